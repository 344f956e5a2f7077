"""`bench/remote_encode.py`: passages encoded on another machine come back as the encode stage's own shards.

The 663k Wikipedia run's base vectors are made this way on a lent GPU (docs/experiments.md), so what comes back must
be what `spar encode` would have written: the same ids in the same shards, vectors within the transport's error, and
a stage that then finds the split finished. Shards this machine finished already are neither carried nor encoded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench import remote_encode
from spar.core.schemas import PASSAGES, write_table
from spar.data.readers import read_corpus
from spar.model.stored_vectors import load_embeddings

SHARD = 5


@pytest.fixture
def run_config(sample_dir, one_layer_minilm, tmp_path):
    """A run of 12 SciFact passages (three shards of 5, 5 and 2) whose base is the one-layer MiniLM."""
    rows = list(read_corpus(sample_dir / "corpus.jsonl"))[:12]

    def make(name: str) -> list[str]:
        out = tmp_path / name
        (out / "queries").mkdir(parents=True)
        write_table(out / "queries" / "passages.arrow", pa.table({
            "row": list(range(len(rows))), "id": [p.id for p in rows], "title": [p.title for p in rows],
            "text": [p.text for p in rows]}, schema=PASSAGES))
        return [f"experiment.output_dir={out}", f"data.corpus={sample_dir / 'corpus.jsonl'}",
                f"encode.base.model={one_layer_minilm}", "encode.base.passage_max_length=64",
                f"encode.shard_size={SHARD}", "encode.batch_size=8", "encode.precision=32",
                "encode.encoders=[base]", "experiment.wandb_mode=disabled", "data.question_sets={}"]
    return make


def _cli(*argv: str) -> None:
    remote_encode.main(list(argv))


def test_shards_encoded_elsewhere_are_the_stages_own(run_config, one_layer_minilm, tmp_path):
    import pipelines.encode as stage
    from spar.core.config import load_config

    remote, local = run_config("remote"), run_config("local")
    config = str(Path(__file__).parents[1] / "configs" / "default.yaml")
    pack, there = tmp_path / "pack", tmp_path / "there"
    _cli("pack", "-c", config, "--out", str(pack), *remote)
    plan = json.loads((pack / "plan.json").read_text())
    assert plan["shards"] == 3 and sorted(p.name for p in pack.glob("shard-*")) == [
        "shard-00000.jsonl.xz", "shard-00001.jsonl.xz", "shard-00002.jsonl.xz"]
    _cli("encode", "--pack", str(pack), "--model", str(one_layer_minilm), "--out", str(there),
         "--transport", "float32", "--batch-size", "8")
    _cli("unpack", "-c", config, "--from", str(there / "back"), *remote)
    result = stage.run(load_config(config, remote))  # finds every shard finished: writes the manifest only
    assert "skipped" not in result
    came_back = load_embeddings(Path(remote[0].split("=", 1)[1]) / "embeddings" / "base" / "passages")
    stage.run(load_config(config, local))  # the stage's own encoding, from scratch
    made_here = load_embeddings(Path(local[0].split("=", 1)[1]) / "embeddings" / "base" / "passages")
    assert came_back.ids == made_here.ids and len(came_back.ids) == 12
    assert came_back.manifest["fingerprint"] == made_here.manifest["fingerprint"]
    np.testing.assert_allclose(came_back.vectors, made_here.vectors, atol=1e-5)


def test_finished_shards_are_skipped_and_sq8_stays_within_its_error(run_config, one_layer_minilm, tmp_path):
    remote = run_config("partly")
    config = str(Path(__file__).parents[1] / "configs" / "default.yaml")
    pack, first, there, plan_dir = tmp_path / "pack", tmp_path / "first", tmp_path / "there", tmp_path / "c1"
    _cli("pack", "-c", config, "--out", str(pack), *remote)
    _cli("skip", "-c", config, "--pack", str(pack), "--into", str(plan_dir), *remote)
    assert json.loads((plan_dir / "plan.json").read_text())["skip"] == []  # nothing finished yet
    # shard 1 finished on this machine (as a CPU encode left it): brought in through a first remote pass of it alone
    only_one = tmp_path / "pack-one"
    only_one.mkdir()
    shutil.copy(pack / "shard-00001.jsonl.xz", only_one)
    (only_one / "plan.json").write_text(json.dumps({**json.loads((pack / "plan.json").read_text()), "skip": [0, 2]}))
    _cli("encode", "--pack", str(only_one), "--model", str(one_layer_minilm), "--out", str(first),
         "--transport", "float32", "--batch-size", "8")
    assert sorted(p.name for p in (first / "back").iterdir()) == ["00001"]
    _cli("unpack", "-c", config, "--from", str(first / "back"), *remote)
    _cli("skip", "-c", config, "--pack", str(pack), "--into", str(plan_dir), *remote)
    assert json.loads((plan_dir / "plan.json").read_text())["skip"] == [1]
    shutil.copy(plan_dir / "plan.json", pack / "plan.json")
    _cli("encode", "--pack", str(pack), "--model", str(one_layer_minilm), "--out", str(there), "--batch-size", "8")
    assert sorted(p.name for p in (there / "back").iterdir()) == ["00000", "00002"]  # shard 1 not encoded again
    done = json.loads((there / "back" / "00000" / "DONE").read_text())
    assert 0 < done["sq8_max_abs_error"] <= 1 / 255  # a vector of norm 1: each dimension's range is at most 2
    codes = np.load(there / "back" / "00000" / "codes-a.npy")
    assert codes.dtype == np.uint8


def test_shards_made_from_the_corpus_serve_the_sampled_table_of_the_same_passages(sample_dir, one_layer_minilm,
                                                                                  tmp_path):
    """Encoded before `spar sample` (passages read from the corpus file), unpacked after it (read from
    queries/passages.arrow): the split's identity changed, its passages did not — checked against the pack, then kept;
    a changed passage is refused."""
    import pipelines.encode as stage
    from spar.core.config import load_config

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join((sample_dir / "corpus.jsonl").read_text().splitlines(keepends=True)[:12]))
    out = tmp_path / "run"
    overrides = [f"experiment.output_dir={out}", f"data.corpus={corpus}", f"encode.base.model={one_layer_minilm}",
                 "encode.base.passage_max_length=64", f"encode.shard_size={SHARD}", "encode.batch_size=8",
                 "encode.precision=32", "encode.encoders=[base]", "experiment.wandb_mode=disabled",
                 "data.question_sets={}"]
    config = str(Path(__file__).parents[1] / "configs" / "default.yaml")
    pack, there = tmp_path / "pack", tmp_path / "there"
    _cli("pack", "-c", config, "--out", str(pack), *overrides)
    _cli("encode", "--pack", str(pack), "--model", str(one_layer_minilm), "--out", str(there),
         "--transport", "float32", "--batch-size", "8")
    rows = list(read_corpus(corpus))
    (out / "queries").mkdir(parents=True)

    def sampled(texts: list[str]) -> None:
        write_table(out / "queries" / "passages.arrow", pa.table({
            "row": list(range(len(rows))), "id": [p.id for p in rows], "title": [p.title for p in rows],
            "text": texts}, schema=PASSAGES))

    (out / "embeddings" / "base" / "passages.partial").mkdir(parents=True)
    (out / "embeddings" / "base" / "passages.partial" / ".fingerprint").write_text(
        json.loads((pack / "plan.json").read_text())["fingerprint"])  # as a CPU encode before sampling left it
    sampled([p.text for p in rows[:-1]] + [rows[-1].text + " edited"])
    with pytest.raises(SystemExit, match="shard-00002.jsonl.xz: not the passages of shard 2"):
        _cli("unpack", "-c", config, "--from", str(there / "back"), "--pack", str(pack), *overrides)
    sampled([p.text for p in rows])
    with pytest.raises(SystemExit, match="another config's"):  # without the pack, nothing vouches for them
        _cli("unpack", "-c", config, "--from", str(there / "back"), *overrides)
    _cli("unpack", "-c", config, "--from", str(there / "back"), "--pack", str(pack), *overrides)
    result = stage.run(load_config(config, overrides))
    assert result["source"].endswith("passages.arrow")
    came_back = load_embeddings(out / "embeddings" / "base" / "passages")
    assert came_back.ids == [p.id for p in rows] and came_back.manifest["stats"]["shards"] == 3
    record = json.loads((out / "embeddings" / "base" / "transport.json").read_text())
    assert record["restamped"][0]["from"] == json.loads((pack / "plan.json").read_text())["fingerprint"]
