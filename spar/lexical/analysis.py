"""The teacher's Lucene analyzer and BM25 term weighting in pure Python, so lexical Λ kinds encode without a JVM.

Pyserini's default analyzer (Anserini's ``DefaultEnglishAnalyzer``: Lucene's ``StandardTokenizer``, the English
possessive filter, lower-casing, Lucene's English stop words, Porter stemming) is what the BM25 teacher indexes and
searches with. :class:`LuceneAnalyzer` reproduces it: a regular expression that follows the word-boundary rules of
Unicode UAX #29 that matter for English text (letters and digits join; ``'``, ``.`` and ``:`` join letters, ``.``
and ``,`` join digits, hyphens and other punctuation split), the same stop words and the Porter stemmer as Martin
Porter's reference implementation has it (NLTK's ``MARTIN_EXTENSIONS`` mode; Lucene's ``PorterStemFilter`` ports the
same code, which departs from the published algorithm in two step-2 rules; Snowball's "porter" follows the paper and
differs on words such as *technology*). ``tests/test_lexical.py`` checks the terms against Pyserini's analyzer on real
text.

:func:`bm25_weights` is BM25's document side (Lucene's formula, without the constant ``k1 + 1`` factor).

This module imports nothing from ``spar``: a published model ships it as ``spar_analysis.py`` beside
``spar_modules.py`` (see :mod:`spar.lexical.st_modules`).

Example::

    >>> from spar.lexical.analysis import LuceneAnalyzer
    >>> LuceneAnalyzer().analyze("The runner's shoes were running at 3.5 km²/h; technology")
    ['runner', 'shoe', 'were', 'run', '3.5', 'km', 'h', 'technolog']
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import numpy as np

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``, which Anserini's default analyzer removes.
ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split()
)

# Letters/digits (``[^\W_]``, Unicode-aware) joined by the UAX #29 "mid" characters that keep a word whole:
# between letters ' ’ . : (don't, U.S.A, e.g), between digits . , ; (3.5, 1,000). Underscores join (ExtendNumLet).
_TOKEN = re.compile(
    r"[^\W_]+(?:_+[^\W_]+)*"
    r"(?:(?:(?<=[^\W\d_])['’.:](?=[^\W\d_])|(?<=\d)[.,;'](?=\d))[^\W_]+(?:_+[^\W_]+)*)*"
)
#: Superscript/fraction digits (Unicode "No") break words in UAX #29 but are word characters for Python's ``re``.
_OTHER_NUMBERS = re.compile("[\u00b2\u00b3\u00b9\u00bc-\u00be\u2070-\u209f\u2150-\u218f\u2460-\u24ff\u2776-\u2793]")
#: Lucene's StandardTokenizer drops tokens longer than this (``maxTokenLength`` 255).
MAX_TOKEN_LENGTH = 255


class LuceneAnalyzer:
    """Tokenise, drop possessives, lower-case, remove English stop words and Porter-stem, as Pyserini does.

    Args:
        stemmer: ``"porter"`` (Pyserini's default) or ``"none"``.
        stopwords: remove Lucene's English stop words (Pyserini's default).
    """

    def __init__(self, stemmer: str = "porter", stopwords: bool = True):
        if stemmer not in ("porter", "none"):
            raise ValueError(f"unknown stemmer {stemmer!r}: use 'porter' or 'none'")
        self.stemmer, self.stopwords = stemmer, stopwords

    def config(self) -> dict:
        return {"analyzer": "lucene-default-english", "stemmer": self.stemmer, "stopwords": self.stopwords}

    def analyze(self, text: str) -> list[str]:
        """The terms of ``text`` in order (repeated terms repeat)."""
        terms = []
        for token in _TOKEN.findall(_OTHER_NUMBERS.sub(" ", text)):
            if len(token) > MAX_TOKEN_LENGTH:
                continue
            term = self._term(token)
            if term:
                terms.append(term)
        return terms

    def _term(self, token: str) -> str:
        return _normalize(token, self.stopwords, self.stemmer)



@lru_cache(maxsize=1)
def _porter():
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)


@lru_cache(maxsize=1 << 20)
def _normalize(token: str, stopwords: bool, stemmer: str) -> str:
    """One token's term ('' when it is dropped); cached because corpora repeat words."""
    if token[-2:] in ("'s", "’s", "'S", "’S"):  # EnglishPossessiveFilter runs before lower-casing
        token = token[:-2]
    term = token.lower()
    if not term or (stopwords and term in ENGLISH_STOP_WORDS):
        return ""
    if stemmer == "porter":
        term = _porter().stem(term, to_lowercase=False)
    return unicodedata.normalize("NFC", term)


def bm25_weights(tf: np.ndarray, doc_length: np.ndarray, idf: np.ndarray, avg_length: float, k1: float,
                 b: float) -> np.ndarray:
    """BM25 weight of each (term, passage) entry: ``idf · tf / (tf + k1 · (1 − b + b · |p| / avg|p|))``.

    >>> float(bm25_weights(np.array([2.0]), np.array([10.0]), np.array([1.5]), 10.0, 0.9, 0.4)[0])
    1.0344827586206897
    """
    norm = k1 * (1.0 - b + b * np.asarray(doc_length, dtype=np.float64) / avg_length)
    tf = np.asarray(tf, dtype=np.float64)
    return np.asarray(idf, dtype=np.float64) * tf / (tf + norm)


def idf_weights(df: np.ndarray, num_docs: int) -> np.ndarray:
    """Lucene's BM25 idf: ``ln(1 + (N − df + 0.5) / (df + 0.5))``."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((num_docs - df + 0.5) / (df + 0.5))
