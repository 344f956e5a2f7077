"""The frontier's latency: SPAR indexes timed side by side with their peers, the base-only indexes and the hybrid.

:func:`time_beside_peers` is the one place that says what the frontier's latency peers are and how they are timed;
every ratio a point reports divides timings of one moment (:mod:`spar.evaluate.latency`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np


#: Hits asked of every timed system.
LATENCY_K = 100
#: Queries timed one at a time per point (all test queries are timed batched).
LATENCY_SINGLE = 100


def time_beside_peers(test: Any, base_q: np.ndarray, graph: Any, bm25: Any, alpha: float,
                      normalize: bool, base_indexes: Mapping[str, Any],
                      spar: Mapping[str, tuple[Any, np.ndarray]] | None = None) -> dict[str, dict[str, float]]:
    """Single-query and batched latency (:func:`spar.evaluate.latency.time_systems`, ``k`` = :data:`LATENCY_K`, one
    FAISS thread: a shared 2-core machine, where OpenMP threads spin) on the ``test`` questions (a
    :class:`spar.data.question_sets.SplitQueries`; ``base_q``: their base vectors) of, timed side by side in this
    order:

    - ``hybrid``: the BM25 + dense hybrid as users serve it, the frontier's reference (issue #46): the base's
      vectors in an HNSW ``graph`` (a :class:`spar.evaluate.served_hybrid.HnswBase`, efSearch calibrated on dev
      questions) and ``bm25`` (Pyserini BM25) searched, one question at a time at once on two threads
      (:class:`spar.evaluate.served_hybrid.ServedHybrid`), batched one after the other, fused at ``alpha`` (tuned
      on dev; ``normalize``: ``tune.hybrid_normalize``);
    - ``base_<type>``: the base-only float32 index (``base_indexes``: ``{type: FAISS index}``) of each type of
      ``spar``, or with ``spar`` None of every type in ``base_indexes``;
    - ``spar_<type>``: each SPAR index of ``spar`` (``{type: (FAISS index, its test query vectors)}``).

    Returns ``{system: {"single_ms", "p50_ms", "batched_ms"}}``."""
    import faiss

    from spar.evaluate.candidates import hybrid_fuse
    from spar.evaluate.latency import time_systems
    from spar.evaluate.served_hybrid import ServedHybrid

    k, pairs = LATENCY_K, test.pairs()
    served = ServedHybrid(graph, bm25, alpha, normalize)

    def hybrid(rows: list[int]) -> None:
        if len(rows) == 1:
            (qid, text), = [pairs[rows[0]]]
            served.search(qid, text, base_q[rows[0]], k)
            return
        dense = graph.search(base_q[rows], k)
        sparse = bm25.search([pairs[r] for r in rows], k)
        for j, r in enumerate(rows):
            hybrid_fuse(dense[j], sparse.get(pairs[r][0], []), alpha, normalize, k)

    def searcher(index: Any, queries: np.ndarray) -> Callable[[list[int]], Any]:
        return lambda rows: index.search(queries[rows], k)

    timed = list(base_indexes) if spar is None else list(spar)
    systems: dict[str, Callable[[list[int]], Any]] = {"hybrid": hybrid}
    systems.update({f"base_{t}": searcher(base_indexes[t], base_q) for t in timed})
    systems.update({f"spar_{t}": searcher(index, queries) for t, (index, queries) in (spar or {}).items()})
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return time_systems(systems, len(test.ids), LATENCY_SINGLE)
    finally:
        faiss.omp_set_num_threads(threads)
        served.close()
