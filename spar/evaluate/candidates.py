"""Exact re-scoring of a candidate set: the sweep behind tuning μ and α without one index per value.

Both combinations are *affine* in their weight (SPAR ``sim + μ·simΛ``, the sum variant, the hybrid ``dense +
α·bm25``), so for every query a candidate set is gathered once (the union of each part's top ``candidates``), both
parts' exact scores held in two matrices, and ``s0 + w·s1`` ranked with numpy for every w of the grid
(:class:`AffineCandidates`, :func:`tune_weight`). :mod:`spar.evaluate.tuning` chooses μ and α with it.

Example::

    >>> import numpy as np
    >>> from spar.evaluate.candidates import AffineCandidates, tune_weight
    >>> c = AffineCandidates(["q"], np.array([[0, 1]]), np.array([[1.0, 0.0]], dtype=np.float32),
    ...                      np.array([[0.0, 2.0]], dtype=np.float32), ["d0", "d1"])
    >>> tune_weight(c, {"q": {"d1": 1}}, "nDCG@10", grid=[0.1, 1.0], max_extensions=0).best
    1.0
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from spar.core.config import Variant
from spar.evaluate.exact import top_k
from spar.evaluate.grid import GridSearch, grid_search
from spar.evaluate.metrics import Qrels, measure_depth, ranked_run

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------------
# Exact re-scoring of a candidate set
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class AffineCandidates:
    """Per query, candidate passages with the two parts of an affine score ``s0 + w·s1``.

    ``rows``: [n_queries, width] int64 passage rows (-1 pads); ``s0``/``s1``: the two parts' exact scores
    (padding holds -inf in ``s0``). ``doc_ids[row]`` names the passage.
    """

    query_ids: list[str]
    rows: np.ndarray
    s0: np.ndarray
    s1: np.ndarray
    doc_ids: Sequence[str]
    stats: dict = field(default_factory=dict)

    def top_columns(self, weight: float, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Candidate columns [n, depth] and scores of the top ``depth`` under ``s0 + weight·s1``, best first
        (padding has score -inf)."""
        total = self.s0 + np.asarray(weight, dtype=self.s0.dtype) * self.s1
        top_scores, top = _topk(total, depth, sorted=True)
        return top, top_scores

    def top(self, weight: float, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Passage rows [n, depth] (-1 where a query has fewer candidates) and scores of the top ``depth`` under
        ``s0 + weight·s1``, best first."""
        top, top_scores = self.top_columns(weight, depth)
        top_rows = np.take_along_axis(self.rows, top, axis=1)
        top_rows = np.where(np.isfinite(top_scores), top_rows, -1)
        return top_rows, top_scores

    def rank(self, weight: float, depth: int) -> dict[str, list[tuple[str, float]]]:
        """The top-``depth`` ranking of every query under ``s0 + weight·s1`` (padding never ranks)."""
        rows, scores = self.top(weight, depth)
        return ranked_run(self.query_ids, rows.tolist(), scores.tolist(), self.doc_ids)


class IncrementalMetric:
    """``metric`` of the top-``depth`` rankings under successive weights, with ir_measures called only for rankings
    it has not judged before.

    Rank-based measures (nDCG, RR, R, P, AP, ...) depend on a query's ranking only through the relevance grades
    down the list (its *signature*: grade at each rank, -1 unjudged, -2 past the end). Each query keeps a memo
    signature -> value; along a μ grid most queries keep their signature, so only the rest go to ir_measures (with
    their real passages and scores). Judged queries without candidates count 0; the mean is over every judged query.
    """

    def __init__(self, candidates: AffineCandidates, qrels: Qrels, metric: str):
        from spar.evaluate.metrics import per_query_values

        self._per_query = per_query_values
        self.candidates, self.qrels, self.metric = candidates, qrels, metric
        self.depth = measure_depth(metric)
        self.judged = [q for q in qrels if qrels[q]]
        judged = set(self.judged)
        self.rows_judged = np.array([i for i, q in enumerate(candidates.query_ids) if q in judged], dtype=np.int64)
        self.grades = self._grade_matrix()
        self.memo: dict[int, dict[bytes, float]] = {int(i): {} for i in self.rows_judged}
        self.doc_names = np.asarray(candidates.doc_ids, dtype=object)
        self.evaluated_queries = 0

    def _grade_matrix(self) -> np.ndarray:
        """Grade of every judged query's candidates (-1: unjudged), [n_judged, width]."""
        c = self.candidates
        row_of = {doc: r for r, doc in enumerate(c.doc_ids)}
        grades = np.full((len(self.rows_judged), c.rows.shape[1]), -1, dtype=np.int32)
        for k, i in enumerate(self.rows_judged.tolist()):
            for doc, grade in self.qrels[c.query_ids[i]].items():
                r = row_of.get(doc)
                if r is not None:
                    grades[k, c.rows[i] == r] = grade
        return grades

    def __call__(self, weight: float) -> float:
        c = self.candidates
        columns, scores = c.top_columns(weight, self.depth)
        columns, scores = columns[self.rows_judged], scores[self.rows_judged]
        signature = np.take_along_axis(self.grades, columns, axis=1)
        signature[~np.isfinite(scores)] = -2
        values = np.empty(len(self.rows_judged))
        misses = []
        for k, i in enumerate(self.rows_judged.tolist()):
            value = self.memo[i].get(signature[k].tobytes())
            if value is None:
                misses.append(k)
            else:
                values[k] = value
        if misses:
            run = {}
            for k in misses:
                keep = np.isfinite(scores[k])
                rows = c.rows[self.rows_judged[k], columns[k][keep]]
                run[c.query_ids[self.rows_judged[k]]] = dict(zip(self.doc_names[rows].tolist(),
                                                                 scores[k][keep].tolist()))
            run = {q: hits for q, hits in run.items() if hits}
            computed = self._per_query({q: self.qrels[q] for q in run}, run, self.metric) if run else {}
            for k in misses:
                i = int(self.rows_judged[k])
                values[k] = computed.get(c.query_ids[i], 0.0)
                self.memo[i][signature[k].tobytes()] = values[k]
            self.evaluated_queries += len(misses)
        return float(values.sum() / len(self.judged))


#: Up to this many query x passage scores, a part's whole score matrix is computed with one BLAS call (cheaper
#: than a top-k search followed by a gather when the candidates are a large share of a small corpus).
FULL_MATRIX_LIMIT = 32 << 20


def _part_top_k(queries: np.ndarray, passages: np.ndarray, k: int) -> tuple[np.ndarray | None, np.ndarray]:
    """(all scores or None, top-k rows) of one score part: the full matrix for small problems, else FAISS."""
    n_q, n_p = queries.shape[0], passages.shape[0]
    if n_q * n_p > FULL_MATRIX_LIMIT or not isinstance(passages, np.ndarray):  # large, or streamed: blocked top-k
        return None, top_k(queries, passages, k)[1]
    full = np.asarray(queries, dtype=np.float32) @ np.asarray(passages, dtype=np.float32).T
    if k >= n_p:
        return full, np.broadcast_to(np.arange(n_p), full.shape).copy()
    return full, _topk(full, k, sorted=False)[1]


def _topk(matrix: np.ndarray, k: int, sorted: bool) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-k (values, column indices) via torch.topk (several times faster than np.argpartition)."""
    import torch

    k = min(k, matrix.shape[1])
    if matrix.shape[1] <= 4096:  # narrow rows: numpy's introselect beats torch's threaded top-k
        part = np.argpartition(-matrix, k - 1, axis=1)[:, :k] if k < matrix.shape[1] else \
            np.broadcast_to(np.arange(matrix.shape[1]), matrix.shape)
        values = np.take_along_axis(matrix, part, axis=1)
        if sorted:
            order = np.argsort(-values, axis=1, kind="stable")
            part, values = np.take_along_axis(part, order, axis=1), np.take_along_axis(values, order, axis=1)
        return values, np.ascontiguousarray(part)
    values, indices = torch.topk(torch.from_numpy(np.ascontiguousarray(matrix)), k, dim=1, sorted=sorted)
    return values.numpy(), indices.numpy()


def _union_rows(*row_sets: np.ndarray) -> np.ndarray:
    """Row-wise union of candidate lists: sorted, duplicates and FAISS's -1 replaced by -1 (padding)."""
    joined = np.sort(np.concatenate(row_sets, axis=1), axis=1)
    dup = np.zeros_like(joined, dtype=bool)
    dup[:, 1:] = joined[:, 1:] == joined[:, :-1]
    joined[dup] = -1
    return joined


def _gather_dot(queries: np.ndarray, passages: np.ndarray, rows: np.ndarray,
                max_bytes: int = 256 << 20) -> np.ndarray:
    """``out[i, j] = queries[i] · passages[rows[i, j]]`` computed exactly, in query blocks bounded in memory."""
    n, width = rows.shape
    dim = passages.shape[1]
    out = np.empty((n, width), dtype=np.float32)
    block = max(1, max_bytes // max(1, width * dim * 4))
    for start in range(0, n, block):
        r = rows[start:start + block]
        vecs = np.asarray(passages[np.where(r >= 0, r, 0).ravel()], dtype=np.float32).reshape(len(r), width, dim)
        out[start:start + block] = np.einsum("nwd,nd->nw", vecs, queries[start:start + block].astype(np.float32))
    return out


def spar_candidates(base_q: np.ndarray, lambda_q: np.ndarray, base_p: np.ndarray, lambda_p: np.ndarray,
                    query_ids: Sequence[str], doc_ids: Sequence[str], variant: Variant = "concat",
                    candidates: int = 1000) -> AffineCandidates:
    """Candidate sets and exact score parts for tuning μ of a SPAR ``variant``.

    concat: ``s0 = Q·P``, ``s1 = QΛ·PΛ``; sum: ``s0 = Q·(P+PΛ)``, ``s1 = QΛ·(P+PΛ)``. Candidates are the union of
    each part's exact top-``candidates``.
    """
    if len(query_ids) != base_q.shape[0] or base_q.shape[0] != lambda_q.shape[0]:
        raise ValueError("base and Λ query vectors and query ids must have the same length")
    if base_p.shape[0] != lambda_p.shape[0] or base_p.shape[0] != len(doc_ids):
        raise ValueError("base and Λ passage vectors and passage ids must have the same length")
    if variant == "concat":
        p0, p1 = base_p, lambda_p
    elif variant == "sum":
        if base_p.shape[1] != lambda_p.shape[1]:
            raise ValueError(f"variant 'sum' needs equal dimensions, got {base_p.shape[1]} and {lambda_p.shape[1]}")
        p0 = p1 = np.asarray(base_p, dtype=np.float32) + np.asarray(lambda_p, dtype=np.float32)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    full0, rows0 = _part_top_k(base_q, p0, candidates)
    full1, rows1 = _part_top_k(lambda_q, p1, candidates)
    rows = _union_rows(rows0, rows1)
    safe = np.where(rows >= 0, rows, 0)
    s0 = np.take_along_axis(full0, safe, axis=1) if full0 is not None else _gather_dot(base_q, p0, rows)
    s1 = np.take_along_axis(full1, safe, axis=1) if full1 is not None else _gather_dot(lambda_q, p1, rows)
    s0[rows < 0] = -np.inf
    s1[rows < 0] = 0.0
    width = (rows >= 0).sum(axis=1)
    return AffineCandidates(list(query_ids), rows, s0, s1, doc_ids,
                            {"candidates_per_query": float(width.mean()), "candidates_max": int(width.max())})


def hybrid_fuse(dense: Sequence[tuple[str, float]], sparse: Sequence[tuple[str, float]], alpha: float,
                normalize: bool = False, k: int | None = None) -> list[tuple[str, float]]:
    """Pyserini's dense-sparse hybrid (``HybridSearcher._hybrid_results``): ``dense + alpha·sparse``.

    The union of both lists is scored; a passage missing from one list gets that list's minimum score. With
    ``normalize`` each list is first centred on its mid-range and divided by its range. Best ``k`` returned.
    """
    dense_hits, sparse_hits = dict(dense), dict(sparse)
    d_min, d_max = (min(dense_hits.values()), max(dense_hits.values())) if dense_hits else (0.0, 0.0)
    s_min, s_max = (min(sparse_hits.values()), max(sparse_hits.values())) if sparse_hits else (0.0, 0.0)
    fused = []
    for doc in dense_hits.keys() | sparse_hits.keys():
        d = dense_hits.get(doc, d_min)
        s = sparse_hits.get(doc, s_min)
        if normalize:
            d = _norm(d, d_min, d_max)
            s = _norm(s, s_min, s_max)
        fused.append((doc, d + alpha * s))
    fused.sort(key=lambda x: (-x[1], x[0]))
    return fused[:k] if k is not None else fused


def _norm(x: float, lo: float, hi: float) -> float:
    return (x - (lo + hi) / 2) / (hi - lo) if hi > lo else 0.0


def hybrid_candidates(dense: Mapping[str, Sequence[tuple[str, float]]],
                      sparse: Mapping[str, Sequence[tuple[str, float]]], normalize: bool = False) -> AffineCandidates:
    """The hybrid of :func:`hybrid_fuse` as an affine candidate set (``s0`` dense, ``s1`` sparse), for tuning α."""
    query_ids = list(dense)
    doc_index: dict[str, int] = {}
    per_query = []
    for qid in query_ids:
        d_hits, s_hits = dict(dense[qid]), dict(sparse.get(qid, []))
        d_min, d_max = (min(d_hits.values()), max(d_hits.values())) if d_hits else (0.0, 0.0)
        s_min, s_max = (min(s_hits.values()), max(s_hits.values())) if s_hits else (0.0, 0.0)
        docs = list(d_hits.keys() | s_hits.keys())
        d = [d_hits.get(doc, d_min) for doc in docs]
        s = [s_hits.get(doc, s_min) for doc in docs]
        if normalize:
            d = [_norm(x, d_min, d_max) for x in d]
            s = [_norm(x, s_min, s_max) for x in s]
        per_query.append(([doc_index.setdefault(doc, len(doc_index)) for doc in docs], d, s))
    width = max((len(r) for r, _, _ in per_query), default=1)
    rows = np.full((len(query_ids), width), -1, dtype=np.int64)
    s0 = np.full((len(query_ids), width), -np.inf, dtype=np.float64)
    s1 = np.zeros((len(query_ids), width), dtype=np.float64)
    for i, (r, d, s) in enumerate(per_query):
        rows[i, :len(r)], s0[i, :len(r)], s1[i, :len(r)] = r, d, s
    doc_ids = list(doc_index)
    return AffineCandidates(query_ids, rows, s0, s1, doc_ids,
                            {"candidates_per_query": float((rows >= 0).sum(1).mean())})




def tune_weight(candidates: AffineCandidates, qrels: Qrels, metric: str = "nDCG@10",
                grid: Sequence[float] | None = None, max_extensions: int = 4) -> GridSearch:
    """Grid-search the weight w of ``s0 + w·s1`` for ``metric`` (ir_measures) on ``qrels``."""
    known = set(candidates.query_ids)
    missing = [q for q in qrels if q not in known]
    if missing:
        log.warning("%d judged queries have no candidates (they score 0), e.g. %s", len(missing), missing[:3])

    return grid_search(IncrementalMetric(candidates, qrels, metric), grid, max_extensions)
