"""The SPAR formula: how a base retriever's vectors (P, Q) and Λ's (PΛ, QΛ) combine into one vector (Chen et al.,
§4.2), the one implementation of it (:class:`spar.index.spar_index.SparIndex` indexes and searches these vectors; the
published :class:`spar.publish.model_dir.SparEncoder` and the exact scans use them too).

- ``concat``: passages ``[P, PΛ]``, queries ``[Q, μ·QΛ]``: the inner product is exactly ``sim + μ·simΛ``.
- ``sum``: passages ``P + PΛ``, queries ``Q + μ·QΛ`` (equal dimensions).

Example::

    >>> import numpy as np
    >>> from spar.index.combine import spar_passage_vectors, spar_query_vectors
    >>> P, PL = np.ones((2, 3), "float32"), np.full((2, 2), 2, "float32")
    >>> q = spar_query_vectors(np.ones(3), np.ones(2), mu=0.5)
    >>> q.tolist(), (q @ spar_passage_vectors(P, PL).T).tolist()
    ([[1.0, 1.0, 1.0, 0.5, 0.5]], [[5.0, 5.0]])
"""

from __future__ import annotations

from typing import Any, get_args

import numpy as np

from spar.core.config import Variant
from spar.core.errors import ArtifactError


def check_pair(base: np.ndarray, lam: np.ndarray, variant: str, what: str) -> None:
    """Refuse a base and Λ matrix that do not combine by ``variant`` (rows, dimensions; ``what`` names them)."""
    if variant not in get_args(Variant):
        raise ValueError(f"unknown SPAR variant {variant!r}; use 'concat' or 'sum'")
    if base.ndim != 2 or lam.ndim != 2:
        raise ArtifactError(f"{what}: expected 2-d matrices, got base {base.shape} and Λ {lam.shape}")
    if base.shape[0] != lam.shape[0]:
        raise ArtifactError(f"{what}: base has {base.shape[0]} rows but Λ has {lam.shape[0]}")
    if variant == "sum" and base.shape[1] != lam.shape[1]:
        raise ArtifactError(
            f"{what}: variant 'sum' needs equal dimensions, but the base encoder gives {base.shape[1]} and Λ "
            f"gives {lam.shape[1]}; use variant 'concat'"
        )


def spar_passage_vectors(base_p: np.ndarray, lambda_p: np.ndarray, variant: Variant = "concat") -> np.ndarray:
    """``[P, PΛ]`` (concat) or ``P + PΛ`` (sum), float32 and C-contiguous (what FAISS takes)."""
    base_p, lambda_p = np.asarray(base_p), np.asarray(lambda_p)
    check_pair(base_p, lambda_p, variant, "passage vectors")
    if variant == "concat":
        return np.ascontiguousarray(np.hstack([base_p, lambda_p]), dtype=np.float32)
    return np.ascontiguousarray(base_p.astype(np.float32) + lambda_p.astype(np.float32))


class SparPassageRows:
    """``[P, PΛ]`` (concat) or ``P + PΛ`` (sum) of two row-aligned matrices, made block by block when sliced: the
    exact scan's passages (:func:`spar.evaluate.exact.top_k` streams them) without a second float32 copy of the
    corpus. Supports ``shape``, ``len`` and contiguous slices, what a streamed scan reads.

    >>> import numpy as np
    >>> rows = SparPassageRows(np.ones((3, 2), "float32"), np.zeros((3, 4), "float32"))
    >>> rows.shape, rows[1:3].shape
    ((3, 6), (2, 6))
    """

    def __init__(self, base_p: Any, lambda_p: Any, variant: Variant = "concat"):
        if base_p.shape[0] != lambda_p.shape[0]:
            raise ValueError(f"passage vectors: {base_p.shape[0]} base rows but {lambda_p.shape[0]} Λ rows")
        self.base_p, self.lambda_p, self.variant = base_p, lambda_p, variant
        dim = base_p.shape[1] + lambda_p.shape[1] if variant == "concat" else base_p.shape[1]
        self.shape = (int(base_p.shape[0]), int(dim))
        self.dtype = np.dtype(np.float32)
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice):
            raise IndexError("SparPassageRows supports contiguous slices only")
        return spar_passage_vectors(self.base_p[key], self.lambda_p[key], self.variant)


def spar_query_vectors(base_q: np.ndarray, lambda_q: np.ndarray, mu: float, variant: Variant = "concat") -> np.ndarray:
    """``[Q, μ·QΛ]`` (concat) or ``Q + μ·QΛ`` (sum): the query side of a SPAR index, float32."""
    base_q = np.atleast_2d(np.asarray(base_q, dtype=np.float32))
    lambda_q = np.atleast_2d(np.asarray(lambda_q, dtype=np.float32))
    check_pair(base_q, lambda_q, variant, "query vectors")
    if variant == "concat":
        return np.ascontiguousarray(np.hstack([base_q, np.float32(mu) * lambda_q]))
    return np.ascontiguousarray(base_q + np.float32(mu) * lambda_q)
