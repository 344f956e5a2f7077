"""The hybrid as users serve it (issue #46, :mod:`spar.evaluate.served_hybrid`): the base in an HNSW graph whose
efSearch is chosen on dev questions so that the base alone loses at most a given number of Acc@20 points against its
exact scan, BM25 beside it at once, fused as evaluate fuses."""

from __future__ import annotations

import numpy as np
import pytest

from spar.data.question_sets import SplitQueries
from spar.evaluate.served_hybrid import HnswBase, ServedHybrid, calibrate_ef, success_at
from test_tune import experiment_config, sample_experiment  # noqa: E402,F401


def _corpus_and_questions(n: int = 3000, dim: int = 24, questions: int = 60):
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = [f"p{i}" for i in range(n)]
    # Each question is a passage, lightly perturbed, and judges that passage alone relevant.
    asked = rng.choice(n, questions, replace=False)
    qvecs = (vectors[asked] + 0.05 * rng.standard_normal((questions, dim))).astype(np.float32)
    queries = SplitQueries(split="dev", qrels={f"q{i}": {ids[p]: 1} for i, p in enumerate(asked)},
                           texts={f"q{i}": f"question {i}" for i in range(questions)})
    return vectors, ids, qvecs, queries


def test_accuracy_counts_a_question_once_its_relevant_passage_is_in_the_top_k():
    _, _, _, queries = _corpus_and_questions(questions=4)
    relevant = [next(iter(queries.qrels[q])) for q in queries.ids]
    run = {queries.ids[0]: [(relevant[0], 1.0), ("x", 0.5)],
           queries.ids[1]: [("x", 1.0)] * 20 + [(relevant[1], 0.1)],
           queries.ids[2]: [(relevant[2], 3.0)], queries.ids[3]: []}
    assert success_at(20, run, queries.qrels) == 50.0  # q0 and q2; q1's is 21st, q3 ranks nothing


def test_the_peer_gets_the_smallest_ef_search_within_the_allowed_loss():
    vectors, ids, qvecs, queries = _corpus_and_questions()
    exact_scores = qvecs @ vectors.T
    exact = {q: [(ids[j], float(exact_scores[i, j])) for j in np.argsort(-exact_scores[i])[:20]]
             for i, q in enumerate(queries.ids)}
    graph = HnswBase.build(vectors, ids, m=4, ef_construction=8)  # a sparse graph: a low efSearch loses
    ladder = [1, 2, 4, 8, 16, 64, 256, 1024]

    def judged(*runs):
        return queries.qrels

    found = calibrate_ef(graph, queries.ids, qvecs, exact, judged, ladder, max_loss=2.0)
    assert found["exact_acc@20"] == 100.0  # the exact scan finds every perturbed passage
    losses = [found["exact_acc@20"] - row["acc@20"] for row in found["tried"]]
    assert all(loss > 2.0 for loss in losses[:-1]) and losses[-1] <= 2.0, found
    assert found["tried"][-1]["ef_search"] < ladder[-1]  # stopped at the first within, not run to the end
    assert found["ef_search"] == found["tried"][-1]["ef_search"] == graph.ef_search and len(found["tried"]) > 1
    generous = calibrate_ef(graph, queries.ids, qvecs, exact, judged, ladder, max_loss=100)
    assert generous["ef_search"] == graph.ef_search == 1 and len(generous["tried"]) == 1


def test_the_scale_bench_fits_power_laws_and_finds_where_they_meet():
    """bench/serving_scale.py: ms = a·N^b fitted on logarithms; two such lines meet where a₁N^b₁ = a₂N^b₂."""
    from bench.serving_scale import crossing, loglog_fit

    sizes = [100_000, 200_000, 663_483]
    fit = loglog_fit(sizes, [3.0 * n ** 0.5 for n in sizes])
    assert fit["a"] == pytest.approx(3.0) and fit["b"] == pytest.approx(0.5)
    # SPAR 2·N^0.1 against a hybrid N^0.2: 2·N^0.1 = N^0.2 where N^0.1 = 2, N = 2^10
    assert crossing({"a": 2.0, "b": 0.1}, {"a": 1.0, "b": 0.2}) == pytest.approx(1024)
    assert crossing({"a": 2.0, "b": 0.2}, {"a": 1.0, "b": 0.2}) is None  # parallel: never


def test_the_served_hybrid_fuses_one_question_as_evaluate_fuses_its_hybrid(sample_experiment):  # noqa: F811
    """With an efSearch as large as the corpus the graph returns the exact lists, so the served hybrid, one question
    at a time with its halves on two threads, ranks exactly as evaluate's ``hybrid`` row (same α, same depth)."""
    from pipelines import tune as tune_stage
    from spar.evaluate.evaluation import evaluate_sets
    from spar.experiment.inputs import ExperimentInputs

    cfg = experiment_config(sample_experiment, sample_experiment / "results-served")
    tune_stage.run(cfg)  # α (skipped once tuned)
    inputs = ExperimentInputs(cfg)
    report = next(iter(evaluate_sets(cfg, inputs, systems=("hybrid",)).values()))
    test = inputs.experiment.test_splits()[0]
    depth = report.details["hybrid"]["candidates"]
    base_p = inputs.passage_vectors("base")
    graph = HnswBase.build(base_p, inputs.doc_ids, m=8, ef_construction=40)
    graph.ef_search = len(inputs.doc_ids)
    hybrid = ServedHybrid(graph, inputs.bm25, report.alpha, cfg.tune.hybrid_normalize)
    qvecs = inputs.query_vectors("base", test)
    compared = 0
    for i, (qid, text) in enumerate(test.pairs()):
        timings: dict[str, float] = {}
        served = hybrid.search(qid, text, qvecs[i], cfg.evaluate.k, depth=depth, timings=timings)
        expected = report.runs["hybrid"][qid]
        assert [doc for doc, _ in served] == [doc for doc, _ in expected], qid
        assert [s for _, s in served] == pytest.approx([s for _, s in expected], abs=1e-5)
        assert set(timings) == {"dense", "bm25", "halves"}  # each half's time and both halves' wall time
        compared += 1
    hybrid.close()
    assert compared == len(test.ids) > 10
