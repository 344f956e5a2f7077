"""``index.type: hnsw``: a proximity graph (FAISS HNSW) over float32 or scalar-quantized passage vectors
(:mod:`spar.index.types.registry`); what ``index.type: auto`` serves from ``index.auto_flat_below`` passages.

FAISS's HNSW has no inner-product PQ and cannot hold fast-scan codes. The graph is built with ``index.hnsw_m`` links
per node and ``index.hnsw_ef_construction`` candidates; ``index.hnsw_ef_search`` (efSearch) is a search-time setting.
"""

from __future__ import annotations

from typing import Any, Mapping

from spar.core.errors import ArtifactError
from spar.index.storage import FAST_SCAN, factory_component
from spar.index.types.registry import IndexType, _faiss


class HnswIndex(IndexType):
    name = "hnsw"
    description = "hnsw (graph)"
    label = "HNSW"
    search_time = ("hnsw_ef_search",)
    #: ``index.type: auto`` from ``index.auto_flat_below`` passages: chosen by measurement on the Wikipedia
    #: experiment's real vectors (``bench/odqa_index.py``; docs/experiments.md, "Serving SPAR at 663k"), at the size
    #: it serves (below 300,000 passages auto is a flat scan). At all 667,980 passages (4 dev sets × 300 questions,
    #: bench/results/odqa_index-663k-hnsw-*.json) HNSW over sq4 codes, M 16, the top 4·k re-ranked exactly:
    #: efConstruction 40 with efSearch 512 lost up to 7.3 Acc@20 points against the exact scan (2048: 2.0;
    #: re-ranking 8·k instead of 4·k: the same, so the graph missed the passages); efConstruction 100 with efSearch
    #: 2048 lost at most 1.33 (overlap@20 with the exact top-20 0.87-0.99; the base alone through it 0.34), one
    #: question in 37 ms against the hybrid's 105 (0.35×), built in 15 minutes on 2 cores. (At 200k, efConstruction
    #: 40 and efSearch 512 had lost 0.33.)
    auto = {"storage": "sq4", "hnsw_m": 16, "hnsw_ef_construction": 100, "hnsw_ef_search": 2048, "refine": 4}

    def accepts(self, storage: str) -> bool:
        return storage != "pq" and storage not in FAST_SCAN

    def check_storage(self, storage: str) -> None:
        if storage == "pq":
            raise ArtifactError("index.storage=pq with index.type=hnsw: FAISS's HNSW-PQ has no inner product; use "
                                "index.type=flat or ivf for PQ, or a scalar quantizer (sq8, sq6, sq4) with HNSW")
        if storage in FAST_SCAN:
            raise ArtifactError(f"index.storage={storage} with index.type=hnsw: FAISS's HNSW cannot store fast-scan "
                                "codes; use index.type=flat or ivf, or a scalar quantizer (sq8, sq6, sq4) with HNSW")

    def make(self, dim: int, n: int, storage: str, options: Any) -> Any:
        faiss = _faiss()
        if storage == "float32":
            index = faiss.IndexHNSWFlat(dim, options.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        else:
            component = factory_component(storage, options.pq_m, options.pq_nbits, dim)
            index = faiss.index_factory(dim, f"HNSW{options.hnsw_m},{component}", faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = options.hnsw_ef_construction
        index.hnsw.efSearch = options.hnsw_ef_search
        return index

    def adds_codes(self, storage: str) -> bool:
        return False  # every passage added is linked into the graph as it comes

    def codec(self, index: Any) -> Any:
        return _faiss().downcast_index(index.storage)

    def set_search_params(self, index: Any, values: Mapping[str, Any]) -> None:
        if values.get("hnsw_ef_search") is not None:
            index.hnsw.efSearch = int(values["hnsw_ef_search"])

    def auto_from(self, section: Any) -> int | None:
        return section.auto_flat_below


INDEX_TYPE = HnswIndex
