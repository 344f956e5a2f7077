"""How a SPAR index stores its passage vectors: float32, float16, 8/6/4-bit scalar quantizers, fast-scan or PQ codes.

Queries stay float32; only the passage side is coded.

One FAISS codec covers the whole passage vector ``[P, PΛ]`` (FAISS's scalar quantizers learn a range per
dimension, so the base and Λ parts each get their own scale, but not their own bit width). ``fs4``/``fs2`` are
FAISS's fast-scan PQ with 4-bit codes, one per dimension (the bytes of ``sq4``, with 16 learnt levels per
dimension) or one per two dimensions: the scan runs on SIMD lookup tables, several times faster than decoding scalar
codes, and its scores are rounded through 8-bit tables. :func:`code_bytes` is the bytes per passage of the codes (an
index adds its own structure: HNSW links, IVF list ids), the x-axis of the bytes-per-passage frontier.

Example::

    >>> from spar.index.storage import code_bytes, factory_component
    >>> code_bytes("sq4", 384 + 1536), code_bytes("float32", 384 + 384), code_bytes("pq", 768, pq_m=96)
    (960, 3072, 96)
    >>> code_bytes("fs4", 1920), code_bytes("fs2", 1920)
    (960, 480)
    >>> factory_component("sq6"), factory_component("pq", pq_m=48, pq_nbits=8), factory_component("fs2", dim=1920)
    ('SQ6', 'PQ48x8', 'PQ960x4fs')
"""

from __future__ import annotations

import logging
import math
from typing import get_args

from spar.core.config import Storage
from spar.core.errors import ArtifactError

log = logging.getLogger(__name__)

STORAGES: tuple[str, ...] = get_args(Storage)
#: Bits per dimension of the per-dimension codecs (PQ's size depends on pq_m and pq_nbits instead).
BITS = {"float32": 32, "float16": 16, "sq8": 8, "sq6": 6, "sq4": 4}
_FACTORY = {"float32": "Flat", "float16": "SQfp16", "sq8": "SQ8", "sq6": "SQ6", "sq4": "SQ4"}
#: Dimensions per 4-bit code of the fast-scan PQ storages.
FAST_SCAN = {"fs4": 1, "fs2": 2}


def check_storage(storage: str) -> str:
    if storage not in STORAGES:
        raise ArtifactError(f"unknown index storage {storage!r}; use one of {', '.join(STORAGES)}")
    return storage


def code_bytes(storage: str, dim: int, pq_m: int = 16, pq_nbits: int = 8) -> int:
    """Bytes per passage of the codes of a ``dim``-dimensional passage vector stored as ``storage``."""
    check_storage(storage)
    if storage == "pq":
        return math.ceil(pq_m * pq_nbits / 8)
    if storage in FAST_SCAN:
        return math.ceil(fast_scan_codes(storage, dim) / 2)
    return math.ceil(dim * BITS[storage] / 8)


def fast_scan_codes(storage: str, dim: int) -> int:
    """4-bit codes per passage of a fast-scan storage (``dim`` must split into them evenly)."""
    per_code = FAST_SCAN[storage]
    if dim % per_code:
        raise ArtifactError(f"index.storage={storage} codes {per_code} dimensions per 4-bit code, but the passage "
                            f"vectors have {dim} dimensions; use fs4 or a scalar quantizer")
    return dim // per_code


def factory_component(storage: str, pq_m: int = 16, pq_nbits: int = 8, dim: int | None = None) -> str:
    """The storage part of a FAISS ``index_factory`` string (``Flat``, ``SQfp16``, ``SQ8``, ..., ``PQ16x8``,
    ``PQ960x4fs``; the fast-scan storages need ``dim``)."""
    check_storage(storage)
    if storage in FAST_SCAN:
        if dim is None:
            raise ValueError(f"the {storage} storage needs the vector dimension")
        return f"PQ{fast_scan_codes(storage, dim)}x4fs"
    return f"PQ{pq_m}x{pq_nbits}" if storage == "pq" else _FACTORY[storage]


def pq_bits_for(n: int, nbits: int) -> int:
    """PQ bits per code that ``n`` training points support (FAISS's k-means wants >= 39 points per centroid)."""
    return nbits if n >= 39 * 2 ** nbits else max(1, min(nbits, int(math.log2(max(n, 78) / 39))))


def pq_bits(n: int, nbits: int) -> int:
    """:func:`pq_bits_for`, with a warning when ``n`` passages support fewer bits than ``index.pq_nbits`` asks."""
    fewer = pq_bits_for(n, nbits)
    if fewer != nbits:
        log.warning("only %d passages: PQ codes use %d bits instead of %d", n, fewer, nbits)
    return fewer


def describe(storage: str, dim: int, pq_m: int = 16, pq_nbits: int = 8) -> str:
    """One phrase for summaries and model cards, e.g. ``4-bit scalar quantizer (960 B/passage)``."""
    names = {"float32": "float32", "float16": "float16", "sq8": "8-bit scalar quantizer",
             "sq6": "6-bit scalar quantizer", "sq4": "4-bit scalar quantizer",
             "fs4": "fast-scan PQ, a 4-bit code per dimension", "fs2": "fast-scan PQ, a 4-bit code per 2 dimensions",
             "pq": f"PQ, {pq_m} codes of {pq_nbits} bits"}
    return f"{names[check_storage(storage)]} ({code_bytes(storage, dim, pq_m, pq_nbits):,} B/passage)"
