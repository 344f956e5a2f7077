"""Streaming readers for corpora, queries and qrels.

Formats: BEIR (``corpus.jsonl`` with ``_id``/``title``/``text``, ``queries.jsonl``, ``qrels/*.tsv``), DPR passages
TSV (``id<TAB>text<TAB>title`` with a header), the MS MARCO collection TSV (``pid<TAB>text``), plain JSONL
(``id`` + ``contents`` or ``text``), and TREC qrels (``qid 0 docid rel``). Questions with answers: the open-domain
QA layout (JSONL ``{"_id", "question", "answers"}``) and DPR's ``question<TAB>["answer", ...]`` files
(:func:`read_questions`). Any of them may be gzip-compressed (``.jsonl.gz``, ``.tsv.gz``: decompressed as a stream,
never to disk), and a corpus may be several files read as one (:func:`read_corpus` takes a list; an id that occurs
twice, in one file or across files, is an error naming both places). Readers yield one record at a time, so a
21M-passage corpus never has to fit in memory.

Malformed input fails with :class:`~spar.core.errors.BadRecordError` naming the file and line. With
``on_bad_record="skip"`` the record is skipped and counted in :class:`ReadStats` instead.

Example::

    >>> from spar.data.readers import read_corpus, ReadStats
    >>> stats = ReadStats()
    >>> first = next(iter(read_corpus("data/scifact-sample/corpus.jsonl", stats=stats)))
    >>> sorted(first.__dataclass_fields__)
    ['extra', 'id', 'text', 'title']
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import os
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Literal, Sequence, TypeGuard, Union

from spar.core.artifacts import is_compressed, plain_name
from spar.core.errors import BadRecordError

OnBad = Literal["fail", "skip"]
#: A corpus: one file, or several read one after the other as one corpus.
CorpusSource = Union[str, Path, Sequence[Union[str, Path]]]
csv.field_size_limit(1 << 30)


@dataclass
class Passage:
    id: str
    title: str
    text: str
    extra: dict[str, Any] = field(default_factory=dict)

    def contents(self, sep: str = " ") -> str:
        """Title and text joined (the text a sparse teacher indexes)."""
        return sep.join(part for part in (self.title, self.text) if part)  # a title-only passage has no text


@dataclass
class Query:
    id: str
    text: str


@dataclass
class Question:
    """An evaluation question: its id, text and, when the file carries them, its reference answers."""

    id: str
    text: str
    answers: list[str] | None = None
    #: The line it was read from (for messages about it found later).
    line: int | None = field(default=None, compare=False)


@dataclass
class ReadStats:
    """Counts of records read and skipped, by reason; printed by stages and stored in manifests."""

    read: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def skip(self, error: BadRecordError) -> None:
        self.skipped[error.reason.split(":")[0]] += 1
        if len(self.examples) < 5:
            self.examples.append(str(error))

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "skipped": dict(self.skipped), "examples": self.examples}

    def summary(self) -> str:
        if not self.skipped:
            return f"{self.read:,} records read"
        reasons = ", ".join(f"{n} {r}" for r, n in self.skipped.most_common())
        return f"{self.read:,} records read, {self.total_skipped:,} skipped ({reasons})"


def open_binary(path: str | Path) -> BinaryIO:
    """The file's bytes, gunzipped as a stream when its name ends in ``.gz``."""
    p = Path(path)
    return gzip.open(p, "rb") if is_compressed(p) else p.open("rb")  # type: ignore[return-value]


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Raw lines with 1-based numbers; a truncated or corrupt gzip stream is an error naming the line it broke at
    (whatever ``on_bad_record`` says: nothing after it can be read)."""
    number = 0
    try:
        with open_binary(path) as fh:
            for number, raw in enumerate(fh, start=1):
                yield number, raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        reason = "ends before its end (truncated)" if isinstance(exc, EOFError) else f"is corrupt ({exc})"
        raise BadRecordError(str(path), number + 1, f"the gzip stream {reason}") from None


def _lines(path: Path, on_bad: OnBad, stats: ReadStats) -> Iterator[tuple[int, str]]:
    """Decoded lines with 1-based numbers; undecodable lines are bad records."""
    for number, raw in _raw_lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            _bad(BadRecordError(str(path), number,
                                f"not UTF-8: byte {raw[exc.start]:#04x} at column {exc.start + 1}"),
                 on_bad, stats)
            continue
        line = line.rstrip("\r\n")
        if number == 1:
            line = line.lstrip("\ufeff")
        if line.strip():
            yield number, line


def _bad(error: BadRecordError, on_bad: OnBad, stats: ReadStats) -> None:
    if on_bad == "fail":
        raise error
    stats.skip(error)


def _has_whitespace(identifier: str) -> bool:
    return any(ch.isspace() for ch in identifier)


def _whitespace_error(path: Path, number: int, kind: str, identifier: str) -> BadRecordError:
    # TREC run and qrels files are whitespace-separated: such an id would corrupt every run file written later.
    return BadRecordError(str(path), number, f"whitespace in id: {kind} id {identifier!r} (TREC files cannot "
                          "hold it; rename the id)")


def input_file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as an input file (None when it is a regular file): a missing file, a dangling
    symbolic link, a link loop, a directory, or a device such as ``/dev/null`` each get their own words."""
    import errno
    import stat

    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links, not a file"
        if p.is_symlink():
            return f"a symbolic link to a missing file ({os.readlink(p)})"
        return "file not found"
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    if not stat.S_ISREG(mode):
        return "not a regular file (a device, pipe or socket)"
    return None


def _require_file(path: Path) -> None:
    problem = input_file_problem(path)
    if problem:
        raise BadRecordError(str(path), None, problem)


def _first_line(path: Path) -> str:
    for _, raw in _raw_lines(path):
        return raw.decode("utf-8", errors="replace").strip().lstrip("\ufeff")
    return ""


def detect_corpus_format(path: str | Path) -> str:
    """Infer the corpus format from the file name (a ``.gz`` suffix aside) and its first line."""
    p = Path(path)
    _require_file(p)
    first, suffix = _first_line(p), plain_name(p).suffix
    if suffix in (".jsonl", ".json") or first.startswith("{"):
        try:
            obj = json.loads(first)
        except json.JSONDecodeError:
            return "beir" if plain_name(p).name.startswith("corpus") else "jsonl"
        return "beir" if isinstance(obj, dict) and "_id" in obj else "jsonl"
    if suffix == ".tsv" or "\t" in first:
        header = [c.strip().lower() for c in first.split("\t")]
        return "dpr" if header[:1] == ["id"] and "text" in header else "msmarco"
    raise BadRecordError(str(p), 1, "cannot tell the corpus format; set data.corpus_format")


def corpus_files(source: CorpusSource) -> list[Path]:
    """The files of a corpus: ``data.corpus`` is one path or a list of them."""
    if isinstance(source, (str, Path)):
        return [Path(source)]
    files = [Path(s) for s in source]
    if not files:
        raise BadRecordError("<config>", None, "data.corpus is an empty list: name at least one corpus file")
    return files


def is_corpus_files(source: Any) -> TypeGuard[CorpusSource]:
    """Whether ``source`` names corpus files (a path, or a list of paths) rather than holding passages."""
    if isinstance(source, (str, Path)):
        return True
    return isinstance(source, (list, tuple)) and bool(source) and all(isinstance(s, (str, Path)) for s in source)


def corpus_fingerprint(source: CorpusSource) -> str:
    """Content fingerprint of a corpus: the file's own for one file (so a one-file corpus keeps the fingerprint it
    always had), else one over the files' in their order."""
    from spar.core.fingerprint import file_fingerprint, fingerprint_dict

    files = corpus_files(source)
    if isinstance(source, (str, Path)):
        return file_fingerprint(files[0])
    return fingerprint_dict([file_fingerprint(f) for f in files])


def read_corpus(
    source: CorpusSource,
    fmt: str = "auto",
    on_bad_record: OnBad = "fail",
    stats: ReadStats | None = None,
    check_duplicates: bool = True,
) -> Iterator[Passage]:
    """Stream passages from a corpus: one file or several read as one (BEIR, DPR TSV, MS MARCO TSV or JSONL, each
    optionally gzip-compressed; with ``fmt="auto"`` each file's own format is detected).

    Errors (or counted skips) for: malformed JSON, missing id or text, empty text and title (a title-only passage
    is valid), duplicate ids (within a file or across files: the error names the file that had it first), ids
    containing whitespace, non-UTF-8 bytes, wrong TSV column count, a truncated gzip stream (always an error).
    """
    files = corpus_files(source)
    stats = stats if stats is not None else ReadStats()
    seen: dict[str, int] | None = {} if check_duplicates else None
    reader = {"beir": _jsonl_passages, "jsonl": _jsonl_passages, "dpr": _dpr_passages, "msmarco": _msmarco_passages}
    if fmt != "auto" and fmt not in reader:
        raise ValueError(f"unknown corpus format {fmt!r}")
    for file_number, p in enumerate(files):
        file_format = detect_corpus_format(p) if fmt == "auto" else fmt
        for number, passage in reader[file_format](p, on_bad_record, stats):
            if _has_whitespace(passage.id):
                _bad(_whitespace_error(p, number, "passage", passage.id), on_bad_record, stats)
                continue
            if not passage.text.strip() and not passage.title.strip():  # a title-only record is a valid passage
                hint = " (--on-bad-record skip counts and skips such passages)" if on_bad_record == "fail" else ""
                _bad(BadRecordError(str(p), number, f"empty text and title: passage {passage.id!r}{hint}"),
                     on_bad_record, stats)
                continue
            if seen is not None:
                first = seen.get(passage.id)
                if first is not None:
                    where = "" if first == file_number else f" (first in {files[first]})"
                    _bad(BadRecordError(str(p), number, f"duplicate passage id: {passage.id!r}{where}"),
                         on_bad_record, stats)
                    continue
                seen[passage.id] = file_number
            stats.read += 1
            yield passage


def _json_object(path: Path, number: int, line: str, on_bad: OnBad, stats: ReadStats) -> dict | None:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        _bad(BadRecordError(str(path), number, f"malformed JSON: {exc.msg} at column {exc.colno}"), on_bad, stats)
        return None
    if not isinstance(obj, dict):
        _bad(BadRecordError(str(path), number, "malformed JSON: expected an object"), on_bad, stats)
        return None
    return obj


def _jsonl_passages(path: Path, on_bad: OnBad, stats: ReadStats) -> Iterator[tuple[int, Passage]]:
    for number, line in _lines(path, on_bad, stats):
        obj = _json_object(path, number, line, on_bad, stats)
        if obj is None:
            continue
        pid = obj.get("_id", obj.get("id", obj.get("docid")))
        text = obj.get("text", obj.get("contents"))
        if pid is None or str(pid).strip() == "":
            _bad(BadRecordError(str(path), number, "missing id: no '_id' or 'id' field"), on_bad, stats)
            continue
        if text is None:
            _bad(BadRecordError(str(path), number, f"missing text: passage {pid!r} has no 'text' field"), on_bad, stats)
            continue
        extra = {k: v for k, v in obj.items() if k not in ("_id", "id", "docid", "title", "text", "contents")}
        yield number, Passage(str(pid), str(obj.get("title") or ""), str(text), extra)


def _tsv_rows(path: Path, on_bad: OnBad, stats: ReadStats, columns: int) -> Iterator[tuple[int, list[str]]]:
    for number, line in _lines(path, on_bad, stats):
        row = next(csv.reader(io.StringIO(line), delimiter="\t", quoting=csv.QUOTE_MINIMAL), [])
        if len(row) != columns:
            _bad(BadRecordError(str(path), number, f"wrong column count: expected {columns}, found {len(row)}"),
                 on_bad, stats)
            continue
        yield number, row


def _dpr_passages(path: Path, on_bad: OnBad, stats: ReadStats) -> Iterator[tuple[int, Passage]]:
    header: list[str] | None = None
    for number, row in _tsv_rows(path, on_bad, stats, columns=3):
        if header is None:
            header = [c.strip().lower() for c in row]
            if "id" not in header or "text" not in header:
                raise BadRecordError(str(path), number, "DPR TSV needs a header 'id<TAB>text<TAB>title'")
            continue
        rec = dict(zip(header, row))
        yield number, Passage(rec["id"], rec.get("title", ""), rec["text"])


def _msmarco_passages(path: Path, on_bad: OnBad, stats: ReadStats) -> Iterator[tuple[int, Passage]]:
    for number, row in _tsv_rows(path, on_bad, stats, columns=2):
        yield number, Passage(row[0], "", row[1])


def read_queries(path: str | Path, on_bad_record: OnBad = "fail", stats: ReadStats | None = None) -> Iterator[Query]:
    """Stream queries from BEIR ``queries.jsonl``, an ``id<TAB>text`` TSV, or any question file of
    :func:`read_questions` (its answers are not read here)."""
    for question in read_questions(path, on_bad_record, stats, with_answers=False):
        yield Query(question.id, question.text)


def _answer_list(raw: Any) -> list[str] | None:
    """A question's reference answers as a list of non-empty strings (None when the value is not one)."""
    gold = raw if isinstance(raw, list) else [raw]
    gold = [str(a) for a in gold if a is not None]
    # DPR's matching finds an empty answer in every passage: it would count as a hit.
    return gold if gold and all(a.strip() for a in gold) else None


def _parse_answer_cell(cell: str) -> Any:
    """DPR's answer column: a JSON list, or the Python-literal list its CSV files hold (``['a', "b's"]``)."""
    try:
        return json.loads(cell)
    except json.JSONDecodeError:
        return ast.literal_eval(cell)  # literals only: never code


def _is_qas_tsv(path: Path) -> bool:
    """A DPR question file (``question<TAB>["answer", ...]``): the first line's second column is a list."""
    cells = _first_line(path).split("\t")
    return len(cells) == 2 and cells[1].lstrip().startswith("[")


def read_questions(path: str | Path, on_bad_record: OnBad = "fail", stats: ReadStats | None = None, *,
                   with_answers: bool = True, answer_match: str = "string") -> Iterator[Question]:
    """Stream evaluation questions, with their answers where the file carries them.

    Formats (any of them gzip-compressed): JSONL with an id (``_id``/``id``/``qid``), a text (``text``/``query``/
    ``question``) and optionally ``answers`` (the open-domain QA layout, ``{"_id", "question", "answers"}``); an
    ``id<TAB>text`` TSV (BEIR/MS MARCO queries, no answers); DPR's ``question<TAB>["answer", ...]`` files (no id
    column: a question's id is its 0-based position in the file, as Pyserini's DPR topics number them). With
    ``answer_match="regex"`` every answer must compile as a regular expression (a bad record otherwise).
    """
    from spar.data.answers import answer_problem

    p = Path(path)
    stats = stats if stats is not None else ReadStats()
    _require_file(p)
    is_json = plain_name(p).suffix in (".jsonl", ".json")
    qas = not is_json and _is_qas_tsv(p)
    seen: set[str] = set()
    rows: Iterator[tuple[int, Any]] = (_lines(p, on_bad_record, stats) if is_json
                                       else _tsv_rows(p, on_bad_record, stats, columns=2))
    position = 0
    for number, item in rows:
        answers: Any = None
        if is_json:
            obj = _json_object(p, number, item, on_bad_record, stats)
            if obj is None:
                continue
            qid = obj.get("_id", obj.get("id", obj.get("qid")))
            text = obj.get("text", obj.get("query", obj.get("question")))
            answers = obj.get("answers", obj.get("answer"))
        elif qas:
            qid, text = str(position), item[0]
            try:
                answers = _parse_answer_cell(item[1])
            except (ValueError, SyntaxError) as exc:
                _bad(BadRecordError(str(p), number, f"malformed answer list: {exc}"), on_bad_record, stats)
                continue
        else:
            qid, text = item
        position += 1
        if qid is None or str(qid).strip() == "":
            _bad(BadRecordError(str(p), number, "missing id in query"), on_bad_record, stats)
            continue
        if text is None or not str(text).strip():  # named as such (#48: it read "missing id or text")
            what = "missing text" if text is None else "empty text"
            _bad(BadRecordError(str(p), number, f"{what} in query {str(qid)!r}"), on_bad_record, stats)
            continue
        if _has_whitespace(str(qid)):
            _bad(_whitespace_error(p, number, "query", str(qid)), on_bad_record, stats)
            continue
        if str(qid) in seen:
            _bad(BadRecordError(str(p), number, f"duplicate query id: {qid!r}"), on_bad_record, stats)
            continue
        gold = None
        if with_answers and answers is not None:
            gold = _answer_list(answers)
            if gold is None:
                _bad(BadRecordError(str(p), number, f"empty answer: question {qid!r}"), on_bad_record, stats)
                continue
            problem = next(filter(None, (answer_problem(a, answer_match) for a in gold)), None)
            if problem:
                _bad(BadRecordError(str(p), number, f"{problem}, question {qid!r}"), on_bad_record, stats)
                continue
        seen.add(str(qid))
        stats.read += 1
        yield Question(str(qid), str(text), gold, number)


def read_qrels(
    path: str | Path,
    known_queries: set[str] | None = None,
    known_passages: set[str] | None = None,
    on_bad_record: OnBad = "fail",
    stats: ReadStats | None = None,
) -> dict[str, dict[str, int]]:
    """Read BEIR qrels TSV (``query-id corpus-id score`` with header) or TREC qrels (``qid 0 docid rel``).

    When ``known_queries``/``known_passages`` are given, judgments naming unknown ids are bad records.
    """
    p = Path(path)
    stats = stats if stats is not None else ReadStats()
    _require_file(p)
    qrels: dict[str, dict[str, int]] = {}
    for number, line in _lines(p, on_bad_record, stats):
        parts = line.split("\t") if "\t" in line else line.split()
        if number == 1 and parts[0].strip().lower() in ("query-id", "qid", "query_id"):
            continue
        if len(parts) == 4:
            qid, _, pid, rel = parts
        elif len(parts) == 3:
            qid, pid, rel = parts
        else:
            _bad(BadRecordError(str(p), number, f"wrong column count: expected 3 or 4, found {len(parts)}"),
                 on_bad_record, stats)
            continue
        qid, pid = qid.strip(), pid.strip()
        if _has_whitespace(qid) or _has_whitespace(pid):
            kind, bad = ("query", qid) if _has_whitespace(qid) else ("passage", pid)
            _bad(_whitespace_error(p, number, kind, bad), on_bad_record, stats)
            continue
        try:
            grade = int(float(rel))
        except ValueError:
            _bad(BadRecordError(str(p), number, f"relevance is not a number: {rel!r}"), on_bad_record, stats)
            continue
        if known_queries is not None and qid not in known_queries:
            _bad(BadRecordError(str(p), number, f"unknown query: {qid!r} is not in the queries file"),
                 on_bad_record, stats)
            continue
        if known_passages is not None and pid not in known_passages:
            _bad(BadRecordError(str(p), number, f"unknown passage: {pid!r} is not in the corpus"),
                 on_bad_record, stats)
            continue
        qrels.setdefault(qid, {})[pid] = grade
        stats.read += 1
    return qrels


def evaluation_qrels(qs, split: str, seed: int = 42, *, known_queries: set[str] | None = None,
                     known_passages: set[str] | None = None, on_bad_record: OnBad = "fail",
                     stats: ReadStats | None = None) -> dict[str, dict[str, int]]:
    """The qrels of ``split`` ("dev" or "test") of a question set (a ``data.question_sets`` section): the one place
    splits are made.

    With the set's ``dev_holdout_fraction`` the test qrels are divided by a seeded hash of the query id, so the dev
    and test query sets are disjoint and stable across runs. Judgments naming queries or passages outside
    ``known_queries`` / ``known_passages`` are bad records (an error, or skipped and counted).
    """
    def read(path):
        return read_qrels(path, known_queries, known_passages, on_bad_record, stats)

    import hashlib

    if split not in ("dev", "test"):
        raise ValueError(f"split must be 'dev' or 'test', not {split!r}")
    if qs.dev_holdout_fraction is None:
        path = qs.qrels_dev if split == "dev" else qs.qrels_test
        if path is None:
            raise BadRecordError("<config>", None, f"qrels_{split} is not set")
        return read(path)
    if qs.qrels_test is None:
        raise BadRecordError("<config>", None, "dev_holdout_fraction needs qrels_test")
    qrels = read(qs.qrels_test)

    def is_dev(qid: str) -> bool:
        digest = hashlib.sha256(f"{seed}:{qid}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < qs.dev_holdout_fraction

    return {q: rels for q, rels in qrels.items() if is_dev(q) == (split == "dev")}
