"""An exact in-memory BM25 teacher: Pyserini's rankings and scores, bit for bit, from numpy postings.

:class:`MemoryBM25` answers ``search(queries, k)`` exactly as :class:`spar.teacher.teachers.BM25Searcher` (Pyserini's
``LuceneSearcher.batch_search`` with ``set_bm25(k1, b)``) does on the teacher index built from the same
``passages.arrow`` and ``label.fields``: the same hits in the same order with the same float scores, so label
shards are byte-identical between ``label.engine: lucene`` and ``memory``. What that takes, read from the Anserini
1.7.1 / Lucene 9.9.1 classes Pyserini 1.6 bundles:

- **Analysis**: Anserini's ``IndexCollection.DEFAULT_ANALYZER`` (what both indexing and ``SimpleSearcher`` use),
  called through the JVM on batches of texts joined by a separator token (:class:`LuceneTokens`). spar's
  pure-Python analyzer (:mod:`spar.lexical.analysis`) agrees on > 99.9 % of terms, which is not byte-identity.
- **Query**: ``BagOfWordsQueryGenerator``: one ``TermQuery`` per distinct term, boosted by its count.
- **Scoring** (``BM25Similarity``): the document length is kept as a one-byte norm (``SmallFloat.intToByte4``,
  decoded with ``byte4ToInt``); ``idf = (float) ln(1 + (N − df + 0.5) / (df + 0.5))`` with N the documents that have
  a term, ``avgdl = (float) (sumTotalTermFreq / N)``, ``cache[norm] = 1 / (k1 · ((1 − b) + b · len[norm] / avgdl))``
  and a term scores ``weight − weight / (1 + tf · cache[norm])`` with ``weight = boost · idf``, all in float32; a
  document's score is the float32 of the double sum of its terms' scores (Lucene sums clauses in a double).
- **Order**: score descending, ties broken by the external passage id as a string (``SimpleSearcher`` sorts by
  score, then the ``id`` doc value), then Anserini's ``ScoreTiesAdjusterReranker`` rewrites the returned scores
  (rounded to 4 decimals in double, minus ``1e-6 · n`` for the n-th of a run of ties, in float32).

Each ingredient matters: without any one of them the top-50 lists or their scores differ on real queries.

The postings (term -> passages, with each posting's score at boost 1 and its ``1 + tf · cache[norm]``) are built
in memory from ``passages.arrow`` at start (about 20 bytes per posting, plus a JVM for the analyzer). A query is
one ``numpy.bincount`` over its terms' postings (a scatter-add in C, in double, with the GIL released, so
``threads`` query batches run side by side), then the top k is read from the dense scores block by block (the k-th
largest block maximum bounds the k-th score from below). Dynamic pruning was measured and left out: a term-at-a-time
MaxScore in numpy skipped 75 % of the postings of enwiki-2015 sentence queries but scored 3x slower than the one
bincount (its candidates, ~48k per query, must be looked up in the skipped lists); skipping only the most common
terms (bounds summing to under 5 % of the query's) gained 8 % and lost up to 30 % with wider tails.

Written here rather than taken from a library: bm25s (``method="lucene"``) has neither the one-byte norms, the tie
order nor the score adjustment, and differed on 8 of 44,373 SciFact top-50 lists in a measurement reported in issue
#28; no maintained package reproduces Lucene's float32 arithmetic.

Example (skipped in the doctest run: it starts the JVM)::

    >>> from spar.teacher.bm25_memory import MemoryBM25
    >>> teacher = MemoryBM25.from_passages("runs/x/queries/passages.arrow", fields=["title", "text"])  # doctest: +SKIP
    >>> teacher.search([("q1", "salient phrase retrieval")], k=3)                                    # doctest: +SKIP
    {'q1': [('4983', 7.3101), ('1201', 6.9044), ('77', 6.5213)]}
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spar.core.errors import ArtifactError, ConfigError
from spar.data.passages import PassagesTable, indexed_text
from spar.teacher.teachers import LuceneBM25

log = logging.getLogger(__name__)

Hits = dict[str, list[tuple[str, float]]]

# ----------------------------------------------------------------------------------------------------------------
# Lucene's one-byte length norms (org.apache.lucene.util.SmallFloat)
# ----------------------------------------------------------------------------------------------------------------

#: ``SmallFloat``: byte values below this encode the length itself; above, a 4-bit float of the rest.
_NUM_FREE_VALUES = 24  # 255 - longToInt4(Integer.MAX_VALUE)


def _long_to_int4(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.int64)
    bits = np.frexp(values.astype(np.float64))[1].astype(np.int64)  # bit length (exact below 2^53)
    shift = np.maximum(bits - 4, 0)
    normal = ((values >> shift) & 0x07) | ((shift + 1) << 3)
    return np.where(bits < 4, values, normal)


def int_to_byte4(lengths: np.ndarray) -> np.ndarray:
    """``SmallFloat.intToByte4``: a document length as Lucene's one-byte norm (exact below 24, then 4 bits).

    >>> int_to_byte4(np.array([0, 5, 23, 24, 100, 1000])).tolist()
    [0, 5, 23, 24, 57, 87]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    encoded = np.where(lengths < _NUM_FREE_VALUES, lengths,
                       _NUM_FREE_VALUES + _long_to_int4(np.maximum(lengths - _NUM_FREE_VALUES, 0)))
    return encoded.astype(np.uint8)


def byte4_to_int(norms: np.ndarray) -> np.ndarray:
    """``SmallFloat.byte4ToInt``: the length a one-byte norm stands for (the smallest length that encodes to it).

    >>> byte4_to_int(np.array([0, 5, 23, 24, 57, 87])).tolist()
    [0, 5, 23, 24, 96, 984]
    """
    i = np.asarray(norms, dtype=np.int64)
    rest = np.maximum(i - _NUM_FREE_VALUES, 0)
    bits, shift = rest & 0x07, (rest >> 3) - 1
    decoded = np.where(shift < 0, bits, (bits | 0x08) << np.maximum(shift, 0))
    return np.where(i < _NUM_FREE_VALUES, i, _NUM_FREE_VALUES + decoded)


#: ``BM25Similarity.LENGTH_TABLE``: the length of each norm byte, as float.
LENGTH_TABLE = byte4_to_int(np.arange(256)).astype(np.float32)


def norm_cache(k1: float, b: float, avgdl: np.float32) -> np.ndarray:
    """``BM25Similarity``'s per-norm ``1 / (k1 · ((1 − b) + b · length / avgdl))``, evaluated in float32 in
    Lucene's order of operations."""
    k1f, bf, one = np.float32(k1), np.float32(b), np.float32(1)
    return (one / (k1f * ((one - bf) + bf * LENGTH_TABLE / np.float32(avgdl)))).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# Analysis through Pyserini's JVM
# ----------------------------------------------------------------------------------------------------------------

#: Joins the texts of one analyzer call. Newlines always break words (UAX #29 WB3a/b) and stop Extend/Format
#: characters from attaching across texts, so each text is tokenised as if alone; the marker itself comes out of
#: the analyzer unchanged (checked at start) and a batch where it comes out more often than it was put in (a text
#: contains it) is analysed text by text.
_MARKER = "qqsparsepqq"


class LuceneTokens:
    """The terms Anserini indexes and searches with (``IndexCollection.DEFAULT_ANALYZER``), for many texts per JVM
    call. Call from one thread at a time (pyjnius)."""

    def __init__(self, heap: str = "4g", batch_chars: int = 1 << 20):
        from spar.core.java import pyserini_module

        pyserini_module("pyserini.analysis", heap)  # starts the JVM with the Anserini jar
        from jnius import autoclass

        self._analyze = autoclass("io.anserini.analysis.AnalyzerUtils").analyze
        self._analyzer = autoclass("io.anserini.index.IndexCollection").DEFAULT_ANALYZER
        self.batch_chars = batch_chars
        if self._split(_MARKER).to_pylist() != [_MARKER]:
            raise RuntimeError(f"the analyzer changes the separator token {_MARKER!r}")

    def analyze(self, texts: Sequence[str]) -> list[list[str]]:
        """The terms of each text, in order."""
        tokens, lengths = self.analyze_flat(texts)
        flat = tokens.to_pylist()
        ends = np.cumsum(lengths).tolist()
        return [flat[end - n:end] for end, n in zip(ends, lengths.tolist())]

    def analyze_flat(self, texts: Sequence[str]) -> tuple[pa.Array, np.ndarray]:
        """The terms of all texts in one string array, and how many belong to each text."""
        tokens, lengths = [], []
        start = 0
        while start < len(texts):
            end, size = start, 0
            while end < len(texts) and (end == start or size + len(texts[end]) < self.batch_chars):
                size += len(texts[end]) + len(_MARKER) + 2
                end += 1
            batch_tokens, batch_lengths = self._analyze_joined(texts[start:end])
            tokens.append(batch_tokens)
            lengths.append(batch_lengths)
            start = end
        if not tokens:
            return pa.array([], pa.string()), np.zeros(0, dtype=np.int64)
        return pa.concat_arrays(tokens), np.concatenate(lengths)

    def _split(self, text: str) -> pa.Array:
        listed = self._analyze(self._analyzer, text).toString()  # "[t1, t2, ...]": one JNI string, no list proxy
        if len(listed) <= 2:
            return pa.array([], pa.string())
        return pc.split_pattern(pa.array([listed[1:-1]]), ", ").flatten()

    def _analyze_joined(self, texts: Sequence[str]) -> tuple[pa.Array, np.ndarray]:
        tokens = self._split(f"\n{_MARKER}\n".join(texts))
        marker = pc.equal(tokens, _MARKER).to_numpy(zero_copy_only=False)
        at = np.flatnonzero(marker)
        if len(at) != len(texts) - 1:  # a text holds the marker itself: one call per text
            parts = [self._split(text) for text in texts]
            return pa.concat_arrays(parts), np.array([len(p) for p in parts], dtype=np.int64)
        bounds = np.concatenate([[-1], at, [len(tokens)]])
        return tokens.filter(pa.array(~marker)), np.diff(bounds) - 1


# ----------------------------------------------------------------------------------------------------------------
# The postings and the searcher
# ----------------------------------------------------------------------------------------------------------------


def _java_idf(df: np.ndarray, doc_count: int) -> np.ndarray:
    """``BM25Similarity.idf``: ``(float) Math.log(1 + (N - df + 0.5) / (df + 0.5))``, with the JVM's own
    ``Math.log`` (called once per distinct document frequency)."""
    from jnius import autoclass

    log_ = autoclass("java.lang.Math").log
    values, inverse = np.unique(df, return_inverse=True)
    idf = np.array([log_(1.0 + (doc_count - int(v) + 0.5) / (int(v) + 0.5)) for v in values], dtype=np.float64)
    return idf.astype(np.float32)[inverse]


def scores_as_anserini(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``ScoreTiesAdjusterReranker`` on ranked float32 score rows ``[queries, k]`` (``valid`` masks real hits):
    each score rounded to 4 decimals in double, then within a run of ties (a score within 1e-4 of the previous,
    already adjusted one) lowered by 1e-6 times its position in the run, in float32.

    >>> ranked = np.array([[23.439316, 22.087432, 22.087432, 21.602508]], np.float32)  # Anserini's own example
    >>> out = scores_as_anserini(ranked, np.ones((1, 4), bool))[0]
    >>> [bool(out[i] == np.float32(v)) for i, v in enumerate((23.4393, 22.0874, 22.0874 - 1e-6, 21.6025))]
    [True, True, True, True]
    """
    x = scores.astype(np.float64) * 1e4
    whole = np.floor(x)
    rounded = ((whole + (x - whole >= 0.5)) / 1e4).astype(np.float32)  # Math.round: half up
    out = rounded.copy()
    dup = np.zeros(len(out), dtype=np.int64)
    step, gap = np.float32(1e-6), np.float32(1e-4)
    for i in range(1, out.shape[1]):
        tied = valid[:, i] & ~((out[:, i - 1] - out[:, i]) > gap)
        dup = np.where(tied, dup + 1, 0)
        out[:, i] = np.where(tied, out[:, i] - step * dup.astype(np.float32), out[:, i])
    return out


#: Passages per block when looking for the top k in a dense score vector: the k-th largest block maximum bounds
#: the k-th score from below, so only blocks reaching it are read.
_BLOCK = 1024
#: A score whose float32 rounding may equal that of ``kth`` is at least ``kth * (1 - _MARGIN)`` (float32 rounds
#: within 6e-8 relatively).
_MARGIN = 1e-6


def _candidates(acc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows (and their double sums) of a dense score vector that may rank in the top ``k`` once scores are rounded
    to float32: every matching row when fewer than ``k`` match, else those within the float32 tie margin of the
    k-th largest sum."""
    n = len(acc)
    blocks = n // _BLOCK
    if blocks > 2 * k:
        maxima = acc[:blocks * _BLOCK].reshape(blocks, _BLOCK).max(axis=1)
        bound = np.partition(maxima, blocks - k)[blocks - k]  # k blocks reach it: the k-th sum is at least this
        if bound > 0:
            floor = bound * (1 - _MARGIN)
            hit = np.flatnonzero(maxima >= floor)
            rows = np.concatenate([(hit[:, None] * _BLOCK + np.arange(_BLOCK)).ravel(),
                                   np.arange(blocks * _BLOCK, n)])
            rows = rows[acc[rows] >= floor]
        else:
            rows = np.flatnonzero(acc)
    else:
        rows = np.flatnonzero(acc)
    sums = acc[rows]
    if len(rows) > k:
        kth = np.partition(sums, len(sums) - k)[len(sums) - k]
        keep = sums >= kth * (1 - _MARGIN)
        rows, sums = rows[keep], sums[keep]
    return rows, sums


def _analysed_postings(table: PassagesTable, fields: Sequence[str], tokens: LuceneTokens, batch_rows: int,
                       progress: bool) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Analyse every passage: (vocabulary, passage and term frequency of each posting sorted by term then passage,
    term offsets ``indptr``, each passage's length in terms)."""
    from spar.core.console import progress_bar

    vocab: dict[str, int] = {}
    doc_parts, term_parts, tf_parts, length_parts = [], [], [], []
    base = 0
    bar = progress_bar(total=len(table), desc="analysing passages", unit=" passages", enabled=progress)
    for batch in table.iter_columns(columns=list(fields), batch_rows=batch_rows):
        contents = [indexed_text(values) for values in zip(*(batch[f] for f in fields))]
        flat, lengths = tokens.analyze_flat(contents)
        encoded = pc.dictionary_encode(flat)
        local = np.fromiter((vocab.setdefault(t, len(vocab)) for t in encoded.dictionary.to_pylist()), np.int64)
        term = local[encoded.indices.to_numpy(zero_copy_only=False)] if len(flat) else np.zeros(0, np.int64)
        doc = np.repeat(np.arange(len(contents), dtype=np.int64), lengths)
        keys, counts = np.unique((doc << 32) | term, return_counts=True)  # (passage, term) pairs, sorted
        doc_parts.append(((keys >> 32) + base).astype(np.int32))
        term_parts.append((keys & 0xFFFFFFFF).astype(np.int32))
        tf_parts.append(counts.astype(np.int32))
        length_parts.append(lengths)
        base += len(contents)
        bar.update(len(contents))
    bar.close()

    def joined(parts: list[np.ndarray], dtype) -> np.ndarray:
        out = np.concatenate(parts) if parts else np.zeros(0, dtype)
        parts.clear()
        return out

    terms = joined(term_parts, np.int32)
    order = np.argsort(terms, kind="stable")  # by term, then passage (batches come in passage order)
    docs, tfs = joined(doc_parts, np.int32)[order], joined(tf_parts, np.int32)[order]
    df = np.bincount(terms, minlength=len(vocab))
    del order, terms
    indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    return vocab, docs, tfs, indptr, joined(length_parts, np.int64)


class MemoryBM25:
    """Lucene's BM25 over in-memory postings (see the module docstring); ``search`` has :class:`BM25Searcher`'s
    contract. Build it with :meth:`from_passages`."""

    def __init__(self, ids: list[str], vocab: dict[str, int], indptr: np.ndarray, docs: np.ndarray,
                 tfs: np.ndarray, lengths: np.ndarray, k1: float, b: float, tokens: LuceneTokens, threads: int = 2,
                 stats: dict[str, Any] | None = None):
        self.ids, self.vocab, self.indptr, self.tokens = ids, vocab, indptr, tokens
        self.threads = max(1, int(threads))
        self.num_docs = len(ids)
        doc_count = int((lengths > 0).sum())  # Lucene's docCount: passages with at least one term
        if doc_count == 0:
            raise ArtifactError("no passage has a term the analyzer keeps: nothing to search")
        total_terms = int(lengths.sum())
        avgdl = np.float32(total_terms / doc_count)  # (float) (sumTotalTermFreq / (double) docCount)
        norms = int_to_byte4(lengths)
        df = np.diff(indptr)
        #: Per term: ``(float) ln(1 + (N − df + 0.5) / (df + 0.5))``.
        self.idf = _java_idf(df, doc_count)
        #: Per posting: ``1 + tf · cache[norm]`` in float32 (what a boosted term's score needs).
        self.xs = (np.float32(1) + tfs.astype(np.float32) * norm_cache(k1, b, avgdl)[norms[docs]]).astype(np.float32)
        weight = np.repeat(self.idf, df)
        #: Per posting: its score when its term occurs once in the query (weight = idf), widened to float64 for
        #: bincount's double sums.
        self.unit = (weight - weight / self.xs).astype(np.float64)
        del weight
        self.docs = docs.astype(np.intp)  # bincount's index type: no conversion per query
        order = sorted(range(len(ids)), key=ids.__getitem__)
        #: Each passage's position among the ids sorted as strings (Lucene's tie order).
        self.id_rank = np.empty(len(ids), dtype=np.int64)
        self.id_rank[order] = np.arange(len(ids))
        self.stats = {"documents": len(ids), "non_empty_documents": doc_count, "total_terms": total_terms,
                      "unique_terms": len(vocab), "postings": int(len(docs)), **(stats or {})}
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="bm25") if self.threads > 1 else None
        self.source: Path | None = None

    @classmethod
    def from_section(cls, passages_arrow: str | Path, section: Any, index_dir: str | Path | None = None,
                     progress: bool = False) -> "MemoryBM25":
        """The teacher ``label`` (a :class:`~spar.core.config.LabelSection`) describes, built from ``passages_arrow``;
        checked against the Lucene teacher index when ``index_dir`` is given. Self-contained: any process can
        build one from these two arguments."""
        teacher = cls.from_passages(passages_arrow, section.fields, section.k1, section.b, section.threads,
                                    section.java_heap, progress=progress)
        if index_dir is not None:
            teacher.verify(index_dir)
        return teacher

    @classmethod
    def from_passages(cls, passages_arrow: str | Path, fields: Sequence[str] = ("title", "text"), k1: float = 0.9,
                      b: float = 0.4, threads: int = 2, heap: str = "4g", batch_rows: int = 8192,
                      progress: bool = False) -> "MemoryBM25":
        """Analyse every passage of ``passages_arrow`` (``fields`` joined by a space, as the teacher index holds
        them) and build the postings with Lucene's BM25 statistics."""
        started = time.perf_counter()
        table = PassagesTable(passages_arrow)
        tokens = LuceneTokens(heap)
        vocab, docs, tfs, indptr, lengths = _analysed_postings(table, fields, tokens, batch_rows, progress)
        teacher = cls(table.ids, vocab, indptr, docs, tfs, lengths, k1, b, tokens, threads)
        teacher.stats["start_seconds"] = round(time.perf_counter() - started, 2)
        teacher.source = Path(passages_arrow)
        return teacher

    def nbytes(self) -> int:
        """Bytes held by the arrays (postings, ranks; not the vocabulary dict or the id strings)."""
        return sum(a.nbytes for a in (self.idf, self.indptr, self.docs, self.xs, self.unit, self.id_rank))

    def verify(self, index_dir: str | Path) -> None:
        """Check these postings against the Lucene teacher index's statistics (passages, passages with a term,
        terms, distinct terms): a mismatch means another corpus or another analysis, and fails in one line."""
        import re

        from jnius import autoclass

        utils = autoclass("io.anserini.index.IndexReaderUtils")
        reader = utils.getReader(str(index_dir))
        try:
            listed = utils.getIndexStats(reader).toString()  # "{total_terms=..., documents=..., ...}"
        finally:
            reader.close()
        lucene = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", listed)}
        for key in ("documents", "non_empty_documents", "total_terms", "unique_terms"):
            if lucene.get(key) != self.stats[key]:
                source = self.source or "the passages"
                raise ArtifactError(
                    f"{source} does not match the teacher index {index_dir}: {key} = {self.stats[key]:,} here, "
                    f"{lucene.get(key)} in Lucene (rebuild the index: `spar label --force`)")

    # -- searching -------------------------------------------------------------------------------------------------
    def _query_terms(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Distinct known terms of one analysed query and their counts (``BagOfWordsQueryGenerator``'s boosts)."""
        counts: dict[int, int] = {}
        vocab = self.vocab
        for term in terms:
            t = vocab.get(term)
            if t is not None:
                counts[t] = counts.get(t, 0) + 1
        return np.fromiter(counts.keys(), np.int64, len(counts)), np.fromiter(counts.values(), np.int64, len(counts))

    def _top(self, tids: np.ndarray, boosts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and float32 scores of one query's top ``k`` (score descending, then passage id)."""
        if len(tids) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        indptr, docs = self.indptr, self.docs
        spans = [(indptr[t], indptr[t + 1]) for t in tids.tolist()]
        rows = np.concatenate([docs[s:e] for s, e in spans])
        parts = []
        for (s, e), t, boost in zip(spans, tids.tolist(), boosts.tolist()):
            if boost == 1:
                parts.append(self.unit[s:e])
            else:
                w = np.float32(boost) * self.idf[t]
                parts.append((w - w / self.xs[s:e]).astype(np.float64))
        # One scatter-add in C (GIL released): each passage's double sum of its float32 term scores.
        acc = np.bincount(rows, weights=np.concatenate(parts), minlength=self.num_docs)
        return self._ranked(*_candidates(acc, k), k)

    def _ranked(self, rows: np.ndarray, sums: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` of candidate ``rows`` by (float32 score descending, passage id)."""
        scores = sums.astype(np.float32)
        if len(rows) > k:
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            keep = scores >= kth
            rows, scores = rows[keep], scores[keep]
        order = np.lexsort((self.id_rank[rows], -scores))[:k]
        return rows[order], scores[order]

    def _search_many(self, queries: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [self._top(tids, boosts, k) for tids, boosts in queries]

    def search(self, queries: Sequence[tuple[str, str]], k: int) -> Hits:
        """Top-``k`` hits of each (query id, text), as Pyserini's ``batch_search`` returns them."""
        if not queries:
            return {}
        analysed = [self._query_terms(terms) for terms in self.tokens.analyze([text for _, text in queries])]
        if self._pool is None or len(analysed) < 2 * self.threads:
            results = self._search_many(analysed, k)
        else:
            step = -(-len(analysed) // self.threads)
            chunks = [analysed[i:i + step] for i in range(0, len(analysed), step)]
            results = [r for part in self._pool.map(lambda c: self._search_many(c, k), chunks) for r in part]
        kk = max((len(rows) for rows, _ in results), default=0)
        scores = np.zeros((len(results), kk), dtype=np.float32)
        valid = np.zeros((len(results), kk), dtype=bool)
        for i, (_, s) in enumerate(results):
            scores[i, :len(s)] = s
            valid[i, :len(s)] = True
        adjusted = scores_as_anserini(scores, valid).tolist() if kk else [[] for _ in results]
        ids = self.ids
        return {qid: [(ids[r], adjusted[i][j]) for j, r in enumerate(rows.tolist())]
                for i, ((qid, _), (rows, _)) in enumerate(zip(queries, results))}


# ----------------------------------------------------------------------------------------------------------------
# The registered teacher, and when ``label.engine: auto`` picks it
# ----------------------------------------------------------------------------------------------------------------

#: ``auto`` runs the memory engine up to this many passages: its lead over Lucene shrinks as the corpus grows (9.1x
#: on SciFact's 5k passages, 2.3x at 100k, 1.3x at 663k; bench/README.md), so it stays below where the trend
#: reaches 1x (about 1.7M) ...
AUTO_MAX_PASSAGES = 1_000_000
#: ... while its estimated peak memory stays under this ...
AUTO_MAX_BYTES = 4 << 30
#: ... and when there are enough queries to pay for its start-up (analysing every passage: 69 s at 663k passages,
#: worth about 33k queries of its lead there, 4.3k at 100k): at least this many queries per passage, plus
#: :data:`AUTO_MIN_QUERIES` (1.6x the measured break-even at 663k, 2x at 100k).
AUTO_QUERIES_PER_PASSAGE = 0.08
AUTO_MIN_QUERIES = 1000
#: Characters of indexed text per posting: 11.3–15.2 measured on SciFact and Wikipedia; 10 errs on the high side.
CHARS_PER_POSTING = 10
#: Peak RSS of ``spar label`` with the memory engine: a base (interpreter, JVM, Arrow) and bytes per posting, fitted
#: on the measured peaks (0.4 GB at 0.5M postings, 1.2 GB at 5.5M, 2.7 GB at 36.6M) so that the estimate errs high.
BASE_BYTES = 1 << 30
BYTES_PER_POSTING = 48


def estimate_bytes(passages_arrow: str | Path, fields: Sequence[str] = ("title", "text")) -> int:
    """The memory engine's estimated peak memory for ``passages_arrow``, from its characters (no analysis)."""
    table = PassagesTable(passages_arrow).table
    chars = sum(int(pc.sum(pc.utf8_length(table.column(f))).as_py() or 0) for f in fields)
    return BASE_BYTES + chars // CHARS_PER_POSTING * BYTES_PER_POSTING


class MemoryBM25Teacher(LuceneBM25):
    """``label.teacher: bm25`` on ``label.engine: memory``: the Lucene teacher's index and settings, searched by
    :class:`MemoryBM25` (built from the index's ``passages.arrow`` and checked against the index)."""

    engine = "memory"

    def open(self, index_dir, passages_arrow=None, threads=None, progress=False) -> MemoryBM25:
        if passages_arrow is None:
            raise ConfigError("label.engine=memory builds the teacher from passages.arrow: pass its path")
        section = self.section.model_copy(update={"threads": threads or self.section.threads})
        return MemoryBM25.from_section(passages_arrow, section, index_dir, progress=progress)

    @classmethod
    def suits(cls, section: Any, passages_arrow: str | Path, queries: int | None) -> tuple[bool, str]:
        """Memory where it pays and fits: up to :data:`AUTO_MAX_PASSAGES` passages, an estimated peak under
        :data:`AUTO_MAX_BYTES`, and enough queries to pay for its start-up."""
        passages = len(PassagesTable(passages_arrow))
        if passages > AUTO_MAX_PASSAGES:
            return False, f"auto: {passages:,} passages > {AUTO_MAX_PASSAGES:,}"
        needed = estimate_bytes(passages_arrow, section.fields)
        if needed > AUTO_MAX_BYTES:
            return False, f"auto: ~{needed / 2**30:.1f} GiB estimated > {AUTO_MAX_BYTES / 2**30:.0f} GiB"
        enough = int(passages * AUTO_QUERIES_PER_PASSAGE) + AUTO_MIN_QUERIES
        if queries is not None and queries < enough:
            return False, f"auto: {queries:,} queries < {enough:,}, too few to pay for the in-memory start-up"
        return True, f"auto: {passages:,} passages, ~{needed / 2**30:.1f} GiB estimated"
