"""The quality-per-byte frontier: Λ kinds × dimensions × passage storage × seeds, scored as SPAR adds Λ.

Each (kind, dim, seed) is a run of its own made by the real stages (:mod:`spar.sweep.points`: ``train`` fits a
projection or trains a static Λ from one, ``encode`` encodes the corpus and the dev/test questions with it), and each
storage (:mod:`spar.index.storage`: float32 to 4-bit, fast-scan, PQ) a run below it whose ``tune`` chooses μ against
the vectors that storage serves and whose ``index`` builds the exhaustive index of that storage. The frontier then
reports on test (:func:`score_point_run`):

- Λ alone: nDCG@10, R@100, and RBO (p = 0.9, depth 100) of its ranking against the teacher's (fidelity);
- SPAR ``[Q, μ·QΛ]`` searched in that index (what ``spar evaluate`` serves): nDCG@10, R@100 (what Λ adds to the
  base), and on dev the figure the default rule reads;
- bytes per passage of the codes, and the training time;
- for the first seed, per index type asked for (``index_types``, any registered one that holds the point's storage,
  :mod:`spar.index.types.registry`; by default the exhaustive one, which is what the default rule needs):
  single-query and batched search latency of a SPAR index of that type and storage, and its ratios to the
  base-only index of the same type and to the BM25 + dense hybrid (:mod:`spar.sweep.timing`); for an approximate
  type also SPAR's nDCG@10 and R@100 through it at the same μ, and the loss against the exact scan of the same codes.
  An approximate index is built as ``spar index`` builds it: with ``index.fold: auto`` it holds ``[P, μ·PΛ]`` and is
  searched with ``[Q, QΛ]`` (the same scores, clusters and links that follow them).

What does not change between points is computed once (:class:`FrontierInputs`): the base's vectors, the teacher's
runs and the base-only indexes. Each timed point times its SPAR indexes side by side with the base-only indexes and the
hybrid, so every ratio it reports divides timings of one moment (the ratio to the hybrid once went through a hybrid
timed once per frontier, and a busier moment of a shared machine printed 6.14 ms as 0.10× beside a 9.90 ms hybrid,
#37). The latency of the base indexes and the hybrid timed together once per frontier is kept in the report's
references.

The base retriever's embeddings, the teacher index and the labels are the run's own artifacts (``spar run`` up to
``encode`` with ``encode.encoders=[base]`` is enough); the points link them. A Λ already trained in the run's
``lambda/`` (a kind the frontier does not make: transformer) joins as one more point run. The report
(:mod:`spar.sweep.report`: the default rule, a Markdown table with mean ± standard deviation over seeds, a PNG of SPAR
nDCG@10 against bytes per passage) is written by ``spar frontier -c CONFIG``. A bench's own Λ that no config names (a
pruned projection table) is scored in memory by :func:`score_points`, its μ chosen by the function ``spar tune`` uses.
"""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.core.artifacts import is_complete
from spar.core.errors import ArtifactError
from spar.core.run_context import RunContext
from spar.experiment.plan import Experiment
from spar.index.storage import FAST_SCAN, STORAGES, code_bytes, fast_scan_codes
from spar.index.types.registry import exhaustive_type, index_type_names, registered_type
from spar.sweep.points import POINTS_DIR, PointRun, PointStages
from spar.sweep.report import FrontierPoint, FrontierReport
from spar.sweep.timing import LATENCY_K, time_beside_peers

__all__ = ["DEFAULT_DIMS", "METRICS", "FrontierInputs", "can_hold", "references", "run_frontier",
           "score_point_run", "score_points"]

log = logging.getLogger(__name__)

#: Up to the embedded default's own point (``configs/default.yaml``: 4,608 dims), so a default frontier holds it.
DEFAULT_DIMS = (128, 256, 384, 768, 1536, 3072, 4608)


#: The figures a point reports on test (and the references).
METRICS = ("nDCG@10", "R@100")


def top_run(q: np.ndarray, p: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], k: int):
    """The exact top ``k`` of ``q`` against ``p`` (:func:`spar.evaluate.exact.dense_search`) as a ranked run."""
    from spar.evaluate.exact import dense_search

    return dense_search(np.ascontiguousarray(q, dtype=np.float32), np.ascontiguousarray(p, dtype=np.float32),
                        query_ids, doc_ids, k)


class FrontierInputs:
    """The run's shared inputs: base vectors, dev/test queries, the teacher's runs and sparse term matrices."""

    def __init__(self, cfg):
        from spar.model.stored_vectors import load_embeddings
        from spar.experiment.inputs import ExperimentInputs
        from spar.experiment.plan import split_queries

        self.cfg = cfg
        run = Experiment.of(cfg).run
        base_dir = run.embeddings("base")
        if not is_complete(base_dir):
            raise ArtifactError(f"{base_dir}: base passage embeddings are missing (run `spar encode "
                                "encode.encoders=[base]` first)")
        self.passages_arrow = run.passages
        base = load_embeddings(base_dir)
        self.doc_ids, self.base_p = base.ids, np.asarray(base.vectors, dtype=np.float32)
        self.experiment = ExperimentInputs(cfg)
        self.dev, self.test = split_queries(cfg, "dev"), split_queries(cfg, "test")
        self.base_q = {s.split: self._base_queries(s) for s in (self.dev, self.test)}
        self.bm25 = {s.split: self.experiment.bm25_search(s, 100) for s in (self.dev, self.test)}

    @cached_property
    def _terms(self):
        """The corpus's BM25 statistics, its passages' and the dev/test questions' term matrices: what an in-memory
        term-based Λ (:func:`score_points`) is applied to (the frontier's own points are encoded by their runs)."""
        from spar.data.passages import corpus_texts
        from spar.lexical.terms import BM25Weights

        label = self.cfg.label
        texts = list(corpus_texts(self.passages_arrow, label.fields))
        if len(texts) != len(self.doc_ids):
            raise ArtifactError(f"{self.passages_arrow} holds {len(texts)} passages, the base embeddings "
                                f"{len(self.doc_ids)}: re-run `spar encode`")
        weights = BM25Weights.fit(texts, k1=label.k1, b=label.b, fields=label.fields)
        return weights, weights.passage_matrix(texts), {s.split: weights.query_matrix(list(s.texts.values()))
                                                         for s in (self.dev, self.test)}

    @property
    def weights(self):
        """The corpus's BM25 statistics (for a bench's own projections)."""
        return self._terms[0]

    @property
    def resolved(self):
        """The experiment resolved once (:class:`spar.experiment.plan.Experiment`): its Λs, encoders, index options."""
        return self.experiment.experiment

    def _base_queries(self, queries) -> np.ndarray:
        from spar.model.stored_vectors import load_embeddings

        d = self.experiment.query_dir("base", queries.split)
        if is_complete(d):
            stored = load_embeddings(d)
            position = {q: i for i, q in enumerate(stored.ids)}
            if all(q in position for q in queries.ids):
                return np.asarray(stored.vectors[[position[q] for q in queries.ids]], dtype=np.float32)
        return self.experiment.encoder("base").encode_query(list(queries.texts.values()))

    def index_options(self, storage: str):
        """The options the ``index`` stage builds an index of the run's config with
        (:attr:`spar.experiment.plan.Experiment.index_options`: the ``index`` section, seeded by the experiment),
        storing ``storage``, and without exact re-ranking (``refine`` 0: the frontier scores what an index finds)."""
        return self.resolved.index_options.model_copy(update={"storage": storage, "refine": 0})

    def base_index(self, index_type: str) -> Any:
        """The base-only float32 FAISS index of ``index_type`` (built once): a latency peer."""
        from spar.index.spar_index import build_spar_index

        cache = self.__dict__.setdefault("_base_indexes", {})
        if index_type not in cache:
            cache[index_type] = build_spar_index(self.base_p, None, index_type=index_type,
                                                 **self.index_options("float32").faiss_options())
        return cache[index_type]

    @cached_property
    def reference_figures(self) -> dict[str, dict[str, float]]:
        """:func:`references` of this run (computed once)."""
        return references(self)

    @property
    def hybrid_alpha(self) -> float:
        return self.reference_figures["hybrid"]["alpha"]

    def reference_latency(self, index_types: Sequence[str]) -> dict[str, dict[str, float]]:
        """Latency of the hybrid and of the base-only indexes of ``index_types`` (and of the exhaustive type), timed
        side by side once per frontier (none of them depends on Λ): ``{"hybrid": {...}, "base_flat": {...}, ...}``."""
        cache = self.__dict__.setdefault("_reference_latency", {})
        missing = [t for t in index_types if f"base_{t}" not in cache]
        if missing or "hybrid" not in cache:
            cache.update(self._time({t: self.base_index(t) for t in dict.fromkeys([exhaustive_type().name,
                                                                                  *index_types])}))
        return cache

    def _time(self, base_indexes: Mapping[str, Any], spar: Mapping[str, tuple[Any, np.ndarray]] | None = None):
        """:func:`spar.sweep.timing.time_beside_peers` on this run's test questions, its BM25 and its hybrid's α,
        with the exhaustive base index the hybrid searches."""
        scan = exhaustive_type().name
        return time_beside_peers(self.test, self.base_q["test"], self.served_base[0], self.experiment.bm25,
                                 self.hybrid_alpha, self.cfg.tune.hybrid_normalize,
                                 {scan: self.base_index(scan), **base_indexes}, spar)

    @cached_property
    def served_base(self) -> tuple[Any, dict[str, Any]]:
        """The hybrid's dense half as users serve it: the base's vectors in an HNSW graph
        (:class:`spar.evaluate.served_hybrid.HnswBase`), its efSearch the smallest whose base alone loses at most 0.3
        Success@20 points against its exact scan on the dev questions (:func:`~spar.evaluate.served_hybrid.
        calibrate_ef`); with its settings and calibration."""
        from spar.evaluate.served_hybrid import HnswBase, calibrate_ef

        graph = HnswBase.build(self.base_p, self.doc_ids)
        exact = top_run(self.base_q["dev"], self.base_p, self.dev.ids, self.doc_ids, 20)
        calibration = calibrate_ef(graph, self.dev.ids, self.base_q["dev"], exact, lambda *runs: self.dev.qrels)
        return graph, {**graph.settings(), "calibration": calibration}

    def latency(self, spar_indexes: Mapping[str, Any], spar_q: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Single-query and batched latency of SPAR indexes (FAISS indexes by type, with their query vectors), each
        timed side by side with the base-only index of its type and with the hybrid: every ratio divides timings of
        one moment."""
        from spar.evaluate.latency import ratios

        timings = self._time({t: self.base_index(t) for t in spar_indexes},
                             {t: (index, spar_q[t]) for t, index in spar_indexes.items()})
        return {t: {**timings[f"spar_{t}"], "vs_base": ratios(timings, f"spar_{t}", f"base_{t}"),
                    "vs_hybrid": ratios(timings, f"spar_{t}", "hybrid"), "base": timings[f"base_{t}"],
                    "hybrid": timings["hybrid"]} for t in spar_indexes}

    def lambda_vectors(self, model) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """An in-memory Λ's passage and dev/test query vectors (term-based kinds reuse the shared sparse
        matrices)."""
        if model.term_based:
            weights, passage_terms, query_terms = self._terms
            passages = model.term_vectors(weights, passage_terms)
            if passages is not None:
                return passages, {s: model.term_vectors(weights, m) for s, m in query_terms.items()}
        from spar.data.passages import PassagesTable

        store = PassagesTable(self.passages_arrow, self.cfg.data.title_field or model.term_based)
        passages = store.get(np.arange(len(store)))
        return model.encode_passage(passages), {s.split: model.encode_query(list(s.texts.values()))
                                                for s in (self.dev, self.test)}


def references(inputs: FrontierInputs, metric: str = "nDCG@10") -> dict[str, dict[str, float]]:
    """Base, BM25 and the base + α·BM25 hybrid (α tuned on dev) on test: the frontier's horizontal lines."""
    from spar.evaluate.metrics import evaluate_run
    from spar.evaluate.candidates import hybrid_candidates, hybrid_fuse, tune_weight

    cfg = inputs.cfg
    base_dev = top_run(inputs.base_q["dev"], inputs.base_p, inputs.dev.ids, inputs.doc_ids, 100)
    alpha = tune_weight(hybrid_candidates(base_dev, inputs.bm25["dev"], cfg.tune.hybrid_normalize), inputs.dev.qrels,
                        metric).best
    base = top_run(inputs.base_q["test"], inputs.base_p, inputs.test.ids, inputs.doc_ids, 100)
    hybrid = {q: hybrid_fuse(base[q], inputs.bm25["test"].get(q, []), alpha, cfg.tune.hybrid_normalize, 100)
              for q in inputs.test.ids}
    qrels = inputs.test.qrels
    graph, served = inputs.served_base
    graph_lists = graph.run(inputs.test.ids, inputs.base_q["test"], 100)
    hybrid_served = {q: hybrid_fuse(hits, inputs.bm25["test"].get(q, []), alpha, cfg.tune.hybrid_normalize, 100)
                     for q, hits in graph_lists.items()}
    return {"base": {**evaluate_run(qrels, base, METRICS), "bytes_per_passage": 4 * inputs.base_p.shape[1]},
            "bm25": evaluate_run(qrels, inputs.bm25["test"], METRICS),
            "hybrid": {**evaluate_run(qrels, hybrid, METRICS), "alpha": alpha},
            # the hybrid and the base as users serve them (issue #46): the base in HNSW, efSearch chosen on dev
            "base_hnsw": {**evaluate_run(qrels, graph_lists, METRICS),
                          "bytes_per_passage": round(graph.nbytes() / len(inputs.doc_ids), 1), **served},
            "hybrid_served": {**evaluate_run(qrels, hybrid_served, METRICS), "alpha": alpha,
                              "ef_search": served["ef_search"]}}


def can_hold(index_type: str, storage: str) -> bool:
    """Whether an index of ``index_type`` stores exactly ``storage`` (HNSW holds neither PQ nor fast-scan codes;
    IVF-PQ holds PQ codes only): the registry's :meth:`~spar.index.types.registry.IndexType.holds`."""
    return registered_type(index_type).holds(storage)


def approximate_quality(inputs: FrontierInputs, index: Any, spar_q: np.ndarray,
                        exact: Mapping[str, list[tuple[str, float]]]) -> dict[str, float]:
    """SPAR through an approximate FAISS ``index`` on test: nDCG@10, R@100, the loss against the exact scan of the
    same codes (``exact``: its ranked run) and the share of the exact top 10 it finds (overlap@10)."""
    from spar.evaluate.metrics import evaluate_run, ranked_run

    test = inputs.test
    scores, rows = index.search(np.ascontiguousarray(spar_q, dtype=np.float32), LATENCY_K)
    run = ranked_run(test.ids, rows, scores, inputs.doc_ids)
    figures = evaluate_run(test.qrels, run, METRICS)
    exact_ndcg = evaluate_run(test.qrels, exact, ["nDCG@10"])["nDCG@10"]
    overlap = np.mean([len({d for d, _ in run[q][:10]} & {d for d, _ in exact[q][:10]}) / max(1, min(10, len(exact[q])))
                       for q in test.ids])
    return {**{m: round(v, 6) for m, v in figures.items()}, "loss": round(exact_ndcg - figures["nDCG@10"], 6),
            "overlap@10": round(float(overlap), 4)}


def _lambda_alone(inputs: FrontierInputs, lam_p: np.ndarray, lam_q: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Λ alone on test: nDCG@10, R@100, and the RBO of its ranking against the teacher's (fidelity)."""
    from spar.evaluate.metrics import evaluate_run, mean_rbo

    test = inputs.test
    lambda_run = top_run(lam_q["test"], lam_p, test.ids, inputs.doc_ids, 100)
    return {"lambda_alone": {m: round(v, 6) for m, v in evaluate_run(test.qrels, lambda_run, METRICS).items()},
            "rbo": round(mean_rbo(lambda_run, inputs.bm25["test"], p=0.9, depth=100, queries=test.ids), 6)}


def score_point_run(inputs: FrontierInputs, point: PointRun, stages: PointStages,
                    storages: Sequence[str] = ("float32",), index_types: Sequence[str] = (),
                    force: bool = False) -> list[FrontierPoint]:
    """One point as the stages make it (:mod:`spar.sweep.points`): its Λ by ``train`` and ``encode``, and per
    storage its μ by ``tune`` and its exhaustive index by ``index``; then scored on dev and test through that index
    (:func:`_served_point`). ``force``: its stages start over. FAISS runs on one thread here."""
    from spar.evaluate.tuning import read_tuned
    from spar.index.spar_index import SparIndex, faiss_threads

    point.make_lambda(stages, force)
    facts = point.lambda_facts()
    stored, lam_q = point.vectors({"dev": inputs.dev, "test": inputs.test})
    if list(stored.ids) != list(inputs.doc_ids):
        raise ArtifactError(f"{point.directory}: Λ's passage vectors are not in the base embeddings' order "
                            "(re-run the frontier with --force)")
    lam_p = np.asarray(stored.vectors, dtype=np.float32)
    runs = {storage: point.make_index(stages, storage, force) for storage in storages}  # the stages' own threads
    points = []
    with faiss_threads(1):  # scoring and timing: one thread, as a served question gets
        alone = _lambda_alone(inputs, lam_p, lam_q)
        for storage, run_dir in runs.items():
            tuned = read_tuned(run_dir)
            scored = SparIndex.load(RunContext.at(run_dir).artifact("index"))
            options = Experiment(point.config(storage)).index_options  # the point's storage, seed, no re-ranking
            points.append(_served_point(inputs, facts["kind"], lam_p, lam_q, storage, scored, tuned.mu(),
                                        tuned.payload["dev_scores"]["spar"], index_types, options,
                                        tuned.payload["metric"], seed=point.seed,
                                        train_seconds=round(facts["train_seconds"], 2), steps=facts["steps"],
                                        run=str(run_dir), **alone))
    return points


def score_points(inputs: FrontierInputs, model, seed: int | None, train_seconds: float, steps: int = 0,
                 storages: Sequence[str] = ("float32",), index_types: Sequence[str] = (),
                 metric: str = "nDCG@10") -> list[FrontierPoint]:
    """An in-memory Λ (a bench's variant that no config names, e.g. a pruned projection table) scored as a point
    is: for each storage the exhaustive index of that storage is built as ``spar index`` builds it (its codec
    trained once: the served vectors and the index share it), μ is swept on dev against its decoded codes by
    :func:`spar.evaluate.tuning.choose_mu`, where ``spar tune`` chooses it, then :func:`_served_point`. The
    frontier's own points are runs of the stages instead (:func:`score_point_run`)."""
    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import SparIndex, faiss_threads
    from spar.evaluate.tuning import choose_mu

    lam_p, lam_q = inputs.lambda_vectors(model)
    points = []
    with faiss_threads(1):
        alone = _lambda_alone(inputs, lam_p, lam_q)
        for storage in storages:
            options = inputs.index_options(storage)
            scored = SparIndex.build(inputs.base_p, lam_p, ids=inputs.doc_ids, variant="concat",
                                     index_type=exhaustive_type().name, options=options)
            served_base, served_lambda = served_passage_vectors(inputs.base_p, lam_p, "concat",
                                                                exhaustive_type().name, options, scored.index)
            tuned = choose_mu(inputs.cfg, inputs.base_q["dev"], lam_q["dev"], served_base, served_lambda, inputs.dev,
                              inputs.doc_ids, "concat", metric=metric, confirm=False)
            del served_base, served_lambda
            points.append(_served_point(inputs, model.kind, lam_p, lam_q, storage, scored, tuned.search.best,
                                        round(tuned.search.best_score, 6), index_types, options, metric, seed=seed,
                                        train_seconds=round(train_seconds, 2), steps=steps, **alone))
    return points


def _served_point(inputs: FrontierInputs, kind: str, lam_p: np.ndarray, lam_q: Mapping[str, np.ndarray], storage: str,
                  scored: Any, mu: float, dev_decoded: float, index_types: Sequence[str], options: Any, metric: str,
                  **point: Any) -> FrontierPoint:
    """SPAR through ``scored`` (the exhaustive index of ``storage``) at ``mu`` on dev (the rule's figure, by
    ``metric``) and test. Fast-scan indexes score through 8-bit lookup tables whose rounding grows with the number of
    codes: scoring the decoded codes instead overstated them (SciFact-sample, 384 + 4608 dims, ``fs2``: dev 0.830
    decoded, 0.735 served). Then the indexes of ``index_types`` that hold ``storage``, each built as the ``index``
    stage builds it (``options``: the index options of ``storage``): an approximate one holds ``[P, μ₀·PΛ]`` with μ₀
    this point's μ (``index.fold: auto``), so its lists and links follow the score that ranks (Λ's half has ~20× the
    base's norm: on SciFact unfolded IVF lists cost 8 points of nDCG@10 at 32 of 132 lists probed, folded ones
    1.7)."""
    from spar.index.approximate import fold_factor
    from spar.index.spar_index import SparIndex
    from spar.evaluate.metrics import evaluate_run, ranked_run

    dev, test = inputs.dev, inputs.test
    scan = exhaustive_type().name

    def served_run(split) -> dict[str, list[tuple[str, float]]]:
        q = scored.query_vectors(inputs.base_q[split.split], lam_q[split.split], mu)
        scores, rows = scored.index.search(q, min(100, len(inputs.doc_ids)))
        return ranked_run(split.ids, rows, scores, inputs.doc_ids)

    dev_served = evaluate_run(dev.qrels, served_run(dev), [metric])[metric]
    spar_run = served_run(test)
    indexes = {t: scored if t == scan else
               SparIndex.build(inputs.base_p, lam_p, ids=inputs.doc_ids, variant="concat", index_type=t,
                               options=options, fold=fold_factor(t, options.fold, mu))
               for t in index_types if can_hold(t, storage)}
    queries = {t: index.query_vectors(inputs.base_q["test"], lam_q["test"], mu) for t, index in indexes.items()}
    dim = lam_p.shape[1]
    return FrontierPoint(
        kind=kind, dim=dim, mu=mu, dev_spar=round(dev_served, 6), dev_decoded=dev_decoded,
        spar={m: round(v, 6) for m, v in evaluate_run(test.qrels, spar_run, METRICS).items()},
        bytes_per_passage=code_bytes(storage, inputs.base_p.shape[1] + dim, options.pq_m, options.pq_nbits),
        storage=storage,
        latency=inputs.latency({t: index.index for t, index in indexes.items()}, queries) if indexes else {},
        approximate={t: approximate_quality(inputs, index.index, queries[t], spar_run) for t, index in indexes.items()
                     if index.kind.approximate}, **point)


def run_frontier(cfg, stages: PointStages, kinds: Sequence[str] | None = None, dims: Sequence[int] = DEFAULT_DIMS,
                 seeds: Sequence[int] = (0, 1, 2), storages: Sequence[str] = ("float32",),
                 work_dir: str | Path | None = None,
                 progress: Callable[[str], None] = log.info,
                 known: Sequence[FrontierPoint] = (),
                 on_point: Callable[[list[FrontierPoint]], None] | None = None,
                 index_types: Sequence[str] | None = None, force: bool = False) -> FrontierReport:
    """Every (kind, dim, storage, seed) point on ``cfg``'s run (see the module docstring), each a run of ``stages``
    under ``<work_dir>/points/`` (:class:`spar.sweep.points.PointRun`). ``known`` points (from an earlier run with
    the same settings) are kept instead of being scored again, and a point asked for twice is computed once;
    ``on_point(points)`` is called after each new point (to save progress: a static point costs minutes).
    ``index_types``: the index types timed (and, approximate ones, scored) on the first seed (default: the
    exhaustive one, :func:`spar.index.types.registry.exhaustive_type`). ``force``: the points' stages start over.
    ``kinds``: default the kinds the frontier computes (:func:`spar.lexical.computed_kinds`)."""
    from spar.lexical import computed_kinds

    computed = computed_kinds()
    scan = exhaustive_type()
    index_types = (scan.name,) if index_types is None else tuple(index_types)
    kinds = computed if kinds is None else tuple(kinds)

    inputs = FrontierInputs(cfg)
    base_dim = inputs.base_p.shape[1]
    for dim in dims:  # a storage that cannot code a dimension fails now, not after hours of other points
        for storage in storages:
            if storage in FAST_SCAN:
                fast_scan_codes(storage, base_dim + dim)
    work = Path(work_dir) if work_dir else Experiment.of(cfg).run.artifact("frontier")
    points_root = work / POINTS_DIR
    points: list[FrontierPoint] = list(known)
    done = {(p.kind, p.dim, p.seed, p.storage) for p in points}
    timed_seed = seeds[0] if seeds else None  # latency does not depend on the seed: measured once per point

    def add(new: list[FrontierPoint]) -> None:
        points.extend(new)
        done.update((p.kind, p.dim, p.seed, p.storage) for p in new)
        for p in new:
            flat = p.latency.get(scan.name, {})
            progress(f"{p.kind} d={p.dim} {p.storage} seed={p.seed}: SPAR {p.spar['nDCG@10']:.4f} at "
                     f"{p.bytes_per_passage:,} B/passage" + (f", {scan.label} {flat['single_ms']:.2f} ms/query "
                                                            f"({flat['vs_hybrid']['single_ms']:.2f}× hybrid)"
                                                            if flat else "")
                     + "".join(f", {t} {a['nDCG@10']:.4f} ({-a['loss']:+.4f})" for t, a in p.approximate.items()))
        if on_point and new:
            on_point(points)

    for dim in dict.fromkeys(dims):
        for seed in dict.fromkeys(seeds):
            types = index_types if seed == timed_seed else ()
            for kind in computed:  # the projection, then the kinds trained from it (static)
                todo = [st for st in dict.fromkeys(storages) if (kind, dim, seed, st) not in done]
                if kind in kinds and todo:
                    add(score_point_run(inputs, PointRun(cfg, kind, dim, seed, points_root), stages, todo, types,
                                        force))
    source = inputs.resolved.own_lambda
    if source is not None:  # the run's own Λ, of a requested kind this loop does not compute (transformer)
        run_kind = source.kind
        todo = [st for st in dict.fromkeys(storages) if not any(p.kind == run_kind and p.storage == st
                                                                for p in points)]
        if run_kind in kinds and run_kind not in computed and todo:
            add(score_point_run(inputs, PointRun(cfg, run_kind, None, None, points_root), stages, todo, index_types,
                                force))
    return FrontierReport(Experiment.of(cfg).run.dataset, points,
                          {**inputs.reference_figures,
                           **({"latency": inputs.reference_latency(index_types)} if index_types else {})},
                          {"dims": sorted({p.dim for p in points}), "seeds": sorted({p.seed for p in points
                                                                                      if p.seed is not None}),
                           "kinds": sorted({p.kind for p in points}),
                           "storages": [st for st in STORAGES if any(p.storage == st for p in points)],
                           "index_types": [t for t in index_type_names() if any(t in p.latency for p in points)],
                           "dev_queries": len(inputs.dev.ids), "test_queries": len(inputs.test.ids),
                           "projection": cfg.train.lexical.projection})
