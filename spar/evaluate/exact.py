"""Exact dense search: inner-product top-k over passage vectors in memory or streamed from their shards.

Tuning, evaluation and the frontier rank with it (the FAISS index of :mod:`spar.index.spar_index` is the approximate,
stored alternative).

Example::

    >>> import numpy as np
    >>> from spar.evaluate.exact import dense_search
    >>> ranked = dense_search(np.eye(2, dtype="float32"), np.eye(2, dtype="float32"), ["q1", "q2"], ["d1", "d2"], 1)
    >>> ranked["q2"]
    [('d2', 1.0)]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from spar.evaluate.metrics import ranked_run


#: Passage rows scored at a time when the passages are not in memory (:func:`top_k` over a streamed corpus), at
#: most: wide vectors are read in blocks of :data:`STREAM_BLOCK_BYTES` (3,456-d SPAR vectors: 9,709 rows).
STREAM_BLOCK = 65_536
#: Bytes of float32 passage vectors scored at a time: what a streamed scan holds, whatever the corpus size.
STREAM_BLOCK_BYTES = 128 << 20


def stream_rows(dim: int) -> int:
    """Rows per block of a streamed scan of ``dim``-dimensional vectors (:data:`STREAM_BLOCK_BYTES`)."""
    return max(1, min(STREAM_BLOCK, STREAM_BLOCK_BYTES // (4 * max(1, dim))))


def top_k(queries: np.ndarray, passages: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k (FAISS brute force, multi-threaded, blocked): (scores, rows), best first.

    ``passages`` in memory are scored at once; a streamed matrix (anything that is not an ndarray but slices into
    one: :class:`spar.model.stored_vectors.ShardedVectors`, :class:`spar.index.served.ServedVectors`) block of rows by
    block, the running top-k kept in FAISS's result heap, so memory stays flat in the corpus size.
    """
    import faiss

    k = min(k, passages.shape[0])
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if isinstance(passages, np.ndarray):
        return faiss.knn(queries, np.ascontiguousarray(passages, dtype=np.float32), k,
                         metric=faiss.METRIC_INNER_PRODUCT)
    heap = faiss.ResultHeap(queries.shape[0], k, keep_max=True)
    rows_per_block = stream_rows(passages.shape[1])
    for start in range(0, passages.shape[0], rows_per_block):
        block = np.ascontiguousarray(passages[start:start + rows_per_block], dtype=np.float32)
        scores, rows = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(scores, np.where(rows >= 0, rows + start, -1))
    heap.finalize()
    return heap.D, heap.I


def dense_search(queries: np.ndarray, passages: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str],
                 k: int) -> dict[str, list[tuple[str, float]]]:
    """Exact inner-product top-``k`` of every query (FAISS brute force) as a ranked run."""
    scores, rows = top_k(queries, passages, k)
    return ranked_run(query_ids, rows, scores, doc_ids)
