"""Stage `encode` on real SciFact passages with the real MiniLM base retriever and the untrained Λ initialisation."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spar.model.embeddings import EncodeOptions, encode_passages, encode_queries
from spar.model.stored_vectors import load_embeddings
from spar.model.encoders import BiEncoder
from spar.core.errors import ArtifactError
from spar.data.readers import evaluation_qrels, read_corpus, read_queries
from spar.core.schemas import PASSAGES, read_table, write_table

#: The experiment's one question set (data.queries & co. before spar 0.2).
QS = "data.question_sets.default"

#: fp32 on every CPU class: these tests compare with the encoder's own fp32 vectors (issue #45).
QUIET = EncodeOptions(batch_size=16, show_progress=False, precision="32")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """OpenMP threads spin: on a shared 2-core test machine one intra-op thread is several times faster than two."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def base_encoder() -> BiEncoder:
    return BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True, passage_max_length=64,
                                     query_max_length=32)


@pytest.fixture(scope="module")
def lambda_dir(tmp_path_factory) -> Path:
    """The real untrained Λ initialisation (CLS pooling, raw dot products), saved as `spar train` would."""
    d = tmp_path_factory.mktemp("lambda") / "lambda"
    from spar.lexical.transformer import TransformerLambda

    TransformerLambda(BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="cls", normalize=False,
                                                passage_max_length=64)).save(d)
    return d


@pytest.fixture(scope="module")
def passages(sample_dir):
    return list(itertools.islice(read_corpus(sample_dir / "corpus.jsonl"), 24))


def test_vectors_ids_and_manifest(base_encoder, passages, tmp_path):
    encode_passages(base_encoder, passages, tmp_path / "p", shard_size=10, options=QUIET,
                    weights_fingerprint="minilm", encoder_name="base")
    emb = load_embeddings(tmp_path / "p")
    assert emb.ids == [p.id for p in passages]
    assert emb.vectors.shape == (24, 384) and emb.vectors.dtype == np.float32 and emb.dim == 384
    # Same vectors as the encoder's own (unsharded, differently batched) path.
    reference = base_encoder.encode_passage([(p.title, p.text) for p in passages], batch_size=7)
    np.testing.assert_allclose(emb.vectors, reference, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(emb.vectors, axis=1), 1.0, atol=1e-5)

    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    s = manifest["stats"]
    assert manifest["kind"] == "embeddings"
    assert (s["pooling"], s["normalize"], s["dim"], s["count"], s["dtype"], s["shards"]) == ("mean", True, 384, 24,
                                                                                          "float32", 3)
    assert s["model_fingerprint"] == emb.model_fingerprint and s["encoder"] == "base"
    # Truncation is counted exactly: passages longer than 64 tokens with special tokens.
    tok = base_encoder.tokenizer
    long = sum(len(tok(f"{p.title} {tok.sep_token} {p.text}")["input_ids"]) > 64 for p in passages)
    assert 0 < s["truncated"] == long
    assert sorted(f.name for f in (tmp_path / "p").iterdir()) == [
        "ids.arrow", "manifest.json", "part-00000.npy", "part-00001.npy", "part-00002.npy"]
    ids = read_table(tmp_path / "p" / "ids.arrow")
    assert ids.column("row").to_pylist() == list(range(24))
    # A complete directory with the same inputs is not encoded again.
    again = dict(shard_size=10, options=QUIET, weights_fingerprint="minilm", encoder_name="base")
    assert encode_passages(base_encoder, passages, tmp_path / "p", **again)["skipped"]
    assert not encode_passages(base_encoder, passages[:4], tmp_path / "p", **again).get("skipped")


def test_float16_storage(base_encoder, passages, tmp_path):
    encode_passages(base_encoder, passages[:8], tmp_path / "h", dtype="float16", options=QUIET)
    emb = load_embeddings(tmp_path / "h")
    assert emb.vectors.dtype == np.float16 and emb.manifest["stats"]["dtype"] == "float16"


class Killed(BaseException):
    """Stands in for SIGKILL after the first shard (raised from the per-shard hook, not caught by the writer)."""


def die(index, stats):
    raise Killed


def test_resume_gives_identical_shards(base_encoder, passages, tmp_path, capsys):
    encode_passages(base_encoder, passages, tmp_path / "full", shard_size=10, options=QUIET,
                    weights_fingerprint="minilm")

    with pytest.raises(Killed):
        encode_passages(base_encoder, passages, tmp_path / "resumed", shard_size=10, options=QUIET,
                        weights_fingerprint="minilm", on_shard=die)
    partial = tmp_path / "resumed.partial"
    assert (partial / "part-00000.npy").exists() and not (partial / "part-00001.npy").exists()
    assert not (tmp_path / "resumed").exists()  # never looks complete

    stats = encode_passages(base_encoder, passages, tmp_path / "resumed", shard_size=10,
                            options=dataclasses.replace(QUIET, show_progress=True), weights_fingerprint="minilm")
    assert stats["resumed_shards"] == 1 and stats["encoded_this_run"] == 14 and stats["count"] == 24
    # the bar counts this run's work: the shard found finished is neither progress nor speed
    assert "encode encoder/resumed: 14/14 item in " in capsys.readouterr().err
    for name in ["ids.arrow", "part-00000.npy", "part-00001.npy", "part-00002.npy"]:
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "resumed" / name).read_bytes(), name
    assert not partial.exists()


def test_changed_config_discards_partial_work(base_encoder, passages, tmp_path):
    with pytest.raises(Killed):
        encode_passages(base_encoder, passages, tmp_path / "e", shard_size=10, options=QUIET,
                        weights_fingerprint="a", on_shard=die)
    stats = encode_passages(base_encoder, passages, tmp_path / "e", shard_size=10, options=QUIET,
                            weights_fingerprint="b")
    assert stats["resumed_shards"] == 0 and stats["encoded_this_run"] == 24


def test_lightning_predict_loop_matches_plain_loop(base_encoder, passages, tmp_path):
    opts = EncodeOptions(batch_size=8, engine="lightning", accelerator="cpu", devices=1, show_progress=False,
                         precision="32")
    stats = encode_passages(base_encoder, passages[:16], tmp_path / "l", options=opts)
    encode_passages(base_encoder, passages[:16], tmp_path / "p", options=QUIET)
    assert stats["engine"] == "lightning"
    np.testing.assert_allclose(load_embeddings(tmp_path / "l").vectors, load_embeddings(tmp_path / "p").vectors,
                               atol=1e-6)


def test_queries_use_query_encoder_settings(lambda_dir, tmp_path):
    lam = BiEncoder.load(lambda_dir)
    queries = {"q2": "0-dimensional biomaterials show inductive properties.", "q1": "vitamin C prevents scurvy"}
    encode_queries(lam, queries, tmp_path / "q", options=QUIET)
    emb = load_embeddings(tmp_path / "q")
    assert emb.ids == ["q2", "q1"]
    np.testing.assert_allclose(emb.vectors, lam.encode_query(list(queries.values())), atol=1e-5)
    assert emb.manifest["stats"]["pooling"] == "cls" and emb.manifest["stats"]["normalize"] is False


def test_damaged_directory_names_the_missing_file(base_encoder, passages, tmp_path):
    encode_passages(base_encoder, passages[:4], tmp_path / "d", options=QUIET)
    (tmp_path / "d" / "part-00000.npy").unlink()
    with pytest.raises(ArtifactError, match="part-00000.npy"):
        load_embeddings(tmp_path / "d")


def test_stage_encodes_passages_and_query_splits(lambda_dir, passages, sample_dir, tmp_path):
    """`spar encode` on passages.arrow (as the sample stage writes it), with dev/test queries, base and Λ; the stored
    query splits are the ones tune and evaluate use, with the experiment's seed (7, not the default 42)."""
    import pipelines.encode as stage
    from spar.core.config import load_config
    from spar.experiment.plan import split_queries

    out = tmp_path / "run"
    (out / "queries").mkdir(parents=True)
    # Every passage the test qrels judge (qrels naming passages outside passages.arrow are refused), and a few more.
    judged = {line.split("\t")[1] for line in (sample_dir / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    corpus = list(read_corpus(sample_dir / "corpus.jsonl"))
    rows = [p for p in corpus if p.id in judged] + [p for p in corpus if p.id not in judged][:4]
    write_table(out / "queries" / "passages.arrow", pa.table({
        "row": list(range(len(rows))), "id": [p.id for p in rows], "title": [p.title for p in rows],
        "text": [p.text for p in rows]}, schema=PASSAGES))
    shutil.copytree(lambda_dir, out / "lambda")
    cfg = load_config(None, [
        f"experiment.output_dir={out}", f"data.corpus={sample_dir / 'corpus.jsonl'}",
        f"{QS}.dev={sample_dir / 'queries.jsonl'}", f"{QS}.test={sample_dir / 'queries.jsonl'}",
        f"{QS}.qrels_dev=null", f"{QS}.dev_holdout_fraction=0.5",
        f"{QS}.qrels_test={sample_dir / 'qrels' / 'test.tsv'}", "encode.base.passage_max_length=64",
        "encode.shard_size=5", "encode.batch_size=16", "experiment.seed=7", "encode.precision=32",
    ])
    result = stage.run(cfg)
    assert "skipped" not in result and result["source"].endswith("passages.arrow")
    emb = out / "embeddings"
    test_qids = list(split_queries(cfg, "test").qrels)  # what evaluate reads (stored in qrels-file order)
    dev_qids = list(split_queries(cfg, "dev").qrels)  # what tune reads
    assert test_qids and dev_qids and not set(test_qids) & set(dev_qids)
    default = cfg.data.question_sets["default"]
    assert set(dev_qids) == set(evaluation_qrels(default, "dev", seed=7))
    assert set(dev_qids) != set(evaluation_qrels(default, "dev", seed=42))  # the seed matters on this sample
    for name, pooling in (("base", "mean"), ("lambda", "cls")):
        p = load_embeddings(emb / name / "passages")
        assert p.ids == [x.id for x in rows] and p.manifest["stats"]["shards"] == -(-len(rows) // 5)
        assert p.manifest["stats"]["pooling"] == pooling
        test = load_embeddings(emb / name / "queries-test")
        assert test.ids == test_qids and test.vectors.shape == (len(test_qids), 384)
        assert test.model_fingerprint == p.model_fingerprint  # queries and passages: one encoder
        assert load_embeddings(emb / name / "queries-dev").ids == dev_qids
    assert (load_embeddings(emb / "base" / "passages").model_fingerprint
            != load_embeddings(emb / "lambda" / "passages").model_fingerprint)
    texts = {q.id: q.text for q in read_queries(sample_dir / "queries.jsonl")}
    lam = BiEncoder.load(out / "lambda")
    np.testing.assert_allclose(load_embeddings(emb / "lambda" / "queries-test").vectors[:3],
                               lam.encode_query([texts[q] for q in test_qids[:3]]), atol=1e-5)
    assert stage.run(cfg)["skipped"]


def test_stage_requires_lambda(sample_dir, tmp_path):
    import pipelines.encode as stage
    from spar.core.config import load_config

    cfg = load_config(None, [f"experiment.output_dir={tmp_path}", f"data.corpus={sample_dir / 'corpus.jsonl'}",
                             "encode.encoders=[lambda]"])
    with pytest.raises(ArtifactError, match="run `spar train`"):
        stage.run(cfg)


def test_titles_can_be_left_out(base_encoder, passages, tmp_path):
    """``data.title_field: false``: the text alone is encoded, and that is a different artifact."""
    encode_passages(base_encoder, passages[:4], tmp_path / "t", use_titles=False, options=QUIET)
    np.testing.assert_allclose(load_embeddings(tmp_path / "t").vectors,
                               base_encoder.encode_passage([p.text for p in passages[:4]]), atol=1e-5)
    assert not encode_passages(base_encoder, passages[:4], tmp_path / "t", options=QUIET).get("skipped")


# ---- precision (encode.precision): honoured on the CPU where it is native, refused where it is not ----------------


def test_cpu_bf16_is_detected_from_the_cpu_flags(monkeypatch, tmp_path):
    """AMX or AVX-512 BF16 in /proc/cpuinfo's flags: native bf16; AVX2 alone: none."""
    import builtins

    from spar.model import engines

    monkeypatch.delenv(engines.CPU_CLASS_ENV)  # the suite's pin (tests/conftest.py): here the flags are read
    real_open = builtins.open
    for flags, expected in [("fpu sse2 avx2 avx512f avx512_bf16", "avx512_bf16"), ("fpu avx2 amx_tile amx_bf16",
                                                                                  "amx_bf16"), ("fpu sse2 avx2", None)]:
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\n")
        monkeypatch.setattr(builtins, "open", lambda f, *a, **k: real_open(cpuinfo if f == "/proc/cpuinfo" else f,
                                                                           *a, **k))
        engines.detected_cpu_bf16.cache_clear()
        assert engines.cpu_bf16_support() == expected, flags
        assert engines.resolve_precision("cpu", "auto") == ("bf16-mixed" if expected else "32")
    monkeypatch.undo()
    engines.detected_cpu_bf16.cache_clear()


def test_cpu_bf16_encoding_is_honoured_recorded_and_fingerprinted(base_encoder, passages, tmp_path, monkeypatch):
    """On a CPU with native bf16, `auto` encodes under bf16 autocast: other vectors (close to fp32's), recorded in
    the manifest and the fingerprint; fp32 keeps the fingerprint it had before precision was honoured."""
    from spar.core.artifacts import read_manifest
    from spar.model import engines

    fp32 = encode_passages(base_encoder, passages, tmp_path / "fp32", shard_size=10, weights_fingerprint="m",
                           options=EncodeOptions(batch_size=8, show_progress=False, precision="32"))
    assert fp32["precision"] == "32"
    monkeypatch.setattr(engines, "cpu_bf16_support", lambda: "amx_bf16")
    bf16 = encode_passages(base_encoder, passages, tmp_path / "bf16", shard_size=10, weights_fingerprint="m",
                           options=EncodeOptions(batch_size=8, show_progress=False, precision="auto"))
    assert bf16["precision"] == "bf16-mixed"
    a, b = load_embeddings(tmp_path / "fp32").vectors, load_embeddings(tmp_path / "bf16").vectors
    assert not np.array_equal(a, b)  # autocast really ran
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.995, cosine.min()
    m32, m16 = read_manifest(tmp_path / "fp32"), read_manifest(tmp_path / "bf16")
    assert m32["fingerprint"] != m16["fingerprint"]
    assert "precision" not in m32["config"] and m16["config"]["precision"] == "bf16-mixed"

    # Without native bf16, auto is fp32: the same fingerprint as an explicit 32 (and as before this option counted).
    monkeypatch.setattr(engines, "cpu_bf16_support", lambda: None)
    again = encode_passages(base_encoder, passages, tmp_path / "fp32", shard_size=10, weights_fingerprint="m",
                            options=EncodeOptions(batch_size=8, show_progress=False, precision="auto"))
    assert again.get("skipped") is True


def test_precision_a_device_cannot_run_is_refused_in_one_line(base_encoder, passages, tmp_path, monkeypatch):
    from spar.core.errors import ConfigError
    from spar.model import engines

    monkeypatch.setattr(engines, "cpu_bf16_support", lambda: None)
    for precision, words in [("bf16-mixed", "no native bf16"), ("16-mixed", "fp16 autocast is for GPUs")]:
        with pytest.raises(ConfigError, match=words) as err:
            encode_passages(base_encoder, passages, tmp_path / precision, shard_size=10, weights_fingerprint="m",
                            options=EncodeOptions(batch_size=8, show_progress=False, precision=precision))
        assert "\n" not in str(err.value) and not (tmp_path / precision).exists()
def test_the_rate_is_items_per_wall_second(base_encoder, passages, tmp_path):
    """#37 item 10: the encode rate was items over the shards' summed seconds; with 2 Ray workers each shard's seconds
    overlap, so a 2-worker encode looked half as fast as it was (label's rate is per wall second). Here each shard
    reports the 1,000 s two workers might each take at once: the rate must still be per second of the run."""
    import time

    from spar.core.artifacts import read_manifest
    from spar.core.executor import LocalExecutor
    from spar.core.stage import run_unit
    from spar.model.embeddings import passages_unit, write_split

    class Overlapping(LocalExecutor):
        def map(self, spec, tasks, ordered=False):
            for task, stats in super().map(spec, tasks, ordered):
                yield task, {**stats, "seconds": 1000.0}

    unit = passages_unit(base_encoder, passages[:20], tmp_path / "p", shard_size=10, options=QUIET,
                         executor=Overlapping())
    started = time.perf_counter()
    run_unit(unit, lambda w: write_split(w, unit))
    wall = time.perf_counter() - started
    assert read_manifest(tmp_path / "p")["stats"]["items_per_second"] >= 20 / wall
