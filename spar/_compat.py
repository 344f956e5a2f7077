"""Old import paths kept for one release after ``spar/`` moved into subpackages (issue #29).

As sentence-transformers kept its old module paths when it moved them, without a file at each old path (so that
git follows every moved file as a rename):

- :data:`ALIASES`: an old flat module (``spar.config``) is an alias of its new home (``spar.core.config``): the
  same module object, so ``spar.config.X is spar.core.config.X`` and pickles naming the old path still load.
  Importing an old path emits one :class:`DeprecationWarning` naming the new one. ``spar/__init__.py`` installs
  the import hook (:func:`install`).
- :func:`lazy_exports`: a package that replaced a module of the same name (``spar.index``, ``spar.publish``,
  ``spar.experiment``) exports that module's names, each imported from its new home on first use.

This module imports nothing of spar, so any layer may use it.

Example::

    >>> import warnings
    >>> with warnings.catch_warnings(record=True):
    ...     warnings.simplefilter("always")
    ...     import spar.config
    >>> import spar.core.config
    >>> spar.config is spar.core.config
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import FrameType
from typing import Any, Callable

#: Old module path -> its new home (written by the move script; removed in the next release).
ALIASES: dict[str, str] = {
    # BEGIN ALIASES
    "spar.errors": "spar.core.errors",
    "spar.config": "spar.core.config",
    "spar.config_fields": "spar.core.config_fields",
    "spar.console": "spar.core.console",
    "spar.artifacts": "spar.core.artifacts",
    "spar.stage": "spar.core.stage",
    "spar.run_context": "spar.core.run_context",
    "spar.schemas": "spar.core.schemas",
    "spar.java": "spar.core.java",
    "spar.executor": "spar.core.executor",
    "spar.lineage": "spar.core.lineage",
    "spar.readers": "spar.data.readers",
    "spar.passages": "spar.data.passages",
    "spar.sampling": "spar.data.sampling",
    "spar.question_sets": "spar.data.question_sets",
    "spar.models": "spar.model.resolve",
    "spar.encoders": "spar.model.encoders",
    "spar.losses": "spar.model.losses",
    "spar.encode_engines": "spar.model.engines",
    "spar.encode_workers": "spar.model.encode_workers",
    "spar.embeddings": "spar.model.embeddings",
    "spar.onnx_encoder": "spar.model.onnx_encoder",
    "spar.teachers": "spar.teacher.teachers",
    "spar.bm25_memory": "spar.teacher.bm25_memory",
    "spar.labelling": "spar.teacher.labelling",
    "spar.st_modules": "spar.lexical.st_modules",
    "spar.storage": "spar.index.storage",
    "spar.training": "spar.train.training",
    "spar.training_data": "spar.train.data",
    "spar.model_card": "spar.publish.card",
    "spar.search": "spar.publish.search",
    "spar.corpus_index": "spar.publish.corpus_index",
    "spar.lambda_source": "spar.experiment.lambda_source",
    "spar.preflight": "spar.experiment.preflight",
    "spar.metrics": "spar.evaluate.metrics",
    "spar.grid": "spar.evaluate.grid",
    "spar.tuning": "spar.evaluate.tuning",
    "spar.evaluation": "spar.evaluate.evaluation",
    "spar.latency": "spar.evaluate.latency",
    "spar.frontier": "spar.evaluate.frontier",
    "spar.frontier_report": "spar.evaluate.frontier_report",
    # END ALIASES
}


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside the import machinery and this module, for a warning issued by
    this module's caller (``warnings`` skips importlib's bootstrap frames when it counts, so they are not counted)."""
    frame: FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            frame = frame.f_back
            continue
        if name != __file__ and name != importlib.__file__:
            return level
        frame, level = frame.f_back, level + 1
    return 1


class _AliasLoader(importlib.abc.Loader):
    """Loads an old path as its new module: the module object in ``sys.modules`` is the new one."""

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        old = module.__name__
        new = ALIASES[old]
        warnings.warn(f"{old} moved to {new} (spar 0.2); the old path is an alias that goes in the next release",
                      DeprecationWarning, stacklevel=_caller_stacklevel())
        sys.modules[old] = importlib.import_module(new)


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader())
        return None


def install() -> None:
    """Serve the old paths of :data:`ALIASES` (once per interpreter)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``exports`` read from its module on first use."""
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(module, name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(exports))

    return __getattr__, __dir__
