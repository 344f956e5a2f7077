"""One question at a time from its text: SPAR through a run's served index against the hybrid a user would deploy.

The paper times search with the query vectors given; a user's question arrives as text, and one MiniLM query
encoding (15–18 ms here) is most of what a SPAR search costs on a small corpus. This times, question by question
and alternated, on 1 thread per half (torch, FAISS and ONNX Runtime alike):

- **SPAR**: the published model's query encoders (the run's ``model/``, opened by
  :class:`spar.publish.search.SparSearcher` from the run's ``index/``; the base on each of ``--backends``) and one
  search of the served index (:meth:`spar.index.spar_index.SparIndex.search`: folding and exact re-ranking included),
  exactly what ``SparSearcher.search`` does short of looking up the hits' texts;
- **hybrid, as deployed** (the peer, issue #46 item 1): the same base query encoder on the same backend; then, **at
  once on two threads** as a deployed hybrid runs its halves, the base's own FAISS HNSW index (``IndexHNSWFlat``,
  ``--peer-hnsw-m``, efSearch chosen on the set's **dev** questions: the smallest of ``--peer-ef-ladder`` whose base
  alone loses at most ``--peer-max-loss`` Acc@20 points against its exact scan; or ``--peer-ef-search``) and BM25
  (Pyserini's Lucene searcher over the run's teacher index, at ``label``'s k1/b); then fusion as ``evaluate`` fuses
  (:func:`spar.evaluate.candidates.hybrid_fuse`, the tuned α). A second row runs spar's in-memory BM25 engine
  (:class:`spar.teacher.bm25_memory.MemoryBM25`, Lucene's scores) as the BM25 half;
- **hybrid with a flat base scan**: the peer timed before #46 (every base vector scanned per question): kept, and
  labelled, for comparison with the old figures; nobody deploys it.

Each system's time is split into its parts (encoding, dense, BM25, both halves' wall time, fusion) from the same
calls; resident bytes are the served index's (SPAR; exact re-ranking reads its rows from disk) against the peer's
HNSW index plus its BM25 index (Lucene's directory, which it memory-maps; the in-memory engine's arrays). Prints
JSON: ms per question (median, mean) per system and backend, SPAR / each peer, the peer's calibration. Run it on a
free machine: it measures what one core per half does.

    spar publish -c configs/experiments/wiki-odqa.yaml          # the run's model/ (the query encoders and μ)
    python -m bench.query_latency -c configs/experiments/wiki-odqa.yaml --set nq --questions 200 \\
        --out bench/results/query_latency-663k.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench._common import command_line, directory_bytes, machine, positive_int, write_result
from bench.serving_scale import LuceneOne
from spar.evaluate.served_hybrid import EF_LADDER, PEER_EF_CONSTRUCTION, PEER_M, PEER_MAX_LOSS

def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "mean": round(statistics.fmean(values), 2)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--set", default="nq", help="the question set whose dev questions are asked (never test)")
    ap.add_argument("--questions", type=positive_int, default=200, help="dev questions timed")
    ap.add_argument("--k", type=positive_int, default=100)
    ap.add_argument("--backends", nargs="+", default=["torch", "onnx"], choices=["torch", "onnx"])
    ap.add_argument("--peer-hnsw-m", type=positive_int, default=PEER_M, help="M of the peer's HNSW index")
    ap.add_argument("--peer-ef-construction", type=positive_int, default=PEER_EF_CONSTRUCTION)
    ap.add_argument("--peer-ef-search", type=positive_int, default=None,
                    help="the peer's efSearch (default: calibrated on the dev questions)")
    ap.add_argument("--peer-ef-ladder", type=positive_int, nargs="+", default=list(EF_LADDER))
    ap.add_argument("--peer-max-loss", type=float, default=PEER_MAX_LOSS,
                    help="Acc@20 points the peer's base alone may lose against its exact scan")
    ap.add_argument("--calibration-questions", type=positive_int, default=1000,
                    help="dev questions the peer's efSearch is chosen on")
    ap.add_argument("--no-memory-bm25", action="store_true", help="leave out the in-memory BM25 engine's row")
    ap.add_argument("--no-flat-peer", action="store_true", help="leave out the flat-scan hybrid's row")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import faiss
    import numpy as np
    import torch

    torch.set_num_threads(1)  # before any ONNX session opens: it takes torch's thread count

    from spar.core.config import load_config
    from spar.data.passages import PassagesTable
    from spar.data.question_sets import answer_judge, judged_qrels
    from spar.evaluate.candidates import hybrid_fuse
    from spar.evaluate.served_hybrid import HnswBase, ServedHybrid, calibrate_ef
    from spar.evaluate.tuning import read_tuned
    from spar.experiment.inputs import ExperimentInputs
    from spar.experiment.plan import dev_split
    from spar.model.stored_vectors import load_embeddings
    from spar.publish.model_dir import SparEncoder
    from spar.publish.search import SparSearcher, on_backend
    from spar.teacher.bm25_memory import MemoryBM25

    cfg = load_config(args.config)
    run = Path(cfg.output_dir)
    searcher = SparSearcher.open(run / "index")  # the fingerprint checks, once; then one encoder per backend
    index = searcher.index
    # on_backend moves the base and a transformer Λ alike (what `spar search --backend` runs), in place: each
    # backend gets its own copy of the published encoder
    encoders = {backend: on_backend(SparEncoder.from_pretrained(searcher.model_dir), backend)
                for backend in args.backends}
    tuned = read_tuned(run)
    mu, alpha = tuned.for_set(args.set).mu(), tuned.for_set(args.set).alpha
    dev = dev_split(cfg, args.set)
    pairs = dev.pairs()[:args.questions]

    # -- the peer's dense half: the base's vectors in HNSW (and flat, the exact reference and the old peer) ----------
    base_p = load_embeddings(run / "embeddings" / "base" / "passages")
    doc_ids = list(base_p.ids)
    graph = HnswBase.build(base_p.sharded, doc_ids, args.peer_hnsw_m, args.peer_ef_construction)  # every core
    flat = faiss.IndexFlatIP(base_p.dim)
    for start in range(0, len(doc_ids), 65536):
        flat.add(np.ascontiguousarray(base_p.sharded[start:start + 65536], dtype=np.float32))
    faiss.omp_set_num_threads(1)

    table = PassagesTable.open(run / "queries" / "passages.arrow")
    row_of = {doc: row for row, doc in enumerate(table.ids)}
    judge = answer_judge(dev, table) if dev.answers is not None else None
    if args.peer_ef_search is not None:
        graph.ef_search = args.peer_ef_search
        calibration = {"ef_search": args.peer_ef_search, "given": True}
    else:
        from spar.data.question_sets import sampled

        calibrating = sampled(dev, args.calibration_questions, cfg.experiment.seed)
        encoder = encoders[args.backends[0]].base
        qvecs = np.concatenate([encoder.encode_query([t for _, t in calibrating.pairs()[i:i + 64]])
                                for i in range(0, len(calibrating.ids), 64)]).astype(np.float32)
        _, rows = flat.search(qvecs, 20)
        exact = {q: [(doc_ids[j], 0.0) for j in row if j >= 0] for q, row in zip(calibrating.ids, rows)}
        calibration = calibrate_ef(graph, calibrating.ids, qvecs, exact,
                                   lambda *runs: judged_qrels(calibrating, judge, row_of, *runs),
                                   args.peer_ef_ladder, args.peer_max_loss)

    # -- the BM25 halves ---------------------------------------------------------------------------------------------
    lucene = ExperimentInputs(cfg).bm25

    bm25s = {"lucene": LuceneOne(lucene)}
    bm25s["lucene"].search(pairs[:1], args.k)  # the JVM warm
    if not args.no_memory_bm25:
        label = cfg.label
        bm25s["memory"] = MemoryBM25.from_passages(run / "queries" / "passages.arrow", label.fields, label.k1,
                                                   label.b, threads=1, heap=label.java_heap)
        bm25s["memory"].search(pairs[:1], args.k)

    parts: dict[str, dict[str, list[float]]] = {}

    def record(name: str, **values: float) -> None:
        times = parts.setdefault(name, {key: [] for key in values})
        for key, value in values.items():
            times[key].append(1000 * value)

    def spar(backend: str, qid: str, text: str) -> None:
        t0 = time.perf_counter()
        base_q = encoders[backend].base.encode_query([text])
        lambda_q = encoders[backend].lambda_.encode_query([text])
        t1 = time.perf_counter()
        index.search(base_q, lambda_q, args.k, mu=mu)
        t2 = time.perf_counter()
        record(f"spar/{backend}", encode=t1 - t0, search=t2 - t1, total=t2 - t0)

    def served(name: str, bm25):
        """The peer: :class:`ServedHybrid` (graph and BM25 at once on two threads, fused at α)."""
        hybrid = ServedHybrid(graph, bm25, alpha, cfg.tune.hybrid_normalize)  # fused as `evaluate` fuses

        def run_one(backend: str, qid: str, text: str) -> None:
            t0 = time.perf_counter()
            q = encoders[backend].base.encode_query([text])
            t1 = time.perf_counter()
            halves: dict[str, float] = {}
            hybrid.search(qid, text, q[0], args.k, timings=halves)
            t2 = time.perf_counter()
            record(f"{name}/{backend}", encode=t1 - t0, **halves, fuse=t2 - t1 - halves["halves"], total=t2 - t0)
        return run_one

    def flat_scan(backend: str, qid: str, text: str) -> None:
        """The old peer: every base vector scanned, then BM25, one after the other."""
        t0 = time.perf_counter()
        q = encoders[backend].base.encode_query([text])
        t1 = time.perf_counter()
        scores, rows = flat.search(q, args.k)
        t2 = time.perf_counter()
        sparse = bm25s["lucene"].search([(qid, text)], args.k)
        t3 = time.perf_counter()
        hybrid_fuse([(doc_ids[j], float(v)) for j, v in zip(rows[0], scores[0]) if j >= 0],
                    list(sparse.get(qid, [])), alpha, cfg.tune.hybrid_normalize)
        t4 = time.perf_counter()
        record(f"hybrid-flat/{backend}", encode=t1 - t0, dense=t2 - t1, bm25=t3 - t2, halves=t3 - t1, fuse=t4 - t3,
               total=t4 - t0)

    peers = {"hybrid-hnsw": served("hybrid-hnsw", bm25s["lucene"])}
    if "memory" in bm25s:
        peers["hybrid-hnsw-memory-bm25"] = served("hybrid-hnsw-memory-bm25", bm25s["memory"])
    if not args.no_flat_peer:
        peers["hybrid-flat"] = flat_scan
    systems = [(fn, backend) for backend in args.backends for fn in (spar, *peers.values())]
    for fn, backend in systems:  # warm each path once (ONNX sessions open on first use)
        fn(backend, *pairs[0])
    parts.clear()
    for qid, text in pairs:  # alternated, question by question
        for fn, backend in systems:
            fn(backend, qid, text)

    ms = {name: {part: summary(values) for part, values in times.items()} for name, times in parts.items()}
    fastest = min(args.backends, key=lambda b: ms[f"spar/{b}"]["total"]["median"])
    ratios = {peer: {b: round(ms[f"spar/{b}"]["total"]["median"] / ms[f"{peer}/{b}"]["total"]["median"], 3)
                     for b in args.backends} for peer in peers}
    spar_bytes = len(faiss.serialize_index(index.index))
    resident = {"spar": {"index": spar_bytes, "per_passage": round(spar_bytes / len(index), 1),
                         "note": "the served index; exact re-ranking reads its rows from disk (pread)"},
                "hybrid-hnsw": {"hnsw": graph.nbytes(), "bm25": directory_bytes(lucene.index_dir)}}
    if "memory" in bm25s:
        resident["hybrid-hnsw-memory-bm25"] = {"hnsw": resident["hybrid-hnsw"]["hnsw"],
                                               "bm25": bm25s["memory"].nbytes()}
    for name, held in resident.items():
        if name != "spar":
            held["total"] = held["hnsw"] + held["bm25"]
            held["per_passage"] = round(held["total"] / len(doc_ids), 1)
    result = {
        "benchmark": "one question at a time from its text: SPAR (served index) against the hybrid as deployed (base "
                     "in HNSW and BM25 at once on two threads, fused), query encoding included (issue #46 item 1)",
        "config": args.config, "passages": len(index), "split": dev.split, "questions": len(pairs), "k": args.k,
        "mu": mu, "alpha": alpha, "threads": "1 per half",
        "served_index": {key: index.info.get(key) for key in ("type", "storage", "fold")},
        "served_options": {key: index.info.get("options", {}).get(key) for key in ("hnsw_ef_search", "refine")},
        "peer_hnsw": {**graph.settings(), "calibration": calibration},
        "ms": ms, "spar": ms[f"spar/{fastest}"]["total"], "peer": ms[f"hybrid-hnsw/{fastest}"]["total"],
        "fastest_spar_backend": fastest, "ratio": ratios["hybrid-hnsw"][fastest], "ratio_by_peer": ratios,
        "resident_bytes": resident,
        "unit": "ms per question, median (mean) over questions; ratio: SPAR / peer, medians, same backend; peer: "
                "hybrid-hnsw (base HNSW + Lucene BM25 at once); hybrid-flat scans every base vector (the old peer)",
        "machine": machine(1), "command": command_line(__file__, argv),
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
