"""``index.type: ivf``: inverted lists over a flat k-means quantizer, passages stored as ``index.storage`` says
(:mod:`spar.index.types.registry`).

``index.ivf_nlist`` lists (default :func:`default_nlist`); ``index.nprobe`` (lists visited per query) is a search-time
setting. ``index.type: auto`` never chooses it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from spar.core.errors import ArtifactError
from spar.index.storage import factory_component, pq_bits
from spar.index.types.registry import IndexType, _faiss


def default_nlist(n: int) -> int:
    """≈ 4·√N inverted lists, but at least 39 training points per list (FAISS's k-means minimum)."""
    return max(1, min(int(round(4 * math.sqrt(n))), n // 39 or 1))


class IvfIndex(IndexType):
    name = "ivf"
    description = "ivf (inverted lists)"
    label = "IVF"
    search_time = ("nprobe",)

    def make(self, dim: int, n: int, storage: str, options: Any) -> Any:
        faiss = _faiss()
        nlist = options.ivf_nlist or default_nlist(n)
        if nlist > n:
            raise ArtifactError(f"index.ivf_nlist={nlist} exceeds the number of passages ({n})")
        quantizer = faiss.IndexFlatIP(dim)
        if storage == "pq":
            index = faiss.IndexIVFPQ(quantizer, dim, nlist, options.pq_m, pq_bits(n, options.pq_nbits),
                                     faiss.METRIC_INNER_PRODUCT)
        elif storage == "float32":
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            component = factory_component(storage, options.pq_m, options.pq_nbits, dim)
            index = faiss.index_factory(dim, f"IVF{nlist},{component}", faiss.METRIC_INNER_PRODUCT)
        index.nprobe = min(options.nprobe, nlist)
        return index

    def set_search_params(self, index: Any, values: Mapping[str, Any]) -> None:
        if values.get("nprobe") is not None:
            ivf = _faiss().try_extract_index_ivf(index)  # also under a wrapper (an IVF with an HNSW quantizer)
            if ivf is not None:
                ivf.nprobe = int(min(values["nprobe"], ivf.nlist))


INDEX_TYPE = IvfIndex
