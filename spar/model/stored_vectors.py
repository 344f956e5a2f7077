"""An embeddings directory on disk, read: its layout (the one place it is named), :class:`Embeddings` and
:func:`load_embeddings`, and the memory-mapped views that serve corpora larger than memory (:class:`ShardedVectors`,
:func:`pread_rows`). Writing one is :mod:`spar.model.embeddings`'s.

Layout of one embeddings directory (``embeddings/<encoder>/<split>/`` in a pipeline run)::

    part-00000.npy  part-00001.npy ...   float32 (or float16) [shard rows, dim], one per ``shard_size`` items
    ids.arrow                            schemas.EMBEDDING_IDS: row (position in the split), id
    manifest.json                        model fingerprint, pooling, normalize, dim, count, dtype, truncation counts

Example::

    >>> import numpy as np
    >>> from spar.model.stored_vectors import ShardedVectors
    >>> rows = ShardedVectors([np.zeros((2, 3), "float32"), np.ones((1, 3), "float32")], 3)
    >>> rows.shape, rows[1:3].sum(axis=1).tolist()
    ((3, 3), [0.0, 3.0])
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from spar.core.artifacts import read_manifest
from spar.core.errors import ArtifactError
from spar.core.schemas import IDS_FILE, read_table

KIND = "embeddings"
#: One shard's vectors: ``part-NNNNN.npy``.
PART_PATTERN = "part-{:05d}.npy"


@dataclass
class Embeddings:
    """Vectors and ids of one embeddings directory, as :func:`load_embeddings` returns them.

    ``vectors`` is memory-mapped when the directory has one shard, else the shards are concatenated in memory on
    first access; :attr:`sharded` (a memory-mapped view across shards) and :meth:`iter_shards` serve corpora that
    do not fit in memory.
    """

    directory: Path
    ids: list[str]
    manifest: dict[str, Any]
    part_files: list[Path]
    _vectors: np.ndarray | None = field(default=None, repr=False)

    @property
    def dim(self) -> int:
        return int(self.manifest["stats"]["dim"])

    @property
    def model_fingerprint(self) -> str:
        """Identifies the encoder (weights and settings) that produced these vectors."""
        return str(self.manifest["stats"]["model_fingerprint"])

    @property
    def encoder_name(self) -> str:
        return str(self.manifest["stats"].get("encoder", "?"))

    def __len__(self) -> int:
        return len(self.ids)

    def iter_shards(self) -> Iterator[np.ndarray]:
        """Each shard's vectors in order, memory-mapped."""
        for part in self.part_files:
            yield np.load(part, mmap_mode="r", allow_pickle=False)

    @property
    def sharded(self) -> ShardedVectors:
        """All vectors as one memory-mapped matrix view (slices and row lookups; nothing loaded up front)."""
        return ShardedVectors(list(self.iter_shards()), self.dim)

    @property
    def vectors(self) -> np.ndarray:
        if self._vectors is None:
            shards = list(self.iter_shards())
            if not shards:
                self._vectors = np.zeros((0, self.dim), dtype=np.float32)
            elif len(shards) == 1:
                self._vectors = shards[0]
            else:
                self._vectors = np.concatenate(shards, axis=0)
        return self._vectors


def _read_rows(shard: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a shard as a new array. A memory-mapped ``.npy`` shard is read with a positional file
    read rather than through the mapping: pages touched through a mapping stay counted in the process's RSS until
    it is unmapped, so a pass over a 1M-passage corpus would grow RSS by the whole corpus (bench/memory.py)."""
    if isinstance(shard, np.memmap) and shard.filename and shard.flags.c_contiguous and shard.ndim == 2:
        row_bytes = shard.shape[1] * shard.dtype.itemsize
        count = (stop - start) * shard.shape[1]
        flat = np.fromfile(shard.filename, dtype=shard.dtype, count=count, offset=shard.offset + start * row_bytes)
        return flat.reshape(stop - start, shard.shape[1])
    return np.asarray(shard[start:stop])


def pread_rows(fd: int, name: str | Path, data_offset: int, rows: np.ndarray, dim: int, dtype: Any) -> np.ndarray:
    """Rows ``rows`` (any order, repeats allowed) of a row-major matrix stored at ``data_offset`` of the open file
    ``fd``, one positional read per row. What reading a few rows anywhere in a corpus needs without a memory
    mapping, whose touched pages stay counted in the process's RSS until it is unmapped."""
    dtype = np.dtype(dtype)
    row_bytes = dim * dtype.itemsize
    out = np.empty((len(rows), dim), dtype=dtype)
    buffer = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    for i, row in enumerate(np.asarray(rows, dtype=np.int64).tolist()):
        got = os.preadv(fd, [buffer[i * row_bytes:(i + 1) * row_bytes]], data_offset + row * row_bytes)
        if got != row_bytes:
            raise OSError(f"{name}: short read of row {row} ({got} of {row_bytes} bytes)")
    return out


def _gather_rows(shard: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of a shard as a new array; a memory-mapped ``.npy`` shard is read by :func:`pread_rows`, for the
    reason :func:`_read_rows` gives: gathering tuning's candidates through the mapping left the 663k corpus's 9 GB of
    Λ vectors counted in the process's RSS (bench/stage_memory.py)."""
    if not (isinstance(shard, np.memmap) and shard.filename and shard.flags.c_contiguous and shard.ndim == 2):
        return np.asarray(shard[rows])
    rows = np.asarray(rows, dtype=np.int64)
    outside = rows[(rows < 0) | (rows >= shard.shape[0])]
    if len(outside):
        raise IndexError(f"row {int(outside[0])} is out of bounds for {shard.shape[0]} rows")
    fd = os.open(shard.filename, os.O_RDONLY)
    try:
        return pread_rows(fd, shard.filename, shard.offset, rows, shard.shape[1], shard.dtype)
    finally:
        os.close(fd)


class ShardedVectors:
    """Read-only row access across memory-mapped shards as if they were one [n, dim] matrix.

    Supports ``shape``, ``dtype``, ``len``, contiguous slices (``x[a:b]``) and integer index arrays (``x[rows]``),
    which is what index building needs, without ever holding the whole corpus in memory.
    """

    def __init__(self, shards: Sequence[np.ndarray], dim: int):
        self.shards = list(shards)
        self.offsets = np.cumsum([0] + [len(s) for s in self.shards])
        self.dtype = self.shards[0].dtype if self.shards else np.dtype(np.float32)
        self.shape = (int(self.offsets[-1]), dim)
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def head(self, n: int) -> "ShardedVectors":
        """The first ``n`` rows, still memory-mapped (a smaller corpus of the same passages, nothing read)."""
        shards = [shard[:n - lo] for shard, lo in zip(self.shards, self.offsets[:-1]) if lo < n]
        return ShardedVectors(shards, self.shape[1])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """``np.asarray(vectors)``: every row in memory (a caller that needs the whole matrix asks for it)."""
        whole = self[0:self.shape[0]]
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                raise IndexError("ShardedVectors supports contiguous slices only")
            parts = []
            for shard, lo, hi in zip(self.shards, self.offsets[:-1], self.offsets[1:]):
                a, b = max(start, lo), min(stop, hi)
                if a < b:
                    parts.append(_read_rows(shard, a - lo, b - lo))
            return np.concatenate(parts) if parts else np.zeros((0, self.shape[1]), self.dtype)
        if np.ndim(key) == 0:  # one row, as an ndarray's integer index gives
            return self[[int(key)]][0]
        rows = np.asarray(key, dtype=np.int64)
        which = np.searchsorted(self.offsets, rows, side="right") - 1
        out = np.empty((len(rows), self.shape[1]), dtype=self.dtype)
        for i in np.unique(which):
            mask = which == i
            out[mask] = _gather_rows(self.shards[i], rows[mask] - self.offsets[i])
        return out


def load_embeddings(directory: str | Path) -> Embeddings:
    """Open an embeddings directory written by :func:`encode_passages` / :func:`encode_queries`.

    Fails with :class:`~spar.core.errors.ArtifactError` naming the directory when it is incomplete or damaged.
    """
    d = Path(directory)
    manifest = read_manifest(d)
    if manifest.get("kind") != KIND:
        raise ArtifactError(f"{d}: expected an '{KIND}' artifact, found '{manifest.get('kind')}'")
    stats = manifest["stats"]
    parts = [d / PART_PATTERN.format(i) for i in range(int(stats["shards"]))]
    for f in [d / IDS_FILE, *parts]:
        if not f.exists():
            raise ArtifactError(f"{d}: missing file '{f.name}' (the embeddings are damaged; re-run `spar encode`)")
    ids = read_table(d / IDS_FILE).column("id").to_pylist()
    if len(ids) != int(stats["count"]):
        raise ArtifactError(f"{d / IDS_FILE}: {len(ids)} ids but the manifest counts {stats['count']} vectors")
    return Embeddings(d, ids, manifest, parts)
