"""``projection`` Λ: the densified teacher — the teacher's own term weights times a seeded random matrix.

Passages are their BM25 term weights ``w(·, p)`` (:class:`~spar.lexical.terms.BM25Weights`), queries their analysed
term counts ``c(·, q)``; both are multiplied by one random matrix ``R`` [V, dim]::

    Λ(q) · Λ(p) = c(q) R Rᵀ w(p)ᵀ ≈ c(q) · w(p) = BM25(q, p)

``R`` is Gaussian with entries N(0, 1/dim) (Johnson–Lindenstrauss: ``E[R Rᵀ] = I``), or a count-sketch (each term
hashed to one dimension with a random sign). The dot product is the teacher's score plus zero-mean noise whose
variance shrinks as 1/dim (Luan et al., 2021, analyse how many dimensions keep BM25's ranking). Nothing is trained:
"fitting" counts the corpus statistics, in seconds. ``R`` is regenerated from ``seed`` in vocabulary order, so a
saved Λ holds only its statistics.

Example::

    >>> from spar.lexical.projection import ProjectionLambda
    >>> corpus = ["salient phrases in dense retrieval", "sparse retrieval with BM25", "vitamin C and scurvy"]
    >>> lam = ProjectionLambda.fit(corpus, dim=4096, seed=0)
    >>> q, p = lam.encode_query(["sparse retrieval"]), lam.encode_passage(corpus)
    >>> exact = (lam.weights.query_matrix(["sparse retrieval"]) @ lam.weights.passage_matrix(corpus).T).toarray()
    >>> bool(abs(q @ p.T - exact).max() < 0.1 * exact.max())   # the teacher's scores, up to small noise
    True
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Literal

import numpy as np
import scipy.sparse as sp
import torch

from spar.errors import ConfigError
from spar.lexical.bag import STATISTICS_FILES, TermLambda, require_bm25
from spar.lexical.base import PassageLike, encode_in_batches, passage_text, read_lambda_config
from spar.lexical.terms import BM25Weights

Projection = Literal["gaussian", "countsketch"]
#: Rows of R generated per step (bounds the transient memory of a large vocabulary).
_ROW_BLOCK = 8192


def random_matrix(vocab: list[str], dim: int, projection: Projection = "gaussian",
                  seed: int = 0) -> np.ndarray | sp.csr_matrix:
    """The projection matrix [V, dim]: dense Gaussian N(0, 1/dim), or a sparse count-sketch.

    Gaussian rows are drawn in vocabulary order from ``numpy.random.default_rng(seed)``; count-sketch rows hash each
    term with the seed (its dimension and sign do not depend on the rest of the vocabulary).
    """
    if dim <= 0:
        raise ConfigError(f"Λ dimension must be positive, got {dim}")
    v = len(vocab)
    if projection == "gaussian":
        rng = np.random.default_rng(seed)
        out = np.empty((v, dim), dtype=np.float32)
        scale = np.float32(1.0 / np.sqrt(dim))
        for start in range(0, v, _ROW_BLOCK):
            stop = min(v, start + _ROW_BLOCK)
            out[start:stop] = rng.standard_normal((stop - start, dim), dtype=np.float32) * scale
        return out
    if projection == "countsketch":
        cols = np.empty(v, dtype=np.int64)
        signs = np.empty(v, dtype=np.float32)
        for i, term in enumerate(vocab):
            digest = hashlib.blake2b(f"{seed}\0{term}".encode(), digest_size=8).digest()
            h = int.from_bytes(digest, "little")
            cols[i], signs[i] = h % dim, 1.0 if (h >> 63) else -1.0
        return sp.csr_matrix((signs, cols, np.arange(v + 1)), shape=(v, dim))
    raise ConfigError(f"unknown projection {projection!r}; use 'gaussian' or 'countsketch'")


def project(matrix: sp.csr_matrix, r: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """Sparse term weights [n, V] times R [V, dim] -> dense float32 [n, dim]."""
    out = matrix @ r
    return np.ascontiguousarray(out.toarray() if sp.issparse(out) else out, dtype=np.float32)


class ProjectionLambda(TermLambda):
    """The densified BM25 teacher (see the module docstring).

    Args:
        weights: the corpus's BM25 statistics (analyzer, vocabulary, df, average length, k1, b).
        dim: output dimension.
        projection: ``gaussian`` or ``countsketch``.
        seed: seed of the random matrix.
    """

    kind = "projection"
    trainable = False
    files = {"spar_lambda.json": "kind, dim, projection, seed, teacher statistics", **STATISTICS_FILES}

    def __init__(self, weights: BM25Weights, dim: int, projection: Projection = "gaussian", seed: int = 0):
        super().__init__()
        if dim <= 0:
            raise ConfigError(f"Λ dimension must be positive, got {dim}")
        if projection not in ("gaussian", "countsketch"):
            raise ConfigError(f"unknown projection {projection!r}; use 'gaussian' or 'countsketch'")
        self.weights, self._dim, self.projection, self.seed = weights, int(dim), projection, int(seed)

    @classmethod
    def build(cls, train, passages_arrow, *, teacher: str, k1: float, b: float, fields,
              seed: int) -> "ProjectionLambda":
        """Fitted on the corpus (its BM25 statistics over ``fields``) with ``train.lexical`` dim/projection/seed."""
        require_bm25(train.kind, teacher)
        lex = train.lexical
        return cls(cls.fit_weights(passages_arrow, k1, b, fields), lex.dim, lex.projection,
                   seed if lex.seed is None else lex.seed)

    @classmethod
    def fingerprint_settings(cls, train: dict[str, Any]) -> dict[str, Any]:
        """Fitted, not trained: only what changes its vectors."""
        return {"kind": cls.kind, "lexical": {k: train["lexical"][k] for k in ("dim", "projection", "seed")}}

    @classmethod
    def fit(cls, passages: Iterable[PassageLike], dim: int, projection: Projection = "gaussian", seed: int = 0,
            k1: float = 0.9, b: float = 0.4) -> "ProjectionLambda":
        """Count the corpus statistics of ``passages`` (the teacher's corpus) and set up the projection."""
        return cls(BM25Weights.fit((passage_text(p) for p in passages), k1, b), dim, projection, seed)

    @property
    def dim(self) -> int:
        return self._dim

    @cached_property
    def matrix(self) -> np.ndarray | sp.csr_matrix:
        return random_matrix(self.weights.vocab, self._dim, self.projection, self.seed)

    def dense_matrix(self) -> np.ndarray:
        """R as a dense [V, dim] float32 array (the initial term embeddings of a ``static`` Λ)."""
        r = self.matrix
        return r.toarray().astype(np.float32) if isinstance(r, sp.csr_matrix) else r

    def term_table(self) -> np.ndarray:
        return self.dense_matrix()

    def term_vectors(self, weights, matrix) -> np.ndarray | None:
        return project(matrix, self.matrix) if weights is self.weights else None

    def card_facts(self, cfg) -> dict[str, Any]:
        return self._card_facts(cfg, {"kind": self.kind, "training": "none (the teacher's BM25 weights times a "
                                                                     "seeded random matrix)"})

    def encode_query(self, texts: Iterable[str], batch_size: int = 4096) -> np.ndarray:
        return encode_in_batches(list(texts), lambda t: project(self.weights.query_matrix(t), self.matrix), self.dim,
                                 batch_size)

    def encode_passage(self, passages: Iterable[PassageLike], batch_size: int = 4096) -> np.ndarray:
        return encode_in_batches([self.weights.passage_text(p) for p in passages],
                                 lambda t: project(self.weights.passage_matrix(t), self.matrix), self.dim, batch_size)

    def with_statistics(self, passages: Iterable[PassageLike]) -> "ProjectionLambda":
        """Refit the BM25 statistics on ``texts``; the random rows of the carried terms are unchanged (Gaussian rows
        are drawn in vocabulary order and new terms are appended; count-sketch rows depend on the term alone)."""
        return ProjectionLambda(self.weights.refit(passages), self._dim, self.projection, self.seed)

    def config_dict(self) -> dict[str, Any]:
        return {"projection": self.projection, "seed": self.seed, "teacher": self.weights.describe()}

    def save(self, directory: str | Path) -> None:
        self.weights.save(directory)
        self.write_config(directory)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "ProjectionLambda":
        config = read_lambda_config(directory)
        return cls(BM25Weights.load(directory), int(config["dim"]), config["projection"], int(config["seed"]))
