"""One question at a time against a run's served SPAR index and a flat fast-scan index of the same vectors.

Where ``index.type: auto`` should switch from a flat scan to the approximate index is a question of speed as well
as accuracy: this times ``SparIndex.search`` one question at a time (query vectors given, as the paper times search;
folding and exact re-ranking included) on the run's saved index (``<run>/index``) and on a flat index of
``--flat-storage`` codes built here from the same embeddings, with the same dev questions, μ and k, alternated
question by question. Prints JSON: milliseconds per question (median, mean), the ratio served / flat.

    python -m bench.serve_latency -c configs/experiments/wiki-odqa.yaml --split queries-dev-nq --questions 100 \\
        --out bench/results/serve_latency-663k.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench._common import command_line, machine, write_result


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--split", default="queries-dev-nq", help="embeddings/<encoder>/<split> question vectors")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--flat-storage", default="fs4")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench/results/serve_latency.json")
    args = ap.parse_args()

    import faiss
    import numpy as np

    from spar.core.config import load_config
    from spar.evaluate.tuning import read_tuned
    from spar.index.spar_index import SparIndex
    from spar.model.stored_vectors import load_embeddings

    faiss.omp_set_num_threads(args.threads)
    cfg = load_config(args.config)
    run = Path(cfg.output_dir)
    mu = read_tuned(run).mu()
    served = SparIndex.load(run / "index")
    base_p = load_embeddings(run / "embeddings" / "base" / "passages")
    lambda_p = load_embeddings(run / "embeddings" / "lambda" / "passages")
    started = time.perf_counter()
    flat = SparIndex.build(base_p, lambda_p, index_type="flat", storage=args.flat_storage)
    flat_build = time.perf_counter() - started
    bq = np.asarray(load_embeddings(run / "embeddings" / "base" / args.split).vectors[:args.questions])
    lq = np.asarray(load_embeddings(run / "embeddings" / "lambda" / args.split).vectors[:args.questions])
    times: dict[str, list[float]] = {"served": [], "flat": []}
    overlap = []
    for i in range(len(bq)):
        found = {}
        for name, index in (("served", served), ("flat", flat)):  # alternated, question by question
            t = time.perf_counter()
            _, ids = index.search(bq[i:i + 1], lq[i:i + 1], k=args.k, mu=mu)
            times[name].append(1000 * (time.perf_counter() - t))
            found[name] = ids[0][:20]
        overlap.append(len(set(found["served"]) & set(found["flat"])) / 20)
    ms = {name: {"median": round(statistics.median(v), 2), "mean": round(statistics.fmean(v), 2)}
          for name, v in times.items()}
    result = {
        "benchmark": "one question at a time: the run's served index against a flat fast-scan index of its vectors",
        "config": args.config, "passages": len(served), "served_index": {k: served.info.get(k) for k in
                                                                          ("type", "storage", "fold")},
        "served_options": {k: served.info.get("options", {}).get(k) for k in ("hnsw_ef_search", "refine")},
        "flat_storage": args.flat_storage, "flat_build_s": round(flat_build, 1), "questions": len(bq),
        "split": args.split, "mu": mu, "k": args.k, "threads": args.threads,
        "overlap@20_served_vs_flat": round(float(np.mean(overlap)), 4),
        "spar": ms["served"], "peer": ms["flat"], "ratio": round(ms["served"]["median"] / ms["flat"]["median"], 3),
        "unit": "ms per question (median over questions), served / flat",
        "machine": machine(args.threads), "command": command_line(__file__, None),
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
