"""The frontier's latency: SPAR indexes timed side by side with their peers, the base-only indexes and the hybrid.

:func:`time_beside_peers` is the one place that says what the frontier's latency peers are and how they are timed;
every ratio a point reports divides timings of one moment (:mod:`spar.evaluate.latency`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.index.types.registry import exhaustive_type

#: Hits asked of every timed system.
LATENCY_K = 100
#: Queries timed one at a time per point (all test queries are timed batched).
LATENCY_SINGLE = 100


def time_beside_peers(inputs: Any, base_types: Sequence[str],
                      spar: Mapping[str, tuple[Any, np.ndarray]] | None = None) -> dict[str, dict[str, float]]:
    """Single-query and batched latency (:func:`spar.evaluate.latency.time_systems`, ``k`` = :data:`LATENCY_K`, one
    FAISS thread: a shared 2-core machine, where OpenMP threads spin) of, timed side by side in this order:

    - ``hybrid``: the BM25 + dense hybrid, the frontier's reference: the base-only float32 index of the
      exhaustive type (:func:`spar.index.types.registry.exhaustive_type`) searched, Pyserini BM25 searched, the
      two fused at the hybrid's α tuned on dev (``inputs.hybrid_alpha``);
    - ``base_<type>``: the base-only float32 index of each of ``base_types`` (``inputs.base_index``);
    - ``spar_<type>``: each SPAR index of ``spar`` (``{type: (FAISS index, its test query vectors)}``).

    ``inputs``: a :class:`spar.sweep.inputs.FrontierInputs`. Returns ``{system: {"single_ms", "p50_ms",
    "batched_ms"}}``."""
    import faiss

    from spar.evaluate.candidates import hybrid_fuse
    from spar.evaluate.latency import time_systems

    k, pairs = LATENCY_K, inputs.test.pairs()
    base_q, alpha = inputs.base_q["test"], inputs.hybrid_alpha
    dense = inputs.base_index(exhaustive_type().name)

    def hybrid(rows: list[int]) -> None:
        scores, found = dense.search(base_q[rows], k)
        sparse = inputs.experiment.bm25.search([pairs[r] for r in rows], k)
        for j, r in enumerate(rows):
            hits = [(inputs.doc_ids[d], float(x)) for d, x in zip(found[j], scores[j]) if d >= 0]
            hybrid_fuse(hits, sparse.get(pairs[r][0], []), alpha, inputs.cfg.tune.hybrid_normalize, k)

    def searcher(index: Any, queries: np.ndarray) -> Callable[[list[int]], Any]:
        return lambda rows: index.search(queries[rows], k)

    systems: dict[str, Callable[[list[int]], Any]] = {"hybrid": hybrid}
    systems.update({f"base_{t}": searcher(inputs.base_index(t), base_q) for t in base_types})
    systems.update({f"spar_{t}": searcher(index, queries) for t, (index, queries) in (spar or {}).items()})
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return time_systems(systems, len(inputs.test.ids), LATENCY_SINGLE)
    finally:
        faiss.omp_set_num_threads(threads)
