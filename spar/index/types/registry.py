"""The index-type contract and the registry of types: what building, searching, ``index.type: auto``, the served
vectors, the stages and the frontier ask of an index type, never its name.

An index type is one class, registered under its ``index.type`` name in :data:`REGISTRY`:

- ``flat``: :class:`spar.index.types.flat.FlatIndex`, every passage scored (``IndexFlatIP`` or a flat codec); what
  ``index.type: auto`` serves below ``index.auto_flat_below`` passages;
- ``hnsw``: :class:`spar.index.types.hnsw.HnswIndex`, a graph over float32 or scalar-quantized vectors; auto's from
  ``index.auto_flat_below`` passages;
- ``ivf``: :class:`spar.index.types.ivf.IvfIndex`, inverted lists of any storage;
- ``ivfpq``: :class:`spar.index.types.ivfpq.IvfPqIndex`, inverted lists of PQ codes.

The contract (:class:`IndexType`; the ``options`` its methods take are an :class:`spar.index.spar_index.IndexOptions`,
the ``index`` config section plus the codec-training seed):

- building: :meth:`~IndexType.make` an empty inner-product FAISS index of ``dim``-dimensional vectors for ``n``
  passages, storing ``storage``; :meth:`~IndexType.check_storage` refuses a storage it cannot hold (one line, naming
  what to use instead) and :meth:`~IndexType.served_storage` is the storage it really holds (``ivfpq``: PQ codes);
  :meth:`~IndexType.adds_codes` (whether FAISS adds codes made elsewhere, by Ray workers) and
  :meth:`~IndexType.codec` (the part of a built index that codes one passage: what :mod:`spar.index.served` decodes);
- searching: :attr:`~IndexType.search_time`, the ``index`` options it reads at search time (from ``index.json``,
  refreshed there without re-indexing), applied to a loaded index by :meth:`~IndexType.set_search_params`;
  :attr:`~IndexType.approximate` (False: it scores every passage; True: μ is folded into its passages and
  ``index.refine`` re-ranks its candidates, :mod:`spar.index.approximate`);
- ``index.type: auto``: :meth:`~IndexType.auto_from`, the smallest corpus auto serves with it (None: never; auto
  takes the type with the largest one the corpus reaches) and :attr:`~IndexType.auto`, the settings it comes with;
- words: :attr:`~IndexType.description` (errors, ``--help``) and :attr:`~IndexType.label` (the frontier's table);
- :func:`exhaustive_type`: the registered type that scans every passage (the frontier's scored and default-timed one).

A new type is its module ``spar/index/types/<name>.py`` (a subclass of :class:`IndexType` named ``INDEX_TYPE`` there)
and its name in :data:`spar.core.config_sections.INDEX_TYPES` (which the config checks ``index.type`` against); a type
defined outside spar (a plug-in, a test) is registered by :func:`register` instead. Options of its own: a field of
:class:`spar.core.config.IndexSection`.

Example::

    >>> from spar.index.types.registry import auto_type, exhaustive_type, index_type_names, registered_type
    >>> index_type_names(), exhaustive_type().name
    (('flat', 'hnsw', 'ivf', 'ivfpq'), 'flat')
    >>> hnsw = registered_type("hnsw")
    >>> hnsw.approximate, hnsw.search_time, hnsw.accepts("sq4"), hnsw.accepts("fs4")
    (True, ('hnsw_ef_search',), True, False)
    >>> registered_type("ivfpq").served_storage("float32")
    'pq'
    >>> from spar.core.config import IndexSection
    >>> section = IndexSection(type="auto")
    >>> auto_type(section, 1_000).name, auto_type(section, 1_000_000).name
    ('flat', 'hnsw')
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Mapping

from spar.core.config_sections import EXHAUSTIVE_INDEX_TYPES, INDEX_TYPES
from spar.core.errors import ArtifactError, ConfigError

#: Every index type: name -> its class (``module:Class``, imported on first use), derived from the names written once
#: in the config (:data:`spar.core.config_sections.INDEX_TYPES`): type ``t`` is ``INDEX_TYPE`` of
#: ``spar/index/types/<t>.py``. :func:`register` adds a class defined elsewhere.
REGISTRY: dict[str, str] = {name: f"spar.index.types.{name}:INDEX_TYPE" for name in INDEX_TYPES}


def _faiss():
    import faiss

    return faiss


class IndexType:
    """A FAISS index type behind ``index.type`` (see the module docstring). Instances hold no state: the registry
    makes one per type."""

    #: ``index.type`` it is registered under.
    name: ClassVar[str] = ""
    #: One phrase for errors and ``--help`` (``"graph (HNSW)"``).
    description: ClassVar[str] = ""
    #: Its name in the frontier's table (``"HNSW"``).
    label: ClassVar[str] = ""
    #: Searched approximately (candidates, not every passage): an ``index.fold: auto`` index holds ``[P, μ₀·PΛ]``, and
    #: ``index.refine`` re-ranks its candidates exactly. False: an exhaustive scan (exact for its storage).
    approximate: ClassVar[bool] = True
    #: The ``index`` options it reads at search time (each one of :data:`spar.index.files.SEARCH_TIME`).
    search_time: ClassVar[tuple[str, ...]] = ()
    #: What ``index.type: auto`` sets when it picks this type: ``storage`` always (the configured one is the flat
    #: scan's); any other option only where the config leaves it at its default (:func:`auto_section`).
    auto: ClassVar[dict[str, Any]] = {}

    # -- storage ---------------------------------------------------------------------------------------------
    def accepts(self, storage: str) -> bool:
        """Whether it holds ``storage`` (``index.storage``) at all."""
        return True

    def check_storage(self, storage: str) -> None:
        """Refuse, in one line naming what to use instead, a ``storage`` it cannot hold."""
        if not self.accepts(storage):
            raise ArtifactError(f"index.storage={storage} with index.type={self.name}: {self.name} cannot store it")

    def served_storage(self, storage: str) -> str:
        """The storage it really holds when ``index.storage`` is ``storage``."""
        return storage

    def holds(self, storage: str) -> bool:
        """Whether it stores exactly ``storage`` (what the frontier's points of that storage can be served by)."""
        return self.accepts(storage) and self.served_storage(storage) == storage

    # -- building --------------------------------------------------------------------------------------------
    def make(self, dim: int, n: int, storage: str, options: Any) -> Any:
        """An empty FAISS inner-product index of ``dim``-dimensional vectors, sized for ``n`` passages, storing
        ``storage`` (already checked and served: :meth:`served_storage`); ``options``: an ``IndexOptions``."""
        raise NotImplementedError

    def adds_codes(self, storage: str) -> bool:
        """Whether FAISS adds its passages from codes made elsewhere (``add_sa_codes``: Ray workers code them)."""
        from spar.index.storage import FAST_SCAN

        return storage not in FAST_SCAN  # fast-scan codes are packed in blocks as they are added

    def codec(self, index: Any) -> Any:
        """The part of a built ``index`` whose ``sa_encode``/``sa_decode`` code one passage vector."""
        return index

    # -- searching -------------------------------------------------------------------------------------------
    def set_search_params(self, index: Any, values: Mapping[str, Any]) -> None:
        """Apply the search-time ``values`` (of :attr:`search_time`; others are ignored) to a built or loaded index."""

    # -- index.type: auto ------------------------------------------------------------------------------------
    def auto_from(self, section: Any) -> int | None:
        """The smallest corpus (passages) ``index.type: auto`` serves with this type, for the ``index`` ``section``;
        None: auto never chooses it."""
        return None


def index_type_names() -> tuple[str, ...]:
    """The registered types, in the config's order (errors, ``--help`` and the frontier list them so)."""
    return tuple(INDEX_TYPES)


_INSTANCES: dict[str, IndexType] = {}


def registered_type(name: str) -> IndexType:
    """The registered type ``name`` (a one-line :class:`ConfigError` listing them for any other name)."""
    where = REGISTRY.get(name)
    if where is None:
        raise ConfigError(f"index.type={name!r} is not a registered index type (use one of "
                          f"{', '.join(index_type_names())})")
    found = _INSTANCES.get(where)
    if found is None:
        module, _, qualname = where.partition(":")
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        found = _INSTANCES[where] = cls()
    return found


def exhaustive_type() -> IndexType:
    """The first registered type that scans every passage (not :attr:`~IndexType.approximate`): what the frontier
    scores each point through and times by default (the default rule's latency), and the dense half of its hybrid."""
    for name in index_type_names():
        kind = registered_type(name)
        if not kind.approximate:
            return kind
    raise ConfigError(f"no registered index type scans every passage (registered: {', '.join(index_type_names())})")


def is_approximate(name: str) -> bool:
    """Whether an index of type ``name`` is searched approximately (``auto``, a choice not yet made: False)."""
    return name != "auto" and registered_type(name).approximate


def register(cls: type[IndexType]) -> type[IndexType]:
    """Register a type defined outside spar's modules (a plug-in, a test) under its ``name``; the config accepts it
    from then on. Usable as a class decorator; :func:`unregister` takes it back."""
    if not cls.name or cls.name == "auto":
        raise ValueError(f"{cls.__name__}: an index type needs a name (not 'auto')")
    REGISTRY[cls.name] = f"{cls.__module__}:{cls.__qualname__}"
    _INSTANCES.pop(REGISTRY[cls.name], None)
    if cls.name not in INDEX_TYPES:
        INDEX_TYPES.append(cls.name)
    if cls.approximate:
        EXHAUSTIVE_INDEX_TYPES.discard(cls.name)
    else:
        EXHAUSTIVE_INDEX_TYPES.add(cls.name)
    return cls


def unregister(name: str) -> None:
    """Take back a type :func:`register` added (the config refuses its name again)."""
    where = REGISTRY.pop(name, None)
    if where is not None:
        _INSTANCES.pop(where, None)
    if name in INDEX_TYPES:
        INDEX_TYPES.remove(name)
    EXHAUSTIVE_INDEX_TYPES.discard(name)


def auto_type(section: Any, passages: int) -> IndexType:
    """The type ``index.type: auto`` serves a corpus of ``passages`` with: of the types whose
    :meth:`~IndexType.auto_from` the corpus reaches, the one with the largest (the first registered on a tie)."""
    best: tuple[int, IndexType] | None = None
    for name in index_type_names():
        kind = registered_type(name)
        start = kind.auto_from(section)
        if start is not None and passages >= start and (best is None or start > best[0]):
            best = (start, kind)
    if best is None:
        raise ConfigError(f"index.type=auto: no registered index type serves {passages:,} passages")
    return best[1]


def auto_section(section: Any, passages: int) -> Any:
    """The ``index`` section with ``type: auto`` made concrete for ``passages`` (:func:`auto_type`): its name, the
    storage it comes with (:attr:`IndexType.auto`), and its other settings where the section leaves them at their
    defaults (an ``index.hnsw_ef_search`` or ``index.refine`` given with auto is kept, as with the type itself). An
    exhaustive type has no candidates to re-rank (``refine`` 0); nor has ``sum``, which exact re-ranking cannot
    score (its refusal said "use index.refine=0", which auto would replace)."""
    kind = auto_type(section, passages)
    fields = type(section).model_fields
    chosen = {"type": kind.name, **{key: value for key, value in kind.auto.items()
                                    if key == "storage" or getattr(section, key) == fields[key].default}}
    if not kind.approximate:
        chosen["refine"] = 0
    elif section.variant != "concat":
        chosen.pop("refine", None)
    return section.model_copy(update=chosen)


def stored_storage(info: Mapping[str, Any]) -> str:
    """The storage of a built index from its ``index.json`` (``info``); one written before ``storage`` was recorded
    held float32 vectors, or what its type always serves."""
    if "storage" in info:
        return info["storage"]
    return registered_type(info.get("type", "flat")).served_storage("float32")
