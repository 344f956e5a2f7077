"""The SPAR FAISS index of [P, PΛ] and the passage storage codecs.

The old module ``spar.index`` is this package now; its names are exported here, each imported from its new home on
first use.
See docs/architecture.md for the packages and who imports whom.
"""

from spar._compat import lazy_exports

_EXPORTS = {
    "Variant": "spar.index.spar_index",
    "IndexType": "spar.index.spar_index",
    "INDEX_FILE": "spar.index.files",
    "IDS_FILE": "spar.index.files",
    "INDEX_MANIFEST": "spar.index.files",
    "ADD_BATCH": "spar.index.spar_index",
    "TRAIN_SAMPLE": "spar.index.spar_index",
    "spar_passage_vectors": "spar.index.spar_index",
    "spar_query_vectors": "spar.index.spar_index",
    "IndexOptions": "spar.index.spar_index",
    "default_nlist": "spar.index.spar_index",
    "pq_bits_for": "spar.index.spar_index",
    "make_faiss_index": "spar.index.spar_index",
    "trained_faiss_index": "spar.index.spar_index",
    "build_faiss_index": "spar.index.spar_index",
    "ServedVectors": "spar.index.served",
    "served_passage_vectors": "spar.index.served",
    "build_spar_index": "spar.index.spar_index",
    "SparIndex": "spar.index.spar_index",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
