"""The passage vectors as an index stores them: decoded codes, so μ is tuned and scored against what is served.

:func:`served_passage_vectors` codes the passages with the codec the index is trained with
(:func:`spar.index.spar_index.trained_faiss_index`) and decodes them: in memory for a corpus that fits, else lazily
(:class:`ServedVectors`), each passage coded once (:class:`PassageCodes`). An index that re-ranks its candidates
exactly (``index.refine``) serves float32 scores: the inputs come back as they are.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from spar.core.config import Variant
from spar.index import spar_index as _index
from spar.index.spar_index import IndexOptions, _batches, trained_faiss_index
from spar.index.types.registry import registered_type
from spar.index.combine import check_pair, spar_passage_vectors


class PassageCodes:
    """The codes of the ``[P, PΛ]`` passage vectors, made block by block on first access and kept: each passage is
    coded once however often it is read (the μ sweep reads every passage for the top-k of each part, then gathers
    millions of candidate rows; PQ and fast-scan coding is the costly step). Memory: the index's own bytes per
    passage (1,728 at fs4 or sq4 with 3,456 dimensions, an eighth of float32), allocated up front.
    """

    def __init__(self, codec, sources: Sequence[Any]):
        self.codec, self.sources = codec, sources
        n = int(sources[0].shape[0])
        self.codes = np.empty((n, int(codec.sa_code_size())), dtype=np.uint8)
        self.coded = np.zeros(-(-n // _index.ADD_BATCH), dtype=bool)

    def __getitem__(self, key) -> np.ndarray:
        n = len(self.codes)
        batch = _index.ADD_BATCH
        if isinstance(key, slice):
            start, stop, _ = key.indices(n)
            blocks: Any = range(start // batch, (stop - 1) // batch + 1) if stop > start else range(0)
        else:
            blocks = np.unique(np.asarray(key, dtype=np.int64) // batch)
        for block in blocks:
            if not self.coded[block]:
                lo, hi = int(block) * _index.ADD_BATCH, min(n, (int(block) + 1) * _index.ADD_BATCH)
                rows = spar_passage_vectors(self.sources[0][lo:hi], self.sources[1][lo:hi], "concat")
                self.codes[lo:hi] = self.codec.sa_encode(rows)
                self.coded[block] = True
        return self.codes[key]


class ServedVectors:
    """One part (base or Λ) of the SPAR passage vectors as an index stores them, decoded on demand: row slices and
    row gathers, like :class:`spar.model.stored_vectors.ShardedVectors`, without a decoded copy of the corpus in memory.

    Each access decodes the codes of the rows it needs (:class:`PassageCodes`, shared by both parts: a scalar
    quantizer or PQ codes a vector alone, so a row decodes to the same values whichever rows it comes with).
    """

    def __init__(self, codec, sources: Sequence[Any], columns: slice, codes: PassageCodes | None = None):
        self.codec, self.sources, self.columns = codec, sources, columns
        self.codes = codes if codes is not None else PassageCodes(codec, sources)
        width = len(range(*columns.indices(int(codec.d))))
        self.shape = (int(sources[0].shape[0]), width)
        self.dtype = np.dtype(np.float32)
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        if not isinstance(key, slice):
            key = np.asarray(key, dtype=np.int64)
        codes = self.codes[key]
        if len(codes) == 0:
            return np.zeros((0, self.shape[1]), np.float32)
        return np.ascontiguousarray(self.codec.sa_decode(codes)[:, self.columns])


def served_passage_vectors(base_p: Any, lambda_p: Any, variant: Variant = "concat",
                           index_type: str = "flat", options: IndexOptions | None = None,
                           trained: Any = None) -> tuple[Any, Any]:
    """The passage vectors as an index of ``options.storage`` holds them: ``(P̂, P̂Λ)``, the decoded codes.

    Scoring queries against them gives the index's own scores (float32 storage returns the inputs). For ``sum``
    the stored vector is ``P + PΛ``, which cannot be split: it comes back as ``(decoded sum, zeros)``, which every
    SPAR scorer adds up again. The codec is trained exactly as :func:`build_faiss_index` trains it, unless
    ``trained`` (an index from :func:`trained_faiss_index` for these vectors and options) is given to code with.
    Inputs that are not in memory (:class:`spar.model.stored_vectors.ShardedVectors`, a corpus too large to copy) give
    :class:`ServedVectors`, decoded row block by row block as they are read (concat).
    """
    options = options or IndexOptions()
    streamed = not isinstance(base_p, np.ndarray) or not isinstance(lambda_p, np.ndarray)
    if options.served_storage(index_type) == "float32" or options.exact_scores(index_type):
        if streamed:
            return base_p, lambda_p
        return np.asarray(base_p, np.float32), np.asarray(lambda_p, np.float32)
    check_pair(np.asarray(base_p[:1]), np.asarray(lambda_p[:1]), variant, "passage vectors")
    index = trained if trained is not None else trained_faiss_index([base_p, lambda_p], variant, index_type, options)
    codec = registered_type(index_type).codec(index)
    if streamed and variant == "concat":
        dim = base_p.shape[1]
        codes = PassageCodes(codec, [base_p, lambda_p])  # both parts decode the same codes, made once
        return ServedVectors(codec, [base_p, lambda_p], slice(0, dim), codes), \
            ServedVectors(codec, [base_p, lambda_p], slice(dim, None), codes)
    base_p, lambda_p = np.asarray(base_p), np.asarray(lambda_p)
    n = base_p.shape[0]
    decoded = np.empty((n, index.d), dtype=np.float32)
    for start, chunk in zip(range(0, n, _index.ADD_BATCH), _batches([base_p, lambda_p], variant, n)):
        decoded[start:start + len(chunk)] = codec.sa_decode(codec.sa_encode(chunk))
    if variant == "sum":
        return decoded, np.zeros_like(decoded)
    return decoded[:, :base_p.shape[1]], decoded[:, base_p.shape[1]:]
