"""The teacher's term weights as sparse matrices: what the lexical Λ kinds densify and learn from.

:class:`BM25Weights` holds the BM25 teacher's statistics (vocabulary, document frequencies, number of passages,
average length, k1, b) fitted on the corpus with the teacher's analyzer (:mod:`spar.lexical.analysis`). It turns
passages into BM25 term weights and queries into analysed term counts, both ``scipy.sparse.csr_matrix`` [n, V], so
``queries @ passages.T`` is the teacher's BM25 score (Lucene's, up to its one-byte length quantisation)::

    w(t, p) = idf(t) · tf / (tf + k1 · (1 − b + b · |p| / avg|p|)),   idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))

Query terms absent from the corpus get no column: they never match, as in BM25.

Example::

    >>> from spar.lexical.terms import BM25Weights
    >>> weights = BM25Weights.fit(["salient phrases in dense retrieval", "sparse retrieval with BM25"])
    >>> weights.vocab
    ['bm25', 'dens', 'phrase', 'retriev', 'salient', 'spars']
    >>> scores = (weights.query_matrix(["sparse retrieval"]) @ weights.passage_matrix(
    ...     ["salient phrases in dense retrieval", "sparse retrieval with BM25"]).T).toarray()
    >>> bool(scores[0, 1] > scores[0, 0] > 0)
    True
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence, Union

import numpy as np
import scipy.sparse as sp

from spar.core.errors import ArtifactError
from spar.lexical.analysis import LuceneAnalyzer, bm25_weights, idf_weights

#: The passage fields the BM25 teacher indexes by default (``label.fields``).
DEFAULT_FIELDS = ("title", "text")
PassageLike = Union[tuple[str, str], str]

TERMS_FILE = "vocab.txt"
STATS_FILE = "term_statistics.json"
DF_FILE = "document_frequencies.npy"


@dataclass
class BM25Weights:
    """BM25 statistics of a corpus and the sparse passage/query matrices they give (see the module docstring)."""

    vocab: list[str]
    df: np.ndarray
    num_docs: int
    avg_length: float
    k1: float = 0.9
    b: float = 0.4
    analyzer: LuceneAnalyzer = field(default_factory=LuceneAnalyzer)
    #: Set by :meth:`refit`: the corpus statistics come from another corpus than the vocabulary's first
    #: ``carried_terms`` terms (the terms a Λ was trained with).
    carried_terms: int | None = None
    #: Which fields of a ``(title, text)`` passage make its text, joined by one space: the teacher's
    #: ``label.fields`` when the statistics were fitted (their one owner from then on).
    fields: tuple[str, ...] = DEFAULT_FIELDS

    def __post_init__(self) -> None:
        self.fields = tuple(self.fields)
        self.df = np.asarray(self.df, dtype=np.int64)
        self.index = {term: i for i, term in enumerate(self.vocab)}
        self.idf = idf_weights(self.df, self.num_docs).astype(np.float32)

    # -- fitting and persistence ----------------------------------------------------------------------------------
    def passage_text(self, passage: PassageLike) -> str:
        """A passage as the teacher indexed it: a string as is, a ``(title, text)`` pair as its :attr:`fields`
        joined by one space (empty ones skipped)."""
        if isinstance(passage, str):
            return passage
        from spar.data.passages import indexed_text

        parts = dict(zip(DEFAULT_FIELDS, passage))
        return indexed_text(parts[f] for f in self.fields)

    @classmethod
    def fit(cls, texts: Iterable[str], k1: float = 0.9, b: float = 0.4,
            analyzer: LuceneAnalyzer | None = None, fields: Sequence[str] = DEFAULT_FIELDS) -> "BM25Weights":
        """Count document frequencies and lengths of the corpus ``texts`` (the teacher's indexed contents, made of
        ``fields``)."""
        analyzer = analyzer or LuceneAnalyzer()
        df: Counter[str] = Counter()
        total_length = docs = 0
        for text in texts:
            terms = analyzer.analyze(text)
            df.update(set(terms))
            total_length += len(terms)
            docs += 1
        if docs == 0:
            raise ArtifactError("cannot fit BM25 statistics on an empty corpus")
        vocab = sorted(df)
        return cls(vocab, np.array([df[t] for t in vocab], dtype=np.int64), docs, total_length / docs, k1, b,
                   analyzer, fields=tuple(fields))

    def refit(self, passages: Iterable[PassageLike]) -> "BM25Weights":
        """These statistics refitted on another corpus (``passages``, e.g. the target corpus of a Λ trained
        elsewhere; read through :attr:`fields`).

        Document frequencies, number of passages and average length come from ``texts``; the vocabulary keeps
        this one's terms in their order (row ``i`` of a Λ's term table stays term ``i``) and appends the new
        corpus's unseen terms, sorted. k1, b and the analyzer are unchanged.

        Example::

            >>> from spar.lexical.terms import BM25Weights
            >>> wiki = BM25Weights.fit(["the moon orbits the earth", "the earth orbits the sun"])
            >>> target = wiki.refit(["vitamin C prevents scurvy", "the sun and vitamin D"])
            >>> target.vocab[:wiki.vocab_size] == wiki.vocab, target.vocab[wiki.vocab_size:]
            (True, ['c', 'd', 'prevent', 'scurvi', 'vitamin'])
            >>> int(target.df[target.index["sun"]]), int(target.df[target.index["moon"]]), target.num_docs
            (1, 0, 2)
        """
        fresh = BM25Weights.fit((self.passage_text(p) for p in passages), self.k1, self.b, self.analyzer)
        vocab = self.vocab + [t for t in fresh.vocab if t not in self.index]
        df = np.zeros(len(vocab), dtype=np.int64)
        position = {t: i for i, t in enumerate(vocab)}
        df[[position[t] for t in fresh.vocab]] = fresh.df
        return BM25Weights(vocab, df, fresh.num_docs, fresh.avg_length, self.k1, self.b, self.analyzer,
                           carried_terms=self.vocab_size, fields=self.fields)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def describe(self) -> dict:
        stats = {"weighting": "bm25", "k1": self.k1, "b": self.b, "num_docs": self.num_docs,
                 "avg_length": round(self.avg_length, 4), "vocab_size": self.vocab_size, **self.analyzer.config()}
        if self.carried_terms is not None:
            stats["carried_terms"] = self.carried_terms
        if self.fields != DEFAULT_FIELDS:  # recorded when not the default (files stay as they were)
            stats["fields"] = list(self.fields)
        return stats

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / TERMS_FILE).write_text("\n".join(self.vocab) + "\n", encoding="utf-8")
        np.save(d / DF_FILE, self.df, allow_pickle=False)
        (d / STATS_FILE).write_text(json.dumps(self.describe(), indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> "BM25Weights":
        d = Path(directory)
        for name in (TERMS_FILE, DF_FILE, STATS_FILE):
            if not (d / name).exists():
                raise ArtifactError(f"{d}: missing file '{name}' (not a lexical Λ directory)")
        stats = json.loads((d / STATS_FILE).read_text())
        vocab = (d / TERMS_FILE).read_text(encoding="utf-8").split("\n")[:-1]
        df = np.load(d / DF_FILE, allow_pickle=False)
        if len(vocab) != len(df) or len(vocab) != stats["vocab_size"]:
            raise ArtifactError(f"{d}: {TERMS_FILE} has {len(vocab)} terms, {DF_FILE} {len(df)}, "
                                f"{STATS_FILE} says {stats['vocab_size']}")
        analyzer = LuceneAnalyzer(stats.get("stemmer", "porter"), stats.get("stopwords", True))
        return cls(vocab, df, int(stats["num_docs"]), float(stats["avg_length"]), float(stats["k1"]),
                   float(stats["b"]), analyzer, stats.get("carried_terms"), tuple(stats.get("fields", DEFAULT_FIELDS)))

    # -- sparse matrices -----------------------------------------------------------------------------------------
    def term_counts(self, texts: Sequence[str]) -> tuple[sp.csr_matrix, np.ndarray]:
        """Counts of the known terms of each text [n, V], and each text's analysed length (all its terms)."""
        indptr, indices, data = [0], [], []
        lengths = np.zeros(len(texts), dtype=np.float32)
        index = self.index
        for i, text in enumerate(texts):
            terms = self.analyzer.analyze(text)
            lengths[i] = len(terms)
            counts = Counter(index[t] for t in terms if t in index)
            indices.extend(counts.keys())
            data.extend(counts.values())
            indptr.append(len(indices))
        matrix = sp.csr_matrix((np.asarray(data, dtype=np.float32), np.asarray(indices, dtype=np.int64),
                                np.asarray(indptr, dtype=np.int64)), shape=(len(texts), self.vocab_size))
        matrix.sort_indices()
        return matrix, lengths

    def query_matrix(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Analysed term counts of each query (BM25's query side)."""
        return self.term_counts(texts)[0]

    def passage_matrix(self, texts: Sequence[str]) -> sp.csr_matrix:
        """BM25 term weights of each passage (``texts`` as the teacher indexed them, e.g. title + " " + text)."""
        counts, lengths = self.term_counts(texts)
        row_length = np.repeat(lengths, np.diff(counts.indptr))
        counts.data = bm25_weights(counts.data, row_length, self.idf[counts.indices], self.avg_length, self.k1,
                                   self.b).astype(np.float32)
        return counts

