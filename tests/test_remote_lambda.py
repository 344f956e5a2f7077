"""`bench/remote_lambda.py`: a Λ trained on a lent GPU from this machine's labels comes back as vectors a run reads.

The GPU machine gets the passages only as `bench/remote_encode.py` packs them, so the trainer's passages table is
rebuilt there from the pack: it must be the table the labels' rows index (same rows, ids, titles, texts, schema).
What comes back is decoded into the stored embeddings format the library's tuning and the benches read.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench import remote_lambda
from bench.remote_encode import _dequantize, _quantize
from spar.core.schemas import PASSAGES
from spar.data.passages import PassagesTable
from spar.model.stored_vectors import load_embeddings


def _pack(directory: Path, shards: list[list[list[str]]]) -> None:
    directory.mkdir(parents=True)
    (directory / "plan.json").write_text(json.dumps({"shards": len(shards), "shard_size": len(shards[0])}))
    for index, items in enumerate(shards):
        with lzma.open(directory / f"shard-{index:05d}.jsonl.xz", "wt") as fh:
            for item in items:
                fh.write(json.dumps(item, ensure_ascii=False) + "\n")


def test_the_passages_table_rebuilt_from_the_pack_is_the_one_the_labels_index(tmp_path):
    shards = [[["a-0", "Alpha", "first passage"], ["a-1", "Alpha", "second, with ünïcode"]],
              [["b-0", "", "a passage without a title"]]]
    _pack(tmp_path / "pack", shards)
    path = tmp_path / "passages.arrow"
    assert remote_lambda.rebuild_passages(tmp_path / "pack", path, watch=0) == 3
    table = PassagesTable(path)  # the trainer's reader: schema and rows 0..n-1 checked
    expected = pa.table({"row": [0, 1, 2], "id": ["a-0", "a-1", "b-0"], "title": ["Alpha", "Alpha", ""],
                         "text": ["first passage", "second, with ünïcode", "a passage without a title"]},
                        schema=PASSAGES)
    assert table.table.equals(expected)


def test_a_missing_shard_is_named_after_the_wait(tmp_path):
    _pack(tmp_path / "pack", [[["a-0", "", "x"]], [["b-0", "", "y"]]])
    (tmp_path / "pack" / "shard-00001.jsonl.xz").unlink()
    try:
        remote_lambda.rebuild_passages(tmp_path / "pack", tmp_path / "passages.arrow", watch=0)
    except SystemExit as exc:
        assert "shard-00001.jsonl.xz: not here" in str(exc)
    else:
        raise AssertionError("a missing shard was not refused")
    assert not (tmp_path / "passages.arrow").exists()


def test_vectors_brought_back_load_as_stored_embeddings_within_the_quantizers_step(tmp_path):
    rng = np.random.default_rng(0)
    shards = [rng.normal(size=(5, 8)).astype(np.float32) * 3, rng.normal(size=(2, 8)).astype(np.float32)]
    decoded = []
    for vectors in shards:
        codes, lo, scale = _quantize(vectors)
        decoded.append(_dequantize(codes, lo, scale))
        assert np.abs(decoded[-1] - vectors).max() <= scale.max() / 2 + 1e-6  # half a step at most
    ids = [f"p{i}" for i in range(7)]
    remote_lambda._stored(tmp_path / "passages", ids, decoded, "passage", "0123456789abcdef", {"transport": "sq8"})
    stored = load_embeddings(tmp_path / "passages")
    assert stored.ids == ids and stored.dim == 8 and stored.model_fingerprint == "0123456789abcdef"
    np.testing.assert_array_equal(stored.vectors, np.concatenate(decoded))
    assert stored.manifest["stats"]["transport"] == "sq8"
