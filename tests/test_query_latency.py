"""bench/query_latency.py's peer (issue #46 item 1): the hybrid as deployed keeps the base in HNSW, with efSearch
chosen on dev questions so that the base alone loses at most a given number of Acc@20 points against its exact scan."""

from __future__ import annotations

import numpy as np

from bench.query_latency import accuracy_at, calibrate_ef
from spar.data.question_sets import SplitQueries


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
    _, ids, _, queries = _corpus_and_questions(questions=4)
    relevant = [next(iter(queries.qrels[q])) for q in queries.ids]
    rankings = {queries.ids[0]: [relevant[0], "x"], queries.ids[1]: ["x"] * 20 + [relevant[1]],
                queries.ids[2]: [relevant[2]], queries.ids[3]: []}
    row_of = {doc: row for row, doc in enumerate(ids)}
    assert accuracy_at(20, rankings, queries, None, row_of) == 50.0  # q0 and q2; q1's is 21st


def test_the_peer_gets_the_smallest_ef_search_within_the_allowed_loss():
    import faiss

    vectors, ids, qvecs, queries = _corpus_and_questions()
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    hnsw = faiss.IndexHNSWFlat(vectors.shape[1], 4, faiss.METRIC_INNER_PRODUCT)  # a sparse graph: low ef loses
    hnsw.hnsw.efConstruction = 8
    hnsw.add(vectors)
    row_of = {doc: row for row, doc in enumerate(ids)}
    ladder = [1, 2, 4, 8, 16, 64, 256, 1024]
    found = calibrate_ef(hnsw, flat, qvecs, ids, queries, None, row_of, ladder, max_loss=2.0)
    assert found["exact_acc@20"] == 100.0  # the exact scan finds every perturbed passage
    losses = [found["exact_acc@20"] - row["acc@20"] for row in found["tried"]]
    assert all(loss > 2.0 for loss in losses[:-1]) and losses[-1] <= 2.0, found
    assert found["tried"][-1]["ef_search"] < ladder[-1]  # stopped at the first within, not run to the end
    assert found["ef_search"] == found["tried"][-1]["ef_search"] and len(found["tried"]) > 1, found
    generous = calibrate_ef(hnsw, flat, qvecs, ids, queries, None, row_of, ladder, max_loss=100)
    assert generous["ef_search"] == 1 and len(generous["tried"]) == 1
