"""The quality-per-byte frontier: Λ kinds × dimensions × passage storage × seeds, scored as SPAR adds Λ.

For each (kind, dim, seed) the frontier fits (``projection``) or trains (``static``) a Λ on the run's corpus and
labels and encodes the corpus and the dev/test queries; then for each storage (:mod:`spar.index.storage`: float32 to
4-bit, PQ) it codes ``[P, PΛ]`` as an index of that storage would, tunes μ on dev against those vectors, and reports on
test:

- Λ alone: nDCG@10, R@100, and RBO (p = 0.9, depth 100) of its ranking against the teacher's (fidelity);
- SPAR ``[Q, μ·QΛ]`` against the stored ``[P, PΛ]`` by exact search: nDCG@10, R@100 (what Λ adds to the base);
- bytes per passage of the codes, and the training time;
- for the first seed: single-query and batched search latency of flat and HNSW indexes of that storage, side by
  side with the base-only index and the BM25 + dense hybrid (:mod:`spar.evaluate.latency`), and their ratios.

The base retriever's embeddings, the teacher index and the labels are the run's own artifacts (``spar run`` up to
``encode`` with ``encode.encoders=[base]`` is enough); the teacher's statistics are fitted once and shared by every
point. A transformer Λ already trained in the run's ``lambda/`` joins as one more point. Results: JSON, a Markdown
table (mean ± standard deviation over seeds) and a PNG (SPAR nDCG@10 against bytes per passage on a log scale, one
line per kind and storage; the base, the BM25 hybrid and BM25 marked). Driver: ``spar frontier -c CONFIG``.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.core.artifacts import is_complete
from spar.core.errors import ArtifactError
from spar.core.config import IndexType
from spar.core.run_context import RunContext
from spar.index.storage import STORAGES, code_bytes, hnsw_can_store

log = logging.getLogger(__name__)

DEFAULT_DIMS = (128, 256, 384, 768, 1536, 3072)
#: Index types each point's latency is measured with.
LATENCY_TYPES: tuple[IndexType, ...] = ("flat", "hnsw")
METRICS = ("nDCG@10", "R@100")


@dataclass
class FrontierPoint:
    kind: str
    dim: int
    seed: int | None
    mu: float
    dev_spar: float
    spar: dict[str, float]
    lambda_alone: dict[str, float]
    rbo: float
    bytes_per_passage: int
    train_seconds: float
    steps: int = 0
    storage: str = "float32"
    #: {"flat"|"hnsw": {"single_ms", "p50_ms", "batched_ms", "vs_base": {...}, "vs_hybrid": {...}}} (first seed)
    latency: dict[str, Any] = field(default_factory=dict)


@dataclass
class FrontierReport:
    dataset: str
    points: list[FrontierPoint]
    references: dict[str, dict[str, float]]
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "references": self.references, "points": [asdict(p) for p in self.points],
                **self.details}

    def groups(self) -> dict[tuple[str, int, str], list[FrontierPoint]]:
        out: dict[tuple[str, int, str], list[FrontierPoint]] = {}
        for p in self.points:
            out.setdefault((p.kind, p.dim, p.storage), []).append(p)
        order = {name: i for i, name in enumerate(STORAGES)}
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1], order.get(kv[0][2], 99))))

    def best_within(self, max_bytes: float) -> tuple[tuple[str, int, str], list[FrontierPoint]] | None:
        """The (kind, dim, storage) with the best mean **dev** SPAR score at or below ``max_bytes`` per passage (chosen
        on dev, never on test), or None when no point fits."""
        fits = [(key, pts) for key, pts in self.groups().items() if pts[0].bytes_per_passage <= max_bytes]
        if not fits:
            return None
        return max(fits, key=lambda kv: (statistics.mean(p.dev_spar for p in kv[1]), -kv[1][0].bytes_per_passage))

    def choice_line(self) -> str:
        """One line naming the point a config should use: the best on dev within 2× the base's float32 bytes."""
        base_bytes = self.references.get("base", {}).get("bytes_per_passage")
        best = self.best_within(2 * base_bytes) if base_bytes else None
        if not best or not base_bytes:
            return ""
        (kind, dim, storage), pts = best
        return (f"Best within 2× the base's float32 bytes ({2 * base_bytes:,} B/passage), chosen on dev: {kind} "
                f"Λ, {dim} dims, {storage} ({pts[0].bytes_per_passage:,} B/passage): dev SPAR "
                f"{statistics.mean(p.dev_spar for p in pts):.4f}, test SPAR nDCG@10 "
                f"{statistics.mean(p.spar['nDCG@10'] for p in pts):.4f} over {len(pts)} seed(s).")

    def markdown(self) -> str:
        def cell(values: list[float], digits: int = 3) -> str:
            if len(values) == 1:
                return f"{values[0]:.{digits}f}"
            return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

        def latency(pts: list[FrontierPoint], index_type: str) -> str:
            timed = next((p.latency[index_type] for p in pts if index_type in p.latency), None)
            if not timed:
                return "–"
            return (f"{timed['single_ms']:.2f} ({timed['vs_hybrid']['single_ms']:.2f}× hybrid, "
                    f"{timed['vs_base']['single_ms']:.2f}× base)")

        refs = self.references
        base_bytes = refs.get("base", {}).get("bytes_per_passage")
        lines = [f"**{self.dataset}** — quality per byte (test queries; μ tuned on dev against the stored vectors). "
                 f"Base nDCG@10 {refs['base']['nDCG@10']:.3f} / R@100 {refs['base']['R@100']:.3f}"
                 + (f" at {base_bytes:,} B/passage (float32)" if base_bytes else "") + "; BM25 hybrid "
                 f"{refs['hybrid']['nDCG@10']:.3f} / {refs['hybrid']['R@100']:.3f}; BM25 "
                 f"{refs['bm25']['nDCG@10']:.3f} / {refs['bm25']['R@100']:.3f}. Latency: ms per query, one at a "
                 "time, k = 100, first seed; in brackets the ratio to the hybrid (base flat float32 + Pyserini BM25 + "
                 "fusion) and to the base-only index of the same type, measured in the same run.", "",
                 "| Λ kind | dim | storage | bytes/passage | seeds | Λ nDCG@10 | RBO vs teacher | SPAR nDCG@10 | "
                 "SPAR R@100 | flat 1-query ms | HNSW 1-query ms | train s |",
                 "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for (kind, dim, storage), pts in self.groups().items():
            lines.append(
                f"| {kind} | {dim} | {storage} | {pts[0].bytes_per_passage:,} | {len(pts)} | "
                f"{cell([p.lambda_alone['nDCG@10'] for p in pts])} | {cell([p.rbo for p in pts])} | "
                f"{cell([p.spar['nDCG@10'] for p in pts])} | {cell([p.spar['R@100'] for p in pts])} | "
                f"{latency(pts, 'flat')} | {latency(pts, 'hnsw')} | "
                f"{statistics.mean(p.train_seconds for p in pts):.0f} |")
        choice = self.choice_line()
        return "\n".join(lines + (["", choice] if choice else [])) + "\n"

    def plot(self, path: str | Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker  # noqa: F401  (FuncFormatter below)

        fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
        lines = sorted({(p.kind, p.storage) for p in self.points},
                       key=lambda ks: (ks[0], STORAGES.index(ks[1]) if ks[1] in STORAGES else 99))
        for kind, storage in lines:
            groups = [(dim, pts) for (k, dim, st), pts in self.groups().items() if k == kind and st == storage]
            xs = [pts[0].bytes_per_passage for _, pts in groups]
            ys = [statistics.mean(p.spar["nDCG@10"] for p in pts) for _, pts in groups]
            err = [statistics.stdev(p.spar["nDCG@10"] for p in pts) if len(pts) > 1 else 0.0 for _, pts in groups]
            ax.errorbar(xs, ys, yerr=err, marker="o", markersize=4, capsize=3, label=f"SPAR, {kind} Λ, {storage}")
            for (dim, _), x, y in zip(groups, xs, ys):
                ax.annotate(str(dim), (x, y), textcoords="offset points", xytext=(3, -9), fontsize=6)
        refs = self.references
        for name, style in (("hybrid", "--"), ("bm25", "-."), ("base", ":")):
            ax.axhline(refs[name]["nDCG@10"], color="grey", linestyle=style, linewidth=1,
                       label=f"{name} ({refs[name]['nDCG@10']:.3f})")
        if refs["base"].get("bytes_per_passage"):
            ax.scatter([refs["base"]["bytes_per_passage"]], [refs["base"]["nDCG@10"]], marker="s", color="black",
                       zorder=3, label="base alone, float32")
            ax.axvline(2 * refs["base"]["bytes_per_passage"], color="lightgrey", linewidth=1,
                       label="2× the base's bytes")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.set_xlabel("bytes per passage of the SPAR index's codes (log scale)")
        ax.set_ylabel("SPAR nDCG@10 (test)")
        ax.set_title(f"{self.dataset}: quality per byte")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def _top_run(q: np.ndarray, p: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], k: int):
    from spar.evaluate.exact import dense_search

    return dense_search(np.ascontiguousarray(q, dtype=np.float32), np.ascontiguousarray(p, dtype=np.float32),
                        query_ids, doc_ids, k)


class FrontierInputs:
    """The run's shared inputs: base vectors, dev/test queries, the teacher's runs and sparse term matrices."""

    def __init__(self, cfg):
        from spar.model.embeddings import load_embeddings
        from spar.experiment.inputs import ExperimentInputs
        from spar.data.question_sets import split_queries
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
        from spar.model.embeddings import load_embeddings

        d = self.experiment.query_dir("base", queries.split)
        if is_complete(d):
            stored = load_embeddings(d)
            position = {q: i for i, q in enumerate(stored.ids)}
            if all(q in position for q in queries.ids):
                return np.asarray(stored.vectors[[position[q] for q in queries.ids]], dtype=np.float32)
        return self.experiment.encoder("base").encode_query(list(queries.texts.values()))

    @cached_property
    def base_indexes(self) -> dict[str, Any]:
        """Base-only float32 indexes (flat, HNSW): the latency references."""
        from spar.index.spar_index import build_spar_index

        return {t: build_spar_index(self.base_p, None, index_type=t, **self.index_params) for t in LATENCY_TYPES}

    @property
    def index_params(self) -> dict[str, Any]:
        section = self.cfg.index
        return {"hnsw_m": section.hnsw_m, "hnsw_ef_construction": section.hnsw_ef_construction,
                "hnsw_ef_search": section.hnsw_ef_search, "seed": self.cfg.experiment.seed}

    @cached_property
    def reference_figures(self) -> dict[str, dict[str, float]]:
        """:func:`references` of this run (computed once)."""
        return references(self)

    @property
    def hybrid_alpha(self) -> float:
        return self.reference_figures["hybrid"]["alpha"]

    def latency(self, lam_p: np.ndarray, spar_q: np.ndarray, options) -> dict[str, Any]:
        """Single-query and batched latency of flat and HNSW SPAR indexes storing ``[P, PΛ]`` as ``options`` says,
        timed with the base-only indexes and the hybrid in one run (1 FAISS thread: a shared 2-core machine)."""
        import faiss

        from spar.index.spar_index import build_spar_index
        from spar.evaluate.latency import ratios, time_systems

        storage = options.storage
        params = {**self.index_params, "storage": storage}
        spar_indexes: dict[str, Any] = {t: build_spar_index(self.base_p, lam_p, "concat", t, **params)
                                        for t in LATENCY_TYPES if t != "hnsw" or hnsw_can_store(storage)}
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            timings = time_systems(_timed_systems(self, spar_indexes, spar_q), len(self.test.ids), LATENCY_SINGLE)
        finally:
            faiss.omp_set_num_threads(threads)
        return {t: {**timings[f"spar_{t}"], "vs_base": ratios(timings, f"spar_{t}", f"base_{t}"),
                    "vs_hybrid": ratios(timings, f"spar_{t}", "hybrid"),
                    "base": timings[f"base_{t}"], "hybrid": timings["hybrid"]} for t in spar_indexes}

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


LATENCY_K = 100
#: Queries timed one at a time per point (all test queries are timed batched).
LATENCY_SINGLE = 100


def _timed_systems(inputs: "FrontierInputs", spar_indexes: Mapping[str, Any], spar_q: np.ndarray):
    """The systems a point is timed against: SPAR (flat, HNSW), the base-only indexes, the BM25 + dense hybrid."""
    from spar.evaluate.tuning import hybrid_fuse

    k, test = LATENCY_K, inputs.test
    pairs = test.pairs()
    base_q = inputs.base_q["test"]
    base_flat = inputs.base_indexes["flat"]
    alpha = inputs.hybrid_alpha

    def hybrid(rows):
        scores, found = base_flat.search(base_q[rows], k)
        sparse = inputs.experiment.bm25.search([pairs[r] for r in rows], k)
        for j, r in enumerate(rows):
            dense = [(inputs.doc_ids[d], float(x)) for d, x in zip(found[j], scores[j]) if d >= 0]
            hybrid_fuse(dense, sparse.get(pairs[r][0], []), alpha, inputs.cfg.tune.hybrid_normalize, k)

    def searcher(index: Any, queries: np.ndarray) -> Callable[[list[int]], Any]:
        return lambda rows: index.search(queries[rows], k)

    systems: dict[str, Callable[[list[int]], Any]] = {"hybrid": hybrid}
    for index_type, index in inputs.base_indexes.items():
        systems[f"base_{index_type}"] = searcher(index, base_q)
    for index_type, index in spar_indexes.items():
        systems[f"spar_{index_type}"] = searcher(index, spar_q)
    return systems


def score_points(inputs: FrontierInputs, model, seed: int | None, train_seconds: float, steps: int = 0,
                 storages: Sequence[str] = ("float32",), timed: bool = False,
                 metric: str = "nDCG@10") -> list[FrontierPoint]:
    """For each storage: tune μ on dev against ``[P, PΛ]`` as stored, score Λ alone and SPAR on test (and, when
    ``timed``, the search latency of flat and HNSW indexes of that storage)."""
    from spar.index.spar_index import IndexOptions, served_passage_vectors, spar_query_vectors
    from spar.evaluate.metrics import evaluate_run, mean_rbo
    from spar.evaluate.tuning import tune_mu

    lam_p, lam_q = inputs.lambda_vectors(model)
    dev, test = inputs.dev, inputs.test
    lambda_run = _top_run(lam_q["test"], lam_p, test.ids, inputs.doc_ids, 100)
    lambda_alone = {m: round(v, 6) for m, v in evaluate_run(test.qrels, lambda_run, METRICS).items()}
    rbo = round(mean_rbo(lambda_run, inputs.bm25["test"], p=0.9, depth=100, queries=test.ids), 6)
    points = []
    for storage in storages:
        options = IndexOptions.from_section(inputs.cfg.index, seed=inputs.cfg.experiment.seed).model_copy(
            update={"storage": storage})
        served_base, served_lambda = served_passage_vectors(inputs.base_p, lam_p, "concat", "flat", options)
        tuned = tune_mu(inputs.base_q["dev"], lam_q["dev"], served_base, served_lambda, dev.ids, inputs.doc_ids,
                        dev.qrels, metric, "concat", confirm=False)
        mu = tuned.search.best
        test_q = spar_query_vectors(inputs.base_q["test"], lam_q["test"], mu, "concat")
        spar_run = _top_run(test_q, np.hstack([served_base, served_lambda]), test.ids, inputs.doc_ids, 100)
        points.append(FrontierPoint(
            kind=model.kind, dim=model.dim, seed=seed, mu=mu, dev_spar=round(tuned.search.best_score, 6),
            spar={m: round(v, 6) for m, v in evaluate_run(test.qrels, spar_run, METRICS).items()},
            lambda_alone=lambda_alone, rbo=rbo,
            bytes_per_passage=code_bytes(storage, inputs.base_p.shape[1] + model.dim, options.pq_m, options.pq_nbits),
            train_seconds=round(train_seconds, 2), steps=steps, storage=storage,
            latency=inputs.latency(lam_p, test_q, options) if timed else {}))
    return points


def references(inputs: FrontierInputs, metric: str = "nDCG@10") -> dict[str, dict[str, float]]:
    """Base, BM25 and the base + α·BM25 hybrid (α tuned on dev) on test: the frontier's horizontal lines."""
    from spar.evaluate.metrics import evaluate_run
    from spar.evaluate.tuning import hybrid_candidates, hybrid_fuse, tune_weight

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


def run_frontier(cfg, kinds: Sequence[str] = ("projection", "static"), dims: Sequence[int] = DEFAULT_DIMS,
                 seeds: Sequence[int] = (0, 1, 2), storages: Sequence[str] = ("float32",),
                 work_dir: str | Path | None = None,
                 progress: Callable[[str], None] = log.info,
                 known: Sequence[FrontierPoint] = (),
                 on_point: Callable[[list[FrontierPoint]], None] | None = None) -> FrontierReport:
    """Every (kind, dim, storage, seed) point on ``cfg``'s run (see the module docstring). ``known`` points
    (from an earlier run with the same settings) are kept instead of being recomputed; ``on_point(points)`` is
    called after each new point (to save progress: a static point costs minutes)."""
    from spar.lexical.projection import ProjectionLambda

    inputs = FrontierInputs(cfg)
    lex = cfg.train.lexical
    work = Path(work_dir) if work_dir else RunContext(cfg).artifact("frontier")
    points: list[FrontierPoint] = list(known)
    done = {(p.kind, p.dim, p.seed, p.storage) for p in points}
    timed_seed = seeds[0] if seeds else None  # latency does not depend on the seed: measured once per point

    def add(new: list[FrontierPoint]) -> None:
        points.extend(new)
        for p in new:
            flat = p.latency.get("flat", {})
            progress(f"{p.kind} d={p.dim} {p.storage} seed={p.seed}: SPAR {p.spar['nDCG@10']:.4f} at "
                     f"{p.bytes_per_passage:,} B/passage" + (f", flat {flat['single_ms']:.2f} ms/query "
                                                            f"({flat['vs_hybrid']['single_ms']:.2f}× hybrid)"
                                                            if flat else ""))
        if on_point and new:
            on_point(points)

    for dim in dims:
        for seed in seeds:
            projection = ProjectionLambda(inputs.weights, dim, lex.projection, seed,
                                          lex.nonzeros if lex.projection == "sparse" else None)
            timed = seed == timed_seed
            todo = [st for st in storages if ("projection", dim, seed, st) not in done]
            if "projection" in kinds and todo:
                add(score_points(inputs, projection, seed, 0.0, 0, todo, timed=timed))
            todo = [st for st in storages if ("static", dim, seed, st) not in done]
            if "static" in kinds and todo:
                model, seconds, steps = train_static(cfg, projection, work / f"static-d{dim}-s{seed}", seed)
                add(score_points(inputs, model, seed, seconds, steps, todo, timed=timed))
    lam_dir = RunContext(cfg).artifact("lambda")
    if is_complete(lam_dir):  # the run's own Λ, of a requested kind this loop does not compute (transformer)
        from spar.core.artifacts import read_manifest
        from spar.lexical import load_lambda, read_lambda_config

        run_kind = read_lambda_config(lam_dir)["kind"]
        if run_kind in kinds and run_kind not in {k for k, *_ in done} | {"projection", "static"}:
            stats = read_manifest(lam_dir).get("stats", {})
            add(score_points(inputs, load_lambda(lam_dir), None, float(stats.get("train_seconds", 0.0)),
                             int(stats.get("steps", 0)), storages, timed=True))
    return FrontierReport(RunContext(cfg).dataset, points, inputs.reference_figures,
                          {"dims": sorted({p.dim for p in points}), "seeds": sorted({p.seed for p in points
                                                                                      if p.seed is not None}),
                           "kinds": sorted({p.kind for p in points}),
                           "storages": [st for st in STORAGES if any(p.storage == st for p in points)],
                           "dev_queries": len(inputs.dev.ids), "test_queries": len(inputs.test.ids),
                           "projection": cfg.train.lexical.projection})


def train_static(cfg, projection, work_dir: Path, seed: int):
    """Train a static Λ initialised from ``projection`` on the run's labels (Lightning, as ``spar train``)."""
    import shutil

    from spar.lexical.static import StaticLambda
    from spar.train.training import train_lambda

    lex = cfg.train.lexical
    model = StaticLambda.from_projection(projection, objective=lex.objective, temperature=lex.temperature)
    train = cfg.train.model_copy(update={"kind": "static"})
    if work_dir.exists():
        shutil.rmtree(work_dir)  # a frontier point is cheap: never resume from another configuration
    start = time.perf_counter()
    run = RunContext(cfg)
    result = train_lambda(model, train, run.passages, run.artifact("labels"), work_dir, seed=seed,
                          use_title=cfg.data.title_field,
                          run_name=f"{cfg.experiment.name}-frontier-static-d{projection.dim}-s{seed}",
                          logger_root=cfg.output_dir, enable_progress_bar=False, wandb_group=cfg.experiment.name)
    seconds = time.perf_counter() - start
    shutil.rmtree(work_dir / "checkpoints", ignore_errors=True)
    return model.eval(), seconds, result.steps
