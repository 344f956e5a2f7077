"""Stage `index`: one FAISS index of SPAR passage vectors ([P, PΛ] or P + PΛ) -> ``index/``.

Reads ``embeddings/base/passages`` and ``embeddings/lambda/passages``. A flat index stores vectors, not μ (μ scales
the query side and comes from ``tune/tune.json`` where the index is searched), so it does not depend on ``tune``; an
approximate one (hnsw, ivf, ivfpq: :attr:`spar.index.types.registry.IndexType.approximate`) holds ``[P, μ₀·PΛ]``
with μ₀ the tuned μ (``index.fold``, :mod:`spar.index.approximate`) and is rebuilt when μ₀ changes. The search-time
parameters (``hnsw_ef_search``, ``nprobe``, ``refine``) are not part of the index's fingerprint: changing them
updates ``index.json`` in place, never re-indexes.
"""

from __future__ import annotations

import logging

from spar.core.artifacts import ArtifactWriter
from spar.core.executor import make_executor
from spar.core.stage import Stage, Unit
from spar.core.tracking import Report, figures
from spar.experiment.inputs import ExperimentInputs, resolved_index
from spar.experiment.plan import Experiment
from spar.index.files import SEARCH_TIME, index_file_bytes, index_schema, refresh_search_params
from spar.index.spar_index import SparIndex
from spar.model.stored_vectors import load_embeddings

log = logging.getLogger(__name__)


def plan(cfg, force: bool = False) -> Unit:
    """``index/`` as the experiment declares it (:func:`spar.experiment.declarations.index`), folded by μ₀ when
    its type is approximate. Never indexes vectors encode would not make now (refused naming `spar encode`)."""
    experiment = Experiment.of(cfg)
    ExperimentInputs(cfg, experiment).check_embeddings()
    fold = folded_mu(cfg)
    run = experiment.run
    return experiment.artifact("index", fold=fold).unit(payload=(run.embeddings("base"), run.embeddings("lambda"),
                                                                 fold))


def folded_mu(cfg) -> float:
    """μ₀, what the index multiplies Λ's half of the passage vectors by: the experiment's tuned μ for an approximate
    index type with ``index.fold: auto``, else 1 (:func:`spar.index.approximate.fold_factor`)."""
    from spar.index.approximate import fold_factor
    from spar.index.types.registry import is_approximate

    experiment = Experiment.of(cfg)
    options = experiment.index_options
    if options.fold == "never" or not is_approximate(options.type):
        return 1.0
    from spar.evaluate.tuning import read_tuned

    return fold_factor(options.type, options.fold, read_tuned(experiment.output_dir).mu())


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    base_dir, lambda_dir, fold = unit.payload
    base, lam = load_embeddings(base_dir), load_embeddings(lambda_dir)
    options = Experiment.of(cfg).index_options  # the index section, seeded by the experiment
    with make_executor(cfg.executor) as executor:  # Ray: workers code the passages, this process adds the codes
        index = SparIndex.build(base, lam, variant=options.variant, index_type=options.type, options=options,
                                executor=executor, fold=fold)
    index.save(w.path)
    size = index_file_bytes(w.path)
    w.schema = index_schema(options.type, index.storage)
    w.stats = {**index.info, "bytes": size, "bytes_per_passage": round(size / max(1, len(index)), 1),
               **executor.describe()}
    return {"variant": options.variant, "type": options.type, "storage": index.storage,
            "passages": f"{len(index):,}",
            "dim": f"{index.info['dim']} (base {index.info['base_dim']} + Λ {index.info['lambda_dim']})"
            if options.variant == "concat" else str(index.info["dim"]),
            "size": f"{size / 2**20:,.1f} MiB ({size / max(1, len(index)):,.0f} B/passage)",
            **({"folded": f"[P, {fold:g}·PΛ] (μ₀, the tuned μ)"} if fold != 1.0 else {}),
            **({"refine": f"top {index.refine}·k re-ranked with exact scores"} if index.refine else {})}


def on_skip(cfg, manifest: dict) -> dict:
    """An up-to-date index still takes new search-time settings (no re-indexing)."""
    experiment = Experiment.of(cfg)
    changed = refresh_search_params(experiment.run.artifact("index"),
                                    {k: getattr(experiment.index, k) for k in SEARCH_TIME})
    return {"updated": ", ".join(changed) + " (no re-indexing: search-time settings)"} if changed else {}


def report(cfg, written: dict) -> Report:
    """The W&B run's numbers: bytes per passage, build time, type, storage and the rest of the index's figures."""
    manifest = next(iter(written.values()))
    return Report(summary={**figures(manifest), "build_seconds": manifest.get("seconds"),
                           "type": Experiment.of(cfg).index.type})


STAGE = Stage(name="index", sections=("experiment", "data", "encode", "index", "executor"), plan=plan,
              work=work, on_skip=on_skip, report=report,
              summary="build one FAISS index of [P(p), PΛ(p)] (flat, HNSW, IVF; float32 to 4-bit or PQ) -> index/",
              prepare=resolved_index)
run = STAGE.run
