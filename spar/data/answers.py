"""Reference answers of open-domain QA questions and DPR's answer matching (``has_answer``).

The one owner of reading answers files and of judging whether a passage holds an answer: question sets
(:mod:`spar.data.question_sets`) judge with it, preflight checks answers files with it, and Acc@k
(:func:`spar.evaluate.metrics.answer_accuracy`) counts with it.

Example::

    >>> from spar.data.answers import has_answer
    >>> has_answer(["Vitamin C"], "Scurvy is caused by a lack of vitamin C."), has_answer(["zinc"], "vitamin C")
    (True, False)
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
import warnings
from pathlib import Path
from typing import Any, Iterable, Literal

from spar.core.errors import BadRecordError


def has_answer(answers: Iterable[str], text: str, match: Literal["string", "regex"] = "string") -> bool:
    """Whether a passage contains one of the answers: Pyserini's ``has_answers`` (DPR's code), so Acc@k is
    comparable with DPR's and the SPAR paper's figures.

    ``string``: the answer's DPR ``SimpleTokenizer`` tokens (NFD text, lower-cased, punctuation kept as tokens,
    accents kept as combining marks) occur contiguously in the passage's. ``regex``: an answer is a regular
    expression (CuratedTREC) searched case-insensitively; an invalid pattern never matches.

    String mode is Pyserini's comparison on tokens cached per text: Acc@k judges the same passages again and again
    (every system's top 100 of every question), and tokenizing them (a regular expression over each passage, in
    Python) was nearly all of an evaluation's time over tens of thousands of questions.
    """
    if match not in ("string", "regex"):
        raise ValueError(f"match must be 'string' or 'regex', not {match!r}")
    if match == "regex":
        from pyserini.eval.evaluate_dpr_retrieval import has_answers

        with warnings.catch_warnings():  # e.g. "Possible nested set" from re, once per new pattern: not the user's
            warnings.simplefilter("ignore", FutureWarning)
            return bool(has_answers(text, list(answers), _dpr_tokenizer(), regex=True))
    tokens, vocabulary = _dpr_words(text)
    for answer in answers:
        wanted, needed = _dpr_words(answer)
        if not wanted:  # Pyserini's loop finds the empty sequence in any text
            return True
        if not needed <= vocabulary:  # most answers miss most passages: no scan
            continue
        n, first, i = len(wanted), wanted[0], tokens.index(wanted[0])
        while i <= len(tokens) - n:
            if tokens[i:i + n] == wanted:
                return True
            try:
                i = tokens.index(first, i + 1)
            except ValueError:
                break
    return False


def answer_problem(answer: str, match: str = "string") -> str | None:
    """Why ``answer`` could never be matched in ``match`` mode, or None: in ``regex`` mode, a pattern that does not
    compile as :func:`has_answer` compiles it (NFD, case-insensitive), which would silently never match (#37).

    >>> answer_problem("(unclosed", "regex")
    "invalid regex answer: '(unclosed' (missing ), unterminated subpattern at position 0)"
    """
    if match != "regex":
        return None
    try:
        with warnings.catch_warnings():  # e.g. "Possible nested set": a valid pattern, not the reader's business
            warnings.simplefilter("ignore")
            re.compile(unicodedata.normalize("NFD", answer), flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except Exception as exc:  # re.error, and OverflowError/RecursionError for absurd patterns
        return f"invalid regex answer: {answer!r} ({exc})"
    return None


@functools.lru_cache(maxsize=1 << 16)
def _dpr_words(text: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """DPR's lower-cased tokens of ``text`` after NFD normalisation (what Pyserini's ``has_answers`` compares), and
    their set."""
    import unicodedata

    words = tuple(_dpr_tokenizer().tokenize(unicodedata.normalize("NFD", text)).words(uncased=True))
    return words, frozenset(words)


@functools.cache
def _dpr_tokenizer():
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer

    return SimpleTokenizer()


def read_answers(path: str | Path, match: str = "string", on_bad_record: str = "fail",
                 stats: Any = None) -> dict[str, list[str]]:
    """QA answers by query id: JSONL (``{"id"|"_id"|"qid": ..., "answers": [...]}``) or TSV (``qid<TAB>answers``,
    the answers a JSON list or one string).

    A malformed record, an empty answer or (``match="regex"``) a pattern that does not compile is a
    :class:`~spar.core.errors.BadRecordError` naming the file and line, or, with ``on_bad_record="skip"``, a record
    left out and counted in ``stats`` (a :class:`spar.data.readers.ReadStats`).
    """
    p = Path(path)
    if not p.exists():
        raise BadRecordError(str(p), None, "file not found")

    def bad(error: BadRecordError) -> None:
        if on_bad_record != "skip":
            raise error
        if stats is not None:
            stats.skip(error)

    out: dict[str, list[str]] = {}
    with p.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if p.suffix in (".jsonl", ".json"):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    bad(BadRecordError(str(p), number, f"malformed JSON: {exc.msg}"))
                    continue
                if not isinstance(obj, dict):
                    bad(BadRecordError(str(p), number, "malformed JSON: not an object"))
                    continue
                qid = obj.get("_id", obj.get("id", obj.get("qid")))
                gold = obj.get("answers", obj.get("answer"))
            else:
                parts = line.split("\t")
                if len(parts) != 2:
                    bad(BadRecordError(str(p), number, f"wrong column count: expected 2, found {len(parts)}"))
                    continue
                qid, raw = parts
                try:
                    gold = json.loads(raw) if raw.lstrip().startswith("[") else raw
                except json.JSONDecodeError as exc:
                    bad(BadRecordError(str(p), number, f"malformed JSON answer list: {exc.msg}"))
                    continue
            if qid is None or gold is None:
                bad(BadRecordError(str(p), number, "missing query id or answers"))
                continue
            gold = [str(a) for a in (gold if isinstance(gold, list) else [gold])]
            if not gold or not all(a.strip() for a in gold):
                # DPR's matching finds an empty answer in every passage: it would count as a hit.
                bad(BadRecordError(str(p), number, "empty answer"))
                continue
            problem = next(filter(None, (answer_problem(a, match) for a in gold)), None)
            if problem:
                bad(BadRecordError(str(p), number, f"{problem}, query {qid!r}"))
                continue
            if stats is not None:
                stats.read += 1
            out[str(qid)] = gold
    return out
