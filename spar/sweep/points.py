"""One frontier point: a Λ's vectors scored as SPAR adds them, at one passage storage, through the indexes asked.

For each storage the point's indexes are built as the ``index`` stage builds that config (:meth:`SparIndex.build
<spar.index.spar_index.SparIndex.build>` with the run's ``index`` options, an approximate type folded with
:func:`spar.index.approximate.fold_factor`); μ is chosen on dev as ``spar tune`` chooses it
(:func:`spar.evaluate.tuning.choose_mu`) against the vectors the exhaustive index serves.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from spar.index.storage import code_bytes
from spar.index.types.registry import exhaustive_type, registered_type
from spar.sweep.inputs import METRICS, FrontierInputs, top_run
from spar.sweep.report import FrontierPoint
from spar.sweep.timing import LATENCY_K


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
        lambda_run = top_run(lam_q["test"], lam_p, test.ids, inputs.doc_ids, 100)
        lambda_alone = {m: round(v, 6) for m, v in evaluate_run(test.qrels, lambda_run, METRICS).items()}
        rbo = round(mean_rbo(lambda_run, inputs.bm25["test"], p=0.9, depth=100, queries=test.ids), 6)
        return [_score_storage(inputs, model, lam_p, lam_q, storage, index_types, metric, seed=seed,
                               train_seconds=round(train_seconds, 2), steps=steps, lambda_alone=lambda_alone, rbo=rbo)
                for storage in storages]


def _score_storage(inputs: FrontierInputs, model, lam_p: np.ndarray, lam_q: Mapping[str, np.ndarray], storage: str,
                   index_types: Sequence[str], metric: str, **point: Any) -> FrontierPoint:
    """One point, as ``spar tune``, ``spar index`` and ``spar evaluate`` would make it: the exhaustive index of
    ``storage`` built (its codec trained once: the served vectors and the index share it), μ swept on dev against
    its decoded codes, then SPAR scored on dev (the rule's figure) and test through that index. Fast-scan indexes
    score through 8-bit lookup tables whose rounding grows with the number of codes: scoring the decoded codes
    instead overstated them (SciFact-sample, 384 + 4608 dims, ``fs2``: dev 0.830 decoded, 0.735 served). Then the
    indexes of ``index_types`` that hold ``storage``, each built as the ``index`` stage builds it: an approximate
    one holds ``[P, μ₀·PΛ]`` with μ₀ this point's μ (``index.fold: auto``), so its lists and links follow the score
    that ranks (Λ's half has ~20× the base's norm: on SciFact unfolded IVF lists cost 8 points of nDCG@10 at 32 of
    132 lists probed, folded ones 1.7)."""
    from spar.index.approximate import fold_factor
    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import SparIndex
    from spar.evaluate.metrics import evaluate_run, ranked_run
    from spar.evaluate.tuning import choose_mu

    dev, test = inputs.dev, inputs.test
    options = inputs.index_options(storage)
    scan = exhaustive_type().name

    def build(index_type: str, mu: float = 1.0) -> SparIndex:
        return SparIndex.build(inputs.base_p, lam_p, ids=inputs.doc_ids, variant="concat", index_type=index_type,
                               options=options, fold=fold_factor(index_type, inputs.cfg.index.fold, mu))

    scored = build(scan)
    served_base, served_lambda = served_passage_vectors(inputs.base_p, lam_p, "concat", scan, options, scored.index)
    tuned = choose_mu(inputs.cfg, inputs.base_q["dev"], lam_q["dev"], served_base, served_lambda, dev, inputs.doc_ids,
                      "concat", metric=metric, confirm=False)
    del served_base, served_lambda
    mu = tuned.search.best

    def served_run(split) -> dict[str, list[tuple[str, float]]]:
        q = scored.query_vectors(inputs.base_q[split.split], lam_q[split.split], mu)
        scores, rows = scored.index.search(q, min(100, len(inputs.doc_ids)))
        return ranked_run(split.ids, rows, scores, inputs.doc_ids)

    dev_served = evaluate_run(dev.qrels, served_run(dev), [metric])[metric]
    spar_run = served_run(test)
    indexes = {t: scored if t == scan else build(t, mu) for t in index_types if can_hold(t, storage)}
    queries = {t: index.query_vectors(inputs.base_q["test"], lam_q["test"], mu) for t, index in indexes.items()}
    return FrontierPoint(
        kind=model.kind, dim=model.dim, mu=mu, dev_spar=round(dev_served, 6),
        dev_decoded=round(tuned.search.best_score, 6),
        spar={m: round(v, 6) for m, v in evaluate_run(test.qrels, spar_run, METRICS).items()},
        bytes_per_passage=code_bytes(storage, inputs.base_p.shape[1] + model.dim, options.pq_m, options.pq_nbits),
        storage=storage,
        latency=inputs.latency({t: index.index for t, index in indexes.items()}, queries) if indexes else {},
        approximate={t: approximate_quality(inputs, index.index, queries[t], spar_run) for t, index in indexes.items()
                     if index.kind.approximate}, **point)
