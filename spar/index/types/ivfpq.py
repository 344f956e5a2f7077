"""``index.type: ivfpq``: inverted lists of PQ codes (FAISS ``IndexIVFPQ``: ``index.pq_m`` codes of ``index.pq_nbits``
bits), whatever ``index.storage`` says but another codec (:mod:`spar.index.types.registry`). Built, searched and
sized like :mod:`spar.index.types.ivf` with ``index.storage=pq``, which is the same index.
"""

from __future__ import annotations

from spar.core.errors import ArtifactError
from spar.index.types.ivf import IvfIndex


class IvfPqIndex(IvfIndex):
    name = "ivfpq"
    description = "ivfpq (IVF + PQ)"
    label = "IVF-PQ"

    def accepts(self, storage: str) -> bool:
        return storage in ("float32", "pq")  # float32: the storage's default, which an IVF-PQ index overrides

    def check_storage(self, storage: str) -> None:
        if not self.accepts(storage):
            raise ArtifactError(f"index.type=ivfpq stores PQ codes, not index.storage={storage}; use index.type=ivf "
                                "for an inverted-list index of another storage")

    def served_storage(self, storage: str) -> str:
        return "pq"


INDEX_TYPE = IvfPqIndex
