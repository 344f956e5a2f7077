"""Stage `label` on a real SciFact slice: labels are Pyserini's own ranking, resumable shards, multi-machine parts,
and the impact teacher scores are dot products of integer term weights. One JVM per pytest process."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from spar.core import schemas
from spar.core.artifacts import read_manifest
from spar.core.config import load_config
from spar.core.errors import ConfigError

N_DOCS = 300


@pytest.fixture(scope="module")
def corpus(datasets_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    with (datasets_dir / "scifact" / "corpus.jsonl").open(encoding="utf-8") as fin:
        out.write_text("".join(line for _, line in zip(range(N_DOCS), fin)), encoding="utf-8")
    return out


def _config(corpus: Path, out: Path, *overrides: str):
    return load_config(None, [
        f"data.corpus={corpus}", f"experiment.output_dir={out}", "sample.strategy=all", "sample.dev_fraction=0.05",
        "sample.max_queries=400", "label.k=50", "label.n_positives=10", "label.n_negatives=5",
        "label.shard_size=100", "label.batch_size=64", *overrides,
    ])


@pytest.fixture(scope="module")
def labelled(corpus, tmp_path_factory):
    import pipelines.label
    import pipelines.sample

    out = tmp_path_factory.mktemp("run")
    cfg = _config(corpus, out)
    pipelines.sample.run(cfg)
    result = pipelines.label.run(cfg)
    return cfg, out, result


@pytest.fixture(scope="module")
def lucene(labelled):
    from spar.core.java import pyserini_module

    _, out, _ = labelled
    searcher = pyserini_module("pyserini.search.lucene").LuceneSearcher(str(out / "teacher_index"))
    searcher.set_bm25(0.9, 0.4)
    return searcher


def _labels(directory: Path) -> list[dict]:
    return schemas.read_shards(directory, "labels").to_pylist()


def _queries(out: Path) -> list[dict]:
    return schemas.read_shards(out / "queries", "queries").to_pylist()


def test_labels_are_pyserini_bm25_ranking(labelled, lucene):
    cfg, out, _ = labelled
    labels = _labels(out / "labels")
    dev = [r for r in labels if r["split"] == "dev"]
    assert dev, "the slice should hold dev queries"
    for record in labels[:15] + dev[:5]:
        hits = lucene.search(record["query"], cfg.label.k)
        n_p = 1 if record["split"] == "dev" else cfg.label.n_positives
        assert record["positive_ids"] == [h.docid for h in hits[:n_p]]
        assert record["positive_scores"] == pytest.approx([h.score for h in hits[:n_p]], abs=0)
        assert record["positive_ranks"] == list(range(1, n_p + 1))
        bottom = hits[-cfg.label.n_negatives:]
        assert record["negative_ids"] == [h.docid for h in bottom]
        assert record["negative_scores"] == pytest.approx([h.score for h in bottom], abs=0)
        assert record["negative_ranks"] == list(range(len(hits) - cfg.label.n_negatives + 1, len(hits) + 1))


def test_rows_point_into_passages_and_dev_has_one_positive(labelled):
    _, out, _ = labelled
    table = schemas.read_shards(out / "labels", "labels").to_pandas()
    ids = schemas.read_table(out / "queries" / "passages.arrow").column("id").to_pylist()
    for _, row in table.iterrows():
        assert [ids[r] for r in row["positive_rows"]] == list(row["positive_ids"])
        assert [ids[r] for r in row["negative_rows"]] == list(row["negative_ids"])
        assert len(row["positive_ids"]) == (1 if row["split"] == "dev" else 10)
        assert len(row["negative_ids"]) == 5
    # the source passage usually ranks first (intended, not excluded)
    first = [pid.split("#")[0] == row[0] for pid, row in zip(table["query_id"], table["positive_ids"])]
    assert sum(first) / len(first) > 0.8


def test_dropped_queries_are_counted_and_have_too_few_hits(labelled, lucene):
    cfg, out, _ = labelled
    stats = read_manifest(out / "labels")["stats"]
    queries = _queries(out)
    kept = {r["query_id"] for r in _labels(out / "labels")}
    assert stats["queries"] == len(queries) == stats["labelled"] + stats["dropped"]
    assert stats["labelled"] == len(kept)
    for query in queries:
        needed = (1 if query["split"] == "dev" else cfg.label.n_positives) + cfg.label.n_negatives
        enough = len(lucene.search(query["text"], cfg.label.k)) >= needed
        assert enough == (query["query_id"] in kept), query["query_id"]


def test_k_beyond_corpus_size_drops_or_fails_clearly(labelled, tmp_path):
    from spar.core.config import LabelSection
    from spar.teacher.labelling import label_queries
    from spar.teacher.teachers import BM25Searcher

    _, out, _ = labelled
    teacher = BM25Searcher(out / "teacher_index")
    assert teacher.num_docs == N_DOCS
    stats = label_queries(teacher, out / "queries", tmp_path / "deep", LabelSection(k=2 * N_DOCS, n_positives=10,
                          n_negatives=250, shard_size=1000), progress=False)
    assert stats["dropped"] > 0 and stats["labelled"] + stats["dropped"] == stats["queries"]
    with pytest.raises(ConfigError, match="holds 300 passages"):
        label_queries(teacher, out / "queries", tmp_path / "impossible",
                      LabelSection(k=2 * N_DOCS, n_positives=10, n_negatives=N_DOCS), progress=False)


def test_shards_read_back_with_pandas(labelled):
    _, out, result = labelled
    files = sorted((out / "labels").glob("labels-*.arrow"))
    assert len(files) == 5  # ~420 queries in shards of 100
    frame = pa.ipc.open_file(pa.memory_map(str(files[0]))).read_all().to_pandas()
    assert list(frame.columns) == schemas.LABELS.names and len(frame) <= 100
    assert result["queries labelled"].startswith(f"{read_manifest(out / 'labels')['stats']['labelled']:,}")


def test_killed_run_resumes_at_first_missing_shard_with_identical_bytes(labelled):
    import pipelines.label

    cfg, out, _ = labelled
    labels = out / "labels"
    reference = {f.name: f.read_bytes() for f in labels.glob("labels-*.arrow")}
    fingerprint = read_manifest(labels)["fingerprint"]
    # simulate a kill after shard 1: the .partial dir holds shards 0-1 (and a stale temp file), no manifest
    partial = labels.with_name("labels.partial")
    shutil.copytree(labels, partial)
    for name in sorted(reference)[2:]:
        (partial / name).unlink()
    (partial / "manifest.json").unlink()
    (partial / ".fingerprint").write_text(fingerprint)
    (partial / ".labels-00002.arrow.tmp-999").write_bytes(b"half-written")
    shutil.rmtree(labels)
    result = pipelines.label.run(cfg)
    assert result["shards"] == "3 written, 2 reused"
    assert {f.name: f.read_bytes() for f in labels.glob("labels-*.arrow")} == reference
    assert not list(labels.glob(".*tmp*"))
    assert read_manifest(labels)["fingerprint"] == fingerprint
    assert pipelines.label.run(cfg) == {"skipped": True}


def test_deleted_or_truncated_shards_are_not_up_to_date(labelled):
    """#22 item 5: after deleting a damaged shard (or all of them), `spar label` said "up to date" with an empty
    labels/: the manifest records each file's size and checksum, and a missing or resized one re-runs the stage."""
    import pipelines.label

    cfg, out, _ = labelled
    labels = out / "labels"
    reference = {f.name: f.read_bytes() for f in labels.glob("labels-*.arrow")}
    assert set(read_manifest(labels)["checksums"]) >= set(reference)
    for shard in labels.glob("labels-*.arrow"):
        shard.unlink()
    result = pipelines.label.run(cfg)
    assert result.get("skipped") is not True and result["shards"] == f"{len(reference)} written, 0 reused"
    assert {f.name: f.read_bytes() for f in labels.glob("labels-*.arrow")} == reference
    first = sorted(labels.glob("labels-*.arrow"))[0]
    first.write_bytes(first.read_bytes()[:100])  # truncated
    assert pipelines.label.run(cfg).get("skipped") is not True
    assert first.read_bytes() == reference[first.name]
    assert pipelines.label.run(cfg) == {"skipped": True}


def test_parts_on_several_machines_merge_into_the_single_run(labelled, corpus, tmp_path):
    import pipelines.label

    cfg, out, _ = labelled
    reference = {f.name: f.read_bytes() for f in (out / "labels").glob("labels-*.arrow")}
    fingerprint = read_manifest(out / "labels")["fingerprint"]
    # each "machine" has the queries and teacher index (copied), and labels its part
    shutil.copytree(out / "queries", tmp_path / "queries")
    shutil.copytree(out / "teacher_index", tmp_path / "teacher_index")
    part0 = pipelines.label.run(_config(corpus, tmp_path, "label.num_shards=2", "label.shard_index=0"))
    assert part0["merged"].startswith("no: waiting for labels-part-1-of-2")
    assert sorted(f.name for f in (tmp_path / "labels-part-0-of-2").glob("*.arrow")) == [
        "labels-00000.arrow", "labels-00002.arrow", "labels-00004.arrow"]
    part1 = pipelines.label.run(_config(corpus, tmp_path, "label.num_shards=2", "label.shard_index=1"))
    assert part1["merged"].startswith("yes: 2 parts")
    assert {f.name: f.read_bytes() for f in (tmp_path / "labels").glob("labels-*.arrow")} == reference
    merged = read_manifest(tmp_path / "labels")
    assert merged["fingerprint"] == fingerprint
    assert merged["stats"]["labelled"] == read_manifest(out / "labels")["stats"]["labelled"]


def test_impact_teacher_scores_are_integer_dot_products(corpus, tmp_path):
    from spar.data.passages import PassagesTable
    from spar.teacher.teachers import ImpactTeacher, SparseEncoder, build_impact_index
    from spar.data.passages import passage_contents

    import pipelines.sample

    small = tmp_path / "small.jsonl"
    small.write_text("".join(corpus.read_text(encoding="utf-8").splitlines(keepends=True)[:48]), encoding="utf-8")
    cfg = _config(small, tmp_path / "run", "sample.max_queries=20")
    pipelines.sample.run(cfg)
    passages = tmp_path / "run" / "queries" / "passages.arrow"
    encoder = SparseEncoder("splade-tiny")
    assert encoder.kind == "splade"
    index = build_impact_index(passages, tmp_path / "impact", encoder, quantization=100, threads=2, max_length=128,
                               batch_size=16, progress=False)
    batch = next(PassagesTable(passages).iter_columns(batch_rows=256))
    doc_vectors = dict(zip(batch["id"], encoder.encode_quantized(passage_contents(["title", "text"], batch), 100,
                                                                 128, 16)))
    assert all(isinstance(w, int) and w > 0 for v in doc_vectors.values() for w in v.values())
    teacher = ImpactTeacher(index, encoder, quantization=100, threads=2, max_length=64)
    queries = _queries(tmp_path / "run")[:6]
    hits = teacher.search([(q["query_id"], q["text"]) for q in queries], k=10)
    query_vectors = teacher.encode_queries([q["text"] for q in queries])
    for query, q_vec in zip(queries, query_vectors):
        ranked = hits[query["query_id"]]
        assert len(ranked) == 10
        for docid, score in ranked:
            d_vec = doc_vectors[docid]
            assert score == sum(w * d_vec.get(t, 0) for t, w in q_vec.items())
        exact = sorted(((sum(w * d.get(t, 0) for t, w in q_vec.items()), pid) for pid, d in doc_vectors.items()),
                       reverse=True)
        assert [s for s, _ in exact[:10]] == [s for _, s in ranked]
    json.dumps(query_vectors)  # plain ints and strings


def test_select_positives_and_negative_window():
    from spar.teacher.labelling import select

    hits = [(f"d{i}", float(50 - i)) for i in range(50)]
    assert select(hits, 10, 5) == (list(range(10)), [45, 46, 47, 48, 49])
    assert select(hits, 1, 5) == ([0], [45, 46, 47, 48, 49])  # dev
    # ranks 20..30 (1-based): the bottom 5 of the window are ranks 26..30
    assert select(hits, 10, 5, (20, 30)) == (list(range(10)), [25, 26, 27, 28, 29])
    # a window overlapping the positives never yields a positive as a negative
    assert select(hits[:14], 10, 3, (1, 14)) == (list(range(10)), [11, 12, 13])
    assert select(hits[:14], 10, 5, (1, 14)) is None
    assert select(hits[:12], 10, 5) is None  # too few hits
    assert select(hits[:15], 10, 0) == (list(range(10)), [])


@pytest.mark.parametrize("how", ["another corpus's table", "same size, one word changed"])
def test_a_passages_table_replaced_under_label_and_train_is_refused(labelled, corpus, tmp_path, how):
    """#37 item 3: ``queries/passages.arrow`` replaced by another table (its manifest still recording the old size
    and SHA-256): label and train said "up to date", and ``label --force`` labelled the new passages against a
    teacher index of the old ones. Both now check the table against its manifest first, with --force too."""
    import pipelines.label
    import pipelines.sample
    import pipelines.train
    from spar.core.errors import ArtifactError

    _, out, _ = labelled
    run = tmp_path / "run"
    shutil.copytree(out, run)
    passages = run / "queries" / "passages.arrow"
    if how.startswith("another"):
        fewer = tmp_path / "fewer.jsonl"
        fewer.write_text("".join(corpus.read_text(encoding="utf-8").splitlines(keepends=True)[:150]))
        pipelines.sample.run(_config(fewer, tmp_path / "other"))
        shutil.copy(tmp_path / "other" / "queries" / "passages.arrow", passages)
    else:
        data = bytearray(passages.read_bytes())
        at = data.index(b" the ")
        data[at:at + 5] = b" THE "
        passages.write_bytes(bytes(data))
    cfg = _config(corpus, run)
    refusal = rf"^{passages}: .+ since `spar sample` wrote it; re-run `spar sample --force`$"
    for stage in (pipelines.label, pipelines.train):
        with pytest.raises(ArtifactError, match=refusal):
            stage.STAGE.status(cfg)  # what `spar label` / `spar train` decide: not "up to date"
        with pytest.raises(ArtifactError, match=refusal):
            stage.STAGE.run(cfg, force=True)
    assert read_manifest(run / "teacher_index")["fingerprint"] == read_manifest(out / "teacher_index")["fingerprint"]
