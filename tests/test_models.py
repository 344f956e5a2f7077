"""Model resolution: bundled offline weights by name, local paths, hub ids passed through."""

from __future__ import annotations

from pathlib import Path

import pytest

from spar.models import bundled_models, model_fingerprint, resolve_model


def test_bundled_models_are_found_without_hardcoded_paths():
    found = bundled_models()
    for name, path in found.items():
        assert path is not None and (path / "config.json").exists(), name
    assert resolve_model("all-MiniLM-L6-v2") == resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    assert resolve_model("splade-tiny") == found["splade-tiny"]


def test_local_path_and_hub_id(tmp_path: Path):
    local = resolve_model("all-MiniLM-L6-v2")
    assert resolve_model(str(local)) == local
    assert resolve_model("bert-base-uncased") == "bert-base-uncased"
    assert resolve_model("facebook/dpr-question_encoder-single-nq-base") == "facebook/dpr-question_encoder-single-nq-base"
    with pytest.raises(FileNotFoundError, match="model path not found"):
        resolve_model("./no/such/model")
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        resolve_model(str(tmp_path))


def test_fingerprints_distinguish_models():
    assert model_fingerprint("all-MiniLM-L6-v2") != model_fingerprint("splade-tiny")
    assert model_fingerprint("all-MiniLM-L6-v2") == model_fingerprint("all-MiniLM-L6-v2")


def test_bundled_minilm_loads_and_encodes():
    from spar.encoders import BiEncoder

    enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    q = enc.encode_query(["what causes scurvy"])
    p = enc.encode_passage([("Scurvy", "Scurvy is caused by a lack of vitamin C."), "Paris is in France."])
    scores = enc.similarity(q, p)[0]
    assert q.shape == (1, 384) and scores[0] > scores[1]
