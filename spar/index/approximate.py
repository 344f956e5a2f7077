"""What makes an approximate SPAR index answer like the exact scan: μ folded into the passages, and exact re-ranking.

**Folding.** An inverted-list or graph index is built from the geometry of the vectors it holds. ``[P, PΛ]`` has a
Λ half about 20× the base's norm (the Wikipedia experiment: 22.06 against 1.00) while a query ``[Q, μ·QΛ]`` with a
small μ is ranked mostly by the base: k-means lists and HNSW neighbourhoods then follow Λ, not the score that ranks.
An approximate index therefore holds ``[P, μ₀·PΛ]`` with μ₀ the tuned μ and is searched with ``[Q, (μ/μ₀)·QΛ]``: the
same scores for every μ, so μ still changes at query time (exactly so for a flat index, which is never folded; an
approximate index is built for μ₀, and moving far from it makes its lists and links less apt: docs/experiments.md
measures how much).

**Exact re-ranking.** ``index.refine = r`` asks the approximate index for its top ``r·k`` and re-scores them with
the float32 passage vectors of the run's embeddings, read from disk by position (:class:`PassageRows`: one ``pread``
per row, so a long evaluation never pulls the corpus into the process's memory through a mapping): the index's own
codes only have to *find* the right passages, the order is the exact scan's, and μ is tuned against float32 scores.

Example::

    >>> import numpy as np, tempfile, pathlib
    >>> from spar.index.approximate import PassageRows, refine_top_k
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> rng = np.random.default_rng(0)
    >>> P, PL = rng.standard_normal((50, 4), dtype=np.float32), rng.standard_normal((50, 3), dtype=np.float32)
    >>> np.save(d / "p.npy", P); np.save(d / "l.npy", PL)
    >>> rows = PassageRows([d / "p.npy"], [d / "l.npy"])
    >>> Q, QL = P[:2] + 0.01, PL[:2]
    >>> scores, found = refine_top_k(rows, Q, QL, 0.5, np.array([[7, 0, 3], [1, 9, -1]]), k=2)
    >>> found[:, 0].tolist()
    [0, 1]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spar.index.types.registry import auto_section, is_approximate


def resolve_index_section(section: Any, passages: int | None) -> Any:
    """The ``index`` section with ``type: auto`` made concrete for a corpus of ``passages`` (unknown: unchanged):
    the registered type auto serves that size with (:func:`spar.index.types.registry.auto_section`: a flat scan below
    ``auto_flat_below``, above it HNSW over sq4 codes, :attr:`spar.index.types.hnsw.HnswIndex.auto`)."""
    if section.type != "auto" or passages is None:
        return section
    return auto_section(section, passages)


def fold_factor(index_type: str, fold: str, tuned_mu: float | None) -> float:
    """μ₀, the factor Λ's half of the passage vectors is stored with: the tuned μ for an approximate index when
    ``index.fold`` is ``auto`` (1 for a flat scan, with ``fold: never``, or before μ is known)."""
    if fold == "never" or not is_approximate(index_type) or not tuned_mu or tuned_mu <= 0:
        return 1.0
    return float(tuned_mu)


class FoldedRows:
    """A passage matrix (in memory or streamed: anything that slices and gathers rows) whose rows are multiplied by
    ``factor`` as they are read: Λ's half of ``[P, μ₀·PΛ]`` without a scaled copy of the corpus."""

    def __init__(self, matrix: Any, factor: float):
        self.matrix, self.factor = matrix, np.float32(factor)
        self.shape, self.dtype, self.ndim = matrix.shape, np.dtype(np.float32), 2

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, key) -> np.ndarray:
        return np.asarray(self.matrix[key], dtype=np.float32) * self.factor


class PassageRows:
    """Float32 passage vectors of both parts read by row from their ``.npy`` shards on disk, one ``pread`` per row.

    What exact re-ranking needs: a few hundred rows per query, anywhere in the corpus. A memory mapping would serve
    them too, but every page it touches stays counted in the process's resident memory until unmapped, so an
    evaluation of tens of thousands of questions would end up holding the corpus; positional reads do not.
    """

    def __init__(self, base_parts: Sequence[str | Path], lambda_parts: Sequence[str | Path]):
        self.parts = [_Shards(base_parts), _Shards(lambda_parts)]
        if len(self.parts[0]) != len(self.parts[1]):
            raise ValueError(f"base and Λ embeddings hold {len(self.parts[0])} and {len(self.parts[1])} passages")

    @classmethod
    def beside_index(cls, info: dict[str, Any], directory: str | Path) -> "PassageRows":
        """The rows of the embeddings an index was built from (``info["embeddings"]``: the base and Λ passage
        embedding directories, relative to the index ``directory``)."""
        from spar.core.errors import ArtifactError
        from spar.model.stored_vectors import load_embeddings

        where = info.get("embeddings")
        if not where:
            raise ArtifactError("index.refine needs the passage embeddings the index was built from; this index "
                                "records none (built from matrices): use index.refine=0")
        try:
            parts = {k: load_embeddings(Path(directory) / v).part_files for k, v in where.items()}
        except ArtifactError as exc:
            raise ArtifactError(f"index.refine reads the passage embeddings beside the index: {exc}") from None
        return cls(parts["base"], parts["lambda"])

    def __len__(self) -> int:
        return len(self.parts[0])

    def part(self, which: int, rows: np.ndarray) -> np.ndarray:
        """Rows of the base (0) or Λ (1) vectors, float32 [len(rows), dim]."""
        return self.parts[which].read(rows)

    def close(self) -> None:
        for part in self.parts:
            part.close()


class _Shards:
    """``part-NNNNN.npy`` files of one embeddings directory as one row-addressable matrix (by ``pread``)."""

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = [Path(p) for p in paths]
        self.fds: list[int] = []
        counts, offsets = [], []
        self.dim, self.dtype = 0, np.dtype(np.float32)
        for path in self.paths:
            header = np.load(path, mmap_mode="r", allow_pickle=False)
            counts.append(header.shape[0])
            offsets.append(header.offset)
            self.dim, self.dtype = header.shape[1], header.dtype
            del header
        self.starts = np.cumsum([0, *counts])
        self.data_offsets = offsets

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, rows: np.ndarray) -> np.ndarray:
        if not self.fds:
            self.fds = [os.open(p, os.O_RDONLY) for p in self.paths]
        from spar.model.stored_vectors import pread_rows

        rows = np.asarray(rows, dtype=np.int64).ravel()
        out = np.empty((len(rows), self.dim), dtype=self.dtype)
        shards = np.searchsorted(self.starts, rows, side="right") - 1
        for s in np.unique(shards).tolist():
            mask = shards == s
            out[mask] = pread_rows(self.fds[s], self.paths[s], self.data_offsets[s], rows[mask] - int(self.starts[s]),
                                   self.dim, self.dtype)
        return out.astype(np.float32, copy=False)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def refine_top_k(rows: PassageRows, base_q: np.ndarray, lambda_q: np.ndarray, mu: float, candidates: np.ndarray,
                 k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact SPAR scores ``Q·P + μ·QΛ·PΛ`` of each query's ``candidates`` (row numbers, -1 padding), best ``k`` first:
    (scores [n, k], rows [n, k], -inf / -1 where fewer candidates exist)."""
    base_q = np.atleast_2d(np.asarray(base_q, dtype=np.float32))
    lambda_q = np.atleast_2d(np.asarray(lambda_q, dtype=np.float32))
    n = candidates.shape[0]
    out_scores = np.full((n, k), -np.inf, dtype=np.float32)
    out_rows = np.full((n, k), -1, dtype=np.int64)
    for i in range(n):
        cand = np.unique(candidates[i][candidates[i] >= 0])
        if not len(cand):
            continue
        scores = rows.part(0, cand) @ base_q[i] + np.float32(mu) * (rows.part(1, cand) @ lambda_q[i])
        order = np.argsort(-scores, kind="stable")[:k]
        out_scores[i, :len(order)], out_rows[i, :len(order)] = scores[order], cand[order]
    return out_scores, out_rows
