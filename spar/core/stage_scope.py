"""What a stage run builds once: the run's resolved experiment, shared by its plan, work, report and the layers they
call, instead of each building its own from the config.

:meth:`spar.core.stage.Stage.run` (and ``status``) open a scope; :func:`once_per_stage_run` returns the value made
first in it for a config. Outside a stage run (a library call, a test, a Ray or DDP worker) every call makes its own:
nothing outlives the stage run that made it, so stages run one after another in one process (the tests) never see
an experiment resolved before an earlier stage wrote its outputs.

Example::

    >>> made = []
    >>> cfg = object()
    >>> def make():
    ...     made.append(1)
    ...     return len(made)
    >>> with stage_scope():
    ...     once_per_stage_run("experiment", cfg, make), once_per_stage_run("experiment", cfg, make)
    (1, 1)
    >>> once_per_stage_run("experiment", cfg, make)
    2
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")

#: ``{(what, id(cfg)): (cfg, value)}`` of the stage run in progress; None outside one.
_SCOPE: ContextVar[dict[tuple[str, int], tuple[Any, Any]] | None] = ContextVar("spar_stage_scope", default=None)


@contextmanager
def stage_scope() -> Iterator[None]:
    """One stage run: what :func:`once_per_stage_run` makes inside is shared until it ends (a scope already open,
    e.g. ``status`` called by ``run``, is kept)."""
    if _SCOPE.get() is not None:
        yield
        return
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def once_per_stage_run(what: str, cfg: Any, make: Callable[[], T]) -> T:
    """``make()`` once per stage run and config object (the value is held with its config, so an id is never
    reused within the run); outside a stage run, ``make()`` every time."""
    scope = _SCOPE.get()
    if scope is None:
        return make()
    key = (what, id(cfg))
    if key not in scope or scope[key][0] is not cfg:
        scope[key] = (cfg, make())
    return scope[key][1]
