"""The sparse + dense hybrid as users serve it: SPAR's fair peer (issue #46).

evaluate's ``hybrid`` row scores the base retriever exactly (every passage vector) before fusing it with BM25: the
hybrid's best accuracy, but not how anyone serves a dense index of hundreds of thousands of passages. A deployed
hybrid (Anserini ships HNSW indexes for dense models; Pyserini's ``HybridSearcher`` fuses) holds the base's vectors
in a graph and runs BM25 beside it, both halves at once. This module is that peer, set up as carefully as spar sets
up SPAR's own index, and used wherever spar compares SPAR with a served hybrid (evaluate's ``hybrid_served`` row
when SPAR itself is served approximately, ``bench/query_latency.py``):

- :class:`HnswBase`: the base's passage vectors in a FAISS ``IndexHNSWFlat`` (made by the ``hnsw`` index type of
  :mod:`spar.index.types`, float32 vectors, :data:`PEER_M` links, efConstruction :data:`PEER_EF_CONSTRUCTION`);
- :func:`calibrate_ef`: its efSearch, the smallest of :data:`EF_LADDER` whose base alone loses at most
  ``max_loss`` points of Acc@20 (ir_measures' Success@20, judged as evaluate judges the set: answers in the passage
  text, else qrels) against the exact scan, on **dev** questions;
- :class:`ServedHybrid`: one question from its vector and its text, the graph search and BM25 on two threads at
  once, fused by :func:`spar.evaluate.candidates.hybrid_fuse` at the tuned α, exactly as evaluate fuses the exact
  lists (with an efSearch as large as the corpus the graph returns the exact lists, and the two rows agree).

Example::

    >>> import numpy as np
    >>> from spar.evaluate.served_hybrid import HnswBase
    >>> vectors = np.random.default_rng(0).standard_normal((300, 16)).astype("float32")
    >>> vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    >>> base = HnswBase.build(vectors, [f"p{i}" for i in range(300)], m=16, ef_construction=64)
    >>> base.ef_search = 64
    >>> [hits[0][0] for hits in base.search(vectors[:3], 1)]
    ['p0', 'p1', 'p2']
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.evaluate.candidates import hybrid_fuse

#: The peer graph's links per node and construction beam: FAISS's and hnswlib's usual high-recall settings
#: (Anserini's HNSW dense indexes use M 16, efConstruction 100; this peer is built more generously than that).
PEER_M = 32
PEER_EF_CONSTRUCTION = 200
#: efSearch values tried by :func:`calibrate_ef`, smallest first.
EF_LADDER = (16, 32, 64, 128, 256, 512, 1024, 2048)
#: Acc@20 points the peer's base alone may lose against its exact scan (issue #46: ≤ 0.3).
PEER_MAX_LOSS = 0.3
#: Passages added to the graph per call (float32 copies of streamed shards stay small).
ADD_BLOCK = 65_536

Hits = list[tuple[str, float]]


@dataclass
class HnswBase:
    """The base retriever's passage vectors in a FAISS HNSW graph (inner product), searched by passage id."""

    index: Any
    ids: Sequence[str]
    m: int
    ef_construction: int
    build_seconds: float = 0.0

    @classmethod
    def build(cls, vectors: Any, ids: Sequence[str], m: int = PEER_M,
              ef_construction: int = PEER_EF_CONSTRUCTION) -> "HnswBase":
        """Link every passage vector (rows of ``vectors``, an array or streamed shards, in ``ids`` order) into a
        graph, on every core FAISS is allowed."""
        from spar.index.spar_index import IndexOptions
        from spar.index.types.registry import registered_type

        n, dim = len(ids), int(vectors.shape[1])
        if int(vectors.shape[0]) != n:
            raise ValueError(f"{vectors.shape[0]} vectors for {n} passage ids")
        options = IndexOptions(hnsw_m=m, hnsw_ef_construction=ef_construction)
        index = registered_type("hnsw").make(dim, n, "float32", options)
        started = time.perf_counter()
        for start in range(0, n, ADD_BLOCK):
            index.add(np.ascontiguousarray(vectors[start:start + ADD_BLOCK], dtype=np.float32))
        return cls(index, list(ids), m, ef_construction, round(time.perf_counter() - started, 1))

    @property
    def ef_search(self) -> int:
        return int(self.index.hnsw.efSearch)

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self.index.hnsw.efSearch = int(value)

    def search(self, queries: np.ndarray, k: int) -> list[Hits]:
        """Each query's top ``k`` passages ``[(id, inner product)]``, best first."""
        scores, rows = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        return [[(self.ids[j], float(s)) for j, s in zip(row, score) if j >= 0] for row, score in zip(rows, scores)]

    def run(self, query_ids: Sequence[str], queries: np.ndarray, k: int) -> dict[str, Hits]:
        """``{question id: hits}`` for a batch of query vectors (rows in ``query_ids`` order)."""
        return dict(zip(query_ids, self.search(queries, k)))

    def nbytes(self) -> int:
        """Bytes the graph holds in memory (its serialized size: vectors and links)."""
        import faiss

        return int(faiss.serialize_index(self.index).nbytes)

    def settings(self) -> dict[str, Any]:
        return {"type": "IndexHNSWFlat", "m": self.m, "ef_construction": self.ef_construction,
                "ef_search": self.ef_search, "build_seconds": self.build_seconds}


def success_at(k: int, run: Mapping[str, Hits], qrels: Mapping[str, Mapping[str, int]]) -> float:
    """Acc@k in points: ir_measures' Success@k of ``run`` over ``qrels`` (every question of ``run`` counts; one
    without a relevant passage scores 0)."""
    import ir_measures

    measure = ir_measures.Success @ k
    scored = {q: {doc: float(-rank) for rank, (doc, _) in enumerate(hits[:k])} for q, hits in run.items()}
    per_query = {m.query_id: m.value for m in ir_measures.iter_calc([measure], qrels, scored)}
    return round(100 * sum(per_query.get(q, 0.0) for q in run) / max(len(run), 1), 2)


def calibrate_ef(base: HnswBase, query_ids: Sequence[str], queries: np.ndarray, exact: Mapping[str, Hits],
                 judged: Callable[..., Mapping[str, Mapping[str, int]]], ladder: Sequence[int] = EF_LADDER,
                 max_loss: float = PEER_MAX_LOSS, k: int = 20) -> dict[str, Any]:
    """Set ``base``'s efSearch to the smallest of ``ladder`` whose Acc@k on the questions is within ``max_loss``
    points of the exact scan's (``exact``: each question's exact top ``k``), else to the largest; returns every value
    tried with its Acc@k. ``judged(*runs)`` gives the qrels the runs are judged by (answers or qrels, as evaluate)."""
    exact_acc = success_at(k, exact, judged(exact))
    tried: list[dict[str, Any]] = []
    for ef in sorted(ladder):
        base.ef_search = ef
        run = base.run(query_ids, queries, k)
        tried.append({"ef_search": ef, f"acc@{k}": success_at(k, run, judged(run))})
        if exact_acc - tried[-1][f"acc@{k}"] <= max_loss:
            break
    base.ef_search = int(tried[-1]["ef_search"])
    return {f"exact_acc@{k}": exact_acc, "tried": tried, "ef_search": base.ef_search,
            "loss": round(exact_acc - tried[-1][f"acc@{k}"], 2), "max_loss": max_loss, "questions": len(query_ids)}


@dataclass
class ServedHybrid:
    """The hybrid as served: ``base`` (a :class:`HnswBase`) and ``bm25`` (anything with spar's BM25 ``search``:
    ``[(qid, text)], k -> {qid: hits}``) searched at once on two threads, fused at ``alpha``."""

    base: HnswBase
    bm25: Any
    alpha: float
    normalize: bool = False
    _halves: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(2, thread_name_prefix="hybrid"),
                                        repr=False)

    def search(self, qid: str, text: str, query: np.ndarray, k: int, depth: int | None = None,
               timings: dict[str, float] | None = None) -> Hits:
        """One question: the graph's and BM25's top ``depth`` (default ``k``) at once, fused, top ``k``.
        ``timings`` (when given) receives each half's seconds and both halves' wall time."""
        depth = depth or k

        def timed(fn, *args):
            t0 = time.perf_counter()
            return fn(*args), time.perf_counter() - t0

        started = time.perf_counter()
        dense_job = self._halves.submit(timed, self.base.search, query.reshape(1, -1), depth)
        sparse_job = self._halves.submit(timed, self.bm25.search, [(qid, text)], depth)
        (dense, dense_s), (sparse, bm25_s) = dense_job.result(), sparse_job.result()
        if timings is not None:
            timings.update(dense=dense_s, bm25=bm25_s, halves=time.perf_counter() - started)
        return hybrid_fuse(dense[0], list(sparse.get(qid, [])), self.alpha, self.normalize, k)

    def close(self) -> None:
        self._halves.shutdown()



@dataclass
class SearchedLists:
    """Many questions' top lists from the graph, kept as arrays (60,864 test questions at depth 200 as Python tuples
    are gigabytes), handed out question by question."""

    passage_ids: Sequence[str]
    row_of: dict[str, int]
    rows: np.ndarray
    scores: np.ndarray

    def hits(self, qid: str) -> Hits:
        i = self.row_of[qid]
        return [(self.passage_ids[j], float(s)) for j, s in zip(self.rows[i], self.scores[i]) if j >= 0]


def served_base_lists(inputs: Any, base_vectors: Any, splits: Mapping[str, Any], depths: Mapping[str, int],
                      ladder: Sequence[int] = EF_LADDER, max_loss: float = PEER_MAX_LOSS,
                      k: int = 20) -> tuple[dict[str, SearchedLists], dict[str, Any]]:
    """The served hybrid's dense half for evaluation: the experiment's base passage vectors (an
    :class:`spar.experiment.inputs.ExperimentInputs`' ``inputs``) linked into a graph, its efSearch calibrated on
    the dev questions μ is tuned on (never a test question: one setting for every test set, as one deployed index
    has), then every question of each of ``splits`` (name -> questions) searched to ``depths[name]``. The graph is
    dropped before this returns: evaluation then holds only the lists, not a second copy of the base's vectors.
    Returns the lists per split and the graph's settings with its calibration."""
    from spar.evaluate.exact import dense_search

    base = HnswBase.build(base_vectors, inputs.doc_ids)
    dev = inputs.experiment.dev_pool()
    queries = inputs.query_vectors("base", dev)
    exact = dense_search(queries, base_vectors, dev.ids, inputs.doc_ids, k)
    judge = inputs.answer_judge(dev, f"Acc@{k}") if dev.answers is not None else None
    calibration = calibrate_ef(base, dev.ids, queries, exact, lambda *runs: inputs.judged(dev, judge, *runs),
                               ladder, max_loss, k)
    lists = {}
    for name, split in splits.items():
        scores, rows = base.index.search(np.ascontiguousarray(inputs.query_vectors("base", split), np.float32),
                                         depths[name])
        lists[name] = SearchedLists(base.ids, {q: i for i, q in enumerate(split.ids)}, rows, scores)
    return lists, {**base.settings(), "calibrated_on": dev.split, "calibration": calibration}
