"""``encode.backend``: the ONNX Runtime encoder against the torch one, on SciFact-sample passages and queries, with
the real bundled MiniLM (exported once per module into a temporary cache)."""

from __future__ import annotations

import itertools
import json
import pickle
import shutil

import numpy as np
import pytest
import torch

from spar.core.fingerprint import fingerprint_dict
from spar.core.artifacts import stage_fingerprint
from spar.model.embeddings import EncodeOptions, encode_passages, encode_queries, encoder_fingerprint
from spar.model.stored_vectors import load_embeddings
from spar.model.engines import encode_shard_loop, tokenize_shard
from spar.model.encoders import BiEncoder
from spar.core.errors import ArtifactError, ConfigError
from spar.model.onnx_encoder import INFO_FILE, OnnxBiEncoder, cache_root, with_backend
from spar.data.readers import read_corpus, read_queries

#: fp32 on every CPU class: ONNX Runtime runs fp32, and the torch vectors are its reference (issue #45).
TORCH = EncodeOptions(batch_size=8, show_progress=False, precision="32")
ONNX = EncodeOptions(batch_size=8, show_progress=False, backend="onnx")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One intra-op thread for torch and ONNX Runtime (sessions take torch's count) on the shared test machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(autouse=True)
def isolated_cache(cache, monkeypatch):
    """Every export of this module goes to its own cache, never the user's."""
    monkeypatch.setenv("SPAR_CACHE_DIR", str(cache))


@pytest.fixture(scope="module")
def base() -> BiEncoder:
    return BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True, passage_max_length=64,
                                     query_max_length=32, query_prefix="query: ")


@pytest.fixture(scope="module")
def fast(base, cache) -> OnnxBiEncoder:
    return OnnxBiEncoder.from_encoder(base, cache_dir=cache / "onnx")


@pytest.fixture(scope="module")
def passages(sample_dir):
    return list(itertools.islice(read_corpus(sample_dir / "corpus.jsonl"), 20))


@pytest.fixture(scope="module")
def queries(sample_dir):
    return {q.id: q.text for q in itertools.islice(read_queries(sample_dir / "queries.jsonl"), 12)}


def _shard_vectors(encoder, items, side):
    return encode_shard_loop(encoder, tokenize_shard(encoder, items, side, 6), side, "cpu", precision="32")


def test_same_vectors_as_torch(base, fast, passages, queries):
    """The shard-level function gives the torch encoder's vectors (mean pooling, normalised, prefix, truncation)."""
    items = [(p.title, p.text) for p in passages]
    reference, vectors = _shard_vectors(base, items, "passage"), _shard_vectors(fast, items, "passage")
    assert tokenize_shard(base, items, "passage", 6).truncated > 0  # truncation at 64 tokens is exercised
    np.testing.assert_allclose(vectors, reference, atol=1e-5, rtol=0)
    texts = list(queries.values())
    np.testing.assert_allclose(_shard_vectors(fast, texts, "query"), _shard_vectors(base, texts, "query"),
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(fast.encode_query(texts[:3]), base.encode_query(texts[:3]), atol=1e-5, rtol=0)
    # the query prefix is applied: without it the vectors differ by far more than the tolerance
    plain = BiEncoder(base.query_model, base.passage_model, base.tokenizer, base.settings.__class__(
        pooling="mean", normalize=True, query_max_length=32))
    assert np.abs(plain.encode_query(texts[:3]) - fast.encode_query(texts[:3])).max() > 1e-2


def test_exporting_leaves_the_torch_encoder_alone(base, passages, tmp_path):
    """torch.onnx.export changes the outputs of the module it traces: spar exports a copy."""
    items = [(p.title, p.text) for p in passages[:4]]
    before = base.encode_passage(items)
    exported = OnnxBiEncoder.from_encoder(base, cache_dir=tmp_path / "fresh")  # a real export, not a cache hit
    assert exported.files["query"].info["probe_max_abs_diff"] < 1e-4
    np.testing.assert_array_equal(base.encode_passage(items), before)


def test_separate_passage_weights_and_cls_pooling(passages, queries, cache):
    """A DPR-style Λ (CLS pooling, raw dot products, its own passage weights): one file per side."""
    lam = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="cls", normalize=False, passage_max_length=64)
    with torch.no_grad():
        lam.passage_model.embeddings.word_embeddings.weight.mul_(1.5)
    fast = OnnxBiEncoder.from_encoder(lam, cache_dir=cache / "onnx")
    assert fast.files["query"].path != fast.files["passage"].path
    items, texts = [(p.title, p.text) for p in passages[:8]], list(queries.values())
    np.testing.assert_allclose(_shard_vectors(fast, items, "passage"), _shard_vectors(lam, items, "passage"),
                               atol=1e-5, rtol=0)
    np.testing.assert_allclose(_shard_vectors(fast, texts, "query"), _shard_vectors(lam, texts, "query"),
                               atol=1e-5, rtol=0)
    # the sides really differ (the passage session is not the query one)
    assert np.abs(fast.encode_passage(["same text"]) - fast.encode_query(["same text"])).max() > 1e-2


def test_backend_in_manifest_and_fingerprint(base, passages, queries, tmp_path):
    """Switching the backend re-encodes; the manifest says which backend and which exported file made the vectors;
    the torch path's fingerprints are those computed before backends existed."""
    torch_stats = encode_passages(base, passages, tmp_path / "p", options=TORCH, weights_fingerprint="minilm")
    torch_emb = load_embeddings(tmp_path / "p")
    assert torch_stats["backend"] == "torch" and "onnx" not in torch_stats
    # The encoder fingerprint as spar computed it before this backend (main at f9906e7, same settings) ...
    assert encoder_fingerprint("minilm", BiEncoder.from_pretrained(
        "all-MiniLM-L6-v2", pooling="mean", normalize=True, passage_max_length=64,
        query_max_length=32)) == "f023f1b7979f7da2"
    # ... and the artifact's: the settings that change a vector, nothing about a backend.
    s = base.settings
    expected_model_fp = fingerprint_dict({
        "weights": "minilm", "pooling": s.pooling, "normalize": s.normalize, "query_prefix": s.query_prefix,
        "passage_prefix": s.passage_prefix, "query_max_length": s.query_max_length,
        "passage_max_length": s.passage_max_length})
    assert torch_emb.model_fingerprint == expected_model_fp
    manifest = torch_emb.manifest
    config = {"encoder": "encoder", "side": "passage", "model_fingerprint": expected_model_fp,
              "shard_size": 100_000, "dtype": "float32"}
    assert manifest["config"] == config
    assert manifest["fingerprint"] == stage_fingerprint("embeddings", config, manifest["inputs"])

    onnx_stats = encode_passages(base, passages, tmp_path / "p", options=ONNX, weights_fingerprint="minilm")
    assert not onnx_stats.get("skipped") and onnx_stats["encoded_this_run"] == len(passages)
    emb = load_embeddings(tmp_path / "p")
    record = emb.manifest["stats"]["onnx"]
    assert emb.manifest["stats"]["backend"] == "onnx" and record["backend"] == "onnx"
    path = record["files"]["passage"]["path"]
    assert path.startswith(str(cache_root())) and record["passage"] == record["files"]["passage"]["sha256"][:16]
    assert emb.model_fingerprint != torch_emb.model_fingerprint
    assert emb.manifest["fingerprint"] != manifest["fingerprint"]
    np.testing.assert_allclose(emb.vectors, torch_emb.vectors, atol=1e-5, rtol=0)
    assert encode_passages(base, passages, tmp_path / "p", options=ONNX, weights_fingerprint="minilm")["skipped"]
    # queries and passages of one encoder share the fingerprint (the index compares them)
    encode_queries(base, queries, tmp_path / "q", options=ONNX, weights_fingerprint="minilm")
    assert load_embeddings(tmp_path / "q").model_fingerprint == emb.model_fingerprint


def test_damaged_cache_is_rebuilt_or_named(base, fast, tmp_path, caplog):
    """A truncated cached file is exported again; one whose record was made to match is refused in one line."""
    cache = tmp_path / "cache"
    shutil.copytree(fast.files["query"].path.parent, cache / fast.files["query"].path.parent.name)
    model = cache / fast.files["query"].path.parent.name / "model.onnx"
    good = model.read_bytes()
    model.write_bytes(good[: len(good) // 2])
    with caplog.at_level("WARNING", logger="spar.model.onnx_encoder"):
        rebuilt = OnnxBiEncoder.from_encoder(base, cache_dir=cache)
    assert "exporting it again" in caplog.text and str(model) in caplog.text
    assert rebuilt.files["query"].path == model and model.read_bytes() == good  # the export is deterministic

    model.write_bytes(good[: len(good) // 2])
    info = json.loads((model.parent / INFO_FILE).read_text())
    import hashlib

    info["model.onnx"].update(size=model.stat().st_size, sha256=hashlib.sha256(model.read_bytes()).hexdigest())
    (model.parent / INFO_FILE).write_text(json.dumps(info))
    damaged = OnnxBiEncoder.from_encoder(base, cache_dir=cache)
    with pytest.raises(ArtifactError) as err:
        damaged.encode_query(["vitamin C"])
    assert str(model) in str(err.value) and "\n" not in str(err.value)


def test_pickled_encoder_reopens_its_sessions(fast, queries):
    """What a worker process receives: sessions are dropped and opened again on first use."""
    texts = list(queries.values())[:3]
    expected = fast.encode_query(texts)
    clone = pickle.loads(pickle.dumps(fast))
    assert clone._sessions == {}
    np.testing.assert_array_equal(clone.encode_query(texts), expected)


def test_backend_choice(base, fast):
    assert isinstance(with_backend(base, "auto", "cpu"), OnnxBiEncoder)
    assert with_backend(base, "auto", "cuda") is base and with_backend(base, "torch", "cpu") is base
    assert with_backend(fast, "onnx", "cpu") is fast
    with pytest.raises(ConfigError, match="runs on the CPU"):
        with_backend(base, "onnx", "cuda")
    with pytest.raises(ConfigError, match="encode.backend"):
        with_backend(base, "tensorrt", "cpu")


@pytest.mark.parametrize("value", ["tensorrt", "ONNX", "", "openvino"])
def test_config_rejects_unknown_backends(value):
    from spar.core.config import load_config

    with pytest.raises(ConfigError, match="backend"):
        load_config(None, [f"encode.backend={value}"])
    assert load_config(None, ["encode.backend=onnx"]).encode.backend == "onnx"


def test_default_is_torch_and_int8_is_its_own_backend(base, fast, queries):
    """The default keeps every existing fingerprint; int8 is another encoder (another fingerprint), close but lossy."""
    from spar.core.config import load_config

    assert load_config(None, []).encode.backend == "torch"
    int8 = with_backend(base, "onnx-int8", "cpu")
    assert isinstance(int8, OnnxBiEncoder) and int8.files["query"].path.name == "model-int8.onnx"
    assert int8.backend_record()["query"] != fast.backend_record()["query"]
    assert encoder_fingerprint("w", int8) not in (encoder_fingerprint("w", fast), encoder_fingerprint("w", base))
    texts = list(queries.values())
    reference, vectors = base.encode_query(texts), int8.encode_query(texts)
    cosine = (reference * vectors).sum(1)
    assert cosine.min() > 0.8 and np.abs(reference - vectors).max() > 1e-3
