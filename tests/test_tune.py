"""Tests of the tune stage: the μ grid and its edge extension, exact re-scoring against real FAISS searches of the
combined index, the Pyserini-style hybrid, dev-only tuning, and the stage's outputs on the embedded SciFact sample.

The ``sample_experiment`` fixture (also used by tests/test_evaluate.py) builds a small real experiment: the
embedded 600-abstract sample encoded by MiniLM (base: mean pooling, normalised) and an *untrained* Λ (MiniLM,
CLS pooling, raw dot products), the corpus as ``queries/passages.arrow`` for BM25, and the combined FAISS index.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")

from spar.core.artifacts import ArtifactWriter, artifact_dir, is_complete  # noqa: E402
from spar.core.config import load_config  # noqa: E402
from spar.evaluate.metrics import evaluate_run  # noqa: E402
from spar.evaluate.grid import default_grid, extend_grid, grid_search  # noqa: E402
from spar.evaluate.candidates import AffineCandidates, hybrid_candidates, hybrid_fuse, spar_candidates, tune_weight
from spar.evaluate.tuning import tune_mu

#: The experiment's one question set (data.queries & co. before spar 0.2).
QS = "data.question_sets.default"


# ----------------------------------------------------------------------------------------------------------------
# A small real experiment (shared with tests/test_evaluate.py and others; built once per session, idempotently)
# ----------------------------------------------------------------------------------------------------------------


PASSAGE_MAX_LENGTH = 64


def experiment_config(root: Path, results: Path, *extra: str):
    return load_config(None, [f"experiment.output_dir={root}", f"experiment.results_dir={results}",
                              "experiment.wandb_mode=disabled", "tune.candidates=100",
                              # The sample experiment's index is float32 (tests of other storages override this).
                              "index.storage=float32",
                              # Shorter passages keep the CPU encoding of 2 x 600 abstracts quick.
                              f"encode.base.passage_max_length={PASSAGE_MAX_LENGTH}", *extra])


def build_sample_experiment(root: Path) -> Path:
    """Artifacts of the upstream stages for the embedded sample (skips whatever is already complete)."""
    import pyarrow as pa

    from spar.model.embeddings import EncodeOptions, encode_passages, encode_queries
    from spar.model.encoders import BiEncoder
    from spar.lexical.transformer import TransformerLambda
    from spar.experiment.plan import split_queries
    from spar.index.spar_index import SparIndex
    from spar.data.readers import read_corpus
    from spar.core.schemas import PASSAGES, write_table

    cfg = experiment_config(root, root / "results")
    corpus = list(read_corpus(cfg.data.corpus))
    queries_dir = artifact_dir(root, "queries")
    if not is_complete(queries_dir):  # the passages table only (no sampled sentences): what Λ's fit and tune read
        with ArtifactWriter(queries_dir, kind="queries", config={"sample": "passages table only"}, inputs={}) as w:
            write_table(w.path / "passages.arrow", pa.table({
                "row": list(range(len(corpus))), "id": [p.id for p in corpus], "title": [p.title for p in corpus],
                "text": [p.text for p in corpus]}, schema=PASSAGES))
    teacher_dir = artifact_dir(root, "teacher_index")
    if not is_complete(teacher_dir):
        from spar.teacher.teachers import build_bm25_index

        with ArtifactWriter(teacher_dir, kind="teacher_index", config={"teacher": "bm25"}, inputs={}) as w:
            build_bm25_index(queries_dir / "passages.arrow", w.path, threads=2)
            w.stats.update(passages=len(corpus), teacher="bm25")
    lambda_dir = artifact_dir(root, "lambda")
    if not is_complete(lambda_dir):
        with ArtifactWriter(lambda_dir, kind="lambda", config={"untrained": "all-MiniLM-L6-v2 cls"}, inputs={}) as w:
            TransformerLambda(BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="cls", normalize=False,
                                                        passage_max_length=cfg.encode.base.passage_max_length)
                              ).save(w.path)
    encoders = {"base": BiEncoder.from_section(cfg.encode.base), "lambda": BiEncoder.load(lambda_dir)}
    options = EncodeOptions(batch_size=32, accelerator="cpu", show_progress=False)
    emb = artifact_dir(root, "embeddings")
    test = split_queries(cfg, "test")
    for name, encoder in encoders.items():
        encode_passages(encoder, cfg.data.corpus, emb / name / "passages", encoder_name=name, options=options)
        # Test query vectors are stored; dev ones are left to be encoded on the fly by tune.
        encode_queries(encoder, test.texts, emb / name / "queries-test", encoder_name=name, options=options)
    index_dir = artifact_dir(root, "index")
    if not is_complete(index_dir):
        from spar.model.stored_vectors import load_embeddings

        base_p, lambda_p = load_embeddings(emb / "base" / "passages"), load_embeddings(emb / "lambda" / "passages")
        with ArtifactWriter(index_dir, kind="index", config={"variant": "concat", "type": "flat"}, inputs={}) as w:
            SparIndex.build(base_p, lambda_p, variant="concat", index_type="flat").save(w.path)
            w.stats = {"variant": "concat", "type": "flat", "count": len(base_p)}
    return root


@pytest.fixture(scope="session")
def sample_experiment(tmp_path_factory, worker_id: str) -> Path:
    """The sample experiment, built once per session: under pytest-xdist the first worker to need it builds it under
    a file lock in the directory all workers share (pytest-xdist's documented recipe), and every worker uses its own
    copy, since tests run stages (tune, evaluate, publish) in it."""
    import shutil

    from filelock import FileLock

    # SPAR_TEST_SAMPLE_EXPERIMENT=<dir> keeps the encoded sample between sessions while iterating on these tests.
    cached = os.environ.get("SPAR_TEST_SAMPLE_EXPERIMENT")
    if cached:
        return build_sample_experiment(Path(cached))
    own = tmp_path_factory.getbasetemp() / "spar-sample-experiment"
    if worker_id == "master":  # one process (-n 0)
        return build_sample_experiment(own)
    if own.exists():
        # Each test module that imports this fixture holds its own copy of the definition, so pytest calls it once
        # per module: this worker's copy is made by the first and reused (stages skip what is up to date), as the
        # experiment built in place was before.
        return own
    shared = tmp_path_factory.getbasetemp().parent / "spar-sample-experiment"
    built = shared.with_name(f"{shared.name}.built")  # beside it, not in it: the copies hold only the experiment
    with FileLock(f"{shared}.lock"):
        if not built.exists():
            build_sample_experiment(shared)
            built.touch()
    # Nothing writes to the shared copy once built; manifests name their sources by relative path.
    shutil.copytree(shared, own, symlinks=True)
    return own


# ----------------------------------------------------------------------------------------------------------------
# The grid
# ----------------------------------------------------------------------------------------------------------------


def test_default_grid_is_tenths_and_reciprocals():
    grid = default_grid()
    assert len(grid) == 19
    assert grid[:10] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert grid[-1] == 10.0 and 2.0 in grid and 1.25 in grid and 5.0 in grid
    assert all(math.isclose(g, 1 / r, rel_tol=1e-5) for g, r in zip(grid[:10], reversed(grid[9:])))


def test_extend_grid_adds_one_decade_beyond_the_edge():
    low = extend_grid(default_grid(), "low")
    assert [v for v in low if v < 0.1] == [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09]
    high = extend_grid(default_grid(), "high")
    assert [v for v in high if v > 10] == [11.1111, 12.5, 14.2857, 16.6667, 20.0, 25.0, 33.3333, 50.0, 100.0]


def test_grid_extends_until_the_optimum_at_0_01_is_inside():
    calls = []

    def score(mu: float) -> float:  # peaked at mu = 0.01 (log scale), like MiniLM + Λ on SciFact
        calls.append(mu)
        return -abs(math.log10(mu) + 2)

    result = grid_search(score, None, max_extensions=4)
    assert result.best == 0.01
    assert result.extensions == 2  # 0.01..0.09 (best at the new edge), then 0.001..0.009 (best inside)
    assert min(result.grid) == 0.001 and not result.at_edge
    assert len(calls) == len(set(calls)) == 19 + 9 + 9  # every value scored exactly once


def test_grid_extends_upwards_and_respects_max_extensions():
    assert grid_search(lambda mu: -abs(math.log10(mu) - 1.7), None, 4).best == 50.0
    capped = grid_search(lambda mu: -mu, None, max_extensions=1)
    assert capped.best == 0.01 and capped.at_edge and capped.extensions == 1


def test_ties_prefer_the_value_closest_to_one():
    assert grid_search(lambda mu: 1.0, None, max_extensions=4).best == 1.0  # a flat curve never extends


# ----------------------------------------------------------------------------------------------------------------
# Exact re-scoring
# ----------------------------------------------------------------------------------------------------------------


def _random_problem(n_docs=400, n_queries=25, d0=16, d1=12, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n_queries, d0), dtype=np.float32),
            rng.standard_normal((n_queries, d1), dtype=np.float32),
            rng.standard_normal((n_docs, d0), dtype=np.float32), rng.standard_normal((n_docs, d1), dtype=np.float32))


@pytest.mark.parametrize("variant", ["concat", "sum"])
def test_rescoring_with_all_candidates_is_brute_force(variant):
    q0, q1, p0, p1 = _random_problem(d1=16)
    qids, dids = [f"q{i}" for i in range(len(q0))], [f"d{i}" for i in range(len(p0))]
    cands = spar_candidates(q0, q1, p0, p1, qids, dids, variant, candidates=len(p0))
    for mu in (0.01, 0.3, 1.0, 7.0):
        if variant == "concat":
            exact = q0 @ p0.T + mu * (q1 @ p1.T)
        else:
            exact = (q0 + mu * q1) @ (p0 + p1).T
        ranked = cands.rank(mu, 10)
        for i, qid in enumerate(qids):
            top = np.argsort(-exact[i])[:10]
            assert [d for d, _ in ranked[qid]] == [dids[j] for j in top]
            np.testing.assert_allclose([s for _, s in ranked[qid]], exact[i, top], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("full_matrix", [True, False], ids=["full-matrix", "faiss-topk-gather"])
@pytest.mark.parametrize("variant", ["concat", "sum"])
def test_rescored_candidates_equal_a_real_combined_faiss_search(variant, full_matrix, monkeypatch):
    import spar.evaluate.candidates
    from spar.index.spar_index import build_spar_index
    from spar.index.combine import spar_query_vectors

    if not full_matrix:  # the path large corpora take: FAISS top-k per part, then an exact gather of the union
        monkeypatch.setattr(spar.evaluate.candidates, "FULL_MATRIX_LIMIT", 0)

    q0, q1, p0, p1 = _random_problem(n_docs=1000, d1=16, seed=1)
    qids, dids = [f"q{i}" for i in range(len(q0))], [f"d{i}" for i in range(len(p0))]
    cands = spar_candidates(q0, q1, p0, p1, qids, dids, variant, candidates=100)
    for mu in (0.1, 1.0, 10.0):
        index = build_spar_index(p0, p1, variant, "flat")
        scores, rows = index.search(spar_query_vectors(q0, q1, mu, variant), 10)
        ranked = cands.rank(mu, 10)
        for i, qid in enumerate(qids):
            assert [d for d, _ in ranked[qid]] == [dids[j] for j in rows[i]]
            np.testing.assert_allclose([s for _, s in ranked[qid]], scores[i], rtol=1e-4, atol=1e-4)


def test_incremental_metric_equals_a_full_ir_measures_evaluation_at_every_weight():
    from spar.evaluate.candidates import IncrementalMetric

    q0, q1, p0, p1 = _random_problem(n_docs=300, n_queries=40, seed=4)
    qids, dids = [f"q{i}" for i in range(40)], [f"d{i}" for i in range(300)]
    rng = np.random.default_rng(5)
    qrels = {q: {f"d{j}": int(rng.integers(1, 3)) for j in rng.choice(300, 3, replace=False)} for q in qids[:35]}
    qrels["unretrieved"] = {"d1": 1}  # a judged query without candidates counts 0
    cands = spar_candidates(q0, q1, p0, p1, qids, dids, "concat", candidates=30)
    for metric in ("nDCG@10", "R@20"):
        incremental = IncrementalMetric(cands, qrels, metric)
        for mu in sorted(default_grid()) + [0.01, 0.02, 50.0]:
            assert incremental(mu) == pytest.approx(evaluate_run(qrels, cands.rank(mu, 100), [metric])[metric])
        assert incremental.evaluated_queries < 35 * 22  # unchanged rankings were not re-evaluated


def test_candidate_union_has_no_duplicates_and_is_padded():
    q0, q1, p0, p1 = _random_problem(n_docs=50)
    cands = spar_candidates(q0, q1, p0, p1, [f"q{i}" for i in range(25)], [f"d{i}" for i in range(50)], "concat", 20)
    for row in cands.rows:
        real = row[row >= 0]
        assert len(real) == len(set(real.tolist())) and 20 <= len(real) <= 40
    assert np.isneginf(cands.s0[cands.rows < 0]).all()


# ----------------------------------------------------------------------------------------------------------------
# Hybrid
# ----------------------------------------------------------------------------------------------------------------


def test_hybrid_fuse_follows_pyserini():
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.5)]
    sparse = [("c", 20.0), ("d", 15.0)]
    fused = dict(hybrid_fuse(dense, sparse, alpha=0.1))
    # missing scores take the list's minimum: b has no BM25 score -> 15; d has no dense score -> 0.5
    assert fused == pytest.approx({"a": 0.9 + 1.5, "b": 0.8 + 1.5, "c": 0.5 + 2.0, "d": 0.5 + 1.5})
    normalized = dict(hybrid_fuse(dense, sparse, alpha=1.0, normalize=True))
    # (x - mid-range) / range: dense mid 0.7 range 0.4; sparse mid 17.5 range 5
    assert normalized["a"] == pytest.approx((0.9 - 0.7) / 0.4 + (15 - 17.5) / 5)
    assert [d for d, _ in hybrid_fuse(dense, sparse, 0.1, k=2)] == ["c", "a"]


def test_hybrid_candidates_rank_like_hybrid_fuse():
    rng = np.random.default_rng(3)
    dense = {f"q{i}": [(f"d{j}", float(s))
                       for j, s in zip(rng.choice(60, 20, replace=False), np.sort(rng.random(20))[::-1])]
             for i in range(8)}
    sparse = {f"q{i}": [(f"d{j}", float(s)) for j, s in zip(rng.choice(60, 20, replace=False),
                                                             np.sort(rng.random(20) * 30)[::-1])] for i in range(8)}
    for normalize in (False, True):
        cands = hybrid_candidates(dense, sparse, normalize)
        for alpha in (0.01, 0.5, 3.0):
            ranked = cands.rank(alpha, 10)
            for q in dense:
                expected = hybrid_fuse(dense[q], sparse[q], alpha, normalize, k=10)
                np.testing.assert_allclose([s for _, s in ranked[q]], [s for _, s in expected], atol=1e-9)


def test_tune_weight_finds_the_weight_that_ranks_the_relevant_passage_first():
    # Query q0: relevant passage d1 wins only when w > 1 ; q1: d3 wins only when w < 2.
    cands = AffineCandidates(["q0", "q1"], np.array([[0, 1], [2, 3]]), np.array([[1.0, 0.0], [0.0, 1.0]]),
                             np.array([[0.0, 1.0], [0.5, 0.0]]), ["d0", "d1", "d2", "d3"])
    qrels = {"q0": {"d1": 1}, "q1": {"d3": 1}}
    result = tune_weight(cands, qrels, "MRR@10", grid=[0.5, 1.5, 3.0], max_extensions=0)
    assert result.best == 1.5 and result.best_score == 1.0
    assert result.scores[0.5] == 0.75 and result.scores[3.0] == 0.75


# ----------------------------------------------------------------------------------------------------------------
# On the embedded sample
# ----------------------------------------------------------------------------------------------------------------


def test_chosen_mu_is_confirmed_by_a_real_search_on_the_sample(sample_experiment):
    from spar.experiment.inputs import ExperimentInputs
    from spar.experiment.plan import split_queries

    cfg = experiment_config(sample_experiment, sample_experiment / "results")
    inputs = ExperimentInputs(cfg)
    dev = split_queries(cfg, "dev")
    base_q, lambda_q = inputs.query_vectors("base", dev), inputs.query_vectors("lambda", dev)
    tuned = tune_mu(base_q, lambda_q, inputs.passage_vectors("base"), inputs.passage_vectors("lambda"), dev.ids,
                    inputs.doc_ids, dev.qrels, "nDCG@10", "concat", candidates=100, confirm=True)
    assert tuned.confirmed == pytest.approx(tuned.search.best_score, abs=1e-6)
    assert tuned.search.best < 1.0  # untrained Λ (raw CLS dot products ~ 10-30) must be down-weighted vs cosine
    # Λ's raw scores dwarf the base's cosines: the optimum lies below 0.1, so the grid was extended.
    assert tuned.search.extensions >= 1


def test_tune_stage_writes_tune_json_and_curve_and_reads_only_dev_qrels(sample_experiment, tmp_path, monkeypatch):
    import spar.data.readers
    from pipelines import tune as tune_stage

    root = sample_experiment
    # The test qrels path points nowhere: tuning must not even open it (and it is not part of tune's fingerprint).
    cfg = experiment_config(root, tmp_path / "results", f"{QS}.qrels_test={tmp_path / 'no-such-test-qrels.tsv'}")
    splits = []
    real = spar.data.readers.evaluation_qrels

    def recording(data, split, seed=42, **known):
        splits.append(split)
        return real(data, split, seed, **known)

    monkeypatch.setattr(spar.data.readers, "evaluation_qrels", recording)
    stats = tune_stage.run(cfg, force=True)
    assert splits and set(splits) == {"dev"}

    out = artifact_dir(root, "tune")
    tuned = json.loads((out / "tune.json").read_text())
    for key in ("variant", "metric", "mu", "grid", "scores", "confirmed", "alpha", "alpha_scores"):
        assert key in tuned, key
    assert tuned["variant"] == "concat" and tuned["metric"] == "nDCG@10"
    assert f"{tuned['mu']:g}" in tuned["scores"] and len(tuned["scores"]) >= 19
    assert tuned["confirmed"] == pytest.approx(tuned["scores"][f"{tuned['mu']:g}"], abs=1e-5)
    assert set(tuned["variants"]) == {"concat", "sum"}  # MiniLM base and Λ share a dimension
    assert tuned["dev_scores"]["hybrid"] >= tuned["dev_scores"]["base"] - 0.01  # α tuned on dev: not worse
    assert (out / "mu_curve.png").stat().st_size > 1000 and (out / "alpha_curve.png").exists()
    assert stats["mu"] == tuned["mu"]
    assert tune_stage.run(cfg) == {"skipped": True}


def test_the_confirmation_warning_names_only_the_causes_that_apply():
    """#48 item 7: on a flat sq4 index the warning named approximate indexes and fast-scan tables."""
    from types import SimpleNamespace

    from spar.evaluate.tuning import _why_confirmation_differs

    flat_sq4 = _why_confirmation_differs((None, None, "flat", SimpleNamespace(storage="sq4")))
    assert flat_sq4 == "the sweep re-scores only the top tune.candidates passages of each question: raise it"
    hnsw_fs4 = _why_confirmation_differs((None, None, "hnsw", SimpleNamespace(storage="fs4")))
    assert hnsw_fs4.startswith("the hnsw index is approximate") and "fs4 scores with rounded look-up tables" in hnsw_fs4


@pytest.mark.cpu_class("avx512_bf16")
def test_vectors_of_another_precision_are_refused_naming_spar_encode(sample_experiment):
    """#48: vectors encoded in fp32 (``encode.precision=32``), then ``auto`` again on a CPU with native bf16 (where it
    means bf16): tune, index and evaluate went on with the fp32 vectors or, once tune had been re-run on them, told
    the user to re-run `spar tune`; `spar encode` is the stage that must re-run."""
    import pipelines.evaluate
    import pipelines.index
    import pipelines.tune
    from spar.core.errors import ArtifactError

    cfg = experiment_config(sample_experiment, sample_experiment / "results")
    assert cfg.encode.precision == "auto"
    wanted = r"passages: encoded in fp32, but encode\.precision=auto means bf16 on this CPU: re-run `spar encode`"
    for stage in (pipelines.tune, pipelines.index, pipelines.evaluate):
        with pytest.raises(ArtifactError, match=wanted):
            stage.plan(cfg)
    pinned = cfg.model_copy(update={"encode": cfg.encode.model_copy(update={"precision": "32"})})
    assert pipelines.tune.plan(pinned).kind == "tune"  # the vectors are what fp32 makes: nothing refused
    # Vectors encoded on a GPU (encode.accelerator=gpu) and tuned on a machine without one: not judged here.
    on_gpu = cfg.model_copy(update={"encode": cfg.encode.model_copy(update={"accelerator": "gpu"})})
    assert pipelines.tune.plan(on_gpu).kind == "tune"
