"""Tuning the weight of the lexical model (μ) and of the BM25 hybrid (α) on dev qrels, without one index per value.

Both combinations are *affine* in their weight. SPAR concat scores ``⟨[Q, μQΛ], [P, PΛ]⟩ = sim + μ·simΛ``; the
weighted sum scores ``⟨Q + μQΛ, P + PΛ⟩ = Q·(P+PΛ) + μ·QΛ·(P+PΛ)``; the hybrid scores ``dense + α·bm25``. So for
every query we gather a candidate set once (the union of each part's top ``candidates``), hold both parts'
exact scores in two matrices, and rank ``s0 + w·s1`` with numpy for every w of the grid (:class:`AffineCandidates`).
Only the candidate set is an approximation (a passage outside every part's top-k could in principle enter the
combined top-k); :func:`confirm_mu` therefore re-checks the chosen μ with one real search of the combined FAISS
index. Passages are scored as the index stores them (:func:`spar.index.spar_index.served_passage_vectors` of
``index.storage``), and the confirming search runs on the configured index itself.

The weight grid and its search live in :mod:`spar.evaluate.grid`.

``tune/tune.json`` is the one record of μ and α: :func:`read_tuned` is its one reader (``evaluate`` and ``publish``
use it; the index stores vectors only, so ``index`` does not depend on ``tune``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.core.artifacts import is_complete
from spar.core.config import Variant
from spar.core.run_context import RunContext
from spar.core.errors import ArtifactError
from spar.experiment.inputs import ExperimentInputs
from spar.evaluate.exact import dense_search, top_k
from spar.evaluate.grid import GridSearch, grid_search, grid_values
from spar.evaluate.metrics import Qrels, evaluate_run, measure_depth, ranked_run

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


# ----------------------------------------------------------------------------------------------------------------
# Tuning
# ----------------------------------------------------------------------------------------------------------------


def tune_weight(candidates: AffineCandidates, qrels: Qrels, metric: str = "nDCG@10",
                grid: Sequence[float] | None = None, max_extensions: int = 4) -> GridSearch:
    """Grid-search the weight w of ``s0 + w·s1`` for ``metric`` (ir_measures) on ``qrels``."""
    known = set(candidates.query_ids)
    missing = [q for q in qrels if q not in known]
    if missing:
        log.warning("%d judged queries have no candidates (they score 0), e.g. %s", len(missing), missing[:3])

    return grid_search(IncrementalMetric(candidates, qrels, metric), grid, max_extensions)


def confirm_mu(base_q: np.ndarray, lambda_q: np.ndarray, base_p: np.ndarray, lambda_p: np.ndarray,
               query_ids: Sequence[str], doc_ids: Sequence[str], qrels: Qrels, mu: float, metric: str,
               variant: Variant = "concat", depth: int | None = None, index_type: str = "flat",
               options: Any = None, judge: Any = None) -> tuple[float, dict[str, list[tuple[str, float]]]]:
    """One real search of the combined FAISS index (:func:`spar.index.spar_index.build_spar_index`: ``index_type``
    storing ``options.storage``, default flat float32) at ``mu``.

    Returns the metric and the ranking, so callers can compare it with the re-scored sweep.
    """

    from spar.index.spar_index import build_spar_index, spar_query_vectors

    depth = depth or measure_depth(metric)
    if isinstance(base_p, np.ndarray) and isinstance(lambda_p, np.ndarray):
        base_p, lambda_p = np.asarray(base_p, dtype=np.float32), np.asarray(lambda_p, dtype=np.float32)
    index = build_spar_index(base_p, lambda_p, variant, index_type,  # streamed inputs are added batch by batch
                             **(options.faiss_options() if options is not None else {}))
    q = spar_query_vectors(base_q, lambda_q, mu, variant)
    scores, rows = index.search(np.ascontiguousarray(q, dtype=np.float32), min(depth, len(doc_ids)))
    ranked = ranked_run(query_ids, rows, scores, doc_ids)
    if judge is not None:  # the passages this search ranks outside the candidates are judged too
        qrels = _merged(qrels, judge.qrels({q: rows[i] for i, q in enumerate(query_ids)}))
    return evaluate_run(qrels, ranked, [metric])[metric], ranked


def _merged(*qrels: Qrels) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for part in qrels:
        for q, rels in part.items():
            out.setdefault(q, {}).update(rels)
    return out


def plot_curve(path, results: Mapping[str, GridSearch], metric: str, xlabel: str = "μ",
               title: str | None = None, references: Mapping[str, float] | None = None) -> None:
    """Log-x plot of metric against weight, one line per labelled search, the best point marked; ``references``
    (e.g. the base retriever's and BM25's dev scores) are drawn as dashed horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for label, result in results.items():
        xs = sorted(result.scores)
        ax.plot(xs, [result.scores[x] for x in xs], marker="o", markersize=3, label=label)
        ax.scatter([result.best], [result.best_score], s=60, zorder=3, facecolors="none", edgecolors="black")
    for (label, value), style in zip((references or {}).items(), ("--", ":", "-.", (0, (5, 1)))):
        ax.axhline(value, color="grey", linestyle=style, linewidth=1, label=label)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------------
# The tune stage
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class MuTuning:
    """μ of one SPAR variant: the grid search over re-scored candidates and the confirming real search."""

    variant: str
    search: GridSearch
    confirmed: float | None
    candidates: dict
    seconds: dict[str, float]

    def to_json(self) -> dict:
        return {"variant": self.variant, "mu": self.search.best, "grid": self.search.grid,
                "scores": self.search.scores_by_name(), "confirmed": _round(self.confirmed),
                "extensions": self.search.extensions, "at_edge": self.search.at_edge,
                "candidates": self.candidates, "seconds": self.seconds}


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def resolve_candidates(candidates: int | None, metric: str) -> int:
    """``tune.candidates``, or by default 10 x the metric's cutoff and at least 100 (nDCG@10: 100, R@100: 1000)."""
    if candidates is not None:
        return int(candidates)
    return max(100, 10 * measure_depth(metric, default=100))


def tune_mu(base_q: np.ndarray, lambda_q: np.ndarray, base_p: np.ndarray, lambda_p: np.ndarray,
            query_ids: Sequence[str], doc_ids: Sequence[str], qrels: Qrels, metric: str = "nDCG@10",
            variant: Variant = "concat", candidates: int | None = None, grid: Sequence[float] | None = None,
            max_extensions: int = 4, confirm: bool = True, confirm_with: tuple | None = None,
            judge: Any = None) -> MuTuning:
    """Tune μ of ``variant`` on ``qrels``: re-scored candidate sweep, then one real combined-index search.

    ``base_p``/``lambda_p`` are the passage vectors as served (:func:`spar.index.spar_index.served_passage_vectors`);
    ``confirm_with=(base_p, lambda_p, index_type, options)``: the original vectors and the index that serves them,
    for the confirming search (default: a flat float32 index of ``base_p``/``lambda_p``). ``judge``: an
    :class:`spar.data.question_sets.AnswerJudge` for questions judged by their answers (Acc@k): ``qrels`` are then made
    over every candidate passage (and every passage the confirming search ranks)."""
    import time

    start = time.perf_counter()
    candidates = resolve_candidates(candidates, metric)
    cands = spar_candidates(base_q, lambda_q, base_p, lambda_p, query_ids, doc_ids, variant, candidates)
    if judge is not None:
        qrels = judge.qrels({q: cands.rows[i] for i, q in enumerate(query_ids)})
    gathered = time.perf_counter()
    search = tune_weight(cands, qrels, metric, grid, max_extensions)
    swept = time.perf_counter()
    confirmed = None
    if confirm:
        served_p, served_l, index_type, options = confirm_with or (base_p, lambda_p, "flat", None)
        confirmed, _ = confirm_mu(base_q, lambda_q, served_p, served_l, query_ids, doc_ids, qrels, search.best,
                                  metric, variant, index_type=index_type, options=options, judge=judge)
        if abs(confirmed - search.best_score) > 1e-4:
            log.warning("%s: the real search at μ=%g gives %s=%.4f, the re-scored candidates %.4f (an approximate "
                        "index or fast-scan's rounded tables score otherwise; else raise tune.candidates)", variant,
                        search.best, metric, confirmed, search.best_score)
    done = time.perf_counter()
    seconds = {"candidates": round(gathered - start, 3), "sweep": round(swept - gathered, 3),
               "confirm": round(done - swept, 3)}
    return MuTuning(variant, search, confirmed, cands.stats, seconds)


def choose_mu(cfg, base_q: np.ndarray, lambda_q: np.ndarray, served_base: np.ndarray, served_lambda: np.ndarray,
              dev, doc_ids: Sequence[str], variant: Variant | None = None, metric: str | None = None,
              confirm: bool | None = None, confirm_with: tuple | None = None, judge: Any = None) -> MuTuning:
    """μ chosen on the dev questions ``dev`` (a :class:`spar.data.question_sets.SplitQueries`) with the ``tune``
    section's grid, candidate depth and extensions: the one place μ is chosen (``spar tune`` and each frontier
    point). ``variant``: default ``index.variant``; ``metric``: default ``tune.metric``; ``confirm``: default
    ``tune.confirm``; the rest as :func:`tune_mu`."""
    t = cfg.tune
    return tune_mu(base_q, lambda_q, served_base, served_lambda, dev.ids, doc_ids, dev.qrels, metric or t.metric,
                   variant or cfg.index.variant, t.candidates, grid_values(t.grid), t.max_extensions,
                   t.confirm if confirm is None else confirm, confirm_with=confirm_with, judge=judge)


@dataclass
class TuneReport:
    """What the tune stage found: ``payload`` is ``tune/tune.json``; the searches feed the plots."""

    payload: dict
    mu_searches: dict[str, GridSearch]
    alpha_search: GridSearch


def tune_settings(cfg) -> dict[str, Any]:
    """The ``tune`` section as the stages' fingerprints record it: its options, and the variant μ is tuned for
    (``index.variant``) under the key ``variant``, where ``tune.variant`` kept it before spar 0.2, so that runs
    made before stay up to date."""
    from spar.core.stage import settings

    return {**settings(cfg.tune), "variant": cfg.index.variant}


def tune_experiment(cfg, inputs=None, progress: Callable[[str], None] = log.info) -> TuneReport:
    """The ``tune`` stage on an experiment's artifacts: μ (configured variant, and the other one when
    ``tune.tune_both_variants``) and the hybrid's α, on dev questions only (never a test split): the dev pool of
    :func:`spar.data.question_sets.dev_pool`, then each set that tunes its own μ (``own_mu``) on its own dev split
    (recorded under ``sets``)."""
    from spar.data.question_sets import dev_pool, dev_split, own_mu_sets

    inputs = inputs or ExperimentInputs(cfg)
    report = tune_split(cfg, inputs, dev_pool(cfg), progress)
    own = {name: tune_split(cfg, inputs, dev_split(cfg, name), progress) for name in own_mu_sets(cfg)}
    if own:
        report.payload["sets"] = {name: {k: r.payload[k] for k in SET_KEYS} for name, r in own.items()}
    return report


#: What ``tune.json`` records of a set tuned on its own dev split.
SET_KEYS = ("mu", "alpha", "dev_queries", "dev_sets", "dev_scores", "confirmed", "variants", "at_edge")


def tune_split(cfg, inputs, dev, progress: Callable[[str], None] = log.info) -> TuneReport:
    """μ (and α) tuned on the dev questions ``dev`` (a :class:`spar.data.question_sets.SplitQueries`)."""
    import time

    from spar.index.spar_index import IndexOptions, served_passage_vectors

    t = cfg.tune
    base_p, lambda_p = inputs.passage_vectors("base"), inputs.passage_vectors("lambda")
    # μ is tuned against the passage vectors the index will serve (decoded codes), never float32 then served 4-bit.
    options = IndexOptions.from_section(cfg.index, seed=cfg.experiment.seed)
    doc_ids = inputs.doc_ids
    judge = inputs.answer_judge(dev, t.metric)
    base_q = inputs.query_vectors("base", dev)
    lambda_q = inputs.query_vectors("lambda", dev)
    candidates = resolve_candidates(t.candidates, t.metric)
    where = f"{len(dev.ids)} dev queries" + (f" of {dev.name}" if dev.name else "")

    variant_of_index = cfg.index.variant  # the one variant setting: μ is tuned for the index's combination
    variants = [variant_of_index]
    other = "sum" if variant_of_index == "concat" else "concat"
    if t.tune_both_variants and (other == "concat" or base_p.shape[1] == lambda_p.shape[1]):
        variants.append(other)
    tuned: dict[str, MuTuning] = {}
    for variant in variants:
        progress(f"tuning μ ({variant}) on {where}, {t.metric}, passages stored as {options.storage}")
        served_base, served_lambda = served_passage_vectors(base_p, lambda_p, variant, cfg.index.type, options)
        tuned[variant] = choose_mu(cfg, base_q, lambda_q, served_base, served_lambda, dev, doc_ids, variant,
                                   confirm_with=(base_p, lambda_p, cfg.index.type, options), judge=judge)

    progress(f"tuning α of base + α·BM25 on {where}")
    start = time.perf_counter()
    base_deep = dense_search(base_q, base_p, dev.ids, doc_ids, candidates)
    bm25_deep = inputs.bm25_search(dev, candidates)
    lambda_run = dense_search(lambda_q, lambda_p, dev.ids, doc_ids, measure_depth(t.metric))
    qrels = inputs.judged(dev, judge, base_deep, bm25_deep, lambda_run)
    searched = time.perf_counter()
    alpha = tune_weight(hybrid_candidates(base_deep, bm25_deep, t.hybrid_normalize), qrels, t.metric,
                        grid_values(t.hybrid_alphas), t.max_extensions)
    base_score = evaluate_run(qrels, base_deep, [t.metric])[t.metric]
    bm25_score = evaluate_run(qrels, bm25_deep, [t.metric])[t.metric]
    lambda_score = evaluate_run(qrels, lambda_run, [t.metric])[t.metric]

    main = tuned[variant_of_index]
    payload = {
        "variant": variant_of_index, "metric": t.metric, "mu": main.search.best, "grid": main.search.grid,
        "scores": main.search.scores_by_name(), "confirmed": _round(main.confirmed),
        "alpha": alpha.best, "alpha_grid": alpha.grid, "alpha_scores": alpha.scores_by_name(),
        "split": "dev", "dev_queries": len(dev.ids), "dev_sets": dev.name.split("+") if dev.name else [],
        "judged_by": dev.judged_by, "candidates": candidates,
        "storage": options.served_storage(cfg.index.type), "codec": options.codec(cfg.index.type),
        "extensions": main.search.extensions, "at_edge": main.search.at_edge,
        "dev_scores": {"bm25": _round(bm25_score), "base": _round(base_score), "lambda": _round(lambda_score),
                       "spar": _round(main.search.best_score), "hybrid": _round(alpha.best_score)},
        "hybrid": {"normalize": t.hybrid_normalize, "alpha_extensions": alpha.extensions,
                   "at_edge": alpha.at_edge, "seconds": {"searches": round(searched - start, 3),
                                                         "sweep": round(time.perf_counter() - searched, 3)}},
        "variants": {v: m.to_json() for v, m in tuned.items()},
    }
    return TuneReport(payload, {v: m.search for v, m in tuned.items()}, alpha)


# ----------------------------------------------------------------------------------------------------------------
# Reading the tuned weights (the one reader of tune/tune.json)
# ----------------------------------------------------------------------------------------------------------------

TUNE_FILE = "tune.json"


@dataclass
class TunedWeights:
    """``tune/tune.json``: μ of each tuned SPAR variant, the hybrid's α and the tuning record (``payload``).

    >>> tuned = TunedWeights(Path("tune.json"), {"variant": "concat", "mu": 0.5, "alpha": 0.2,
    ...                                          "variants": {"concat": {"mu": 0.5}, "sum": {"mu": 0.3}}})
    >>> tuned.mu(), tuned.mu("sum"), tuned.alpha, sorted(tuned.variants)
    (0.5, 0.3, 0.2, ['concat', 'sum'])
    """

    path: Path
    payload: dict[str, Any]

    @property
    def variant(self) -> str:
        """The configured variant (``index.variant``), the one whose μ is the record's main ``mu``."""
        return self.payload.get("variant", "concat")

    @property
    def variants(self) -> set[str]:
        """Every variant μ was tuned for."""
        return {self.variant, *self.payload.get("variants", {})}

    def mu(self, variant: str | None = None) -> float:
        """μ tuned for ``variant`` (default: the configured one); fails naming the file when it was not tuned."""
        variant = variant or self.variant
        if variant == self.variant:
            return float(self.payload["mu"])
        other = self.payload.get("variants", {}).get(variant)
        if not other:
            raise ArtifactError(f"{self.path}: μ was not tuned for the '{variant}' variant (tuned: "
                                f"{sorted(self.variants)}); re-run `spar tune` with index.variant={variant}")
        return float(other["mu"])

    @property
    def alpha(self) -> float | None:
        """α of the BM25 hybrid, or None when it was not tuned."""
        return self.payload.get("alpha")

    @property
    def candidates(self) -> int | None:
        """The candidate depth the weights were tuned with."""
        return self.payload.get("candidates")

    @property
    def storage(self) -> str:
        """How the passage vectors μ was tuned against were stored (:mod:`spar.index.storage`)."""
        return self.payload.get("storage", "float32")

    def for_set(self, name: str) -> "TunedWeights":
        """The weights that serve question set ``name``: its own (``own_mu``) when tuned on its dev split, else the
        experiment's."""
        own = self.payload.get("sets", {}).get(name)
        if not own:
            return self
        return TunedWeights(self.path, {**self.payload, **own, "sets": {}})

    def check_served_by(self, index_info: Mapping[str, Any], index_dir: str | Path) -> None:
        """Refuse an index that stores its passages otherwise than the vectors μ was tuned against."""
        served = index_info.get("storage", "pq" if index_info.get("type") == "ivfpq" else "float32")
        tuned_codec = self.payload.get("codec", {"storage": self.storage})
        same_codec = index_info.get("codec", {"storage": served}) == tuned_codec
        if served != self.storage or not same_codec:
            raise ArtifactError(f"{index_dir}: the index stores passages as {index_info.get('codec', served)}, but μ "
                                f"in {self.path} was tuned against {self.payload.get('codec', self.storage)}; re-run "
                                "`spar tune` and `spar index` with the same index settings")


def read_tuned(output_dir: str | Path) -> TunedWeights:
    """``tune/tune.json`` of an experiment (fails naming the stage to run when it is missing or unreadable)."""
    d = RunContext.at(output_dir).artifact("tune")
    path = d / TUNE_FILE
    if not is_complete(d) or not path.exists():
        raise ArtifactError(f"{d}: tuned weights are missing (run `spar tune`)")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(payload, dict) or "mu" not in payload:
        raise ArtifactError(f"{path}: no 'mu' (re-run `spar tune`)")
    return TunedWeights(path, payload)
