"""``label.engine``: the in-memory BM25 teacher writes the same label shards, byte for byte, as Pyserini's Lucene
searcher, and returns the same hits with the same scores on cases built to hit each of Lucene's details (one-byte
length norms, boosts of repeated query terms, ties broken by passage id, Anserini's score adjustment)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spar.core.config import load_config
from spar.core.errors import ArtifactError, ConfigError
from spar.core.schemas import PASSAGES, write_table


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def both_engines(sample_dir, tmp_path_factory):
    """The embedded sample sampled once, labelled by each engine in its own output directory."""
    import pipelines.label
    import pipelines.sample
    from spar.core.artifacts import read_manifest

    root = tmp_path_factory.mktemp("engines")
    runs = {}
    for engine in ("lucene", "memory"):
        out = root / engine
        cfg = load_config(None, [f"experiment.output_dir={out}", f"label.engine={engine}", "label.shard_size=1500",
                                 "label.batch_size=500"])
        if engine == "lucene":
            pipelines.sample.run(cfg)
        else:  # the same queries and teacher index, so only the engine differs
            shutil.copytree(root / "lucene" / "queries", out / "queries")
            shutil.copytree(root / "lucene" / "teacher_index", out / "teacher_index")
        pipelines.label.run(cfg)
        runs[engine] = (out / "labels", read_manifest(out / "labels"))
    return runs


def test_label_shards_are_byte_identical_between_engines(both_engines):
    (lucene_dir, lucene), (memory_dir, memory) = both_engines["lucene"], both_engines["memory"]
    shards = sorted(p.name for p in lucene_dir.glob("labels-*.arrow"))
    assert len(shards) >= 3 and shards == sorted(p.name for p in memory_dir.glob("labels-*.arrow"))
    assert [_sha256(lucene_dir / s) for s in shards] == [_sha256(memory_dir / s) for s in shards]
    assert lucene["stats"]["engine"].startswith("lucene") and memory["stats"]["engine"].startswith("memory")
    assert lucene["stats"]["labelled"] == memory["stats"]["labelled"] > 4000


def test_engine_is_runtime_only(both_engines):
    """Switching the engine neither changes the labels' fingerprint nor re-runs the stage."""
    (_, lucene), (_, memory) = both_engines["lucene"], both_engines["memory"]
    assert lucene["fingerprint"] == memory["fingerprint"]


# ------------------------------------------------------------------------------------------------------------
# Lucene's details, one by one, on a corpus built to need them
# ------------------------------------------------------------------------------------------------------------

_WORDS = ("salient phrase dense retrieval sparse lexical matching vitamin scurvy orbit moon earth sun planet "
          "protein cell gene river mountain city music").split()


def _tricky_passages(path: Path) -> list[tuple[str, str]]:
    """Passages whose ids sort differently as strings than as rows, exact duplicates (ties), lengths from 1 to ~600
    terms (several share a one-byte norm), repeated words, and a passage without a term."""
    rng = np.random.default_rng(7)
    texts = []
    for i in range(400):
        n = int(rng.integers(1, 600)) if i % 7 else int(rng.integers(1, 30))
        texts.append(" ".join(rng.choice(_WORDS, size=n)))
    texts += [texts[3]] * 4 + [texts[10]] * 3 + ["vitamin scurvy"] * 5 + ["quokka wombat"] * 5  # ties
    texts += ["The of and, to it."]  # only stop words: a passage Lucene holds without a term (not in docCount)
    ids = [str(1000 - i) if i % 3 else f"p{i}" for i in range(len(texts))]  # "999" > "1000" as strings
    rows = list(range(len(texts)))
    write_table(path, pa.table({"row": rows, "id": ids, "title": [""] * len(texts), "text": texts}, schema=PASSAGES))
    queries = [(f"q{j}", " ".join(rng.choice(_WORDS, size=int(rng.integers(1, 9))))) for j in range(300)]
    queries += [("rep1", "vitamin vitamin scurvy"), ("rep2", "moon moon moon earth"), ("tie", "quokka"),
                ("one", "salient"), ("none", "zzzz unknown"), ("stop", "the of and")]
    return queries


@pytest.fixture(scope="module")
def tricky(tmp_path_factory):
    from spar.teacher.bm25_memory import MemoryBM25
    from spar.teacher.teachers import BM25Searcher, build_bm25_index

    root = tmp_path_factory.mktemp("tricky")
    queries = _tricky_passages(root / "passages.arrow")
    index = build_bm25_index(root / "passages.arrow", root / "index", threads=2)
    return queries, BM25Searcher(index, threads=2), MemoryBM25.from_passages(root / "passages.arrow"), root


def test_memory_hits_equal_lucene_hits_with_scores(tricky):
    queries, lucene, memory = tricky[:3]
    for k in (1, 10, 50, 500):
        expected, found = lucene.search(queries, k), memory.search(queries, k)
        assert found == expected, k
    hits = lucene.search(queries, 50)
    assert hits["none"] == [] and hits["stop"] == []
    # The corpus does exercise ties: equal scores, ranked by id string (not row), lowered by 1e-6 steps.
    tie = hits["tie"]
    ids = [d for d, _ in tie]
    rows = [int(d[1:]) if d.startswith("p") else 1000 - int(d) for d in ids]
    assert len(tie) == 5 and ids == sorted(ids) and rows != sorted(rows)
    assert [round((tie[0][1] - s) * 1e6) for _, s in tie] == [0, 1, 2, 3, 4]


def test_repeated_query_terms_are_boosted_by_their_count(tricky):
    _, lucene, memory = tricky[:3]
    twice, once = (memory.search([("q", text)], 5)["q"] for text in ("vitamin vitamin scurvy", "vitamin scurvy"))
    assert twice != once and twice == lucene.search([("q", "vitamin vitamin scurvy")], 5)["q"]


def test_statistics_match_the_lucene_index_and_mismatch_fails_in_one_line(tricky, tmp_path):
    from spar.teacher.bm25_memory import MemoryBM25

    root = tricky[3]
    tricky[2].verify(root / "index")  # the same corpus: passes
    assert tricky[2].stats["documents"] == tricky[2].stats["non_empty_documents"] + 1
    other = tmp_path / "passages.arrow"
    write_table(other, pa.table({"row": [0, 1], "id": ["a", "b"], "title": ["", ""], "text": ["moon", "sun moon"]},
                                schema=PASSAGES))
    with pytest.raises(ArtifactError, match="does not match the teacher index") as info:
        MemoryBM25.from_passages(other).verify(root / "index")
    assert "\n" not in str(info.value) and str(other) in str(info.value)


def test_one_byte_norms_are_lucene_smallfloat():
    from jnius import autoclass

    from spar.teacher.bm25_memory import byte4_to_int, int_to_byte4
    from spar.core.java import start_jvm

    start_jvm()
    small_float = autoclass("org.apache.lucene.util.SmallFloat")
    lengths = list(range(3000)) + [10_000, 123_457, 2**31 - 1]
    assert int_to_byte4(np.array(lengths)).tolist() == [small_float.intToByte4(n) & 0xFF for n in lengths]
    assert byte4_to_int(np.arange(256)).tolist() == [small_float.byte4ToInt(b - 256 if b > 127 else b)
                                                     for b in range(256)]


# ------------------------------------------------------------------------------------------------------------
# Choosing the engine, and bad values
# ------------------------------------------------------------------------------------------------------------


def test_bad_engine_values_fail_in_one_line():
    with pytest.raises(ConfigError, match="label.engine") as info:
        load_config(None, ["label.engine=fast"])
    assert "lucene" in str(info.value)
    with pytest.raises(ConfigError, match="label.engine='memory' does not run the impact teacher: use lucene"):
        load_config(None, ["label.engine=memory", "label.teacher=impact"])
    with pytest.raises(ConfigError, match="label.teacher='bm52': use one of bm25, impact"):
        load_config(None, ["label.teacher=bm52"])
    load_config(None, ["label.engine=auto", "label.teacher=impact"])  # auto: Lucene for the impact teacher


def test_auto_picks_memory_for_small_corpora_and_lucene_beyond_its_limits(tricky, monkeypatch):
    import spar.teacher.bm25_memory as engine
    from spar.teacher.registry import choose_engine

    passages = tricky[3] / "passages.arrow"

    def choose(engine: str, teacher: str, queries: int | None = None) -> tuple[str, str]:
        section = load_config(None, [f"label.engine={engine}", f"label.teacher={teacher}"]).label
        return choose_engine(section, passages, queries)

    assert choose("auto", "bm25")[0] == "memory"
    assert choose("auto", "impact") == ("lucene", "the impact teacher runs on lucene only")
    assert choose("lucene", "bm25") == ("lucene", "label.engine=lucene")
    assert choose("auto", "bm25", queries=2000)[0] == "memory"
    assert choose("auto", "bm25", queries=500)[0] == "lucene"  # start-up would not pay
    monkeypatch.setattr(engine, "AUTO_MAX_PASSAGES", 100)
    assert choose("auto", "bm25") == ("lucene", "auto: 418 passages > 100")
    monkeypatch.setattr(engine, "AUTO_MAX_PASSAGES", 10**6)
    monkeypatch.setattr(engine, "AUTO_MAX_BYTES", 1000)
    assert choose("auto", "bm25")[0] == "lucene"
