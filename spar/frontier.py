"""The fidelity-vs-dimension frontier: every Λ kind at several dimensions and seeds, scored as SPAR adds it.

For each point (kind, dim, seed) the frontier fits (``projection``) or trains (``static``) a Λ on the run's corpus
and labels, encodes the corpus and the dev/test queries, tunes μ on dev and reports on test:

- Λ alone: nDCG@10, R@100, and RBO (p = 0.9, depth 100) of its ranking against the teacher's (fidelity);
- SPAR ``[Q, μ·QΛ]`` against ``[P, PΛ]`` by exact search: nDCG@10, R@100 (what Λ adds to the base);
- bytes per passage of the flat SPAR index (``4 · (base dim + dim)``) and the training time.

The base retriever's embeddings, the teacher index and the labels are the run's own artifacts (``spar run`` up to
``encode`` with ``encode.encoders=[base]`` is enough); the teacher's statistics are fitted once and shared by every
point. A transformer Λ already trained in the run's ``lambda/`` joins as one more point. Results: JSON, a Markdown
table (mean ± standard deviation over seeds) and a PNG (SPAR nDCG@10 against bytes per passage, one line per kind,
the base and the BM25 hybrid as horizontal lines). Driver: ``spar frontier -c CONFIG``.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from spar.artifacts import artifact_dir, is_complete
from spar.errors import ArtifactError

log = logging.getLogger(__name__)

DEFAULT_DIMS = (128, 256, 384, 768, 1536, 3072)
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


@dataclass
class FrontierReport:
    dataset: str
    points: list[FrontierPoint]
    references: dict[str, dict[str, float]]
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "references": self.references, "points": [asdict(p) for p in self.points],
                **self.details}

    def groups(self) -> dict[tuple[str, int], list[FrontierPoint]]:
        out: dict[tuple[str, int], list[FrontierPoint]] = {}
        for p in self.points:
            out.setdefault((p.kind, p.dim), []).append(p)
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1])))

    def markdown(self) -> str:
        def cell(values: list[float], digits: int = 3) -> str:
            if len(values) == 1:
                return f"{values[0]:.{digits}f}"
            return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

        refs = self.references
        lines = [f"**{self.dataset}** — fidelity frontier (test queries; μ tuned on dev). Base nDCG@10 "
                 f"{refs['base']['nDCG@10']:.3f} / R@100 {refs['base']['R@100']:.3f}; BM25 hybrid "
                 f"{refs['hybrid']['nDCG@10']:.3f} / {refs['hybrid']['R@100']:.3f}; BM25 "
                 f"{refs['bm25']['nDCG@10']:.3f} / {refs['bm25']['R@100']:.3f}.", "",
                 "| Λ kind | dim | seeds | Λ nDCG@10 | Λ R@100 | RBO vs teacher | SPAR nDCG@10 | SPAR R@100 | "
                 "bytes/passage | train s |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for (kind, dim), pts in self.groups().items():
            lines.append(
                f"| {kind} | {dim} | {len(pts)} | {cell([p.lambda_alone['nDCG@10'] for p in pts])} | "
                f"{cell([p.lambda_alone['R@100'] for p in pts])} | {cell([p.rbo for p in pts])} | "
                f"{cell([p.spar['nDCG@10'] for p in pts])} | {cell([p.spar['R@100'] for p in pts])} | "
                f"{pts[0].bytes_per_passage:,} | {statistics.mean(p.train_seconds for p in pts):.0f} |")
        return "\n".join(lines) + "\n"

    def plot(self, path: str | Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
        kinds = sorted({p.kind for p in self.points})
        for kind in kinds:
            groups = [(dim, pts) for (k, dim), pts in self.groups().items() if k == kind]
            xs = [pts[0].bytes_per_passage for _, pts in groups]
            ys = [statistics.mean(p.spar["nDCG@10"] for p in pts) for _, pts in groups]
            err = [statistics.stdev(p.spar["nDCG@10"] for p in pts) if len(pts) > 1 else 0.0 for _, pts in groups]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"SPAR, {kind} Λ")
            for (dim, _), x, y in zip(groups, xs, ys):
                ax.annotate(str(dim), (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
        for name, style in (("hybrid", "--"), ("base", ":")):
            ax.axhline(self.references[name]["nDCG@10"], color="grey", linestyle=style, linewidth=1,
                       label=f"{name} ({self.references[name]['nDCG@10']:.3f})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per passage of the SPAR index (flat, float32)")
        ax.set_ylabel("SPAR nDCG@10 (test)")
        ax.set_title(f"{self.dataset}: what Λ adds, by index size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def _top_run(q: np.ndarray, p: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], k: int):
    from spar.experiment import dense_search

    return dense_search(np.ascontiguousarray(q, dtype=np.float32), np.ascontiguousarray(p, dtype=np.float32),
                        query_ids, doc_ids, k)


class FrontierInputs:
    """The run's shared inputs: base vectors, dev/test queries, the teacher's runs and sparse term matrices."""

    def __init__(self, cfg):
        from spar.embeddings import load_embeddings
        from spar.experiment import ExperimentInputs, split_queries
        from spar.lexical import corpus_texts
        from spar.lexical.terms import BM25Weights

        self.cfg = cfg
        out = cfg.output_dir
        base_dir = artifact_dir(out, "embeddings") / "base" / "passages"
        if not is_complete(base_dir):
            raise ArtifactError(f"{base_dir}: base passage embeddings are missing (run `spar encode "
                                "encode.encoders=[base]` first)")
        self.passages_arrow = artifact_dir(out, "queries") / "passages.arrow"
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
        from spar.embeddings import load_embeddings

        d = self.experiment.query_dir("base", queries.split)
        if is_complete(d):
            stored = load_embeddings(d)
            position = {q: i for i, q in enumerate(stored.ids)}
            if all(q in position for q in queries.ids):
                return np.asarray(stored.vectors[[position[q] for q in queries.ids]], dtype=np.float32)
        return self.experiment.encoder("base").encode_query(list(queries.texts.values()))

    def lambda_vectors(self, model) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Λ's passage and dev/test query vectors (term-based kinds reuse the shared sparse matrices)."""
        passages = model.term_vectors(self.weights, self.passage_terms)
        if passages is not None:
            return passages, {s: model.term_vectors(self.weights, m) for s, m in self.query_terms.items()}
        from spar.passages import PassagesTable

        store = PassagesTable(self.passages_arrow, self.cfg.data.title_field or model.term_based)
        passages = store.get(np.arange(len(store)))
        return model.encode_passage(passages), {s.split: model.encode_query(list(s.texts.values()))
                                                for s in (self.dev, self.test)}


def score_point(inputs: FrontierInputs, model, seed: int | None, train_seconds: float, steps: int = 0,
                metric: str = "nDCG@10") -> FrontierPoint:
    """Tune μ on dev for ``model`` as Λ and score Λ alone and SPAR on test."""
    from spar.index import spar_passage_vectors, spar_query_vectors
    from spar.metrics import evaluate_run, mean_rbo
    from spar.tuning import tune_mu

    lam_p, lam_q = inputs.lambda_vectors(model)
    dev, test = inputs.dev, inputs.test
    tuned = tune_mu(inputs.base_q["dev"], lam_q["dev"], inputs.base_p, lam_p, dev.ids, inputs.doc_ids, dev.qrels,
                    metric, "concat", confirm=False)
    mu = tuned.search.best
    combined = spar_passage_vectors(inputs.base_p, lam_p, "concat")
    spar_run = _top_run(spar_query_vectors(inputs.base_q["test"], lam_q["test"], mu, "concat"), combined,
                        test.ids, inputs.doc_ids, 100)
    lambda_run = _top_run(lam_q["test"], lam_p, test.ids, inputs.doc_ids, 100)
    return FrontierPoint(
        kind=model.kind, dim=model.dim, seed=seed, mu=mu, dev_spar=round(tuned.search.best_score, 6),
        spar={m: round(v, 6) for m, v in evaluate_run(test.qrels, spar_run, METRICS).items()},
        lambda_alone={m: round(v, 6) for m, v in evaluate_run(test.qrels, lambda_run, METRICS).items()},
        rbo=round(mean_rbo(lambda_run, inputs.bm25["test"], p=0.9, depth=100, queries=test.ids), 6),
        bytes_per_passage=4 * (inputs.base_p.shape[1] + model.dim), train_seconds=round(train_seconds, 2),
        steps=steps)


def references(inputs: FrontierInputs, metric: str = "nDCG@10") -> dict[str, dict[str, float]]:
    """Base, BM25 and the base + α·BM25 hybrid (α tuned on dev) on test: the frontier's horizontal lines."""
    from spar.metrics import evaluate_run
    from spar.tuning import hybrid_candidates, hybrid_fuse, tune_weight

    cfg = inputs.cfg
    base_dev = _top_run(inputs.base_q["dev"], inputs.base_p, inputs.dev.ids, inputs.doc_ids, 100)
    alpha = tune_weight(hybrid_candidates(base_dev, inputs.bm25["dev"], cfg.tune.hybrid_normalize), inputs.dev.qrels,
                        metric).best
    base = _top_run(inputs.base_q["test"], inputs.base_p, inputs.test.ids, inputs.doc_ids, 100)
    hybrid = {q: hybrid_fuse(base[q], inputs.bm25["test"].get(q, []), alpha, cfg.tune.hybrid_normalize, 100)
              for q in inputs.test.ids}
    qrels = inputs.test.qrels
    return {"base": evaluate_run(qrels, base, METRICS), "bm25": evaluate_run(qrels, inputs.bm25["test"], METRICS),
            "hybrid": {**evaluate_run(qrels, hybrid, METRICS), "alpha": alpha}}


def run_frontier(cfg, kinds: Sequence[str] = ("projection", "static"), dims: Sequence[int] = DEFAULT_DIMS,
                 seeds: Sequence[int] = (0, 1, 2), work_dir: str | Path | None = None,
                 progress: Callable[[str], None] = log.info,
                 known: Sequence[FrontierPoint] = (),
                 on_point: Callable[[list[FrontierPoint]], None] | None = None) -> FrontierReport:
    """Every (kind, dim, seed) point of the frontier on ``cfg``'s run (see the module docstring). ``known`` points
    (from an earlier run with the same settings) are kept instead of being recomputed; ``on_point(points)`` is
    called after each new point (to save progress: a static point costs minutes)."""
    from spar.evaluation import dataset_name
    from spar.lexical.projection import ProjectionLambda

    inputs = FrontierInputs(cfg)
    work = Path(work_dir) if work_dir else cfg.output_dir / "frontier"
    points: list[FrontierPoint] = list(known)
    done = {(p.kind, p.dim, p.seed) for p in points}
    for dim in dims:
        for seed in seeds:
            projection = ProjectionLambda(inputs.weights, dim, cfg.train.lexical.projection, seed)
            if "projection" in kinds and ("projection", dim, seed) not in done:
                points.append(score_point(inputs, projection, seed, 0.0))
                progress(f"projection d={dim} seed={seed}: SPAR {points[-1].spar['nDCG@10']:.4f}")
                if on_point:
                    on_point(points)
            if "static" in kinds and ("static", dim, seed) not in done:
                model, seconds, steps = train_static(cfg, projection, work / f"static-d{dim}-s{seed}", seed)
                points.append(score_point(inputs, model, seed, seconds, steps))
                progress(f"static d={dim} seed={seed}: SPAR {points[-1].spar['nDCG@10']:.4f} ({seconds:.0f}s)")
                if on_point:
                    on_point(points)
    lam_dir = artifact_dir(cfg.output_dir, "lambda")
    if is_complete(lam_dir):  # the run's own Λ, of a requested kind this loop does not compute (transformer)
        from spar.artifacts import read_manifest
        from spar.lexical import load_lambda, read_lambda_config

        run_kind = read_lambda_config(lam_dir)["kind"]
        if run_kind in kinds and run_kind not in {k for k, _, _ in done} | {"projection", "static"}:
            stats = read_manifest(lam_dir).get("stats", {})
            points.append(score_point(inputs, load_lambda(lam_dir), None, float(stats.get("train_seconds", 0.0)),
                                      int(stats.get("steps", 0))))
    return FrontierReport(dataset_name(cfg), points, references(inputs),
                          {"dims": sorted({p.dim for p in points}), "seeds": sorted({p.seed for p in points
                                                                                      if p.seed is not None}),
                           "kinds": sorted({p.kind for p in points}),
                           "dev_queries": len(inputs.dev.ids), "test_queries": len(inputs.test.ids),
                           "projection": cfg.train.lexical.projection})


def train_static(cfg, projection, work_dir: Path, seed: int):
    """Train a static Λ initialised from ``projection`` on the run's labels (Lightning, as ``spar train``)."""
    import shutil

    from spar.lexical.static import StaticLambda
    from spar.training import train_lambda

    lex = cfg.train.lexical
    model = StaticLambda.from_projection(projection, objective=lex.objective, temperature=lex.temperature)
    train = cfg.train.model_copy(update={"kind": "static"})
    if work_dir.exists():
        shutil.rmtree(work_dir)  # a frontier point is cheap: never resume from another configuration
    start = time.perf_counter()
    result = train_lambda(model, train, artifact_dir(cfg.output_dir, "queries") / "passages.arrow",
                          artifact_dir(cfg.output_dir, "labels"), work_dir, seed=seed, use_title=cfg.data.title_field,
                          run_name=f"{cfg.experiment.name}-frontier-static-d{projection.dim}-s{seed}",
                          logger_root=cfg.output_dir, enable_progress_bar=False, wandb_group=cfg.experiment.name)
    seconds = time.perf_counter() - start
    shutil.rmtree(work_dir / "checkpoints", ignore_errors=True)
    return model.eval(), seconds, result.steps
