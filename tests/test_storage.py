"""Quantized SPAR indexes (issue #21): every storage end to end, μ tuned against what is served, refusals, and the
bytes-per-passage frontier."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pipelines.frontier import point_stages
from spar.core.artifacts import artifact_dir
from spar.core.errors import ArtifactError
from spar.index.served import served_passage_vectors
from spar.index.spar_index import IndexOptions, SparIndex
from spar.index.storage import STORAGES, code_bytes
from spar.index.types.registry import registered_type

from test_tune import build_sample_experiment, experiment_config, sample_experiment  # noqa: F401

COMBINATIONS = [(t, s) for t in ("flat", "hnsw", "ivf") for s in STORAGES if registered_type(t).accepts(s)]
FAST_SCAN = ("fs4", "fs2")


def _vectors(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, 32)).astype(np.float32)
    lam = (3 * rng.standard_normal((n, 64))).astype(np.float32)  # another scale than the base, as Λ has
    return base, lam, rng.standard_normal((6, 32)).astype(np.float32), rng.standard_normal((6, 64)).astype(np.float32)


@pytest.mark.parametrize("index_type,storage", COMBINATIONS)
def test_served_vectors_give_the_index_scores(index_type, storage):
    """Scoring queries by hand against served_passage_vectors reproduces what the FAISS index of that storage returns:
    what `tune` optimises μ on is what `index` serves."""
    base, lam, q, ql = _vectors()
    options = IndexOptions(storage=storage, pq_m=16, ivf_nlist=8, nprobe=8, hnsw_ef_search=512)
    index = SparIndex.build(base, lam, index_type=index_type, options=options)
    served_base, served_lambda = served_passage_vectors(base, lam, "concat", index_type, options)
    scores, ids = index.search(q, ql, k=5, mu=0.4)
    by_hand = q @ served_base.T + 0.4 * ql @ served_lambda.T
    expected_rows = np.argsort(-by_hand, axis=1)[:, :5]
    expected = np.take_along_axis(by_hand, expected_rows, axis=1)
    if storage in FAST_SCAN:  # fast-scan scores go through 8-bit lookup tables: close, not equal
        assert np.allclose(scores, expected, rtol=0.03, atol=0.5)
    else:
        assert np.allclose(scores, expected, atol=1e-3)
    assert index.info["storage"] == storage and index.storage == storage
    if storage == "float32":
        assert np.array_equal(served_lambda, lam)
    else:  # the codes really are lossy, and lossier with fewer bits
        assert not np.array_equal(served_lambda, lam)


def test_fewer_bits_lose_more_and_sizes_are_by_hand():
    base, lam, _, _ = _vectors()
    errors = {}
    for storage in ("float16", "sq8", "sq6", "sq4", "fs2"):
        served = served_passage_vectors(base, lam, "concat", "flat", IndexOptions(storage=storage))
        errors[storage] = float(np.abs(np.hstack(served) - np.hstack([base, lam])).mean())
    assert errors["float16"] < errors["sq8"] < errors["sq6"] < errors["sq4"] < errors["fs2"]
    # 96 dimensions: 4 bytes, 2 bytes, 1 byte, 6 bits, 4 bits each; PQ: 16 codes of 8 bits.
    assert [code_bytes(s, 96) for s in ("float32", "float16", "sq8", "sq6", "sq4")] == [384, 192, 96, 72, 48]
    assert code_bytes("pq", 96, pq_m=16, pq_nbits=8) == 16 and code_bytes("sq6", 7) == math.ceil(42 / 8)
    import faiss

    assert code_bytes("fs4", 96) == 48 and code_bytes("fs2", 96) == 24
    for storage, factory in (("sq4", "SQ4"), ("sq6", "SQ6"), ("float16", "SQfp16"), ("fs4", "PQ96x4fs"),
                             ("fs2", "PQ48x4fs")):
        assert faiss.index_factory(96, factory, faiss.METRIC_INNER_PRODUCT).sa_code_size() == code_bytes(storage, 96)


def test_sum_variant_served_vectors_fold_lambda_into_the_sum():
    base, lam, q, ql = _vectors()
    lam = lam[:, :32]
    options = IndexOptions(storage="sq8")
    served_sum, zeros = served_passage_vectors(base, lam, "sum", "flat", options)
    assert not zeros.any()
    index = SparIndex.build(base, lam, variant="sum", options=options)
    scores, _ = index.search(q, ql[:, :32], k=1, mu=0.5)
    by_hand = (q + 0.5 * ql[:, :32]) @ served_sum.T
    assert np.allclose(scores[:, 0], by_hand.max(axis=1), atol=1e-3)


@pytest.mark.parametrize("index_type,storage,message", [
    ("ivfpq", "sq8", r"^index.type=ivfpq stores PQ codes, not index.storage=sq8; use index.type=ivf"),
    ("hnsw", "pq", r"^index.storage=pq with index.type=hnsw: FAISS's HNSW-PQ has no inner product"),
    ("hnsw", "fs4", r"^index.storage=fs4 with index.type=hnsw: FAISS's HNSW cannot store fast-scan codes"),
])
def test_impossible_combinations_are_one_line_errors(index_type, storage, message):
    base, lam, _, _ = _vectors(500)
    with pytest.raises(ArtifactError, match=message):
        SparIndex.build(base, lam, index_type=index_type, options=IndexOptions(storage=storage))


def test_unknown_storage_in_a_config_is_refused(sample_experiment, tmp_path):  # noqa: F811
    from spar.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"'index.storage': Input should be 'float32', 'float16', 'sq8', 'sq6', "
                                          r"'sq4', 'fs4', 'fs2' or 'pq'"):
        experiment_config(sample_experiment, tmp_path, "index.storage=sq3")


# ----------------------------------------------------------------------------------------------------------------
# End to end on the sample experiment: tune -> index -> evaluate -> search, for each storage
# ----------------------------------------------------------------------------------------------------------------


def _copy_experiment(sample_experiment, root):  # noqa: F811
    root.mkdir(parents=True)
    for name in ("queries", "teacher_index", "lambda", "embeddings"):
        (root / name).symlink_to(artifact_dir(sample_experiment, name), target_is_directory=True)
    return root


#: The default run checks the default storage, exact float32 and one of each index type; every other storage end to
#: end is slow (tune, index and evaluate each: ~4 min together on 2 busy cores).
END_TO_END = [("flat", "sq4"), ("flat", "float32"), ("hnsw", "sq4"), ("ivf", "sq8")]


@pytest.mark.parametrize("index_type,storage", END_TO_END + [
    pytest.param("flat", s, marks=pytest.mark.slow) for s in STORAGES if ("flat", s) not in END_TO_END])
def test_each_storage_end_to_end(sample_experiment, tmp_path, index_type, storage):  # noqa: F811
    from pipelines import evaluate as evaluate_stage
    from pipelines import index as index_stage
    from pipelines import tune as tune_stage
    from spar.experiment.inputs import ExperimentInputs
    from spar.evaluate.tuning import read_tuned

    root = _copy_experiment(sample_experiment, tmp_path / "run")
    cfg = experiment_config(root, root / "results", f"index.type={index_type}", f"index.storage={storage}",
                            "index.pq_m=48", "index.ivf_nlist=8", "index.nprobe=8", "evaluate.shuffled=false")
    tune_stage.run(cfg)
    tuned = read_tuned(root)
    assert tuned.storage == storage and tuned.payload["codec"]["storage"] == storage
    index_stage.run(cfg)
    index = SparIndex.load(artifact_dir(root, "index"))
    assert index.storage == storage
    nbits = 8 if storage != "pq" else int(math.log2(len(index) / 39))  # 600 passages train 2^3 centroids, not 2^8
    assert index.info["code_bytes"] == code_bytes(storage, index.info["dim"], pq_m=48, pq_nbits=nbits)
    evaluate_stage.run(cfg)
    results = json.loads((root / "results" / f"{cfg.experiment.name}.json").read_text())
    spar = results["systems"]["spar"]
    assert results["index"]["storage"] == storage and results["index"]["code_bytes"] == index.info["code_bytes"]
    header = (root / "results" / f"{cfg.experiment.name}.md").read_text().splitlines()[0]
    assert f"passages stored as {storage} ({index.info['code_bytes']:,} B/passage)" in header
    # Quantized, not broken (PQ here: 18 bytes for 768 dimensions, trained on 600 passages).
    assert spar["nDCG@10"] > results["systems"]["base"]["nDCG@10"] * (0.6 if storage == "pq" else 0.9)

    # The tuned μ's dev score is the score of the served vectors, checked by hand with exact search.
    inputs = ExperimentInputs(cfg)
    from spar.evaluate.exact import dense_search
    from spar.experiment.plan import split_queries
    from spar.index.combine import spar_query_vectors
    from spar.evaluate.metrics import evaluate_run

    dev = split_queries(cfg, "dev")
    served = served_passage_vectors(inputs.passage_vectors("base"), inputs.passage_vectors("lambda"), "concat",
                                    index_type, IndexOptions.from_section(cfg.index, seed=cfg.experiment.seed))
    q = spar_query_vectors(inputs.query_vectors("base", dev), inputs.query_vectors("lambda", dev), tuned.mu())
    run = dense_search(q, np.hstack(served), dev.ids, inputs.doc_ids, 10)
    assert evaluate_run(dev.qrels, run, ["nDCG@10"])["nDCG@10"] == pytest.approx(
        tuned.payload["dev_scores"]["spar"], abs=2e-3 if index_type != "flat" else 1e-4)

    # Searching the index with the tuned μ gives the evaluated run's ranking.
    test = split_queries(cfg, "test")
    first = test.ids[0]
    hits = index.search(inputs.query_vectors("base", test)[:1], inputs.query_vectors("lambda", test)[:1], 10,
                        tuned.mu())[1][0]
    trec = (root / "evaluation" / "runs" / "spar.trec").read_text().splitlines()
    ranked = [line.split()[2] for line in trec if line.split()[0] == first][:10]
    assert hits == ranked


def test_mu_tuned_for_another_storage_is_refused(sample_experiment, tmp_path):  # noqa: F811
    from pipelines import index as index_stage
    from pipelines import tune as tune_stage
    from spar.evaluate.evaluation import evaluate_experiment

    root = _copy_experiment(sample_experiment, tmp_path / "run")
    tune_stage.run(experiment_config(root, root / "results", "index.storage=sq4"))
    cfg = experiment_config(root, root / "results", "index.storage=float32")
    index_stage.run(cfg)
    with pytest.raises(ArtifactError, match=r"the index stores passages as .*float32.* but μ in .*tune.json was "
                                            r"tuned against .*sq4"):
        evaluate_experiment(cfg)
    # The configured storage is part of tune's inputs: running tune again re-tunes for float32, and then it passes.
    assert "skipped" not in tune_stage.run(cfg)
    assert evaluate_experiment(cfg).systems["spar"]["nDCG@10"] > 0


def test_overrides_the_stored_index_cannot_honour_are_refused(sample_experiment, tmp_path):  # noqa: F811
    """#31 item 3: `spar evaluate … index.storage=…` on an index stored otherwise served the stored index while the
    results recorded the override's command line (and publish's card its config); an index of a variant μ was not
    tuned for was searched with the other variant's μ. Both are refused in one line naming what to rebuild, also
    when the results are up to date, and nothing is recorded."""
    from pipelines import evaluate as evaluate_stage
    from pipelines import index as index_stage
    from pipelines import tune as tune_stage

    root = _copy_experiment(sample_experiment, tmp_path / "run")
    common = ("evaluate.shuffled=false", "tune.tune_both_variants=false")
    cfg = experiment_config(root, root / "results", *common)
    tune_stage.run(cfg)
    index_stage.run(cfg)
    sq8 = experiment_config(root, root / "results", *common, "index.storage=sq8")
    refusal = (rf"^{root / 'index'}: not the index the config asks for: index.storage=sq8 \(the index has float32\); "
               r"re-run `spar index` \(and `spar tune`\) with these settings, or drop the override$")
    with pytest.raises(ArtifactError, match=refusal):
        evaluate_stage.run(sq8)
    assert not (root / "results").exists() and not (root / "evaluation").exists()
    evaluate_stage.run(cfg)
    with pytest.raises(ArtifactError, match=refusal):  # up to date for float32: still not served as sq8
        evaluate_stage.run(sq8)
    # #37 item 4: publish said "skipped (up to date)" to the same override (only --force refused it).
    from pipelines import publish as publish_stage

    publish_stage.run(cfg)
    for force in (False, True):
        with pytest.raises(ArtifactError, match=refusal):
            publish_stage.run(sq8, force=force)

    as_sum = experiment_config(root, root / "results", *common, "index.variant=sum")
    index_stage.run(as_sum)
    with pytest.raises(ArtifactError, match=rf"^{root / 'index'}: a 'sum' index, but μ in {root / 'tune'}/tune.json "
                                            r"was tuned for concat only: re-run `spar tune` with tune.variant=sum"):
        evaluate_stage.run(as_sum)


# ----------------------------------------------------------------------------------------------------------------
# The bytes-per-passage frontier
# ----------------------------------------------------------------------------------------------------------------


def test_frontier_has_a_storage_axis_with_latency(sample_experiment, tmp_path):  # noqa: F811
    from spar.sweep.frontier import run_frontier

    root = _copy_experiment(sample_experiment, tmp_path / "run")
    cfg = experiment_config(root, root / "results")
    report = run_frontier(cfg, point_stages(), kinds=("projection",), dims=(64,), seeds=(0, 1),
                          storages=("float32", "sq4", "fs2"),
                          progress=lambda _: None, index_types=("flat", "hnsw", "ivf"))
    by_key = {(p.storage, p.seed): p for p in report.points}
    assert set(by_key) == {(s, seed) for s in ("float32", "sq4", "fs2") for seed in (0, 1)}
    base_dim = report.references["base"]["bytes_per_passage"] // 4
    assert by_key[("float32", 0)].bytes_per_passage == 4 * (base_dim + 64)
    assert by_key[("sq4", 0)].bytes_per_passage == (base_dim + 64) // 2
    assert by_key[("fs2", 0)].bytes_per_passage == (base_dim + 64) // 4
    timed = by_key[("sq4", 0)].latency
    assert set(timed) == {"flat", "hnsw", "ivf"} and not by_key[("sq4", 1)].latency  # the first seed only
    assert set(by_key[("fs2", 0)].latency) == {"flat", "ivf"}  # HNSW cannot hold fast-scan codes
    flat = timed["flat"]
    # Each point times the hybrid side by side with its own indexes (#37 item 12): its ratios divide one moment's.
    assert flat["hybrid"] != by_key[("fs2", 0)].latency["flat"]["hybrid"]  # timed again with the fs2 point
    assert flat["vs_hybrid"]["single_ms"] == pytest.approx(flat["single_ms"] / flat["hybrid"]["single_ms"], abs=1e-3)
    assert flat["vs_base"]["batched_ms"] == pytest.approx(flat["batched_ms"] / flat["base"]["batched_ms"], abs=1e-3)
    # Approximate indexes are scored against the exact scan of the same codes.
    for index_type in ("hnsw", "ivf"):
        scored = by_key[("sq4", 0)].approximate[index_type]
        assert scored["loss"] == pytest.approx(by_key[("sq4", 0)].spar["nDCG@10"] - scored["nDCG@10"], abs=1e-5)
        assert 0 < scored["overlap@10"] <= 1
    assert by_key[("sq4", 0)].approximate["hnsw"]["overlap@10"] > 0.9  # 600 passages: HNSW is nearly exact
    # The same Λ: fidelity does not depend on storage; SPAR may.
    assert by_key[("sq4", 0)].rbo == by_key[("float32", 0)].rbo
    table = report.markdown()
    assert "| projection | 64 | sq4 |" in table and "| projection | 64 | float32 |" in table
    assert "HNSW nDCG@10 (vs flat)" in table and "IVF nDCG@10 (vs flat)" in table
    report.plot(tmp_path / "frontier.png")
    assert (tmp_path / "frontier.png").stat().st_size > 10_000
