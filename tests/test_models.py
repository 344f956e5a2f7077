"""Model resolution: bundled offline weights by name, local paths, hub ids passed through; incomplete model
directories (no weights, pickled weights only, no tokenizer) refused with one line naming the path."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from spar.core.errors import ArtifactError, SparError
from spar.model.resolve import bundled_models, model_fingerprint, resolve_model


def test_bundled_models_are_found_without_hardcoded_paths():
    found = bundled_models()
    for name, path in found.items():
        assert path is not None and (path / "config.json").exists(), name
    assert resolve_model("all-MiniLM-L6-v2") == resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    assert resolve_model("splade-tiny") == found["splade-tiny"]


def test_local_path_and_hub_id(tmp_path: Path, monkeypatch):
    local = resolve_model("all-MiniLM-L6-v2")
    assert resolve_model(str(local)) == local
    with pytest.raises(FileNotFoundError, match="model path not found"):
        resolve_model("./no/such/model")
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        resolve_model(str(tmp_path))
    # Offline (the tests' setting), a hub id that is not cached fails at once instead of retrying for a minute.
    started = time.perf_counter()
    with pytest.raises(SparError, match=r"^model 'no-such-org/no-such-model' is not bundled.*HF_HUB_OFFLINE"):
        resolve_model("no-such-org/no-such-model")
    assert time.perf_counter() - started < 5
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert resolve_model("bert-base-uncased") == "bert-base-uncased"
    dpr = "facebook/dpr-question_encoder-single-nq-base"
    assert resolve_model(dpr) == dpr


def _minilm_copy(tmp_path: Path, *drop: str) -> Path:
    out = tmp_path / "minilm"
    shutil.copytree(resolve_model("all-MiniLM-L6-v2"), out)
    for name in drop:
        (out / name).unlink()
    return out


@pytest.mark.parametrize(("drop", "message"), [
    (("config.json", "modules.json"), "not a model directory (no config.json)"),
    (("model.safetensors",), "no model weights (model.safetensors)"),
    (("tokenizer.json", "vocab.txt"), "no tokenizer vocabulary"),
])
def test_incomplete_model_directories_are_refused(tmp_path: Path, drop, message):
    from spar.model.encoders import BiEncoder

    model = _minilm_copy(tmp_path, *drop)
    with pytest.raises(SparError) as caught:
        BiEncoder.from_pretrained(str(model))
    assert str(caught.value).startswith(str(model)) and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_pickled_weights_only_are_refused(tmp_path: Path):
    """README: safetensors only. A directory with only pytorch_model.bin is refused, not loaded."""
    import torch
    from safetensors.torch import load_file

    from spar.model.encoders import BiEncoder

    model = _minilm_copy(tmp_path)
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    with pytest.raises(SparError, match=r"only pytorch_model\.bin weights; spar loads safetensors only"):
        BiEncoder.from_pretrained(str(model))


def test_a_saved_encoder_without_its_tokenizer_is_refused(tmp_path: Path):
    from spar.model.encoders import BiEncoder

    enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", shared_weights=True)
    enc.save(tmp_path / "lambda")
    BiEncoder.load(tmp_path / "lambda")  # complete: loads
    for name in ("tokenizer.json", "vocab.txt"):
        (tmp_path / "lambda" / "query_encoder" / name).unlink(missing_ok=True)
    with pytest.raises(ArtifactError, match=r"lambda/query_encoder: no tokenizer vocabulary"):
        BiEncoder.load(tmp_path / "lambda")


def test_fingerprints_distinguish_models():
    assert model_fingerprint("all-MiniLM-L6-v2") != model_fingerprint("splade-tiny")
    assert model_fingerprint("all-MiniLM-L6-v2") == model_fingerprint("all-MiniLM-L6-v2")


def test_bundled_minilm_loads_and_encodes():
    from spar.model.encoders import BiEncoder

    enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    q = enc.encode_query(["what causes scurvy"])
    p = enc.encode_passage([("Scurvy", "Scurvy is caused by a lack of vitamin C."), "Paris is in France."])
    scores = enc.similarity(q, p)[0]
    assert q.shape == (1, 384) and scores[0] > scores[1]
