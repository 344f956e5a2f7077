"""Stage `encode`: passages and dev/test queries with the base retriever and Λ -> ``embeddings/<encoder>/<split>/``.

Λ is this run's ``lambda/`` or, with ``encode.lambda``, one trained elsewhere (:mod:`spar.experiment.lambda_source`).
Splits: ``passages`` (``queries/passages.arrow`` from the sample stage, else ``data.corpus``), and each question
set's ``queries-dev`` / ``queries-test`` (``queries-<split>-<set>`` for named sets: the splits tune and evaluate use).
The plan is a declaration over the experiment (:class:`spar.experiment.plan.Experiment`). Every split is its own
resumable artifact; see :mod:`spar.model.embeddings`.
``encode.backend`` picks what runs a transformer encoder (torch, or ONNX Runtime on the CPU:
:mod:`spar.model.onnx_encoder`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from spar.core.artifacts import ArtifactWriter
from spar.model.embeddings import EncodeOptions, declared_unit, split_counts, write_split
from spar.model.engines import resolve_devices
from spar.core.executor import make_executor
from spar.model.onnx_encoder import backend_name, with_backend
from spar.core.stage import Stage, Unit
from spar.core.tracking import Report
from spar.experiment.plan import Experiment

log = logging.getLogger(__name__)


def passage_titles(cfg, encoder) -> bool:
    """Whether ``encoder`` is handed passages with their titles: ``data.title_field`` for a transformer; always for a
    term-based Λ, whose own fields (the teacher's, fixed when it was fitted) make its text."""
    return Experiment.of(cfg).data.title_field or bool(getattr(encoder, "term_based", False))


def plan(cfg, force: bool = False) -> Iterator[Unit]:
    """One unit per encoder and split: passages, then the dev/test queries; one encoder in memory at a time (with
    ``executor.kind: ray``, one set of Ray workers at a time, kept for every split of their encoder). Each split is
    the experiment's ``embeddings/<encoder>/<split>`` (:func:`spar.experiment.declarations.embeddings`: what it is
    made from); the loaded encoder adds its vectors' fingerprint (:func:`spar.model.embeddings.declared_unit`)."""
    experiment = Experiment.of(cfg)
    enc = experiment.encode
    options = EncodeOptions(batch_size=enc.batch_size, accelerator=enc.accelerator, devices=enc.devices,
                            engine=enc.engine, precision=enc.precision, strategy=enc.strategy)
    device = resolve_devices(enc.accelerator, enc.devices)[0]
    queries = {split.key: split.pairs() for split in experiment.question_splits}  # read (and checked) up front
    # Every encoder resolved before the first one runs: a bad encode.lambda was found only after the base had
    # encoded every passage (#48).
    specs = {name: experiment.encoder(name) for name in enc.encoders}
    with make_executor(cfg.executor) as executor:
        for name in enc.encoders:
            spec = specs[name]
            # Exported (or found in the cache) once for all splits; `auto` may fall back to torch: the splits
            # follow. A Ray worker loads the encoder itself (spec.make) and puts it on the same backend
            # (spar/model/encode_workers.py).
            encoder = with_backend(spec.make(), enc.backend, device)
            common = dict(weights_fingerprint=spec.weights, options=replace(options, backend=backend_name(encoder)),
                          executor=executor, make_encoder=spec.make)
            yield declared_unit(experiment.artifact(f"embeddings/{name}/passages"), encoder, experiment.passages,
                                corpus_format=experiment.data.corpus_format, on_bad_record=experiment.on_bad_record,
                                use_titles=passage_titles(cfg, encoder), **common)
            for split in experiment.question_splits:
                yield declared_unit(experiment.artifact(f"embeddings/{name}/queries-{split.key}"), encoder,
                                    queries[split.key], **common)
            del encoder


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    return write_split(w, unit)


def on_skip(cfg, manifest: dict) -> dict:
    return split_counts(manifest)


def summary(cfg, results: dict[str, dict], unit: None) -> dict:
    """One line per encoder and split (``embeddings/<encoder>/<split>``)."""
    result: dict = {"skipped": True} if all(s.get("skipped") for s in results.values()) else {}
    result["source"] = str(Experiment.of(cfg).passages)
    for output, s in results.items():
        name = f"{Path(output).parent.name}/{Path(output).name}"
        if s.get("skipped"):
            result[name] = f"{s['count']:,} x {s['dim']} (up to date)"
            continue
        truncated = f", {s['truncated']:,} truncated at {s['max_length']} tokens" if s["truncated"] else ""
        speed = f", {s['items_per_second']:,.1f}/s" if s.get("items_per_second") else ""
        resumed = f", {s['resumed_shards']} shards resumed" if s.get("resumed_shards") else ""
        backend = f" ({s['backend']})" if s.get("backend") else ""
        result[name] = f"{s['count']:,} x {s['dim']} {s['dtype']}{backend}{truncated}{speed}{resumed}"
    return result


def report(cfg, written: dict) -> Report:
    """The W&B run's numbers for each split it encoded: items/s (``<encoder>/passages_per_s`` for the passages), the
    precision and backend each encoder ran in, and one table of every split (count, dim, dtype, seconds)."""
    columns = ["encoder", "split", "count", "dim", "dtype", "precision", "backend", "items_per_s", "seconds"]
    rows, summary = [], {}
    for path, manifest in written.items():
        stats, encoder, split = manifest["stats"], Path(path).parent.name, Path(path).name
        backend = str(stats.get("backend", "sparse"))  # a term-based Λ encodes without a transformer
        rows.append([encoder, split, stats.get("count"), stats.get("dim"), stats.get("dtype"),
                     str(stats.get("precision")), backend, stats.get("items_per_second"), manifest.get("seconds")])
        rate = "passages_per_s" if split == "passages" else f"{split}/queries_per_s"
        summary.update({f"{encoder}/{rate}": stats.get("items_per_second"),
                        f"{encoder}/precision": str(stats.get("precision")), f"{encoder}/backend": backend})
    return Report(summary=summary, tables={"splits": (columns, rows)})


STAGE = Stage(name="encode", sections=("experiment", "data", "encode", "executor"), plan=plan,
              work=work, on_skip=on_skip, finish=summary, report=report,
              summary="encode the corpus and dev/test queries with the base retriever and Λ -> embeddings/")
run = STAGE.run
