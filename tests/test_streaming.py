"""Corpora too large to copy into memory: passage vectors streamed from their shards (and, for quantized storage,
decoded block by block) give exactly what the in-memory path gives, for tuning and for evaluation.

The sample experiment of tests/test_tune.py is small, so the streaming threshold is lowered to zero and the block
size to a few dozen rows (the blocks then cross shard and block boundaries many times)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")

from spar.model.stored_vectors import ShardedVectors  # noqa: E402
from test_tune import build_sample_experiment, experiment_config, sample_experiment  # noqa: E402,F401


def test_top_k_over_a_streamed_matrix_equals_in_memory():
    from spar.evaluate.exact import top_k

    rng = np.random.default_rng(0)
    passages = rng.standard_normal((1000, 16)).astype(np.float32)
    queries = rng.standard_normal((7, 16)).astype(np.float32)
    shards = ShardedVectors([passages[:300], passages[300:301], passages[301:]], 16)
    import spar.evaluate.exact as exact

    block, exact.STREAM_BLOCK = exact.STREAM_BLOCK, 97
    try:
        streamed = top_k(queries, shards, 10)
    finally:
        exact.STREAM_BLOCK = block
    exact = np.argsort(-(queries @ passages.T), axis=1)[:, :10]
    assert np.array_equal(streamed[1], exact)
    assert np.allclose(streamed[0], np.take_along_axis(queries @ passages.T, exact, axis=1), atol=1e-5)


def _rss_file_bytes() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("RssFile:"))


def test_gathered_rows_of_mapped_shards_are_read_not_mapped(tmp_path):
    """Tuning gathers its candidates' rows from memory-mapped shards; through the mapping, every page it touched
    stayed counted in the process's RSS (9 GB of the 663k corpus's Λ vectors in bench/results/memory-tune-663k.json).
    Gathered by positional reads, the rows are the same and the process's file-backed RSS does not grow by them."""
    rng = np.random.default_rng(0)
    passages = rng.standard_normal((4096, 2048)).astype(np.float32)  # 32 MiB over two shards
    np.save(tmp_path / "a.npy", passages[:1500])
    np.save(tmp_path / "b.npy", passages[1500:])
    shards = ShardedVectors([np.load(tmp_path / n, mmap_mode="r") for n in ("a.npy", "b.npy")], 2048)
    rows = np.concatenate([rng.permutation(4096), [7, 7, 4095, 0]])  # unsorted, repeated, both ends
    before = _rss_file_bytes()
    gathered = shards[rows]
    grown = _rss_file_bytes() - before
    np.testing.assert_array_equal(gathered, passages[rows])
    assert grown < 8 * 2**20, f"file-backed RSS grew by {grown / 2**20:.1f} MiB gathering 32 MiB of rows"
    with pytest.raises(IndexError):
        shards[np.array([4096])]


@pytest.mark.parametrize("storage", ["float32", "sq4"])
def test_tuning_and_evaluation_streamed_equal_in_memory(sample_experiment, tmp_path, monkeypatch,  # noqa: F811
                                                        storage):
    import spar.evaluate.exact as exact
    import spar.experiment.inputs as experiment
    from spar.evaluate.evaluation import evaluate_sets
    from spar.experiment.inputs import ExperimentInputs
    from spar.index.served import ServedVectors, served_passage_vectors
    from spar.evaluate.tuning import tune_experiment

    cfg = experiment_config(sample_experiment, tmp_path / "results", f"index.storage={storage}",
                            "tune.confirm=false", "tune.tune_both_variants=false")
    in_memory = tune_experiment(cfg).payload
    monkeypatch.setattr(experiment, "STREAM_BYTES", 0)
    monkeypatch.setattr(exact, "STREAM_BLOCK", 64)
    inputs = ExperimentInputs(cfg)
    base, lam = inputs.passage_vectors("base"), inputs.passage_vectors("lambda")
    assert isinstance(base, ShardedVectors) and isinstance(lam, ShardedVectors)
    if storage == "sq4":
        from spar.index.spar_index import IndexOptions

        options = IndexOptions.from_section(cfg.index, seed=cfg.experiment.seed)
        lazy = served_passage_vectors(base, lam, "concat", "flat", options)
        eager = served_passage_vectors(np.asarray(base[:len(base)]), np.asarray(lam[:len(lam)]), "concat", "flat",
                                       options)
        assert isinstance(lazy[0], ServedVectors)
        rows = np.array([5, 0, 599, 5])
        for part in (0, 1):
            assert np.array_equal(lazy[part][rows], eager[part][rows])
            assert np.array_equal(lazy[part][100:300], eager[part][100:300])
    streamed = tune_experiment(cfg, inputs).payload
    for key in ("mu", "alpha", "dev_scores", "scores"):
        assert streamed[key] == pytest.approx(in_memory[key], abs=1e-6), key
    if storage == "float32":  # the sample experiment's index stores float32
        from pipelines import tune as tune_stage

        tune_stage.run(experiment_config(sample_experiment, tmp_path / "results"))  # skipped once tuned
        monkeypatch.setattr(experiment, "STREAM_BYTES", 1 << 40)
        memory_reports = evaluate_sets(experiment_config(sample_experiment, tmp_path / "r1", "evaluate.shuffled=false"))
        monkeypatch.setattr(experiment, "STREAM_BYTES", 0)
        stream_reports = evaluate_sets(experiment_config(sample_experiment, tmp_path / "r2", "evaluate.shuffled=false"))
        for system, values in memory_reports[""].systems.items():
            assert stream_reports[""].systems[system] == pytest.approx(values, abs=1e-6), system


@pytest.mark.parametrize("storage", ["sq4", "fs4"])
def test_served_vectors_code_each_passage_once_and_decode_as_the_index_stores_them(storage, monkeypatch):
    import spar.index.served as served_module
    import spar.index.spar_index as index_module

    monkeypatch.setattr(index_module, "ADD_BATCH", 128)  # 1,000 passages: 8 blocks
    rng = np.random.default_rng(0)
    base = rng.standard_normal((1000, 16)).astype(np.float32)
    lam = 20 * rng.standard_normal((1000, 32)).astype(np.float32)
    options = index_module.IndexOptions(storage=storage, seed=0)
    eager = served_module.served_passage_vectors(base, lam, "concat", "flat", options)
    lazy = served_module.served_passage_vectors(ShardedVectors([base[:500], base[500:]], 16),
                                               ShardedVectors([lam], 32), "concat", "flat", options)
    codes = lazy[0].codes
    assert lazy[1].codes is codes  # one set of codes for both parts

    class Counting:
        def __init__(self, codec):
            self.codec, self.calls = codec, 0

        def sa_encode(self, rows):
            self.calls += 1
            return self.codec.sa_encode(rows)

    codes.codec = Counting(codes.codec)
    rows = np.array([5, 0, 999, 5, 300])
    assert np.array_equal(lazy[0][rows], eager[0][rows])
    assert codes.codec.calls == 3 and codes.coded.tolist() == [1, 0, 1, 0, 0, 0, 0, 1]
    assert np.array_equal(lazy[1][rows], eager[1][rows]) and codes.codec.calls == 3  # Λ's part: decoded, not coded
    assert np.array_equal(lazy[1][100:300], eager[1][100:300]) and codes.codec.calls == 4  # block 1 only
    assert np.array_equal(lazy[0][:], eager[0]) and np.array_equal(lazy[1][0:1000], eager[1])
    assert codes.codec.calls == 8 and codes.coded.all() and lazy[0][500:500].shape == (0, 16)
