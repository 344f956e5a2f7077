"""Encode passages and queries with any :class:`~spar.model.encoders.BiEncoder` into sharded, resumable embeddings.

The layout of an embeddings directory and reading one (:func:`~spar.model.stored_vectors.load_embeddings`) are
:mod:`spar.model.stored_vectors`'s; this module writes them, and fingerprints what produced a vector.

How it runs:

- **Streaming and sharded.** Items are read one shard at a time (``queries/passages.arrow`` is memory-mapped; a
  corpus file is streamed with :func:`spar.data.readers.read_corpus`), so memory is flat in corpus size.
- **Length-sorted batches** within a shard: each shard is tokenised once (the fast tokenizer, in chunks), its token
  ids kept in one compact int32 buffer, and batches are cut from the length-sorted order, so padding is minimal.
  Vectors are written back in input order.
- **Resumable per shard.** Work happens in ``<dir>.partial/``; each finished shard is renamed into place
  atomically. A killed run re-encodes only the missing shards, and because a shard's batches depend only on the
  shard's own contents, a resumed run's shards are byte-identical to an uninterrupted one (deterministic device).
- **One device: a plain inference loop. Several devices: Lightning's predict loop** (``Trainer.predict`` with
  :class:`spar.model.engines.EncodeModule`, ``ddp_spawn``), each rank encoding every n-th batch of the shard and the
  main process merging the ranks' vectors. On one CPU device Lightning's loop measured no faster than the plain loop
  (see ``bench/encode_throughput.py``), so ``engine="auto"`` keeps the plain loop there; ``engine="lightning"``
  forces the predict loop on any device count.
- **Truncation is counted**: items longer than the encoder's max length are reported in the manifest stats.
- **Where shards are encoded**: in this process, or on Ray workers that each load the encoder once (a
  :class:`~spar.core.executor.Executor`; the worker is :class:`spar.model.encode_workers.ShardEncoder`). Either way each
  shard is written into ``<dir>.partial/`` by whoever encoded it and the manifest by this process, once all are there.

Example::

    >>> import itertools, tempfile, pathlib
    >>> from spar.model.encoders import BiEncoder
    >>> from spar.model.embeddings import EncodeOptions, encode_passages, encode_queries
    >>> from spar.model.stored_vectors import load_embeddings
    >>> from spar.data.readers import read_corpus
    >>> enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    >>> passages = list(itertools.islice(read_corpus("data/scifact-sample/corpus.jsonl"), 32))
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> stats = encode_passages(enc, passages, out / "passages", shard_size=16, options=EncodeOptions(batch_size=16))
    >>> emb = load_embeddings(out / "passages")
    >>> emb.vectors.shape, emb.dim, emb.manifest["stats"]["shards"], emb.ids[0] == passages[0].id
    ((32, 384), 384, 2, True)
    >>> _ = encode_queries(enc, {"q1": "vitamin C and scurvy"}, out / "queries")
    >>> load_embeddings(out / "queries").ids
    ['q1']
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, cast

import pyarrow as pa
import torch

from spar.core.artifacts import ArtifactWriter, atomic_file
from spar.core.fingerprint import digest, file_fingerprint, fingerprint_dict, records_fingerprint
from spar.model.encoders import BiEncoder
from spar.model.engines import Side, resolve_devices, resolve_precision
from spar.model.encode_workers import EncodeOptions, EncodeTask, PassageShards, ShardEncoder, engine_of
from spar.model.stored_vectors import KIND, PART_PATTERN
from spar.core.errors import ArtifactError, ConfigError
from spar.core.executor import Executor, LocalExecutor, WorkerSpec
from spar.model.onnx_encoder import OnnxBiEncoder, backend_name, with_backend
from spar.data.readers import OnBad
from spar.core.schemas import EMBEDDING_IDS, IDS_FILE, read_table
from spar.core.dependency import Dependency
from spar.core.stage import Declared, Unit, run_unit

from spar.core.console import adopt_library_loggers  # noqa: E402

adopt_library_loggers()  # Lightning's own console handler printed everything twice
log = logging.getLogger(__name__)



# ----------------------------------------------------------------------------------------------------------------
# Fingerprints
# ----------------------------------------------------------------------------------------------------------------


def encoder_fingerprint(weights: str, encoder) -> str:
    """Identifies what produced a vector: the weights' fingerprint plus every setting that changes the vector.

    ``weights`` is :func:`spar.model.resolve.model_fingerprint` of the base model, or the Λ artifact's manifest
    fingerprint. Queries and passages of one encoder share this fingerprint; the index compares it. An encoder run
    by ONNX Runtime adds its backend and exported files (:meth:`spar.model.onnx_encoder.OnnxBiEncoder.backend_record`).
    """
    if not isinstance(encoder, BiEncoder):  # a term-based Λ: its description holds every vector-changing setting
        return fingerprint_dict({"weights": weights, "lambda": encoder.describe()})
    s = encoder.settings
    identity = {
        "weights": weights, "pooling": s.pooling, "normalize": s.normalize, "query_prefix": s.query_prefix,
        "passage_prefix": s.passage_prefix, "query_max_length": s.query_max_length,
        "passage_max_length": s.passage_max_length,
    }
    if isinstance(encoder, OnnxBiEncoder):  # torch adds nothing: its fingerprints predate the other backends
        identity["backend"] = encoder.backend_record()
    return fingerprint_dict(identity)


# ----------------------------------------------------------------------------------------------------------------
# Writing embeddings
# ----------------------------------------------------------------------------------------------------------------


def _shard_source(items: Iterable[tuple[str, Any]], shard_size: int) -> Iterator[list[tuple[str, Any]]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, shard_size)):
        yield chunk


@dataclass
class SplitJob:
    """What :func:`write_split` needs to encode one split besides its unit's config (encoder name, side, shard
    size, dtype, model fingerprint): the payload of its :class:`~spar.core.stage.Unit`."""

    encoder: Any
    shards: Iterable[list[tuple[str, Any]]]
    weights_fingerprint: str
    options: EncodeOptions
    on_shard: Callable[[int, dict[str, Any]], None] | None = None
    expected_items: int | None = None
    #: Where the shards are encoded (default: this process) and, for Ray workers, a picklable factory of the
    #: encoder (each worker loads its own; :mod:`spar.core.executor`).
    executor: Executor | None = None
    make_encoder: Callable[[], Any] | None = None


def split_unit(encoder, shards: Iterable[list[tuple[str, Any]]], declared: Declared, weights_fingerprint: str,
               options: EncodeOptions, on_shard: Callable[[int, dict[str, Any]], None] | None = None,
               expected_items: int | None = None, reusable: bool = True, executor: Executor | None = None,
               make_encoder: Callable[[], Any] | None = None) -> Unit:
    """The artifact of one encoded split (resumable per shard): ``declared`` (output, encoder name, side, shard size,
    dtype, what it is made from) with what the encoder decides added to its settings. ``reusable=False`` (a one-pass
    iterator nothing vouches for) is never up to date and never resumed."""
    device = resolve_devices(options.accelerator, options.devices)[0]
    encoder = with_backend(encoder, options.backend, device)
    declared_settings = declared.settings
    config = {"encoder": declared_settings["encoder"], "side": declared_settings["side"],
              "model_fingerprint": encoder_fingerprint(weights_fingerprint, encoder),
              "shard_size": declared_settings["shard_size"], "dtype": declared_settings["dtype"]}
    # Resolved once, here: every worker runs what the fingerprint says. fp32 adds nothing (fingerprints as before
    # the precision was honoured on the CPU); bf16 or fp16 vectors are other vectors.
    options = replace(options, precision=vector_precision(encoder, options.precision, device))
    if options.precision != "32":
        config["precision"] = options.precision
    job = SplitJob(encoder, shards, weights_fingerprint, options, on_shard, expected_items, executor, make_encoder)
    return replace(declared, settings=config).unit(resumable=reusable, payload=job,
                                                   current=None if reusable else (lambda: False))


def _declared(out_dir: str | Path, encoder_name: str, side: Side, shard_size: int, dtype: str,
              needs: Sequence[Dependency], values: Mapping[str, Any] | None) -> Declared:
    """A split outside an experiment (:func:`encode_passages`, :func:`encode_queries`): made from what it is handed."""
    return Declared(Path(out_dir), KIND, {"encoder": encoder_name, "side": side, "shard_size": shard_size,
                                          "dtype": dtype}, list(needs), dict(values or {}))


def declared_unit(declared: Declared, encoder, items: Any, *, weights_fingerprint: str, options: EncodeOptions,
                  corpus_format: str = "auto", on_bad_record: OnBad = "fail", use_titles: bool = True,
                  executor: Executor | None = None, make_encoder: Callable[[], Any] | None = None) -> Unit:
    """The unit of a split its experiment declares (:func:`spar.experiment.declarations.embeddings`: its output,
    settings and dependencies), encoding ``items``: the passages (``passages.arrow`` or corpus files) of a passage
    split, the ``(id, text)`` pairs of a query split. ``use_titles=False`` encodes passage texts alone (recorded)."""
    shard_size = declared.settings["shard_size"]
    if declared.settings["side"] == "passage":
        shards, _, total = _passage_shards(items, shard_size, corpus_format, on_bad_record, use_titles)
        if not use_titles:
            declared = replace(declared, values={**declared.values, "titles": "dropped"})
    else:
        pairs = list(items)
        shards, total = _shard_source(pairs, shard_size), len(pairs)
    return split_unit(encoder, shards, declared, weights_fingerprint, options, None, total, True, executor,
                      make_encoder)


def vector_precision(encoder, precision: str, device: str) -> str:
    """``32``, ``bf16-mixed`` or ``16-mixed``: the arithmetic ``encoder``'s vectors are made with
    (:func:`spar.model.engines.resolve_precision`). A term-based Λ is exact sparse arithmetic and ONNX Runtime runs
    fp32: an explicit mixed precision for those is refused rather than ignored."""
    if isinstance(encoder, OnnxBiEncoder) or not isinstance(encoder, BiEncoder):
        if precision not in ("auto", "32", "32-true"):
            what = "the onnx backend runs fp32" if isinstance(encoder, OnnxBiEncoder) else \
                "a term-based Λ is encoded by exact sparse products"
            raise ConfigError(f"encode.precision={precision}: {what}; use encode.precision=auto or 32")
        return "32"
    return resolve_precision(device, precision)


def split_counts(manifest: dict[str, Any]) -> dict[str, Any]:
    """What an up-to-date split reports (its count and dimension)."""
    return {k: manifest["stats"][k] for k in ("count", "dim")}


def _shard_done(directory: Path, index: int) -> bool:
    return all((directory / name).exists() for name in (PART_PATTERN.format(index), f"part-{index:05d}.json",
                                                         f"ids-{index:05d}.arrow"))


def _clean_temporaries(directory: Path) -> None:
    """Temporaries of a worker killed while writing (``.part-NNNNN.npy.tmp-<pid>``; every writer has finished)."""
    for stale in directory.glob(".*.tmp-*"):
        if stale.is_file():
            stale.unlink(missing_ok=True)


def write_split(w: ArtifactWriter, unit: Unit) -> dict[str, Any]:
    """Encode ``unit``'s split (:func:`split_unit`) into the writer's directory, shard by shard, on the job's
    executor (this process by default): finished shards of a killed run (same fingerprint) are kept."""
    job: SplitJob = unit.payload
    encoder, options, out_dir = job.encoder, job.options, unit.output
    executor = job.executor if job.executor is not None else LocalExecutor()
    encoder_name, side, shard_size, dtype, model_fp = (unit.config[k] for k in ("encoder", "side", "shard_size",
                                                                                 "dtype", "model_fingerprint"))
    local = executor.kind == "local"
    if not local and job.make_encoder is None:
        raise ConfigError(f"{out_dir}: a Ray executor loads the encoder on each worker; pass make_encoder")
    device, n_devices, engine = engine_of(options, encoder)
    progress = _progress(options.show_progress, job.expected_items, f"encode {encoder_name}/{out_dir.name}")
    per_batch_progress = local and engine == "loop" and isinstance(encoder, BiEncoder)  # the loop reports batches
    _clean_temporaries(w.path)
    shard_stats: dict[int, dict[str, Any]] = {}

    def finished(index: int, stats: dict[str, Any], progressed: bool) -> None:
        shard_stats[index] = stats
        if stats["resumed"] and getattr(progress, "total", None):
            progress.total -= stats["count"]  # the bar and its rate are this run's work, not shards found finished
        elif not progressed:
            progress.update(stats["count"])
        if job.on_shard is not None:
            job.on_shard(index, stats)

    def tasks() -> Iterator[EncodeTask]:
        # passages.arrow: workers read their shard themselves; other sources: the shard's items are shipped.
        source = job.shards if isinstance(job.shards, PassageShards) else None
        shards: Iterable[Any] = range(len(source)) if source is not None else job.shards
        for index, items in enumerate(shards):
            if _shard_done(w.path, index):
                stats = json.loads((w.path / f"part-{index:05d}.json").read_text())
                finished(index, {**stats, "resumed": True}, False)
                continue
            yield EncodeTask(w.path.resolve(), index, side, dtype, index * shard_size,
                             None if source is not None else list(items), source)

    spec = WorkerSpec(f"encode:{encoder_name}:{model_fp}",
                      functools.partial(ShardEncoder, options, make_encoder=job.make_encoder),
                      local=ShardEncoder(options, encoder, on_batch=progress.update if per_batch_progress else None)
                      if local else None,
                      needs={"embeddings' partial directory": w.path}, gpus=True,
                      describe_task=lambda task: f"shard {task.index} ({PART_PATTERN.format(task.index)})")
    worker_device: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        for task, stats in executor.map(spec, tasks()):
            worker_device = {k: stats.pop(k) for k in ("device", "engine", "devices")}
            finished(task.index, {**stats, "resumed": False}, per_batch_progress)
    finally:
        progress.close()
    wall = time.perf_counter() - started
    _clean_temporaries(w.path)
    n_shards = len(shard_stats)
    if sorted(shard_stats) != list(range(n_shards)):
        raise ArtifactError(f"{w.path}: shards {sorted(set(range(n_shards)) - set(shard_stats))} were not encoded")
    ordered = [shard_stats[i] for i in range(n_shards)]
    count = sum(s["count"] for s in ordered)
    encoded = sum(s["count"] for s in ordered if not s["resumed"])
    # Per wall second, as label's: summed shard seconds made 2 workers look half as fast as they are.
    seconds = wall if encoded else 0.0
    _merge_ids(w.path, n_shards)
    for stale in itertools.chain(w.path.glob("part-*.npy"), w.path.glob("part-*.json")):
        if int(stale.name[5:10]) >= n_shards:  # from an older, longer input
            stale.unlink()
    w.files = [IDS_FILE] + [PART_PATTERN.format(i) for i in range(n_shards)]
    for i in range(n_shards):
        (w.path / f"part-{i:05d}.json").unlink()
    truncated = sum(s["truncated"] for s in ordered)
    w.schema = {"ids": str(EMBEDDING_IDS), "vectors": f"{dtype} [count, dim] in part-NNNNN.npy, row order"}
    w.stats = {
        "encoder": encoder_name, "side": side, "model_fingerprint": model_fp,
        "weights_fingerprint": job.weights_fingerprint, **_vector_settings(encoder, side),
        "dim": encoder.dim, "count": count, "dtype": dtype,
        "shards": n_shards, "shard_size": shard_size,
        "truncated": truncated, "truncated_fraction": round(truncated / count, 6) if count else 0.0,
        "encoded_this_run": encoded, "resumed_shards": sum(bool(s["resumed"]) for s in ordered),
        "items_per_second": round(encoded / seconds, 2) if seconds else None,
        "engine": engine, "device": device, "devices": n_devices, **worker_device, **executor.describe(),
        "precision": options.precision,
    }
    if isinstance(encoder, BiEncoder):
        w.stats["backend"] = backend_name(encoder)
        if isinstance(encoder, OnnxBiEncoder):
            w.stats["onnx"] = encoder.manifest_record()
    if truncated:
        log.info("%s: %d of %d items were longer than %d tokens and truncated", out_dir, truncated, count,
                 w.stats["max_length"])
    return dict(w.stats)


def _merge_ids(directory: Path, n_shards: int) -> None:
    """Stream the per-shard id tables into one ``ids.arrow`` (one record batch per shard) and drop them."""
    target = directory / IDS_FILE
    with atomic_file(target) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, EMBEDDING_IDS) as writer:
        for i in range(n_shards):
            writer.write_table(read_table(directory / f"ids-{i:05d}.arrow"))
    for f in directory.glob("ids-*.arrow"):
        f.unlink()


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(show: bool, total: int | None, desc: str):
    if not show:
        return _NoProgress()
    from spar.core.console import progress_bar

    return progress_bar(total=total, desc=desc, unit="item", mininterval=2.0)


# ----------------------------------------------------------------------------------------------------------------
# Public entry points
# ----------------------------------------------------------------------------------------------------------------


def _passage_shards(source: str | Path | Iterable, shard_size: int, corpus_format: str, on_bad_record: OnBad,
                    use_titles: bool = True) -> tuple[Iterable[list[tuple[str, Any]]], Dependency | None, int | None]:
    """Shards of (id, (title, text)) from ``passages.arrow``, a corpus file, or an iterable of passages, and what
    identifies them (``passages``: the file's or the records' content; None for a one-pass iterator)."""
    from spar.data.readers import corpus_fingerprint, corpus_files, is_corpus_files, read_corpus

    def identified(fingerprint: str) -> Dependency:  # fingerprinted, not recorded (no lineage outside a run)
        return Dependency("passages", Path(), "files", value=fingerprint, records=lambda: [])

    if is_corpus_files(source):
        for path in corpus_files(source):
            if not path.exists():
                raise ArtifactError(f"passages not found: {path}")
        if isinstance(source, (str, Path)) and Path(source).suffix == ".arrow":
            shards = PassageShards(source, shard_size, use_titles)
            return shards, identified(file_fingerprint(source)), shards.passages
        stream = ((p.id, (p.title if use_titles else "", p.text))
                  for p in read_corpus(source, corpus_format, on_bad_record))
        return _shard_source(stream, shard_size), identified(corpus_fingerprint(source)), None

    records_source = cast(Iterable, source)

    def items(records: Iterable) -> Iterator[tuple[str, Any]]:
        for p in records:
            pid, title, text = (p.id, p.title, p.text) if hasattr(p, "id") else p
            yield pid, (title if use_titles else "", text)

    if isinstance(records_source, Sequence):  # in memory: its content identifies it
        content = records_fingerprint([pid, title, text] for pid, (title, text) in items(records_source))
        return _shard_source(items(records_source), shard_size), identified(content), len(records_source)
    return _shard_source(items(records_source), shard_size), None, None


def encode_passages(
    encoder: BiEncoder,
    passages: str | Path | Iterable,
    out_dir: str | Path,
    *,
    weights_fingerprint: str | None = None,
    encoder_name: str = "encoder",
    shard_size: int = 100_000,
    dtype: str = "float32",
    options: EncodeOptions | None = None,
    inputs: dict[str, str] | None = None,
    corpus_format: str = "auto",
    on_bad_record: OnBad = "fail",
    use_titles: bool = True,
    force: bool = False,
    on_shard: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Encode passages into ``out_dir`` (``part-NNNNN.npy`` + ``ids.arrow`` + manifest); returns the stats.

    ``passages``: ``queries/passages.arrow`` (schemas.PASSAGES), a corpus file (any format
    :func:`spar.data.readers.read_corpus` reads), or a list/iterable of :class:`spar.data.readers.Passage` /
    ``(id, title, text)``. ``weights_fingerprint`` identifies the weights (default: a hash of the encoder's
    parameters); ``inputs`` adds fingerprints of what the passages came from. Files and lists are fingerprinted
    by content; a one-pass iterator without ``inputs`` is always encoded from scratch (nothing to resume against).
    A complete ``out_dir`` with the same fingerprint is left alone (``{"skipped": True, ...}``) unless ``force``.
    ``use_titles=False`` encodes the text alone (``data.title_field``). ``on_shard(index, stats)`` is called after
    every shard (progress hooks, tests).
    """
    unit = passages_unit(encoder, passages, out_dir, weights_fingerprint=weights_fingerprint,
                         encoder_name=encoder_name, shard_size=shard_size, dtype=dtype, options=options, inputs=inputs,
                         corpus_format=corpus_format, on_bad_record=on_bad_record, use_titles=use_titles,
                         on_shard=on_shard)
    return run_unit(unit, lambda w: write_split(w, unit), force, on_skip=split_counts)


def passages_unit(encoder, passages: str | Path | Iterable, out_dir: str | Path, *,
                  weights_fingerprint: str | None = None, encoder_name: str = "encoder", shard_size: int = 100_000,
                  dtype: str = "float32", options: EncodeOptions | None = None, inputs: dict[str, str] | None = None,
                  corpus_format: str = "auto", on_bad_record: OnBad = "fail", use_titles: bool = True,
                  on_shard: Callable[[int, dict[str, Any]], None] | None = None, executor: Executor | None = None,
                  make_encoder: Callable[[], Any] | None = None) -> Unit:
    """The artifact :func:`encode_passages` writes (same arguments), for a stage to run (:mod:`spar.core.stage`);
    ``executor`` runs its shards (with ``make_encoder``, a picklable factory of the encoder, for Ray workers)."""
    shards, identity, total = _passage_shards(passages, shard_size, corpus_format, on_bad_record, use_titles)
    # A one-pass iterator cannot be fingerprinted up front: never reuse output or shards it cannot vouch for.
    reusable = bool(identity or inputs)
    values = {**({} if use_titles else {"titles": "dropped"}), **(inputs or {})}
    declared = _declared(out_dir, encoder_name, "passage", shard_size, dtype, [identity] if identity else [], values)
    return split_unit(encoder, shards, declared, weights_fingerprint or parameters_fingerprint(encoder),
                      options or EncodeOptions(), on_shard, total, reusable, executor, make_encoder)


def encode_queries(
    encoder: BiEncoder,
    queries: Mapping[str, str] | Sequence[tuple[str, str]],
    out_dir: str | Path,
    *,
    weights_fingerprint: str | None = None,
    encoder_name: str = "encoder",
    shard_size: int = 100_000,
    dtype: str = "float32",
    options: EncodeOptions | None = None,
    inputs: dict[str, str] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Encode queries (``{id: text}`` or ``[(id, text)]``, order kept) with the query encoder into ``out_dir``."""
    unit = queries_unit(encoder, queries, out_dir, weights_fingerprint=weights_fingerprint, encoder_name=encoder_name,
                        shard_size=shard_size, dtype=dtype, options=options, inputs=inputs)
    return run_unit(unit, lambda w: write_split(w, unit), force, on_skip=split_counts)


def queries_unit(encoder, queries: Mapping[str, str] | Sequence[tuple[str, str]], out_dir: str | Path, *,
                 weights_fingerprint: str | None = None, encoder_name: str = "encoder", shard_size: int = 100_000,
                 dtype: str = "float32", options: EncodeOptions | None = None,
                 inputs: dict[str, str] | None = None, executor: Executor | None = None,
                 make_encoder: Callable[[], Any] | None = None) -> Unit:
    """The artifact :func:`encode_queries` writes (same arguments), for a stage to run (:mod:`spar.core.stage`)."""
    pairs = list(queries.items()) if isinstance(queries, Mapping) else list(queries)
    content = Dependency("queries", Path(), "files", value=fingerprint_dict(pairs, ascii_only=False),
                        records=lambda: [])
    declared = _declared(out_dir, encoder_name, "query", shard_size, dtype, [content], inputs)
    return split_unit(encoder, _shard_source(pairs, shard_size), declared,
                      weights_fingerprint or parameters_fingerprint(encoder), options or EncodeOptions(), None,
                      len(pairs), executor=executor, make_encoder=make_encoder)


def _vector_settings(encoder, side: Side) -> dict[str, Any]:
    """What the manifest records of how vectors were made: pooling, normalisation and max length of a
    transformer; the kind of a term-based Λ."""
    if not isinstance(encoder, BiEncoder):
        return {"kind": encoder.kind, "pooling": "term-bag", "normalize": False, "max_length": None}
    s = encoder.settings
    return {"pooling": s.pooling, "normalize": s.normalize,
            "max_length": s.query_max_length if side == "query" else s.passage_max_length}


def parameters_fingerprint(encoder) -> str:
    """Fallback weights fingerprint: a hash of a few values of every parameter tensor (cheap, order-stable)."""
    params = (itertools.chain(encoder.query_model.named_parameters(), encoder.passage_model.named_parameters())
              if isinstance(encoder, BiEncoder) else encoder.named_parameters())

    def samples():
        for name, param in params:
            flat = param.detach().reshape(-1)
            step = max(1, flat.numel() // 64)
            yield name.encode()
            yield flat[::step][:64].float().cpu().numpy().tobytes()

    with torch.no_grad():
        return digest(samples())
