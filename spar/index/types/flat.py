"""``index.type: flat``: every passage scored, exactly for its storage (:mod:`spar.index.types.registry`).

Float32 vectors are FAISS's ``IndexFlatIP``; any other storage is a flat codec scanned in full (``SQ4``, ``PQ16x8``,
fast-scan ``PQ960x4fs``). ``index.type: auto`` serves a corpus below ``index.auto_flat_below`` passages with it.
"""

from __future__ import annotations

from typing import Any

from spar.index.storage import factory_component, pq_bits
from spar.index.types.registry import IndexType, _faiss


class FlatIndex(IndexType):
    name = "flat"
    description = "flat (exhaustive)"
    label = "flat"
    approximate = False

    def make(self, dim: int, n: int, storage: str, options: Any) -> Any:
        faiss = _faiss()
        if storage == "float32":
            return faiss.IndexFlatIP(dim)
        if storage == "pq":  # as many bits per code as n passages can train
            return faiss.index_factory(dim, factory_component("pq", options.pq_m, pq_bits(n, options.pq_nbits)),
                                       faiss.METRIC_INNER_PRODUCT)
        return faiss.index_factory(dim, factory_component(storage, options.pq_m, options.pq_nbits, dim),
                                   faiss.METRIC_INNER_PRODUCT)

    def auto_from(self, section: Any) -> int | None:
        return 0  # any corpus: below the approximate type's threshold, auto scans every passage


INDEX_TYPE = FlatIndex
