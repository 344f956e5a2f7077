"""One question at a time from its text: SPAR through a run's served index against the hybrid, query encoding included.

The paper times search with the query vectors given; a user's question arrives as text, and one MiniLM query
encoding (15–18 ms here) is most of what a SPAR search costs on a small corpus. This times, question by question
and alternated, on 1 thread (torch, FAISS and ONNX Runtime alike):

- **SPAR**: the published model's query encoders (the run's ``model/``, opened by
  :class:`spar.publish.search.SparSearcher` from the run's ``index/``; the base on each of ``--backends``) and one
  search of the served index (:meth:`spar.index.spar_index.SparIndex.search`: folding and exact re-ranking included),
  exactly what ``SparSearcher.search`` does short of looking up the hits' texts;
- **hybrid** (the peer): the same base query encoder on the same backend, a flat float32 scan of the base passage
  vectors, Pyserini BM25 (the run's teacher index, or one built now, at ``label``'s k1/b), and fusion
  (:func:`spar.evaluate.candidates.hybrid_fuse`, the tuned α).

Each system's time is split into its parts (encoding, dense search, BM25, fusion) from the same calls. Prints
JSON: ms per question (median, mean) for each system and backend, and SPAR / hybrid per backend. Run it on a free
machine: it measures what one core does.

    spar publish -c configs/experiments/wiki-odqa.yaml          # the run's model/ (the query encoders and μ)
    python -m bench.query_latency -c configs/experiments/wiki-odqa.yaml --set nq --questions 200 \\
        --out bench/results/query_latency-663k.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench._common import command_line, machine, write_result


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "mean": round(statistics.fmean(values), 2)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--set", default="nq", help="the question set whose dev questions are asked (never test)")
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--backends", nargs="+", default=["torch", "onnx"], choices=["torch", "onnx"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import faiss
    import numpy as np
    import torch

    torch.set_num_threads(1)  # before any ONNX session opens: it takes torch's thread count
    faiss.omp_set_num_threads(1)

    from spar.core.config import load_config
    from spar.evaluate.candidates import hybrid_fuse
    from spar.evaluate.tuning import read_tuned
    from spar.experiment.inputs import ExperimentInputs
    from spar.experiment.plan import dev_split
    from spar.model.stored_vectors import load_embeddings
    from spar.publish.model_dir import SparEncoder
    from spar.publish.search import SparSearcher, on_backend

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

    base_p = load_embeddings(run / "embeddings" / "base" / "passages")
    flat = faiss.IndexFlatIP(base_p.dim)
    for start in range(0, len(base_p.ids), 65536):
        flat.add(np.ascontiguousarray(base_p.sharded[start:start + 65536], dtype=np.float32))
    doc_ids = base_p.ids
    bm25 = ExperimentInputs(cfg).bm25
    bm25.search(pairs[:1], args.k)  # the JVM warm

    parts: dict[str, dict[str, list[float]]] = {}

    def spar(backend: str, qid: str, text: str) -> None:
        t0 = time.perf_counter()
        base_q = encoders[backend].base.encode_query([text])
        lambda_q = encoders[backend].lambda_.encode_query([text])
        t1 = time.perf_counter()
        index.search(base_q, lambda_q, args.k, mu=mu)
        t2 = time.perf_counter()
        times = parts.setdefault(f"spar/{backend}", {"encode": [], "search": [], "total": []})
        times["encode"].append(1000 * (t1 - t0))
        times["search"].append(1000 * (t2 - t1))
        times["total"].append(1000 * (t2 - t0))

    def hybrid(backend: str, qid: str, text: str) -> None:
        t0 = time.perf_counter()
        q = encoders[backend].base.encode_query([text])
        t1 = time.perf_counter()
        scores, rows = flat.search(q, args.k)
        t2 = time.perf_counter()
        sparse = bm25.search([(qid, text)], args.k).get(qid, [])
        t3 = time.perf_counter()
        hybrid_fuse([(doc_ids[j], float(v)) for j, v in zip(rows[0], scores[0]) if j >= 0], list(sparse), alpha)
        t4 = time.perf_counter()
        times = parts.setdefault(f"hybrid/{backend}", {"encode": [], "dense": [], "bm25": [], "fuse": [],
                                                       "total": []})
        for name, value in zip(("encode", "dense", "bm25", "fuse", "total"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3,
                                                                               t4 - t0)):
            times[name].append(1000 * value)

    systems = [(fn, backend) for backend in args.backends for fn in (spar, hybrid)]
    for fn, backend in systems:  # warm each path once (ONNX sessions open on first use)
        fn(backend, *pairs[0])
    parts.clear()
    for qid, text in pairs:  # alternated, question by question
        for fn, backend in systems:
            fn(backend, qid, text)

    ms = {name: {part: summary(values) for part, values in times.items()} for name, times in parts.items()}
    ratio = {backend: round(ms[f"spar/{backend}"]["total"]["median"] / ms[f"hybrid/{backend}"]["total"]["median"], 3)
             for backend in args.backends}
    fastest = min(args.backends, key=lambda b: ms[f"spar/{b}"]["total"]["median"])
    result = {
        "benchmark": "one question at a time from its text: SPAR (served index) against the hybrid, query encoding "
                     "included (issue #36 item 4)",
        "config": args.config, "passages": len(index), "split": dev.split, "questions": len(pairs), "k": args.k,
        "mu": mu, "alpha": alpha, "threads": 1,
        "served_index": {key: index.info.get(key) for key in ("type", "storage", "fold")},
        "served_options": {key: index.info.get("options", {}).get(key) for key in ("hnsw_ef_search", "refine")},
        "ms": ms, "spar": ms[f"spar/{fastest}"]["total"], "peer": ms[f"hybrid/{fastest}"]["total"],
        "fastest_spar_backend": fastest, "ratio": ratio[fastest], "ratio_by_backend": ratio,
        "unit": "ms per question, median (mean) over questions; ratio: SPAR / hybrid, medians, same backend",
        "machine": machine(1), "command": command_line(__file__, argv),
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
