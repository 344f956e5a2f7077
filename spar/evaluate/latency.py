"""Search latency of several systems measured side by side: one query at a time (interleaved) and batched.

Systems are timed in one process, query by query in turn, so a busy moment of a shared machine falls on all of them
alike; the ratios between systems are the figures to read. Used by the frontier (each SPAR point against the
base-only index and the BM25 + dense hybrid, :mod:`spar.sweep.timing`) and by ``bench/search_latency.py``.

Example::

    >>> import numpy as np
    >>> from spar.evaluate.latency import time_systems
    >>> x = np.ones((1000, 8), dtype=np.float32)
    >>> timings = time_systems({"scan": lambda rows: x @ x[rows].T}, queries=20, single=5, warmup=1, repeats=1)
    >>> sorted(timings["scan"])
    ['batched_ms', 'p50_ms', 'single_ms']
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping


def time_systems(systems: Mapping[str, Callable[[list[int]], Any]], queries: int, single: int = 100,
                 warmup: int = 10, repeats: int = 3) -> dict[str, dict[str, float]]:
    """Time each ``systems[name](rows)`` (``rows``: the query rows to search) on ``queries`` queries.

    One at a time: the first ``single`` queries, each system in turn per query (mean and median in ms). Batched: all
    ``queries`` in one call per system, best of ``repeats``, in ms per query.
    """
    if queries < 1:
        raise ValueError("time_systems needs at least one query")
    names = list(systems)
    for i in range(min(warmup, queries)):  # JIT, page cache, FAISS buffers
        for name in names:
            systems[name]([i])
    one: dict[str, list[float]] = {name: [] for name in names}
    for i in range(min(single, queries)):
        for name in names:
            start = time.perf_counter()
            systems[name]([i])
            one[name].append(time.perf_counter() - start)
    batched: dict[str, list[float]] = {name: [] for name in names}
    everything = list(range(queries))
    for _ in range(repeats):
        for name in names:
            start = time.perf_counter()
            systems[name](everything)
            batched[name].append((time.perf_counter() - start) / queries)
    return {name: {"single_ms": round(1000 * statistics.mean(one[name]), 4),
                   "p50_ms": round(1000 * statistics.median(one[name]), 4),
                   "batched_ms": round(1000 * min(batched[name]), 4)} for name in names}


def ratios(timings: Mapping[str, Mapping[str, float]], system: str, peer: str) -> dict[str, float]:
    """``system``'s single-query and batched latency divided by ``peer``'s."""
    return {key: round(timings[system][key] / timings[peer][key], 3) for key in ("single_ms", "batched_ms")
            if timings[peer][key] > 0}
