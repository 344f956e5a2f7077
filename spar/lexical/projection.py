"""``projection`` Λ: the densified teacher — the teacher's own term weights times a seeded random matrix.

Passages are their BM25 term weights ``w(·, p)`` (:class:`~spar.lexical.terms.BM25Weights`), queries their analysed
term counts ``c(·, q)``; both are multiplied by one random matrix ``R`` [V, dim]::

    Λ(q) · Λ(p) = c(q) R Rᵀ w(p)ᵀ ≈ c(q) · w(p) = BM25(q, p)

``R`` is Gaussian with entries N(0, 1/dim) (Johnson–Lindenstrauss: ``E[R Rᵀ] = I``), or sparse: ``nonzeros`` entries
±1/√nonzeros per term, one in each block of dim/nonzeros columns, hashed from the term (sparse JL; ``countsketch`` is
one entry). The dot product is the teacher's score plus zero-mean noise whose variance shrinks as 1/dim (Luan et al.,
2021, analyse how many dimensions keep BM25's ranking). Nothing is trained: "fitting" counts the corpus statistics,
in seconds. ``R`` is regenerated from ``seed`` (:mod:`spar.lexical.random_tables`), so a saved Λ holds only its
statistics. A Gaussian ``R`` is a dense [V, dim] float32 table in memory (Wikipedia's 516k terms at 3,072 dims:
6.3 GB); a sparse one is ``nonzeros`` (column, value) pairs per term (37 MB at ``nonzeros`` 8) and encodes by a
sparse-sparse product — the choice for large vocabularies (README, Λ kinds).

Example::

    >>> from spar.lexical.projection import ProjectionLambda
    >>> corpus = ["salient phrases in dense retrieval", "sparse retrieval with BM25", "vitamin C and scurvy"]
    >>> lam = ProjectionLambda.fit(corpus, dim=4096, seed=0)
    >>> q, p = lam.encode_query(["sparse retrieval"]), lam.encode_passage(corpus)
    >>> exact = (lam.weights.query_matrix(["sparse retrieval"]) @ lam.weights.passage_matrix(corpus).T).toarray()
    >>> bool(abs(q @ p.T - exact).max() < 0.1 * exact.max())   # the teacher's scores, up to small noise
    True
    >>> sparse = ProjectionLambda.fit(corpus, dim=4096, projection="sparse", seed=0, nonzeros=8)  # nothing stored
    >>> noise = sparse.encode_query(["sparse retrieval"]) @ sparse.encode_passage(corpus).T - exact
    >>> bool(abs(noise).max() < 0.1 * exact.max())
    True
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, get_args

import numpy as np
import scipy.sparse as sp
import torch

from spar.core.config import Projection
from spar.core.errors import ConfigError
from spar.lexical import random_tables
from spar.lexical.bag import STATISTICS_FILES, TermLambda, require_bm25
from spar.lexical.base import LexicalModel, PassageLike, encode_in_batches, passage_text, read_lambda_config
from spar.lexical.terms import BM25Weights

PROJECTIONS = get_args(Projection)
#: ``train.lexical.nonzeros`` of a ``sparse`` projection when unset (chosen on SciFact's frontier: README, Λ kinds).
DEFAULT_NONZEROS = 8


def nonzeros_of(projection: str, nonzeros: int | None) -> int | None:
    """Entries per term of a sparse table: ``nonzeros`` for ``sparse``, 1 for ``countsketch``, None (dense) for
    ``gaussian``."""
    if projection == "sparse":
        return DEFAULT_NONZEROS if nonzeros is None else int(nonzeros)
    return 1 if projection == "countsketch" else None


def random_matrix(vocab: list[str], dim: int, projection: Projection = "gaussian",
                  seed: int = 0, nonzeros: int | None = None) -> np.ndarray | sp.csr_matrix:
    """The projection matrix [V, dim]: dense Gaussian N(0, 1/dim), or a sparse table with ``nonzeros`` entries
    ±1/√nonzeros per term (``countsketch``: one) (:mod:`spar.lexical.random_tables`).

    Gaussian rows are drawn in vocabulary order from ``numpy.random.default_rng(seed)``; sparse rows hash each term
    with the seed (their positions and signs do not depend on the rest of the vocabulary).
    """
    if dim <= 0:
        raise ConfigError(f"Λ dimension must be positive, got {dim}")
    if projection not in PROJECTIONS:
        raise ConfigError(f"unknown projection {projection!r}; use one of {', '.join(PROJECTIONS)}")
    if projection == "gaussian":
        return random_tables.gaussian_table(len(vocab), dim, seed)
    return sparse_matrix(random_tables.sparse_rows(vocab, dim, _checked_nonzeros(projection, nonzeros, dim), seed),
                         dim)


def sparse_matrix(rows: tuple[np.ndarray, np.ndarray], dim: int) -> sp.csr_matrix:
    """A sparse table's (columns, signs) [V, s] as a CSR matrix [V, dim] with values ±1/√s."""
    cols, signs = rows
    v, s = cols.shape
    data = signs.astype(np.float32).ravel() * random_tables.sparse_value(s)
    return sp.csr_matrix((data, cols.ravel().astype(np.int32), np.arange(0, v * s + 1, s, dtype=np.int64)),
                         shape=(v, dim))


def _checked_nonzeros(projection: str, nonzeros: int | None, dim: int) -> int:
    s = nonzeros_of(projection, nonzeros)
    assert s is not None
    if not 1 <= s <= dim:
        raise ConfigError(f"train.lexical.nonzeros={s} must be between 1 and the dimension {dim}")
    return s


def project(matrix: sp.csr_matrix, r: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """Sparse term weights [n, V] times R [V, dim] -> dense float32 [n, dim]."""
    out = matrix @ r
    return np.ascontiguousarray(out.toarray() if sp.issparse(out) else out, dtype=np.float32)


class ProjectionLambda(TermLambda):
    """The densified BM25 teacher (see the module docstring).

    Args:
        weights: the corpus's BM25 statistics (analyzer, vocabulary, df, average length, k1, b).
        dim: output dimension.
        projection: ``gaussian``, ``countsketch`` or ``sparse``.
        seed: seed of the random matrix.
        nonzeros: entries per term of a ``sparse`` projection (default :data:`DEFAULT_NONZEROS`).
    """

    kind = "projection"
    trainable = False
    files = {"spar_lambda.json": "kind, dim, projection, seed, teacher statistics", **STATISTICS_FILES}

    def __init__(self, weights: BM25Weights, dim: int, projection: Projection = "gaussian", seed: int = 0,
                 nonzeros: int | None = None):
        super().__init__()
        if dim <= 0:
            raise ConfigError(f"Λ dimension must be positive, got {dim}")
        if projection not in PROJECTIONS:
            raise ConfigError(f"unknown projection {projection!r}; use one of {', '.join(PROJECTIONS)}")
        if projection != "sparse" and nonzeros not in (None, nonzeros_of(projection, None)):
            raise ConfigError(f"train.lexical.nonzeros={nonzeros} applies to projection 'sparse' only "
                              f"(projection {projection!r})")
        self.weights, self._dim, self.projection, self.seed = weights, int(dim), projection, int(seed)
        self.nonzeros = nonzeros_of(projection, nonzeros)
        if self.nonzeros is not None:
            _checked_nonzeros(projection, self.nonzeros, self._dim)

    @classmethod
    def build(cls, train, passages_arrow, *, teacher: str, k1: float, b: float, fields,
              seed: int) -> "ProjectionLambda":
        """Fitted on the corpus (its BM25 statistics over ``fields``) with ``train.lexical`` dim/projection/seed."""
        require_bm25(train.kind, teacher)
        lex = train.lexical
        return cls(cls.fit_weights(passages_arrow, k1, b, fields), lex.dim, lex.projection,
                   seed if lex.seed is None else lex.seed, lex.nonzeros if lex.projection == "sparse" else None)

    @classmethod
    def fingerprint_settings(cls, train: dict[str, Any]) -> dict[str, Any]:
        """Fitted, not trained: only what changes its vectors (``nonzeros`` for a sparse projection only, so the
        fingerprints of Λs made before it existed stay as they were)."""
        lexical = train["lexical"]
        keys = ("dim", "projection", "seed") + (("nonzeros",) if lexical["projection"] == "sparse" else ())
        return {"kind": cls.kind, "lexical": {k: lexical.get(k, DEFAULT_NONZEROS if k == "nonzeros" else None)
                                              for k in keys}}

    @classmethod
    def fit(cls, passages: Iterable[PassageLike], dim: int, projection: Projection = "gaussian", seed: int = 0,
            k1: float = 0.9, b: float = 0.4, nonzeros: int | None = None) -> "ProjectionLambda":
        """Count the corpus statistics of ``passages`` (the teacher's corpus) and set up the projection."""
        return cls(BM25Weights.fit((passage_text(p) for p in passages), k1, b), dim, projection, seed, nonzeros)

    @property
    def dim(self) -> int:
        return self._dim

    @cached_property
    def sparse_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """A sparse projection's (columns, signs) [V, nonzeros] (:func:`~spar.lexical.random_tables.sparse_rows`)."""
        assert self.nonzeros is not None, "a Gaussian projection has no sparse rows"
        return random_tables.sparse_rows(self.weights.vocab, self._dim, self.nonzeros, self.seed)

    @cached_property
    def matrix(self) -> np.ndarray | sp.csr_matrix:
        if self.nonzeros is None:
            return random_matrix(self.weights.vocab, self._dim, self.projection, self.seed)
        return sparse_matrix(self.sparse_rows, self._dim)

    def dense_matrix(self) -> np.ndarray:
        """R as a dense [V, dim] float32 array (the initial term embeddings of a ``static`` Λ)."""
        r = self.matrix
        return r.toarray().astype(np.float32) if isinstance(r, sp.csr_matrix) else r

    def term_table(self) -> np.ndarray:
        return self.dense_matrix()

    def published_table(self) -> tuple[np.ndarray | None, dict[str, Any] | None]:
        """Nothing stored: the seed and a checksum of the table (the Gaussian's dense table is held in memory)."""
        if self.nonzeros is None:
            table = self.dense_matrix()
            return table, random_tables.table_spec("gaussian", self._dim, self.seed, None, (table,))
        return None, random_tables.table_spec("sparse", self._dim, self.seed, self.nonzeros, self.sparse_rows)

    @classmethod
    def load_published(cls, query_dir: Path, document_dir: Path, entry: dict[str, Any],
                       device: str = "cpu") -> LexicalModel:
        """A published projection: the same projection again when its table is regenerated from the seed (the
        checksum checked), else (a model written with the whole table) the table as a static Λ."""
        bag = cls.published_bag(query_dir)
        if bag.table is None:
            return super().load_published(query_dir, document_dir, entry, device)
        spec = bag.table
        projection = entry.get("projection", spec["projection"])
        return cls(cls.published_weights(bag, entry), int(spec["dim"]), projection, int(spec["seed"]),
                   spec.get("nonzeros") if projection == "sparse" else None)

    def term_vectors(self, weights, matrix) -> np.ndarray | None:
        return project(matrix, self.matrix) if weights is self.weights else None

    def card_facts(self, train) -> dict[str, Any]:
        return self._card_facts(train, {"kind": self.kind, "training": "none (the teacher's BM25 weights times a "
                                                                     "seeded random matrix)"})

    def encode_query(self, texts: Iterable[str], batch_size: int = 4096) -> np.ndarray:
        return encode_in_batches(list(texts), lambda t: project(self.weights.query_matrix(t), self.matrix), self.dim,
                                 batch_size)

    def encode_passage(self, passages: Iterable[PassageLike], batch_size: int = 4096) -> np.ndarray:
        return encode_in_batches([self.weights.passage_text(p) for p in passages],
                                 lambda t: project(self.weights.passage_matrix(t), self.matrix), self.dim, batch_size)

    def with_statistics(self, passages: Iterable[PassageLike]) -> "ProjectionLambda":
        """Refit the BM25 statistics on ``texts``; the random rows of the carried terms are unchanged (Gaussian rows
        are drawn in vocabulary order and new terms are appended; sparse rows depend on the term alone)."""
        return ProjectionLambda(self.weights.refit(passages), self._dim, self.projection, self.seed,
                                self.nonzeros if self.projection == "sparse" else None)

    def config_dict(self) -> dict[str, Any]:
        extra = {"nonzeros": self.nonzeros} if self.projection == "sparse" else {}
        return {"projection": self.projection, "seed": self.seed, **extra, "teacher": self.weights.describe()}

    def save(self, directory: str | Path) -> None:
        self.weights.save(directory)
        self.write_config(directory)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "ProjectionLambda":
        config = read_lambda_config(directory)
        return cls(BM25Weights.load(directory), int(config["dim"]), config["projection"], int(config["seed"]),
                   config.get("nonzeros"))
