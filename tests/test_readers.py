"""Readers: every format, on real data, and every kind of malformed record with file and line in the error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spar.core.errors import BadRecordError
from spar.data.readers import ReadStats, detect_corpus_format, evaluation_qrels, read_corpus, read_qrels, read_queries


def test_beir_corpus_streams_real_scifact(datasets_dir: Path):
    stats = ReadStats()
    passages = read_corpus(datasets_dir / "scifact" / "corpus.jsonl", stats=stats)
    first = next(passages)
    assert first.id and first.text and first.title
    rest = sum(1 for _ in passages)
    assert rest + 1 == 5183 == stats.read
    assert stats.total_skipped == 0


def test_wiki_vital_keeps_position_field(datasets_dir: Path):
    first = next(read_corpus(datasets_dir / "wiki-vital" / "corpus.jsonl"))
    assert "article_passage" in first.extra


def test_queries_and_qrels_real(datasets_dir: Path):
    queries = {q.id: q.text for q in read_queries(datasets_dir / "scifact" / "queries.jsonl")}
    qrels = read_qrels(datasets_dir / "scifact" / "qrels" / "test.tsv", known_queries=set(queries))
    assert len(qrels) == 300
    assert sum(len(v) for v in qrels.values()) == 339


def _write(tmp_path: Path, name: str, content: bytes | str) -> Path:
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


def test_dpr_tsv_and_msmarco_tsv(tmp_path: Path):
    dpr = _write(tmp_path, "psgs.tsv", "id\ttext\ttitle\n1\tAlpha text\tAlpha\n2\t\"quoted, text\"\tBeta\n")
    assert detect_corpus_format(dpr) == "dpr"
    got = list(read_corpus(dpr))
    assert [(p.id, p.title, p.text) for p in got] == [("1", "Alpha", "Alpha text"), ("2", "Beta", "quoted, text")]
    marco = _write(tmp_path, "collection.tsv", "0\tThe first passage.\n1\tThe second one.\n")
    assert detect_corpus_format(marco) == "msmarco"
    assert [p.text for p in read_corpus(marco)] == ["The first passage.", "The second one."]


def test_plain_jsonl(tmp_path: Path):
    p = _write(tmp_path, "docs.jsonl", '{"id": "a", "contents": "hello world"}\n')
    assert detect_corpus_format(p) == "jsonl"
    assert next(read_corpus(p)).text == "hello world"


GOOD = '{"_id": "1", "title": "T", "text": "fine"}\n'


@pytest.mark.parametrize(
    "content, line, reason",
    [
        (GOOD + '{"_id": "2", "text": "oops"\n', 2, "malformed JSON"),
        (GOOD + '{"title": "no id", "text": "x"}\n', 2, "missing id"),
        (GOOD + '{"_id": "3", "title": "no text"}\n', 2, "missing text"),
        (GOOD + GOOD, 2, "duplicate passage id"),
        (GOOD + '{"_id": "4", "text": "   "}\n', 2, "empty text and title"),
        (GOOD.encode() + b'{"_id": "5", "text": "caf\xe9"}\n', 2, "not UTF-8"),
    ],
)
def test_bad_corpus_records_name_file_and_line(tmp_path: Path, content, line, reason):
    p = _write(tmp_path, "corpus.jsonl", content)
    with pytest.raises(BadRecordError) as info:
        list(read_corpus(p))
    assert info.value.line == line and info.value.path == str(p)
    assert reason in str(info.value) and f"{p}:{line}" in str(info.value)
    # Skipping counts the record and loses nothing else.
    stats = ReadStats()
    kept = list(read_corpus(p, on_bad_record="skip", stats=stats))
    assert [x.id for x in kept] == ["1"] and stats.total_skipped == 1 and stats.read == 1


def test_tsv_wrong_column_count(tmp_path: Path):
    p = _write(tmp_path, "collection.tsv", "0\tok\n1\ttoo\tmany\n")
    with pytest.raises(BadRecordError, match=r"collection.tsv:2: wrong column count: expected 2, found 3"):
        list(read_corpus(p, fmt="msmarco"))


def test_qrels_unknown_ids(tmp_path: Path):
    p = _write(tmp_path, "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq9\td1\t1\nq1\td9\t1\n")
    with pytest.raises(BadRecordError, match=r"test.tsv:3: unknown query: 'q9'"):
        read_qrels(p, known_queries={"q1"}, known_passages={"d1"})
    stats = ReadStats()
    qrels = read_qrels(p, known_queries={"q1"}, known_passages={"d1"}, on_bad_record="skip", stats=stats)
    assert qrels == {"q1": {"d1": 1}} and stats.skipped == {"unknown query": 1, "unknown passage": 1}


def test_trec_qrels_format(tmp_path: Path):
    p = _write(tmp_path, "qrels.txt", "1 0 184 2\n1 0 29 4\n")
    assert read_qrels(p) == {"1": {"184": 2, "29": 4}}


def test_holdout_split_is_disjoint_and_stable(datasets_dir: Path):
    from spar.core.config import QuestionSetSection

    cranfield = datasets_dir / "cranfield"
    data = QuestionSetSection(test=str(cranfield / "queries.jsonl"), qrels_test=str(cranfield / "qrels" / "test.tsv"),
                              dev_holdout_fraction=0.5)
    dev, test = evaluation_qrels(data, "dev"), evaluation_qrels(data, "test")
    assert dev and test and not set(dev) & set(test)
    assert len(dev) + len(test) == len(read_qrels(data.qrels_test))
    assert evaluation_qrels(data, "dev") == dev


def test_embedded_sample_is_consistent(sample_dir: Path):
    ids = {p.id for p in read_corpus(sample_dir / "corpus.jsonl")}
    queries = {q.id for q in read_queries(sample_dir / "queries.jsonl")}
    for split in ("train", "test"):
        qrels = read_qrels(sample_dir / "qrels" / f"{split}.tsv", known_queries=queries, known_passages=ids)
        assert qrels
    assert (sample_dir / "README.md").read_text().count("CC BY-NC 2.0") >= 1
    assert json.loads((sample_dir / "corpus.jsonl").open().readline())["_id"]


def test_a_title_only_passage_is_valid_and_an_empty_one_is_not(tmp_path: Path):
    """BEIR records with a title and an empty text (CACM has 1,617) are passages; only title and text both empty is
    an empty record."""
    p = _write(tmp_path, "corpus.jsonl", GOOD + '{"_id": "t", "title": "Title only", "text": ""}\n'
               '{"_id": "e", "title": " ", "text": ""}\n')
    stats = ReadStats()
    passages = list(read_corpus(p, on_bad_record="skip", stats=stats))
    assert [x.id for x in passages] == ["1", "t"] and passages[1].contents() == "Title only"
    assert stats.read == 2 and stats.total_skipped == 1
    with pytest.raises(BadRecordError, match=r":3: empty text and title: passage 'e' \(--on-bad-record skip counts "
                                             r"and skips such passages\)$"):
        list(read_corpus(p))


# ---- inputs at scale: compressed files, several corpus files, question files with answers ----------------------

def _gz(tmp_path: Path, name: str, content: str) -> Path:
    import gzip

    p = tmp_path / name
    with gzip.open(p, "wb") as fh:
        fh.write(content.encode())
    return p


def test_gzip_corpora_stream_like_plain_ones(tmp_path: Path, sample_dir: Path):
    plain = (sample_dir / "corpus.jsonl").read_text(encoding="utf-8")
    packed = _gz(tmp_path, "corpus.jsonl.gz", plain)
    assert detect_corpus_format(packed) == "beir"
    got = [(p.id, p.title, p.text) for p in read_corpus(packed)]
    want = [(p.id, p.title, p.text) for p in read_corpus(sample_dir / "corpus.jsonl")]
    assert got == want and len(got) == 600
    dpr = _gz(tmp_path, "psgs_w100.tsv.gz", "id\ttext\ttitle\n1\tAlpha text\tAlpha\n2\tBeta text\tBeta\n")
    assert detect_corpus_format(dpr) == "dpr"
    assert [(p.id, p.title) for p in read_corpus(dpr)] == [("1", "Alpha"), ("2", "Beta")]


def test_real_enwiki_gz_streams_with_positions(datasets_dir: Path):
    import itertools

    first = list(itertools.islice(read_corpus(datasets_dir / "enwiki-2015" / "corpus.jsonl.gz"), 3))
    assert [p.id for p in first] == ["12-0", "12-1", "12-2"]
    assert [p.extra["article_passage"] for p in first] == [0, 1, 2] and first[0].title == "Anarchism"


def test_truncated_gzip_names_file_and_line(tmp_path: Path):
    good = _gz(tmp_path, "full.jsonl.gz", "".join(f'{{"_id": "{i}", "title": "", "text": "passage {i} '
                                                  f'{"x" * 200}"}}\n' for i in range(2000)))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(BadRecordError) as err:
        list(read_corpus(cut, on_bad_record="skip"))  # nothing after the break can be read: an error even with skip
    message = str(err.value)
    assert str(cut) in message and "truncated" in message
    assert f":{sum(1 for _ in _prefix_lines(cut)) + 1}:" in message


def _prefix_lines(path: Path):
    import zlib

    data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(path.read_bytes())
    return data.split(b"\n")[:-1]


def test_several_corpus_files_read_as_one(tmp_path: Path):
    a = _write(tmp_path, "a.jsonl", '{"_id": "a1", "title": "A", "text": "one"}\n')
    b = _gz(tmp_path, "b.tsv.gz", "id\ttext\ttitle\nb1\ttwo\tB\n")
    assert [(p.id, p.text) for p in read_corpus([a, b])] == [("a1", "one"), ("b1", "two")]


def test_an_id_in_two_corpus_files_names_both(tmp_path: Path):
    a = _write(tmp_path, "a.jsonl", '{"_id": "x", "title": "", "text": "one"}\n')
    b = _write(tmp_path, "b.jsonl",
               '{"_id": "y", "title": "", "text": "two"}\n{"_id": "x", "title": "", "text": "3"}\n')
    with pytest.raises(BadRecordError) as err:
        list(read_corpus([a, b]))
    assert f"{b}:2:" in str(err.value) and "duplicate passage id: 'x'" in str(err.value) and str(a) in str(err.value)
    stats = ReadStats()
    assert [p.id for p in read_corpus([a, b], on_bad_record="skip", stats=stats)] == ["x", "y"]
    assert stats.skipped == {"duplicate passage id": 1}


def test_corpus_list_in_a_config_resolves_against_the_yaml(tmp_path: Path):
    from spar.core.config import load_config

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "x.yaml").write_text("data:\n  corpus: [../a.jsonl, ../b.jsonl.gz]\n")
    cfg = load_config(tmp_path / "cfg" / "x.yaml")
    assert cfg.data.corpus == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl.gz")]


def test_odqa_question_files_carry_answers(datasets_dir: Path):
    from spar.data.readers import read_questions

    questions = list(read_questions(datasets_dir / "odqa" / "nq" / "test.jsonl"))
    assert len(questions) == 3610
    assert (questions[0].id, questions[0].text, questions[0].answers) == (
        "nq-test-0", "who got the first nobel prize in physics", ["Wilhelm Conrad Röntgen"])
    curated = next(read_questions(datasets_dir / "odqa" / "curated" / "test.jsonl"))
    assert curated.answers and "|" in curated.answers[0]  # regular expressions, matched in regex mode
    assert [q.text for q in read_queries(datasets_dir / "odqa" / "nq" / "test.jsonl")][:1] == [questions[0].text]


def test_dpr_question_tsv_numbers_questions_and_parses_answer_lists(tmp_path: Path):
    from spar.data.readers import read_questions

    p = _write(tmp_path, "nq-test.qa.csv", "who wrote hamlet\t['William Shakespeare']\n"
               "when was it written\t[\"1600\", \"c. 1601\"]\n")
    got = [(q.id, q.text, q.answers) for q in read_questions(p)]
    assert got == [("0", "who wrote hamlet", ["William Shakespeare"]),
                   ("1", "when was it written", ["1600", "c. 1601"])]


@pytest.mark.parametrize("content, line, reason", [
    ('{"_id": "q1", "question": "a?", "answers": ["x"]}\n{"_id": "q2", "question": "b?", "answers": [""]}\n',
     2, "empty answer"),
    ('{"_id": "q1", "question": "a?", "answers": []}\n', 1, "empty answer"),
    ('{"_id": "q1", "answers": ["x"]}\n', 1, "missing text in query 'q1'"),
    ('{"_id": "q1", "question": " ", "answers": ["x"]}\n', 1, "empty text in query 'q1'"),
    ('{"question": "who?", "answers": ["x"]}\n', 1, "missing id in query"),
])
def test_bad_question_records_name_file_and_line(tmp_path: Path, content, line, reason):
    from spar.data.readers import read_questions

    p = _write(tmp_path, "test.jsonl", content)
    with pytest.raises(BadRecordError) as err:
        list(read_questions(p))
    assert f"{p}:{line}:" in str(err.value) and reason in str(err.value)


def test_malformed_dpr_answer_list_names_line(tmp_path: Path):
    from spar.data.readers import read_questions

    p = _write(tmp_path, "qa.tsv", "q one\t['a']\nq two\t['unclosed\n")
    with pytest.raises(BadRecordError) as err:
        list(read_questions(p))
    assert f"{p}:2:" in str(err.value) and "malformed answer list" in str(err.value)
