"""The weight grid of :mod:`spar.evaluate.tuning` and a grid search that extends past an edge optimum.

The grid (:func:`default_grid`) is {0.1, ..., 1.0} ∪ reciprocals (19 values). When the best value lies at an
edge the grid is extended by one decade beyond it (:func:`extend_grid`), up to ``max_extensions`` times: the
scores of two models can differ by orders of magnitude (SciFact, MiniLM + Λ: μ ≈ 0.01).

Example::

    >>> from spar.evaluate.grid import default_grid, grid_search
    >>> len(default_grid())
    19
    >>> import math
    >>> result = grid_search(lambda mu: -abs(math.log10(mu) + 2), default_grid(), max_extensions=3)
    >>> result.best, result.extensions
    (0.01, 2)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Mapping, Sequence

log = logging.getLogger(__name__)


def _clean(value: float) -> float:
    return float(f"{value:.6g}")


def default_grid() -> list[float]:
    """{0.1, 0.2, ..., 1.0} ∪ {1/0.9, 1/0.8, ..., 10}: 19 values, log-symmetric around 1."""
    tenths = [i / 10 for i in range(1, 11)]
    return sorted({_clean(v) for v in tenths} | {_clean(1 / v) for v in tenths})


def extend_grid(grid: Sequence[float], side: Literal["low", "high"]) -> list[float]:
    """Add one decade beyond an edge: the grid's outermost decade scaled by 1/10 (low) or 10 (high).

    ``default_grid()`` extended low gains 0.01, ..., 0.09; extended high it gains 11.1, 12.5, ..., 100.
    """
    values = sorted(set(grid))
    if not values or values[0] <= 0:
        raise ValueError("grid values must be positive")
    if side == "low":
        edge = values[0]
        decade = [v for v in values if v < edge * 10 - 1e-12] or [edge]
        new = {_clean(v / 10) for v in decade}
    elif side == "high":
        edge = values[-1]
        decade = [v for v in values if v > edge / 10 + 1e-12] or [edge]
        new = {_clean(v * 10) for v in decade}
    else:
        raise ValueError(f"side must be 'low' or 'high', not {side!r}")
    return sorted(set(values) | new)


@dataclass
class GridSearch:
    """Outcome of :func:`grid_search`: the best value, every value tried and its score."""

    best: float
    best_score: float
    grid: list[float]
    scores: dict[float, float]
    extensions: int = 0
    at_edge: bool = False  # still at an edge after max_extensions

    def scores_by_name(self) -> dict[str, float]:
        """Scores keyed by the value's short decimal form (JSON keys)."""
        return {f"{v:g}": round(self.scores[v], 6) for v in sorted(self.scores)}


def _pick_best(scores: Mapping[float, float]) -> float:
    # Ties go to the value closest to 1 in log space: no needless extension on a plateau that reaches an edge.
    top = max(scores.values())
    tied = [v for v, s in scores.items() if s >= top - 1e-12]
    return min(tied, key=lambda v: (abs(math.log(v)), v))


def grid_search(objective: Callable[[float], float], grid: Sequence[float] | None = None,
                max_extensions: int = 4) -> GridSearch:
    """Maximise ``objective`` over ``grid`` (default :func:`default_grid`), extending it past an edge optimum."""
    values = sorted(set(grid)) if grid else default_grid()
    scores: dict[float, float] = {}
    extensions = 0
    while True:
        for v in values:
            if v not in scores:
                scores[v] = float(objective(v))
        best = _pick_best(scores)
        side: Literal["low", "high"] | None = ("low" if best == values[0] else "high" if best == values[-1]
                                                else None)
        if side is None or extensions >= max_extensions or len(values) == 1:
            break
        values = extend_grid(values, side)
        extensions += 1
        log.info("best weight %g is at the %s edge of the grid; extending to %g..%g", best, side, values[0], values[-1])
    at_edge = len(values) > 1 and best in (values[0], values[-1])
    if at_edge:
        log.warning("best weight %g is still at the edge of the grid after %d extensions", best, extensions)
    return GridSearch(best, scores[best], values, scores, extensions, at_edge)


def grid_values(values: Iterable[float] | None) -> list[float] | None:
    """Validate a configured grid: positive values, sorted, deduplicated (None stays None)."""
    if values is None:
        return None
    out = sorted({float(v) for v in values})
    if not out or out[0] <= 0 or not all(math.isfinite(v) for v in out):
        raise ValueError(f"a weight grid needs finite positive values, got {list(values)}")
    return out
