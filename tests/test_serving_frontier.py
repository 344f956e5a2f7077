"""bench/serving_frontier.py: the frontier's table is built only from comparable results, against the hybrid as
deployed, with the figures worked out by hand here."""

from __future__ import annotations

import copy
import doctest
import json

import pytest

from bench import serving_frontier
from bench.serving_frontier import build_frontier, main


def odqa_result(configs: dict[str, tuple[float, float, dict[str, float]]], questions: int = 100) -> dict:
    """An odqa_index result: ``configs`` name -> (ms with vectors given, bytes per passage, Acc@20 per set)."""
    sets = ["nq", "entityq"]
    return {
        "config": "configs/experiments/wiki-odqa.yaml", "passages": 1000, "questions_per_set": questions,
        "split": "dev", "subset": None, "dim": 3456, "machine": "test",
        "exact": {"nq": {"spar": {"Acc@20": 0.41}, "base": {"Acc@20": 0.40}, "hybrid": {"Acc@20": 0.43}},
                  "entityq": {"spar": {"Acc@20": 0.22}, "base": {"Acc@20": 0.12}, "hybrid": {"Acc@20": 0.25}}},
        "spar": [{"config": name, "ms_1_thread": ms, "bytes_per_passage": size,
                  "sets": {s: {"Acc@20": acc[s]} for s in sets}} for name, (ms, size, acc) in configs.items()],
        "peer": {"sets": {"nq": {"Acc@20": 0.42}, "entityq": {"Acc@20": 0.24}}, "ms_1_thread": 10.0,
                 "bytes_per_passage_base": 1800.0, "bytes_per_passage_bm25": 600.0, "bytes_per_passage": 2400.0,
                 "base_hnsw_ms_1_thread": 1.0, "base_hnsw_sets": {"nq": {"Acc@20": 0.39}, "entityq": {"Acc@20": 0.11}}},
        "flat_peer": {"ms_1_thread": 100.0, "bytes_per_passage_base": 1536},
    }


LATENCY = {"config": "configs/experiments/wiki-odqa.yaml", "fastest_spar_backend": "onnx",
           "ms": {"spar/onnx": {"encode": {"median": 13.0}}, "hybrid-hnsw/onnx": {"encode": {"median": 12.0}}}}


def test_docstring_example():
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner()
    for test in finder.find(serving_frontier, "bench.serving_frontier"):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


def test_points_against_the_hybrid_as_deployed_from_text():
    fast = ("hnsw:sq4:ef=256", 8.0, 1872.0, {"nq": 0.40, "entityq": 0.20})
    slow = ("hnsw:sq4:ef=2048", 40.0, 1872.0, {"nq": 0.41, "entityq": 0.22})
    worse = ("hnsw:sq4:ef=512", 12.0, 1872.0, {"nq": 0.39, "entityq": 0.20})
    result = odqa_result({name: rest for name, *rest in (fast, slow, worse)})
    frontier = build_frontier([("a.json", result)], LATENCY)
    points = {p["name"]: p for p in frontier["points"]}
    assert frontier["time"] == "ms_text" and frontier["sets"] == ["nq", "entityq"]
    hybrid = points["hybrid as deployed (base HNSW ‖ BM25)"]
    assert hybrid["ms_text"] == 22.0 and hybrid["acc20_mean"] == 0.33 and hybrid["x_hybrid_ms"] == 1.0
    one = points["SPAR hnsw:sq4:ef=256"]
    # (0.40 + 0.20) / 2 = 0.30, 3 points under the hybrid's 0.33; 8 + 13 ms of encoding = 21 ms = 0.955 × 22
    assert one["acc20_mean"] == 0.3 and one["vs_hybrid_points"] == -3.0 and one["ms_text"] == 21.0
    assert one["x_hybrid_ms"] == 0.955 and one["x_hybrid_bytes"] == 0.78
    assert one["vs_hybrid_points_by_set"] == {"nq": -2.0, "entityq": -4.0}
    # the slow one is more accurate (kept), the ef=512 one slower and worse than ef=256 (dominated)
    assert one["pareto"] and points["SPAR hnsw:sq4:ef=2048"]["pareto"]
    assert not points["SPAR hnsw:sq4:ef=512"]["pareto"]
    exact_hybrid = points["hybrid, exact base (flat scan, then BM25)"]
    assert exact_hybrid["bytes_per_passage"] == 2136.0 and exact_hybrid["dim"] == 384
    assert exact_hybrid["acc20"] == {"nq": 0.43, "entityq": 0.25}
    assert points["SPAR, exact scan of float32 vectors"]["ms_vectors"] is None


def test_results_of_other_questions_are_refused():
    a = odqa_result({"x": (1.0, 10.0, {"nq": 0.4, "entityq": 0.2})})
    b = odqa_result({"y": (1.0, 10.0, {"nq": 0.4, "entityq": 0.2})}, questions=50)
    with pytest.raises(SystemExit, match="b.json: questions_per_set = 50, but a.json has 100"):
        build_frontier([("a.json", a), ("b.json", b)])
    test = copy.deepcopy(a)
    test["split"] = "test"
    with pytest.raises(SystemExit, match="the frontier is chosen on dev"):
        build_frontier([("t.json", test)])


def test_a_frontier_needs_the_hybrid_judged():
    a = odqa_result({"x": (1.0, 10.0, {"nq": 0.4, "entityq": 0.2})})
    del a["peer"]["sets"]
    with pytest.raises(SystemExit, match="the frontier's reference is missing"):
        build_frontier([("a.json", a)])


def test_main_writes_the_table_the_json_and_the_plot(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(odqa_result({"hnsw:sq4:ef=256": (8.0, 1872.0, {"nq": 0.40, "entityq": 0.20})})))
    latency = tmp_path / "latency.json"
    latency.write_text(json.dumps(LATENCY))
    main(["--odqa", str(a), "--query-latency", str(latency), "--out", str(tmp_path / "frontier")])
    table = (tmp_path / "frontier.md").read_text()
    assert "| SPAR hnsw:sq4:ef=256 ★ | 3456 | 1,872 | 0.4000 | 0.2000 | 0.3000 | -3.00 | 8.0 | 21.0 | 0.95× |" in table
    assert json.loads((tmp_path / "frontier.json").read_text())["query_encoding_ms"]["spar"] == 13.0
    assert (tmp_path / "frontier.png").stat().st_size > 0


def test_a_block_summed_projection_is_the_projection_to_fewer_dimensions():
    """bench/odqa_index.py's smaller candidate Λ: summing a sparse projection Λ's vectors over blocks gives exactly
    the vectors of the projection whose matrix is block-summed (linear), each term still of unit norm but for
    collisions, and a query-passage score whose expectation is the full Λ's (checked on a seeded sample)."""
    import numpy as np
    import scipy.sparse as sp

    from bench.odqa_index import BlockSummed
    from spar.lexical.projection import sparse_matrix

    rng = np.random.default_rng(0)
    vocab, dim, small = 5000, 3072, 384
    rows = (rng.integers(0, dim // 8, size=(vocab, 8)) + np.arange(8) * (dim // 8),  # one entry per block
            rng.choice([-1.0, 1.0], size=(vocab, 8)))  # sparse_matrix scales them by 1/√8
    table = sparse_matrix(rows, dim)
    weights = sp.random(200, vocab, density=0.01, random_state=1, format="csr", dtype=np.float32)
    full = np.asarray((weights @ table).todense(), dtype=np.float32)
    summed = BlockSummed(full, small)[:]
    table_summed = np.asarray(table.todense()).reshape(vocab, dim // small, small).sum(axis=1)
    np.testing.assert_allclose(summed, weights @ table_summed, rtol=1e-5, atol=1e-6)
    norms = np.linalg.norm(table_summed, axis=1)
    assert abs(float(np.median(norms)) - 1.0) < 0.02
    exact = np.asarray((weights @ weights.T).todense())
    errors_full = (full @ full.T - exact)[np.triu_indices(200, 1)]
    errors_small = (summed @ summed.T - exact)[np.triu_indices(200, 1)]
    assert abs(errors_small.mean()) < 0.01 and errors_small.std() > errors_full.std()


def test_another_lambdas_points_are_named_by_it_and_timed_against_their_own_peer():
    first = odqa_result({"built:run:ef=512": (20.0, 1872.0, {"nq": 0.41, "entityq": 0.20})})
    first["lambda"] = {"run": "runs/a", "kind": "projection", "dim": 3072}
    learned = odqa_result({"hnsw:sq4:ef=512": (9.0, 528.0, {"nq": 0.40, "entityq": 0.12})})
    learned["lambda"] = {"run": "runs/b", "kind": "transformer", "dim": 384}
    learned["dim"] = 768
    learned["exact"]["nq"]["spar"]["Acc@20"] = 0.404
    learned["peer"]["ms_1_thread"] = 12.0  # its process's hybrid was 2 ms slower than the first's
    frontier = build_frontier([("a.json", first), ("b.json", learned)], LATENCY)
    points = {p["name"]: p for p in frontier["points"]}
    assert "SPAR built:run:ef=512" in points  # the first result's Λ needs no label
    one = points["SPAR [transformer Λ 384] hnsw:sq4:ef=512"]
    # its query encoder is not the one query_latency timed: no time from text; 9 ms against its own peer's 12 ms
    # (not the first's 10), both with the vectors given
    assert "ms_text" not in one and one["x_hybrid_ms"] == 0.75 and one["x_hybrid_ms_of"] == "ms_vectors"
    assert one["dim"] == 768 and "pareto" not in one  # the front is drawn in times from text
    exact = points["SPAR [transformer Λ 384] exact scan of float32 vectors"]
    assert exact["kind"] == "spar-exact" and exact["acc20"] == {"nq": 0.404, "entityq": 0.22}
    assert exact["bytes_per_passage"] == 4 * 768
    # the first result's point keeps the ratio to the first peer: 20 + 13 = 33 ms against 22 ms
    assert points["SPAR built:run:ef=512"]["x_hybrid_ms"] == 1.5
