"""The quality-per-byte frontier: Λ kinds × dimensions × passage storage × seeds, scored as SPAR adds Λ.

For each (kind, dim, seed) the frontier fits (``projection``) or trains (``static``) a Λ on the run's corpus and
labels and encodes the corpus and the dev/test queries; then for each storage (:mod:`spar.index.storage`: float32 to
4-bit, fast-scan, PQ) it codes ``[P, PΛ]`` as an index of that storage would, tunes μ on dev against those vectors, and
reports on test:

- Λ alone: nDCG@10, R@100, and RBO (p = 0.9, depth 100) of its ranking against the teacher's (fidelity);
- SPAR ``[Q, μ·QΛ]`` searched in the flat index of that storage (what ``spar evaluate`` serves; μ swept on dev
  against the decoded codes, as ``spar tune`` does): nDCG@10, R@100 (what Λ adds to the base);
- bytes per passage of the codes, and the training time;
- for the first seed, per index type asked for (``index_types``, any registered one that holds the point's storage,
  :mod:`spar.index.types.registry`: ``flat`` by default, which is what the default rule needs; ``hnsw``, ``ivf``,
  ``ivfpq`` are approximate): single-query and batched search latency of a SPAR
  index of that type and storage, and its ratios to the base-only index of the same type and to the BM25 + dense
  hybrid (:mod:`spar.evaluate.latency`); for an approximate type also SPAR's nDCG@10 and R@100 through it at the same μ,
  and the loss against the exact scan of the same codes. The IVF index holds ``[P, μ·PΛ]`` and is searched with
  ``[Q, QΛ]``: the same scores, but its k-means clusters then follow them (Λ's half has ~20× the base's norm, so
  clusters of ``[P, PΛ]`` follow Λ alone; on SciFact that cost 8 points of nDCG@10 at 32 of 132 lists probed,
  against 1.7 points scaled).

What does not change between points is computed once: the teacher's statistics and the base-only indexes. Each
timed point times its SPAR indexes side by side with the base-only indexes and the hybrid, so every ratio it reports
divides timings of one moment (the ratio to the hybrid once went through a hybrid timed once per frontier, and a
busier moment of a shared machine printed 6.14 ms as 0.10× beside a 9.90 ms hybrid, #37). The latency of the base
indexes and the hybrid timed together once per frontier is kept in the report's references.

The base retriever's embeddings, the teacher index and the labels are the run's own artifacts (``spar run`` up to
``encode`` with ``encode.encoders=[base]`` is enough). A transformer Λ already trained in the run's ``lambda/`` joins
as one more point. The report (:mod:`spar.evaluate.frontier_report`: the default rule, a Markdown table with mean ±
standard deviation over seeds, a PNG of SPAR nDCG@10 against bytes per passage) is written by ``spar frontier -c
CONFIG``.
"""

from __future__ import annotations

import logging
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.core.artifacts import is_complete
from spar.core.errors import ArtifactError
from spar.evaluate.frontier_report import Choice, FrontierPoint, FrontierReport
from spar.core.run_context import RunContext
from spar.index.storage import FAST_SCAN, STORAGES, code_bytes, fast_scan_codes
from spar.index.types.registry import index_type_names, registered_type

__all__ = ["DEFAULT_DIMS", "Choice", "FrontierInputs", "FrontierPoint", "FrontierReport", "index_type_names",
           "run_frontier", "score_points"]

log = logging.getLogger(__name__)

#: Up to the embedded default's own point (``configs/default.yaml``: 4,608 dims), so a default frontier holds it.
DEFAULT_DIMS = (128, 256, 384, 768, 1536, 3072, 4608)
METRICS = ("nDCG@10", "R@100")
LATENCY_K = 100
#: Queries timed one at a time per point (all test queries are timed batched).
LATENCY_SINGLE = 100


def _top_run(q: np.ndarray, p: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], k: int):
    from spar.evaluate.exact import dense_search

    return dense_search(np.ascontiguousarray(q, dtype=np.float32), np.ascontiguousarray(p, dtype=np.float32),
                        query_ids, doc_ids, k)


def can_hold(index_type: str, storage: str) -> bool:
    """Whether an index of ``index_type`` stores exactly ``storage`` (HNSW holds neither PQ nor fast-scan codes;
    IVF-PQ holds PQ codes only)."""
    return registered_type(index_type).holds(storage)


class FrontierInputs:
    """The run's shared inputs: base vectors, dev/test queries, the teacher's runs and sparse term matrices."""

    def __init__(self, cfg):
        from spar.model.stored_vectors import load_embeddings
        from spar.experiment.inputs import ExperimentInputs
        from spar.experiment.plan import split_queries
        from spar.data.passages import corpus_texts
        from spar.lexical.terms import BM25Weights

        self.cfg = cfg
        base_dir = RunContext(cfg).embeddings("base")
        if not is_complete(base_dir):
            raise ArtifactError(f"{base_dir}: base passage embeddings are missing (run `spar encode "
                                "encode.encoders=[base]` first)")
        self.passages_arrow = RunContext(cfg).passages
        base = load_embeddings(base_dir)
        self.doc_ids, self.base_p = base.ids, np.asarray(base.vectors, dtype=np.float32)
        self.experiment = ExperimentInputs(cfg)
        self.dev, self.test = split_queries(cfg, "dev"), split_queries(cfg, "test")
        self.base_q = {s.split: self._base_queries(s) for s in (self.dev, self.test)}
        self.bm25 = {s.split: self.experiment.bm25_search(s, 100) for s in (self.dev, self.test)}
        label = cfg.label
        texts = list(corpus_texts(self.passages_arrow, label.fields))
        if len(texts) != len(self.doc_ids):
            raise ArtifactError(f"{self.passages_arrow} holds {len(texts)} passages, the base embeddings "
                                f"{len(self.doc_ids)}: re-run `spar encode`")
        self.weights = BM25Weights.fit(texts, k1=label.k1, b=label.b, fields=label.fields)
        self.passage_terms = self.weights.passage_matrix(texts)
        self.query_terms = {s.split: self.weights.query_matrix(list(s.texts.values())) for s in (self.dev, self.test)}

    def _base_queries(self, queries) -> np.ndarray:
        from spar.model.stored_vectors import load_embeddings

        d = self.experiment.query_dir("base", queries.split)
        if is_complete(d):
            stored = load_embeddings(d)
            position = {q: i for i, q in enumerate(stored.ids)}
            if all(q in position for q in queries.ids):
                return np.asarray(stored.vectors[[position[q] for q in queries.ids]], dtype=np.float32)
        return self.experiment.encoder("base").encode_query(list(queries.texts.values()))

    @property
    def index_params(self) -> dict[str, Any]:
        """The run's ``index`` options that shape an index (its storage aside), and the codec-training seed."""
        section = self.cfg.index
        return {"hnsw_m": section.hnsw_m, "hnsw_ef_construction": section.hnsw_ef_construction,
                "hnsw_ef_search": section.hnsw_ef_search, "ivf_nlist": section.ivf_nlist, "nprobe": section.nprobe,
                "pq_m": section.pq_m, "pq_nbits": section.pq_nbits, "train_size": section.train_size,
                "seed": self.cfg.experiment.seed}

    def base_index(self, index_type: str) -> Any:
        """The base-only float32 index of ``index_type`` (built once): the latency reference."""
        from spar.index.spar_index import build_spar_index

        cache = self.__dict__.setdefault("_base_indexes", {})
        if index_type not in cache:
            cache[index_type] = build_spar_index(self.base_p, None, index_type=index_type,
                                                 **{**self.index_params, "storage": "float32"})
        return cache[index_type]

    @cached_property
    def reference_figures(self) -> dict[str, dict[str, float]]:
        """:func:`references` of this run (computed once)."""
        return references(self)

    @property
    def hybrid_alpha(self) -> float:
        return self.reference_figures["hybrid"]["alpha"]

    def reference_latency(self, index_types: Sequence[str]) -> dict[str, dict[str, float]]:
        """Latency of the hybrid and of the base-only indexes of ``index_types``, timed side by side once per
        frontier (none of them depends on Λ): ``{"hybrid": {...}, "base_flat": {...}, ...}``."""
        cache = self.__dict__.setdefault("_reference_latency", {})
        missing = [t for t in index_types if f"base_{t}" not in cache]
        if missing or "hybrid" not in cache:
            systems = _hybrid_system(self)
            systems.update({f"base_{t}": _searcher(self.base_index(t), self.base_q["test"])
                            for t in dict.fromkeys(["flat", *index_types])})
            cache.update(_time_one_thread(systems, len(self.test.ids)))
        return cache

    def latency(self, spar_indexes: Mapping[str, Any], spar_q: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Single-query and batched latency of SPAR indexes (by type, with their query vectors), each timed side by
        side with the base-only index of its type and with the hybrid: every ratio divides timings of one moment."""
        from spar.evaluate.latency import ratios

        systems = _hybrid_system(self)
        systems.update({f"base_{t}": _searcher(self.base_index(t), self.base_q["test"]) for t in spar_indexes})
        systems.update({f"spar_{t}": _searcher(index, spar_q[t]) for t, index in spar_indexes.items()})
        timings = _time_one_thread(systems, len(self.test.ids))
        return {t: {**timings[f"spar_{t}"], "vs_base": ratios(timings, f"spar_{t}", f"base_{t}"),
                    "vs_hybrid": ratios(timings, f"spar_{t}", "hybrid"), "base": timings[f"base_{t}"],
                    "hybrid": timings["hybrid"]} for t in spar_indexes}

    def lambda_vectors(self, model) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Λ's passage and dev/test query vectors (term-based kinds reuse the shared sparse matrices)."""
        passages = model.term_vectors(self.weights, self.passage_terms)
        if passages is not None:
            return passages, {s: model.term_vectors(self.weights, m) for s, m in self.query_terms.items()}
        from spar.data.passages import PassagesTable

        store = PassagesTable(self.passages_arrow, self.cfg.data.title_field or model.term_based)
        passages = store.get(np.arange(len(store)))
        return model.encode_passage(passages), {s.split: model.encode_query(list(s.texts.values()))
                                                for s in (self.dev, self.test)}


def _searcher(index: Any, queries: np.ndarray) -> Callable[[list[int]], Any]:
    return lambda rows: index.search(queries[rows], LATENCY_K)


def _time_one_thread(systems: Mapping[str, Callable[[list[int]], Any]], queries: int) -> dict[str, dict[str, float]]:
    """:func:`spar.evaluate.latency.time_systems` with 1 FAISS thread (a shared 2-core machine; OpenMP threads spin)."""
    import faiss

    from spar.evaluate.latency import time_systems

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return time_systems(systems, queries, LATENCY_SINGLE)
    finally:
        faiss.omp_set_num_threads(threads)


def _hybrid_system(inputs: "FrontierInputs") -> dict[str, Callable[[list[int]], Any]]:
    """The BM25 + dense hybrid as a timed system: base flat float32 search + Pyserini BM25 + fusion."""
    from spar.evaluate.candidates import hybrid_fuse

    k, pairs = LATENCY_K, inputs.test.pairs()
    base_q, base_flat, alpha = inputs.base_q["test"], inputs.base_index("flat"), inputs.hybrid_alpha

    def hybrid(rows):
        scores, found = base_flat.search(base_q[rows], k)
        sparse = inputs.experiment.bm25.search([pairs[r] for r in rows], k)
        for j, r in enumerate(rows):
            dense = [(inputs.doc_ids[d], float(x)) for d, x in zip(found[j], scores[j]) if d >= 0]
            hybrid_fuse(dense, sparse.get(pairs[r][0], []), alpha, inputs.cfg.tune.hybrid_normalize, k)

    return {"hybrid": hybrid}


def approximate_quality(inputs: FrontierInputs, index: Any, spar_q: np.ndarray,
                        exact: Mapping[str, list[tuple[str, float]]]) -> dict[str, float]:
    """SPAR through an approximate index on test: nDCG@10, R@100, the loss against the exact scan of the same
    codes (``exact``: its ranked run) and the share of the exact top 10 it finds (overlap@10)."""
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


def score_points(inputs: FrontierInputs, model, seed: int | None, train_seconds: float, steps: int = 0,
                 storages: Sequence[str] = ("float32",), index_types: Sequence[str] = (),
                 metric: str = "nDCG@10") -> list[FrontierPoint]:
    """For each storage: tune μ on dev against ``[P, PΛ]`` as stored, score Λ alone and SPAR on test; for each of
    ``index_types`` (the timed seed's points; empty: none) time a SPAR index of that type and storage, and score
    the approximate ones. FAISS runs on one thread here (see :func:`spar.index.spar_index.faiss_threads`)."""
    from spar.index.spar_index import faiss_threads
    from spar.evaluate.metrics import evaluate_run, mean_rbo

    lam_p, lam_q = inputs.lambda_vectors(model)
    test = inputs.test
    with faiss_threads(1):
        lambda_run = _top_run(lam_q["test"], lam_p, test.ids, inputs.doc_ids, 100)
        lambda_alone = {m: round(v, 6) for m, v in evaluate_run(test.qrels, lambda_run, METRICS).items()}
        rbo = round(mean_rbo(lambda_run, inputs.bm25["test"], p=0.9, depth=100, queries=test.ids), 6)
        return [_score_storage(inputs, model, lam_p, lam_q, storage, index_types, metric, seed=seed,
                               train_seconds=round(train_seconds, 2), steps=steps, lambda_alone=lambda_alone, rbo=rbo)
                for storage in storages]


def _score_storage(inputs: FrontierInputs, model, lam_p: np.ndarray, lam_q: Mapping[str, np.ndarray], storage: str,
                   index_types: Sequence[str], metric: str, **point: Any) -> FrontierPoint:
    """One point, as ``spar tune`` and ``spar evaluate`` would make it: μ swept on dev against the decoded codes of
    ``storage``, then SPAR scored on dev (the rule's figure) and test through the flat index that serves those
    codes (trained once: the served vectors and the index share the codec). Fast-scan indexes score through
    8-bit lookup tables whose rounding grows with the number of codes: scoring the decoded codes instead
    overstated them (SciFact-sample, 384 + 4608 dims, ``fs2``: dev 0.830 decoded, 0.735 served). Then the indexes
    of ``index_types``."""
    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import IndexOptions, add_passages, build_faiss_index, trained_faiss_index
    from spar.index.combine import spar_query_vectors
    from spar.evaluate.metrics import evaluate_run, ranked_run
    from spar.evaluate.tuning import choose_mu

    dev, test = inputs.dev, inputs.test
    options = IndexOptions(**{**inputs.index_params, "storage": storage})
    flat = trained_faiss_index([inputs.base_p, lam_p], "concat", "flat", options)
    served_base, served_lambda = served_passage_vectors(inputs.base_p, lam_p, "concat", "flat", options, flat)
    tuned = choose_mu(inputs.cfg, inputs.base_q["dev"], lam_q["dev"], served_base, served_lambda, dev, inputs.doc_ids,
                      "concat", metric=metric, confirm=False)
    del served_base, served_lambda
    mu = tuned.search.best
    flat = add_passages(flat, [inputs.base_p, lam_p], "concat")

    def served_run(split) -> dict[str, list[tuple[str, float]]]:
        q = spar_query_vectors(inputs.base_q[split.split], lam_q[split.split], mu, "concat")
        scores, rows = flat.search(q, min(100, len(inputs.doc_ids)))
        return ranked_run(split.ids, rows, scores, inputs.doc_ids)

    dev_served = evaluate_run(dev.qrels, served_run(dev), [metric])[metric]
    spar_run = served_run(test)
    test_q = spar_query_vectors(inputs.base_q["test"], lam_q["test"], mu, "concat")
    indexes, queries = {}, {}
    for t in index_types:
        if not can_hold(t, storage):
            continue
        if t == "flat":  # the index the point was scored through: timed as it is
            indexes[t], queries[t] = flat, test_q
        elif t == "ivf":  # Λ's half scaled by μ at index time: the same scores, clusters that follow them
            # (the frontier's own fold, older than index.fold; #49 item 2 folds every type through SparIndex.build)
            indexes[t] = build_faiss_index([inputs.base_p, np.float32(mu) * lam_p], "concat", "ivf", options)
            queries[t] = spar_query_vectors(inputs.base_q["test"], lam_q["test"], 1.0, "concat")
        else:
            indexes[t] = build_faiss_index([inputs.base_p, lam_p], "concat", t, options)
            queries[t] = test_q
    return FrontierPoint(
        kind=model.kind, dim=model.dim, mu=mu, dev_spar=round(dev_served, 6),
        dev_decoded=round(tuned.search.best_score, 6),
        spar={m: round(v, 6) for m, v in evaluate_run(test.qrels, spar_run, METRICS).items()},
        bytes_per_passage=code_bytes(storage, inputs.base_p.shape[1] + model.dim, options.pq_m, options.pq_nbits),
        storage=storage, latency=inputs.latency(indexes, queries) if indexes else {},
        approximate={t: approximate_quality(inputs, index, queries[t], spar_run) for t, index in indexes.items()
                     if t != "flat"}, **point)


def references(inputs: FrontierInputs, metric: str = "nDCG@10") -> dict[str, dict[str, float]]:
    """Base, BM25 and the base + α·BM25 hybrid (α tuned on dev) on test: the frontier's horizontal lines."""
    from spar.evaluate.metrics import evaluate_run
    from spar.evaluate.candidates import hybrid_candidates, hybrid_fuse, tune_weight

    cfg = inputs.cfg
    base_dev = _top_run(inputs.base_q["dev"], inputs.base_p, inputs.dev.ids, inputs.doc_ids, 100)
    alpha = tune_weight(hybrid_candidates(base_dev, inputs.bm25["dev"], cfg.tune.hybrid_normalize), inputs.dev.qrels,
                        metric).best
    base = _top_run(inputs.base_q["test"], inputs.base_p, inputs.test.ids, inputs.doc_ids, 100)
    hybrid = {q: hybrid_fuse(base[q], inputs.bm25["test"].get(q, []), alpha, cfg.tune.hybrid_normalize, 100)
              for q in inputs.test.ids}
    qrels = inputs.test.qrels
    return {"base": {**evaluate_run(qrels, base, METRICS), "bytes_per_passage": 4 * inputs.base_p.shape[1]},
            "bm25": evaluate_run(qrels, inputs.bm25["test"], METRICS),
            "hybrid": {**evaluate_run(qrels, hybrid, METRICS), "alpha": alpha}}


def run_frontier(cfg, kinds: Sequence[str] | None = None, dims: Sequence[int] = DEFAULT_DIMS,
                 seeds: Sequence[int] = (0, 1, 2), storages: Sequence[str] = ("float32",),
                 work_dir: str | Path | None = None,
                 progress: Callable[[str], None] = log.info,
                 known: Sequence[FrontierPoint] = (),
                 on_point: Callable[[list[FrontierPoint]], None] | None = None,
                 index_types: Sequence[str] = ("flat",)) -> FrontierReport:
    """Every (kind, dim, storage, seed) point on ``cfg``'s run (see the module docstring). ``known`` points
    (from an earlier run with the same settings) are kept instead of being recomputed, and a point asked for twice
    is computed once; ``on_point(points)`` is called after each new point (to save progress: a static point costs
    minutes). ``index_types``: the index types timed (and, approximate ones, scored) on the first seed.
    ``kinds``: default the kinds the frontier computes (:func:`spar.lexical.computed_kinds`)."""
    from spar.experiment.lambda_source import run_lambda
    from spar.lexical import computed_kinds, lambda_class
    from spar.lexical.projection import ProjectionLambda

    computed = computed_kinds()
    kinds = computed if kinds is None else tuple(kinds)

    inputs = FrontierInputs(cfg)
    lex = cfg.train.lexical
    base_dim = inputs.base_p.shape[1]
    for dim in dims:  # a storage that cannot code a dimension fails now, not after hours of other points
        for storage in storages:
            if storage in FAST_SCAN:
                fast_scan_codes(storage, base_dim + dim)
    work = Path(work_dir) if work_dir else RunContext(cfg).artifact("frontier")
    points: list[FrontierPoint] = list(known)
    done = {(p.kind, p.dim, p.seed, p.storage) for p in points}
    timed_seed = seeds[0] if seeds else None  # latency does not depend on the seed: measured once per point

    def add(new: list[FrontierPoint]) -> None:
        points.extend(new)
        done.update((p.kind, p.dim, p.seed, p.storage) for p in new)
        for p in new:
            flat = p.latency.get("flat", {})
            progress(f"{p.kind} d={p.dim} {p.storage} seed={p.seed}: SPAR {p.spar['nDCG@10']:.4f} at "
                     f"{p.bytes_per_passage:,} B/passage" + (f", flat {flat['single_ms']:.2f} ms/query "
                                                            f"({flat['vs_hybrid']['single_ms']:.2f}× hybrid)"
                                                            if flat else "")
                     + "".join(f", {t} {a['nDCG@10']:.4f} ({-a['loss']:+.4f})" for t, a in p.approximate.items()))
        if on_point and new:
            on_point(points)

    for dim in dict.fromkeys(dims):
        for seed in dict.fromkeys(seeds):
            projection = ProjectionLambda(inputs.weights, dim, lex.projection, seed,
                                          lex.nonzeros if lex.projection == "sparse" else None)
            types = index_types if seed == timed_seed else ()
            for kind in computed:  # the projection, then the kinds trained from it (static)
                todo = [st for st in dict.fromkeys(storages) if (kind, dim, seed, st) not in done]
                if kind not in kinds or not todo:
                    continue
                if lambda_class(kind).trainable:
                    model, seconds, steps = train_from_projection(cfg, kind, projection,
                                                                  work / f"{kind}-d{dim}-s{seed}", seed)
                    add(score_points(inputs, model, seed, seconds, steps, todo, types))
                else:
                    add(score_points(inputs, projection, seed, 0.0, 0, todo, types))
    source = run_lambda(cfg)
    if source is not None:  # the run's own Λ, of a requested kind this loop does not compute (transformer)
        from spar.core.artifacts import read_manifest

        run_kind = source.kind
        todo = [st for st in dict.fromkeys(storages) if not any(p.kind == run_kind and p.storage == st
                                                                for p in points)]
        if run_kind in kinds and run_kind not in computed and todo:
            stats = read_manifest(source.location).get("stats", {})
            add(score_points(inputs, source.load(), None, float(stats.get("train_seconds", 0.0)),
                             int(stats.get("steps", 0)), todo, index_types))
    return FrontierReport(RunContext(cfg).dataset, points,
                          {**inputs.reference_figures,
                           **({"latency": inputs.reference_latency(index_types)} if index_types else {})},
                          {"dims": sorted({p.dim for p in points}), "seeds": sorted({p.seed for p in points
                                                                                      if p.seed is not None}),
                           "kinds": sorted({p.kind for p in points}),
                           "storages": [st for st in STORAGES if any(p.storage == st for p in points)],
                           "index_types": [t for t in index_type_names() if any(t in p.latency for p in points)],
                           "dev_queries": len(inputs.dev.ids), "test_queries": len(inputs.test.ids),
                           "projection": cfg.train.lexical.projection})


def train_from_projection(cfg, kind: str, projection, work_dir: Path, seed: int):
    """Train a Λ of the trainable term-based ``kind`` (static) initialised from ``projection`` on the run's labels
    (Lightning, as ``spar train``)."""
    import shutil

    from spar.lexical import lambda_class
    from spar.train.training import train_lambda

    lex = cfg.train.lexical
    model = lambda_class(kind).from_projection(  # type: ignore[attr-defined]
        projection, objective=lex.objective, temperature=lex.temperature)
    train = cfg.train.model_copy(update={"kind": kind})
    if work_dir.exists():
        shutil.rmtree(work_dir)  # a frontier point is cheap: never resume from another configuration
    start = time.perf_counter()
    run = RunContext(cfg)
    result = train_lambda(model, train, run.passages, run.artifact("labels"), work_dir, seed=seed,
                          use_title=cfg.data.title_field,
                          run_name=f"{cfg.experiment.name}-frontier-{kind}-d{projection.dim}-s{seed}",
                          logger_root=cfg.output_dir, enable_progress_bar=False, wandb_group=cfg.experiment.name)
    seconds = time.perf_counter() - start
    shutil.rmtree(work_dir / "checkpoints", ignore_errors=True)
    return model.eval(), seconds, result.steps
