"""The quality-per-byte frontier: Λ kinds × dimensions × passage storage × seeds, scored as SPAR adds Λ.

For each (kind, dim, seed) the frontier fits (``projection``) or trains (``static``) a Λ on the run's corpus and
labels and encodes the corpus and the dev/test queries; then for each storage (:mod:`spar.index.storage`: float32 to
4-bit, fast-scan, PQ) it builds the index of that storage as ``spar index`` would, tunes μ on dev against the vectors
it serves, and reports on test (:mod:`spar.sweep.points`):

- Λ alone: nDCG@10, R@100, and RBO (p = 0.9, depth 100) of its ranking against the teacher's (fidelity);
- SPAR ``[Q, μ·QΛ]`` searched in the exhaustive index of that storage (what ``spar evaluate`` serves; μ swept on dev
  against the decoded codes, as ``spar tune`` does): nDCG@10, R@100 (what Λ adds to the base);
- bytes per passage of the codes, and the training time;
- for the first seed, per index type asked for (``index_types``, any registered one that holds the point's storage,
  :mod:`spar.index.types.registry`; by default the exhaustive one, which is what the default rule needs):
  single-query and batched search latency of a SPAR index of that type and storage, and its ratios to the
  base-only index of the same type and to the BM25 + dense hybrid (:mod:`spar.sweep.timing`); for an approximate
  type also SPAR's nDCG@10 and R@100 through it at the same μ, and the loss against the exact scan of the same codes.
  An approximate index is built as ``spar index`` builds it: with ``index.fold: auto`` it holds ``[P, μ·PΛ]`` and is
  searched with ``[Q, QΛ]`` (the same scores, clusters and links that follow them).

What does not change between points is computed once (:mod:`spar.sweep.inputs`): the teacher's statistics and the
base-only indexes. Each timed point times its SPAR indexes side by side with the base-only indexes and the hybrid,
so every ratio it reports divides timings of one moment (the ratio to the hybrid once went through a hybrid timed once
per frontier, and a busier moment of a shared machine printed 6.14 ms as 0.10× beside a 9.90 ms hybrid, #37). The
latency of the base indexes and the hybrid timed together once per frontier is kept in the report's references.

The base retriever's embeddings, the teacher index and the labels are the run's own artifacts (``spar run`` up to
``encode`` with ``encode.encoders=[base]`` is enough). A transformer Λ already trained in the run's ``lambda/`` joins
as one more point. The report (:mod:`spar.sweep.report`: the default rule, a Markdown table with mean ± standard
deviation over seeds, a PNG of SPAR nDCG@10 against bytes per passage) is written by ``spar frontier -c CONFIG``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Sequence

from spar.core.run_context import RunContext
from spar.index.storage import FAST_SCAN, STORAGES, fast_scan_codes
from spar.index.types.registry import exhaustive_type, index_type_names
from spar.sweep.inputs import FrontierInputs
from spar.sweep.points import score_points
from spar.sweep.report import FrontierPoint, FrontierReport

__all__ = ["DEFAULT_DIMS", "run_frontier", "train_from_projection"]

log = logging.getLogger(__name__)

#: Up to the embedded default's own point (``configs/default.yaml``: 4,608 dims), so a default frontier holds it.
DEFAULT_DIMS = (128, 256, 384, 768, 1536, 3072, 4608)


def run_frontier(cfg, kinds: Sequence[str] | None = None, dims: Sequence[int] = DEFAULT_DIMS,
                 seeds: Sequence[int] = (0, 1, 2), storages: Sequence[str] = ("float32",),
                 work_dir: str | Path | None = None,
                 progress: Callable[[str], None] = log.info,
                 known: Sequence[FrontierPoint] = (),
                 on_point: Callable[[list[FrontierPoint]], None] | None = None,
                 index_types: Sequence[str] | None = None) -> FrontierReport:
    """Every (kind, dim, storage, seed) point on ``cfg``'s run (see the module docstring). ``known`` points
    (from an earlier run with the same settings) are kept instead of being recomputed, and a point asked for twice
    is computed once; ``on_point(points)`` is called after each new point (to save progress: a static point costs
    minutes). ``index_types``: the index types timed (and, approximate ones, scored) on the first seed (default: the
    exhaustive one, :func:`spar.index.types.registry.exhaustive_type`).
    ``kinds``: default the kinds the frontier computes (:func:`spar.lexical.computed_kinds`)."""
    from spar.lexical import computed_kinds, lambda_class
    from spar.lexical.projection import ProjectionLambda

    computed = computed_kinds()
    scan = exhaustive_type()
    index_types = (scan.name,) if index_types is None else tuple(index_types)
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
    source = inputs.resolved.own_lambda
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
