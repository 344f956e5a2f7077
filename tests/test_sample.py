"""Stage `sample` on real data: SciFact abstracts (strategy 'all') and wiki-vital passages (strategy 'wiki')."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from spar.core import schemas
from spar.core.artifacts import read_manifest
from spar.core.config import SampleSection, load_config
from spar.core.errors import BadRecordError
from spar.data.readers import ReadStats, read_corpus
from spar.data.sampling import split_sentences, write_query_set


def _slice(src: Path, dst: Path, n: int | None = None, transform=None) -> Path:
    with src.open(encoding="utf-8") as fin, dst.open("w", encoding="utf-8") as fout:
        for i, line in enumerate(fin):
            if n is not None and i >= n:
                break
            record = json.loads(line)
            if transform is not None:
                record = transform(record)
            fout.write(json.dumps(record) + "\n")
    return dst


def _sample(corpus: Path, out: Path, seed: int | None = None, **options) -> tuple[dict, list[dict]]:
    out.mkdir(parents=True, exist_ok=True)
    stats = write_query_set(read_corpus(corpus), out, SampleSection(**options), progress=False, corpus_name=str(corpus),
                            **({"seed": seed} if seed is not None else {}))
    rows = schemas.read_shards(out, "queries").to_pylist() if stats["shards"] else []
    return stats, rows


@pytest.fixture(scope="module")
def scifact_slice(datasets_dir, tmp_path_factory) -> Path:
    return _slice(datasets_dir / "scifact" / "corpus.jsonl", tmp_path_factory.mktemp("scifact") / "corpus.jsonl", 300)


@pytest.fixture(scope="module")
def wiki_corpus(datasets_dir) -> Path:
    return datasets_dir / "wiki-vital" / "corpus.jsonl"


@pytest.fixture(scope="module")
def wiki_run(wiki_corpus, tmp_path_factory):
    return _sample(wiki_corpus, tmp_path_factory.mktemp("wiki"), strategy="wiki", seed=7, dev_fraction=0.02,
                   max_dev_queries=10_000)


def test_split_sentences_drops_fragments_and_cuts_long_sentences():
    text = ("Ok then. The patients " + " ".join(["were treated with the drug and followed"] * 10)
            + " for years.  Deficiency of ascorbic\tacid causes scurvy.")
    sentences = split_sentences(text, min_words=3, max_words=64)
    assert [i for i, _ in sentences] == [1, 2]  # index in the passage, the 2-word fragment dropped
    assert len(sentences[0][1].split()) == 64
    assert sentences[1][1] == "Deficiency of ascorbic acid causes scurvy."


def test_tokenized_splitter_finds_the_sentences_of_lowercased_tokenised_cranfield(datasets_dir):
    # SMART Cranfield is lower-cased with standalone full stops: blingfire sees one sentence per abstract there.
    corpus = [p for p in read_corpus(datasets_dir / "cranfield" / "corpus.jsonl", on_bad_record="skip")][:50]
    blingfire_counts = [len(split_sentences(p.text, 4, 1000)) for p in corpus]
    tokenized = [split_sentences(p.text, 4, 1000, splitter="tokenized") for p in corpus]
    assert sum(blingfire_counts) <= len(corpus) + 5
    assert sum(len(t) for t in tokenized) > 3 * len(corpus)
    first = tokenized[0]
    assert first[0][1] == "experimental investigation of the aerodynamics of a wing in a slipstream ."
    assert first[1][1].startswith("an experimental study of a wing in a propeller slipstream")
    for passage, sentences in zip(corpus, tokenized):  # nothing lost: the sentences re-join into the passage
        if all(len(s.split()) >= 4 for s in passage.text.split(" . ")):
            assert " ".join(s for _, s in sentences) == " ".join(passage.text.split())


def test_all_strategy_keeps_every_long_enough_sentence(scifact_slice, tmp_path):
    stats, rows = _sample(scifact_slice, tmp_path, strategy="all", dev_fraction=0.0, min_words=4, max_words=64)
    passages = schemas.read_table(tmp_path / "passages.arrow")
    corpus = list(read_corpus(scifact_slice))
    assert passages.column("id").to_pylist() == [p.id for p in corpus]
    assert passages.column("row").to_pylist() == list(range(len(corpus)))
    per_passage = Counter(r["source_passage_id"] for r in rows)
    for row, passage in enumerate(corpus):
        expected = split_sentences(passage.text, 4, 64)
        assert per_passage[passage.id] == len(expected), passage.id
    assert all(len(r["text"].split()) >= 4 and len(r["text"].split()) <= 64 for r in rows)
    assert all(r["query_id"].startswith(r["source_passage_id"] + "#s") for r in rows)
    by_id = {p.id: row for row, p in enumerate(corpus)}
    assert all(by_id[r["source_passage_id"]] == r["source_row"] for r in rows)
    assert stats["queries_train"] == len(rows) and stats["queries_dev"] == 0
    assert stats["sampling"]["kept"] == stats["sampling"]["candidate_sentences"] == len(rows)


def test_wiki_strategy_keep_rate_decreases_with_position(wiki_run):
    stats, rows = wiki_run
    buckets = stats["sampling"]["by_position"]
    rates = [buckets[b]["keep_rate"] for b in ("0", "1", "2")]
    assert rates[0] == 1.0  # base ** -0
    assert rates[0] > rates[1] > rates[2]
    assert buckets["1"]["mean_kept_per_passage"] < buckets["0"]["mean_kept_per_passage"]
    # every passage that has a usable sentence yields at least one query
    with_queries = {r["source_passage_id"] for r in rows}
    sampling = stats["sampling"]
    assert len(with_queries) == sampling["passages"] - sampling["passages_without_sentences"]
    assert stats["positions"]["field_one_based"] is False


def test_wiki_positions_one_based_and_from_titles_give_the_same_queries(wiki_run, wiki_corpus, tmp_path):
    _, reference = wiki_run
    options = dict(strategy="wiki", seed=7, dev_fraction=0.02, max_dev_queries=10_000)

    def one_based(r):
        return {**r, "article_passage": r["article_passage"] + 1}

    def no_field(r):
        return {k: v for k, v in r.items() if k != "article_passage"}

    stats1, rows1 = _sample(_slice(wiki_corpus, tmp_path / "one.jsonl", transform=one_based), tmp_path / "a", **options)
    assert stats1["positions"]["field_one_based"] is True
    assert rows1 == reference
    stats2, rows2 = _sample(_slice(wiki_corpus, tmp_path / "titles.jsonl", transform=no_field), tmp_path / "b",
                            **options)
    assert stats2["positions"]["from_titles"] == stats2["passages"]
    assert rows2 == reference


def test_sampling_is_deterministic_and_order_independent(wiki_corpus, tmp_path):
    lines = wiki_corpus.read_text(encoding="utf-8").splitlines()[:3000]
    forward = tmp_path / "forward.jsonl"
    forward.write_text("\n".join(lines) + "\n", encoding="utf-8")
    options = dict(strategy="uniform", uniform_rate=0.4, seed=3, dev_fraction=0.05, max_dev_queries=10_000)
    _, first = _sample(forward, tmp_path / "a", **options)
    _, again = _sample(forward, tmp_path / "b", **options)
    name = "queries-00000.arrow"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # a different corpus order (e.g. another shard layout) draws the same sentences and the same dev split
    backward = tmp_path / "backward.jsonl"
    backward.write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    _, reordered = _sample(backward, tmp_path / "c", **options)
    key = lambda r: (r["query_id"], r["split"])  # noqa: E731
    assert sorted(map(key, reordered)) == sorted(map(key, first))
    _, other_seed = _sample(forward, tmp_path / "d", **{**options, "seed": 4})
    assert sorted(map(key, other_seed)) != sorted(map(key, first))
    # uniform: the keep rate is close to uniform_rate, independent of position
    stats, _ = _sample(forward, tmp_path / "e", **{**options, "uniform_rate": 0.5, "dev_fraction": 0.0})
    s = stats["sampling"]
    assert 0.45 < (s["kept"] - s["passages_forced_one"]) / s["candidate_sentences"] < 0.55


def test_dev_split_cap_and_max_queries(scifact_slice, tmp_path):
    stats, rows = _sample(scifact_slice, tmp_path / "a", strategy="all", dev_fraction=0.1, max_dev_queries=25,
                          seed=1, shard_size=500)
    splits = Counter(r["split"] for r in rows)
    assert splits["dev"] == 25 < stats["dev_candidates"]
    assert stats["shards"] > 1
    # the cap keeps the same queries whatever the shard size
    _, rows_one_shard = _sample(scifact_slice, tmp_path / "b", strategy="all", dev_fraction=0.1, max_dev_queries=25,
                                seed=1, shard_size=100_000)
    assert {r["query_id"] for r in rows if r["split"] == "dev"} == {
        r["query_id"] for r in rows_one_shard if r["split"] == "dev"}
    stats, rows = _sample(scifact_slice, tmp_path / "c", strategy="all", dev_fraction=0.1, max_dev_queries=25,
                          seed=1, shard_size=50, max_queries=120)
    splits = Counter(r["split"] for r in rows)
    assert splits["train"] == 120 and stats["stopped_at_max_queries"]
    assert stats["queries_train"] == 120 and stats["queries_dev"] == splits["dev"]


def test_bad_position_fails_with_file_or_is_counted(wiki_corpus, tmp_path):
    def corrupt(r):
        return {**r, "article_passage": "first"} if r["_id"] == "5" else r

    corpus = _slice(wiki_corpus, tmp_path / "bad.jsonl", 200, transform=corrupt)
    with pytest.raises(BadRecordError, match=r"bad.jsonl: bad 'article_passage': passage '5'"):
        _sample(corpus, tmp_path / "a", strategy="wiki")
    read_stats = ReadStats()
    out = tmp_path / "b"
    out.mkdir()
    stats = write_query_set(read_corpus(corpus), out, SampleSection(strategy="wiki"), on_bad_record="skip",
                            read_stats=read_stats, progress=False)
    assert stats["passages"] == 199 and read_stats.total_skipped == 1


def test_sample_stage_writes_manifest_and_skips_when_complete(scifact_slice, tmp_path):
    import pipelines.sample as stage

    cfg = load_config(None, [f"data.corpus={scifact_slice}", f"experiment.output_dir={tmp_path}",
                             "sample.strategy=all", "sample.dev_fraction=0.05"])
    result = stage.run(cfg)
    assert result["passages"] == 300
    manifest = read_manifest(tmp_path / "queries")
    assert manifest["kind"] == "queries"
    stats = manifest["stats"]
    assert stats["queries"] == stats["queries_train"] + stats["queries_dev"] > 1000
    assert stats["read"]["read"] == 300 and stats["passages_fingerprint"]
    table = schemas.read_shards(tmp_path / "queries", "queries").to_pandas()
    assert set(table["split"]) == {"train", "dev"} and table["query_id"].is_unique
    assert stage.run(cfg) == {"skipped": True}
    # #48 item 4: an edited passages table (same size) is not up to date: it was skipped, then refused by label.
    table_file = tmp_path / "queries" / "passages.arrow"
    original = table_file.read_bytes()
    edited = bytearray(original)
    edited[len(edited) // 2] ^= 0x20
    table_file.write_bytes(bytes(edited))
    assert "skipped" not in stage.run(cfg) and table_file.read_bytes() == original
    by_split = defaultdict(int)
    for split in table["split"]:
        by_split[split] += 1
    assert by_split["dev"] == stats["queries_dev"]


def test_blingfire_on_punctuation_free_text_warns_and_names_the_other_splitter(datasets_dir, tmp_path, caplog):
    """SMART Cranfield is lower-cased and tokenised: blingfire sees one long "sentence" per abstract, cut at
    max_words; the run says so (log and stats) and suggests `tokenized`, which does not trigger the warning."""
    import logging

    def sample(splitter: str, out: Path) -> dict:
        corpus = list(read_corpus(datasets_dir / "cranfield" / "corpus.jsonl", on_bad_record="skip"))[:200]
        out.mkdir(parents=True)
        return write_query_set(corpus, out, SampleSection(max_words=24, sentence_splitter=splitter), progress=False)

    with caplog.at_level(logging.WARNING, logger="spar.data.sampling"):
        stats = sample("blingfire", tmp_path / "blingfire")
    sampling = stats["sampling"]
    assert sampling["sentences_truncated"] > 0.5 * sampling["candidate_sentences"]
    assert len(stats["warnings"]) == 1 and "try sample.sentence_splitter=tokenized" in stats["warnings"][0]
    assert f"{sampling['sentences_truncated']:,} of {sampling['candidate_sentences']:,}" in stats["warnings"][0]
    assert stats["warnings"][0] in caplog.text
    assert sample("tokenized", tmp_path / "tokenized")["warnings"] == []


def test_train_sample_is_a_seeded_sample_of_the_whole_corpus(scifact_slice, tmp_path):
    options = dict(strategy="all", dev_fraction=0.1, max_dev_queries=25, seed=1, shard_size=500)
    full_stats, full = _sample(scifact_slice, tmp_path / "full", **options)
    stats, rows = _sample(scifact_slice, tmp_path / "capped", train_sample=300, **options)
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 300 == stats["queries_train"]
    assert stats["train_sampled_from"] == full_stats["queries_train"] > 300
    # the dev split does not change; the training queries are a subset of the uncapped ones...
    dev = lambda rs: {r["query_id"] for r in rs if r["split"] == "dev"}  # noqa: E731
    assert dev(rows) == dev(full)
    assert {r["query_id"] for r in train} < {r["query_id"] for r in full if r["split"] == "train"}
    # ...drawn from the whole corpus, not its first passages (max_queries stops early instead)
    sources = sorted({r["source_row"] for r in train})
    assert sources[-1] > 0.9 * max(r["source_row"] for r in full)
    # the same sample whatever the shard size (order-independent hashes); another seed, another sample
    _, one_shard = _sample(scifact_slice, tmp_path / "one", train_sample=300, **{**options, "shard_size": 100_000})
    assert {r["query_id"] for r in one_shard} == {r["query_id"] for r in rows}
    _, other = _sample(scifact_slice, tmp_path / "other", train_sample=300, **{**options, "seed": 2})
    assert {r["query_id"] for r in other if r["split"] == "train"} != {r["query_id"] for r in train}
