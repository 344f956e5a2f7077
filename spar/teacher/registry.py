"""The sparse-teacher contract and the registry of teachers: what the label stage (and everything else that needs a
teacher) asks, never a teacher's or an engine's name.

A teacher is one class, for one ``label.teacher`` on one ``label.engine``, registered in :data:`REGISTRY`:

==================  ==========  =================================================  ===================================
``label.teacher``   engine      class                                              index
==================  ==========  =================================================  ===================================
``bm25``            ``lucene``  :class:`spar.teacher.teachers.LuceneBM25`          Lucene BM25 (Pyserini)
``bm25``            ``memory``  :class:`spar.teacher.bm25_memory.MemoryBM25Teacher`  the same index, searched in memory
``impact``          ``lucene``  :class:`spar.teacher.teachers.LuceneImpact`        Anserini impact index
==================  ==========  =================================================  ===================================

The contract (:class:`SparseTeacher`, made from the ``label`` section):

- identity, for fingerprints: :meth:`~SparseTeacher.index_settings` (what its ``teacher_index/`` depends on; the same
  for every engine of one teacher, which share the index) and :meth:`~SparseTeacher.label_settings` (what the labels
  depend on); :meth:`~SparseTeacher.models` (the models it loads, checked before a run) and
  :meth:`~SparseTeacher.describe` (for the Λ and model cards);
- the index: :meth:`~SparseTeacher.build_index` writes it and returns statistics for the manifest;
- searching: :meth:`~SparseTeacher.open` returns a searcher, ``search(queries, k)`` -> ``{query id: [(passage id,
  score), ...]}`` best first, and ``num_docs``;
- what others may rely on: ``bm25_index`` (its index is a Lucene BM25 index of the passages: evaluate's BM25 baseline
  searches it) and ``term_weighting`` (``"bm25"``: its scores are BM25 over ``label.fields`` with ``k1``/``b``, what a
  term-based Λ densifies); :meth:`~SparseTeacher.suits` (whether ``label.engine: auto`` picks this engine).

A new teacher is its module (a subclass of :class:`SparseTeacher`) and its registration: a line in :data:`REGISTRY`
(and its names in :data:`spar.core.config_sections.TEACHERS`, which the config checks ``label.teacher`` /
``label.engine`` against), or, for a teacher defined outside spar (a plug-in, a test), :func:`register`.

Example::

    >>> from spar.core.config import load_config
    >>> teacher = teacher_for(load_config(None).label)
    >>> type(teacher).__name__, teacher.index_settings()
    ('LuceneBM25', {'teacher': 'bm25', 'fields': ['title', 'text']})
    >>> teacher.describe()
    'Pyserini Lucene BM25, k1=0.9, b=0.4, fields title+text'
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, ClassVar, Protocol, Sequence

from spar.core.config_sections import TEACHERS
from spar.core.errors import ConfigError

Hits = dict[str, list[tuple[str, float]]]

#: Every teacher: (``label.teacher``, ``label.engine``) -> the class (``module:Class``, imported on first use).
REGISTRY: dict[tuple[str, str], str] = {
    ("bm25", "lucene"): "spar.teacher.teachers:LuceneBM25",
    ("bm25", "memory"): "spar.teacher.bm25_memory:MemoryBM25Teacher",
    ("impact", "lucene"): "spar.teacher.teachers:LuceneImpact",
}


class Searcher(Protocol):
    """What labelling asks of an opened teacher."""

    num_docs: int

    def search(self, queries: Sequence[tuple[str, str]], k: int) -> Hits: ...


class SparseTeacher:
    """A sparse teacher on one engine, as the ``label`` section configures it (see the module docstring)."""

    #: ``label.teacher`` and ``label.engine`` it is registered under.
    name: ClassVar[str] = ""
    engine: ClassVar[str] = ""
    #: Its ``teacher_index/`` is a Lucene BM25 index of the passages (evaluate's BM25 baseline searches it).
    bm25_index: ClassVar[bool] = False
    #: ``"bm25"``: its scores are BM25 over ``label.fields`` with ``label.k1``/``b`` (a term-based Λ densifies
    #: them, ``train.kl_target=batch`` recomputes them); None: any other scores.
    term_weighting: ClassVar[str | None] = None

    def __init__(self, section: Any):
        self.section = section  # a spar.core.config.LabelSection

    # -- identity ----------------------------------------------------------------------------------------------
    def index_settings(self) -> dict[str, Any]:
        """What ``teacher_index/`` depends on besides the passages (its fingerprint's settings)."""
        raise NotImplementedError

    def label_settings(self) -> dict[str, Any]:
        """What the labels depend on besides the queries and the index (their fingerprint's settings)."""
        raise NotImplementedError

    def models(self) -> dict[str, str]:
        """``{config key: model}`` of the models it loads (checked by :mod:`spar.experiment.preflight`)."""
        return {}

    def describe(self) -> str:
        """One line naming the teacher and its settings (the Λ card and the model card print it)."""
        raise NotImplementedError

    # -- the index ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Prepare this process before the index is built or searched (the Lucene teachers start the JVM)."""

    def build_index(self, passages_arrow: Path, index_dir: Path) -> dict[str, Any]:
        """Write the teacher's index of ``passages_arrow`` into ``index_dir``; statistics for its manifest."""
        raise NotImplementedError

    # -- searching ---------------------------------------------------------------------------------------------
    def open(self, index_dir: str | Path, passages_arrow: str | Path | None = None, threads: int | None = None,
             progress: bool = False) -> Searcher:
        """A searcher of ``index_dir`` (built from ``passages_arrow``) with ``threads`` (default ``label.threads``)."""
        raise NotImplementedError

    @classmethod
    def suits(cls, section: Any, passages_arrow: str | Path, queries: int | None) -> tuple[bool, str]:
        """Whether ``label.engine: auto`` runs this engine for labelling ``queries`` queries (None: unknown) of
        ``passages_arrow`` rather than the teacher's first one, and why. Only engines after the first are asked."""
        return False, f"auto: the {cls.name} teacher runs on {engines(cls.name)[0]}"


def register(cls: type[SparseTeacher]) -> type[SparseTeacher]:
    """Register a teacher defined outside :data:`REGISTRY` (a plug-in, a test) under its ``name`` and ``engine``;
    the config accepts them from then on. Usable as a class decorator."""
    if not cls.name or not cls.engine:
        raise ValueError(f"{cls.__name__}: a teacher needs a name and an engine")
    REGISTRY[(cls.name, cls.engine)] = f"{cls.__module__}:{cls.__qualname__}"
    known = TEACHERS.get(cls.name, ())
    TEACHERS[cls.name] = known if cls.engine in known else (*known, cls.engine)
    return cls


def engines(name: str) -> tuple[str, ...]:
    """The engines ``name`` runs on, its default first (:data:`spar.core.config_sections.TEACHERS`)."""
    if name not in TEACHERS:
        raise ConfigError(f"label.teacher={name!r} is not a registered teacher (use one of {', '.join(TEACHERS)})")
    return TEACHERS[name]


def teacher_class(name: str, engine: str | None = None) -> type[SparseTeacher]:
    """The class of teacher ``name`` on ``engine`` (default: its first engine)."""
    engine = engine or engines(name)[0]
    if (name, engine) not in REGISTRY:
        raise ConfigError(f"label.engine={engine} does not run the {name} teacher (its engines: "
                          f"{', '.join(engines(name))}, or auto)")
    module, _, qualname = REGISTRY[(name, engine)].partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def teacher_for(section: Any, engine: str | None = None) -> SparseTeacher:
    """The teacher the ``label`` section configures, on ``engine`` (default: the teacher's first engine; the index
    and every setting but how it is searched are the same on each)."""
    return teacher_class(section.teacher, engine)(section)


def choose_engine(section: Any, passages_arrow: str | Path, queries: int | None = None) -> tuple[str, str]:
    """``label.engine`` resolved to one of the teacher's engines for labelling ``queries`` queries (None: unknown),
    and why (printed in the stage summary): the one named, else (``auto``) the first later engine that
    :meth:`~SparseTeacher.suits`, else the first."""
    names = engines(section.teacher)
    if section.engine != "auto":
        teacher_class(section.teacher, section.engine)  # refuses an engine the teacher does not run on
        return section.engine, f"label.engine={section.engine}"
    if len(names) == 1:
        return names[0], f"the {section.teacher} teacher runs on {names[0]} only"
    why = ""
    for engine in names[1:]:
        suits, why = teacher_class(section.teacher, engine).suits(section, passages_arrow, queries)
        if suits:
            return engine, why
    return names[0], why


def configured_teacher(section: Any, index_dir: str | Path, engine: str | None = None, threads: int | None = None,
                       passages: str | Path | None = None, progress: bool = False) -> Searcher:
    """The searcher of the teacher the ``label`` section configures on ``engine`` over ``index_dir`` (built from
    ``passages``, the index's ``passages.arrow``): the one factory of the label stage and of its workers
    (:mod:`spar.core.executor`; picklable as ``functools.partial(configured_teacher, section, index_dir, ...)``).
    ``threads`` overrides ``label.threads`` (a Ray worker searches with the CPUs it reserved)."""
    teacher = teacher_for(section, engine)
    teacher.start()
    return teacher.open(index_dir, passages, threads or section.threads, progress)
