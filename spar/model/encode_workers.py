"""The encode stage's worker: one shard of a split in, its files out, in this process or on a Ray worker.

:class:`ShardEncoder` holds one encoder (loaded once per worker) and encodes :class:`EncodeTask` after task: it
tokenises the shard once, runs the configured engine (:mod:`spar.model.engines`) or a term-based Λ, and writes the
shard's ``ids-NNNNN.arrow`` and ``part-NNNNN.npy`` (each atomically) and last its ``part-NNNNN.json`` sidecar,
whose presence marks the shard complete. A shard's vectors depend only on its own items, so its bytes are the same
whoever encodes it (deterministic device). :mod:`spar.model.embeddings` plans the shards, resumes, and writes the
manifest; :mod:`spar.core.executor` decides where the worker runs. :class:`PassageShards` lets a worker read its own
shard of ``passages.arrow`` (memory-mapped, only its rows) instead of receiving the texts.

Example::

    >>> import tempfile, pathlib, numpy as np
    >>> from spar.model.encoders import BiEncoder
    >>> from spar.model.encode_workers import EncodeOptions, EncodeTask, ShardEncoder
    >>> enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> worker = ShardEncoder(EncodeOptions(batch_size=8, accelerator="cpu"), encoder=enc)
    >>> stats = worker(EncodeTask(out, 0, "query", "float32", 0, items=[("q1", "vitamin C"), ("q2", "scurvy")]))
    >>> stats["count"], np.load(out / "part-00000.npy").shape, sorted(p.name for p in out.iterdir())
    (2, (2, 384), ['ids-00000.arrow', 'part-00000.json', 'part-00000.npy'])
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

import numpy as np
import pyarrow as pa

from spar.core.artifacts import atomic_file
from spar.model.engines import Side, encode_shard_lightning, encode_shard_loop, resolve_devices, tokenize_shard
from spar.model.encoders import BiEncoder
from spar.model.onnx_encoder import OnnxBiEncoder, with_backend
from spar.core.schemas import EMBEDDING_IDS, write_table
from spar.model.stored_vectors import PART_PATTERN

log = logging.getLogger(__name__)

Engine = Literal["auto", "loop", "lightning"]


@dataclass
class EncodeOptions:
    """How encoding runs. None of these is part of the output's fingerprint, except ``backend`` (``torch``,
    ``onnx``, ``onnx-int8`` or ``auto``: :mod:`spar.model.onnx_encoder`), which enters it through the encoder it
    makes."""

    batch_size: int = 64
    accelerator: str = "auto"
    devices: int | str = "auto"
    engine: Engine = "auto"
    precision: str = "auto"
    strategy: str = "auto"
    show_progress: bool = True
    backend: str = "torch"


def _save_npy_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_file(path) as tmp, tmp.open("wb") as fh:
        np.save(fh, array, allow_pickle=False)


def _encode_lexical(encoder, items: Sequence[Any], side: Side) -> np.ndarray:
    return encoder.encode_query(items) if side == "query" else encoder.encode_passage(items)


def engine_of(options: EncodeOptions, encoder: Any = None) -> tuple[str, int, str]:
    """(device, device count, engine) of this process for ``options`` and ``encoder``."""
    device, n_devices = resolve_devices(options.accelerator, options.devices)
    if isinstance(encoder, OnnxBiEncoder):  # ONNX Runtime runs on the CPU, in the plain loop
        device, n_devices = "cpu", 1
    engine = options.engine
    if engine == "auto":
        engine = "lightning" if n_devices > 1 else "loop"
    return device, n_devices, engine


@dataclass
class EncodeTask:
    """One shard of a split as a worker encodes it (picklable: a Ray worker receives it). ``items`` are the
    shard's ``(id, item)`` pairs, or None when the worker reads them from ``source`` (``passages.arrow``)."""

    directory: Path
    index: int
    side: Side
    dtype: str
    first_row: int
    items: list[tuple[str, Any]] | None = None
    source: "PassageShards | None" = None


class ShardEncoder:
    """Encodes whole shards: the encode stage's worker (one per process: this one, or each Ray worker of
    :mod:`spar.core.executor`, which loads its own encoder with ``make_encoder``). ``worker(task)`` writes the shard's
    ``ids-NNNNN.arrow`` and ``part-NNNNN.npy`` (each atomically), then its ``part-NNNNN.json`` sidecar, whose
    presence marks the shard complete; it returns the sidecar's statistics."""

    def __init__(self, options: EncodeOptions, encoder: Any = None, make_encoder: Callable[[], Any] | None = None,
                 on_batch: Callable[[int], Any] | None = None):
        if encoder is None:  # a worker loads its own, on the stage's backend (an ONNX export, cached per node)
            device = resolve_devices(options.accelerator, options.devices)[0]
            encoder = with_backend(make_encoder(), options.backend, device)  # type: ignore[misc]
        self.encoder, self.options, self.on_batch = encoder, options, on_batch
        self.device, self.n_devices, self.engine = engine_of(options, encoder)
        if self.engine == "loop" and self.n_devices > 1:
            log.warning("engine='loop' uses one device; %d are available (use engine='lightning')", self.n_devices)
        self.encoder.to(self.device).eval()

    def __call__(self, task: EncodeTask) -> dict[str, Any]:
        encoder, options = self.encoder, self.options
        items = task.items if task.items is not None else task.source[task.index]  # type: ignore[index]
        start = time.perf_counter()
        if not isinstance(encoder, BiEncoder):
            # Term-based Λ kinds encode by sparse products on the CPU: no tokenizer, no device loop.
            vectors, truncated_items = _encode_lexical(encoder, [x for _, x in items], task.side), 0
        else:
            tokenized = tokenize_shard(encoder, [x for _, x in items], task.side, options.batch_size)
            truncated_items = tokenized.truncated
            if self.engine == "lightning":
                vectors = encode_shard_lightning(encoder, tokenized, task.side, self.device, self.n_devices,
                                                 options.precision, options.strategy, work_dir=task.directory)
            else:
                vectors = encode_shard_loop(encoder, tokenized, task.side, self.device, options.precision,
                                            on_batch=self.on_batch)
        elapsed = time.perf_counter() - start
        write_table(task.directory / f"ids-{task.index:05d}.arrow",
                    pa.table({"row": pa.array(range(task.first_row, task.first_row + len(items)), pa.int64()),
                              "id": pa.array([i for i, _ in items], pa.string())}, schema=EMBEDDING_IDS))
        _save_npy_atomic(task.directory / PART_PATTERN.format(task.index), vectors.astype(task.dtype, copy=False))
        stats = {"shard": task.index, "count": len(items), "truncated": truncated_items, "seconds": round(elapsed, 3)}
        with atomic_file(task.directory / f"part-{task.index:05d}.json") as tmp:
            tmp.write_text(json.dumps(stats))  # last: its presence marks the shard complete
        return {**stats, "device": self.device, "engine": self.engine, "devices": self.n_devices}


class PassageShards:
    """The shards of ``passages.arrow`` as ``[(id, (title, text))]`` lists, by index: what an encode worker reads
    itself (only its shard's rows: the file is memory-mapped). Picklable: only the path travels."""

    def __init__(self, path: str | Path, shard_size: int, use_titles: bool = True):
        self.path, self.shard_size, self.use_titles = Path(path).resolve(), shard_size, use_titles
        self._table: Any = None
        self.passages = len(self.table)

    @property
    def table(self):
        if self._table is None:
            from spar.data.passages import PassagesTable

            self._table = PassagesTable.open(self.path, self.use_titles)
        return self._table

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_table": None}

    def __len__(self) -> int:
        return -(-self.passages // self.shard_size)

    def __getitem__(self, index: int) -> list[tuple[str, Any]]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        piece = self.table.table.slice(index * self.shard_size, self.shard_size)
        ids, texts = piece.column("id").to_pylist(), piece.column("text").to_pylist()
        titles = piece.column("title").to_pylist() if self.use_titles else [""] * len(ids)
        return list(zip(ids, zip(titles, texts)))

    def __iter__(self) -> Iterator[list[tuple[str, Any]]]:
        return (self[i] for i in range(len(self)))
