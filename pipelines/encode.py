"""Stage `encode`: passages and dev/test queries with the base retriever and Λ -> ``embeddings/<encoder>/<split>/``.

Λ is this run's ``lambda/`` or, with ``encode.lambda``, one trained elsewhere (:mod:`spar.experiment.lambda_source`).
Splits: ``passages`` (``queries/passages.arrow`` from the sample stage, else ``data.corpus``), and each question
set's ``queries-dev`` / ``queries-test`` (``queries-<split>-<set>`` for named sets; :mod:`spar.data.question_sets`, the
splits tune and evaluate use). Every split is its own resumable artifact; see :mod:`spar.model.embeddings`.
``encode.backend`` picks what runs a transformer encoder (torch, or ONNX Runtime on the CPU:
:mod:`spar.model.onnx_encoder`).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from spar.core.artifacts import ArtifactWriter
from spar.core.fingerprint import file_fingerprint, fingerprint_dict
from spar.model.embeddings import EncodeOptions, passages_unit, queries_unit, split_counts, write_split
from spar.model.engines import resolve_devices
from spar.core.executor import make_executor
from spar.core.lineage import source as lineage_source
from spar.model.onnx_encoder import backend_name, with_backend
from spar.data.passages import experiment_passages
from spar.core.run_context import RunContext
from spar.core.stage import Stage, Unit

log = logging.getLogger(__name__)


def query_sets(cfg) -> dict[str, list[tuple[str, str]]]:
    """``{"queries-dev": [(id, text)], "queries-test-nq": [...]}`` for every split of every question set the config
    defines (:mod:`spar.data.question_sets`): exactly the questions tune and evaluate use."""
    from spar.data.question_sets import configured_splits, set_split

    sets = {}
    for name, split in configured_splits(cfg):
        queries = set_split(cfg, name, split)
        # a judged split in qrels-file order, as stored before the split had one owner (unchanged vectors and
        # fingerprints); an answers-only split in its sorted order
        order = queries.qrels if queries.qrels else queries.texts
        sets[f"queries-{queries.split}"] = [(q, queries.texts[q]) for q in order]
    return sets


def question_files(cfg, split: str) -> dict[str, str]:
    """The fingerprint of the file a split's questions come from (``queries_file``)."""
    from spar.data.question_sets import configured_splits, embeddings_key

    for name, part in configured_splits(cfg):
        if split == f"queries-{embeddings_key(name, part)}":
            return {"queries_file": file_fingerprint(getattr(cfg.data.question_sets[name], part))}
    return {}


def configured_encoder(cfg, name: str):
    """The encoder ``base`` or ``lambda`` as the config makes it: the one factory of the stage and of its Ray
    workers (``functools.partial(configured_encoder, cfg, name)`` is picklable; each worker loads its own)."""
    from spar.model.encoders import BiEncoder

    if name == "base":
        return BiEncoder.from_section(cfg.encode.base)
    from spar.experiment.lambda_source import experiment_lambda

    # The encode engines drive what the Λ names (a transformer's bi-encoder: tokenised, length-sorted, multi-device).
    return experiment_lambda(cfg).load().batch_encoder()


def load_encoder(cfg, name: str):
    """(BiEncoder, weights fingerprint, extra manifest inputs) of ``base`` or ``lambda``."""
    from spar.model.resolve import model_fingerprint

    if name == "base":
        section = cfg.encode.base
        weights = fingerprint_dict({"model": model_fingerprint(section.model), "passage_model":
                                    model_fingerprint(section.passage_model) if section.passage_model else None})
        return configured_encoder(cfg, name), weights, {}
    from spar.experiment.lambda_source import experiment_lambda

    source = experiment_lambda(cfg)
    # The source's fingerprint hashes Λ's files; its origin is recorded without machine-specific paths (the target
    # corpus's content is in the fingerprint).
    extra = {"lambda_source": {k: v for k, v in source.describe().items() if k not in ("path", "statistics_from")}}
    return configured_encoder(cfg, name), source.fingerprint(), extra


def encoder_sources(cfg, name: str) -> list[dict[str, str]]:
    """What the vectors of ``base`` or ``lambda`` depend on besides the texts (:mod:`spar.core.lineage`): the base
    model's files, or the Λ's."""
    from spar.model.resolve import model_sources

    if name == "base":
        return model_sources(cfg.encode.base.model, cfg.encode.base.passage_model)
    from spar.experiment.lambda_source import experiment_lambda

    return experiment_lambda(cfg).sources()


def _query_files(cfg, split: str) -> list[dict[str, str]]:
    """The files an embeddings split's questions are read from: the questions, and the qrels (or answers) that
    choose them."""
    from spar.core.lineage import source
    from spar.data.question_sets import configured_splits, embeddings_key, split_files

    for name, part in configured_splits(cfg):
        if split == f"queries-{embeddings_key(name, part)}":
            return [source(path, "file") for path in split_files(cfg.data.question_sets[name], part).values()]
    return []


def passage_titles(cfg, encoder) -> bool:
    """Whether ``encoder`` is handed passages with their titles: ``data.title_field`` for a transformer; always for a
    term-based Λ, whose own fields (the teacher's, fixed when it was fitted) make its text."""
    return cfg.data.title_field or bool(getattr(encoder, "term_based", False))


def plan(cfg, force: bool = False) -> Iterator[Unit]:
    """One unit per encoder and split: passages, then the dev/test queries; one encoder in memory at a time (with
    ``executor.kind: ray``, one set of Ray workers at a time, kept for every split of their encoder)."""
    enc = cfg.encode
    run = RunContext(cfg)
    source = experiment_passages(cfg)
    queries = query_sets(cfg)
    options = EncodeOptions(batch_size=enc.batch_size, accelerator=enc.accelerator, devices=enc.devices,
                            engine=enc.engine, precision=enc.precision, strategy=enc.strategy)
    device = resolve_devices(enc.accelerator, enc.devices)[0]
    with make_executor(cfg.executor) as executor:
        for name in enc.encoders:
            encoder, weights, extra = load_encoder(cfg, name)
            made_from = encoder_sources(cfg, name)
            # Exported (or found in the cache) once for all splits; `auto` may fall back to torch: the splits
            # follow. A Ray worker loads the encoder itself and puts it on the same backend
            # (spar/model/encode_workers.py).
            encoder = with_backend(encoder, enc.backend, device)
            common = dict(weights_fingerprint=weights, encoder_name=name, shard_size=enc.shard_size,
                          dtype=enc.dtype, options=replace(options, backend=backend_name(encoder)),
                          executor=executor, make_encoder=functools.partial(configured_encoder, cfg, name))
            unit = passages_unit(encoder, source, run.embeddings(name, "passages"),
                                 corpus_format=cfg.data.corpus_format, on_bad_record=cfg.experiment.on_bad_record,
                                 use_titles=passage_titles(cfg, encoder), inputs=extra, **common)
            unit.sources = [*(lineage_source(path, "file") for path in ([source] if isinstance(source, Path)
                                                                         else source)), *made_from]
            yield unit
            for split, pairs in queries.items():
                qinputs = {**extra, **question_files(cfg, split)}
                unit = queries_unit(encoder, pairs, run.embeddings(name, split), inputs=qinputs, **common)
                unit.sources = [*_query_files(cfg, split), *made_from]
                yield unit
            del encoder, unit


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    return write_split(w, unit)


def on_skip(cfg, manifest: dict) -> dict:
    return split_counts(manifest)


def summary(cfg, results: dict[str, dict], unit: None) -> dict:
    """One line per encoder and split (``embeddings/<encoder>/<split>``)."""
    result: dict = {"skipped": True} if all(s.get("skipped") for s in results.values()) else {}
    result["source"] = str(experiment_passages(cfg))
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


STAGE = Stage(name="encode", sections=("experiment", "data", "encode", "executor"), plan=plan,
              work=work, on_skip=on_skip, finish=summary,
              summary="encode the corpus and dev/test queries with the base retriever and Λ -> embeddings/")
run = STAGE.run
