"""Labelling throughput: `spar label` end to end vs raw Pyserini `batch_search` on the same queries and index.

Both run in one process (one JVM, same index, same threads, k and batch size), alternating so machine load hits
both alike; the best of ``--repeats`` runs is reported for each.

- spar: ``pipelines.label.run`` with a complete teacher index (so: manifest checks, passage id -> row map, reading
  the query shards, BM25 search, positive/negative selection, Arrow shard writes, manifest).
- peer: ``LuceneSearcher.batch_search`` over the same query batches, reading each hit's docid and score (the least
  any consumer of the ranking does).

    OMP_NUM_THREADS=1 python -m bench.label_throughput --limit 10000

Prints and writes ``bench/results/label_throughput.json``:
``{"spar": qps, "peer": qps, "ratio": spar/peer, "unit": "queries/s", "machine": ..., "command": ...}``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"))
    parser.add_argument("--limit", type=int, default=None, help="training queries (default: every sentence, ~45k)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--shard-size", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work-dir", default=None, help="keep artifacts here (default: a temporary directory)")
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "label_throughput.json"))
    args = parser.parse_args(argv)

    import pipelines.label
    import pipelines.sample
    from spar.core import schemas
    from spar.core.artifacts import read_manifest
    from spar.core.run_context import RunContext
    from spar.core.config import load_config
    from spar.core.java import pyserini_module

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="spar-label-bench-"))
    overrides = [
        f"data.corpus={args.corpus}", f"experiment.output_dir={work}", "sample.strategy=all",
        f"label.threads={args.threads}", f"label.k={args.k}", f"label.batch_size={args.batch_size}",
        f"label.shard_size={args.shard_size}",
    ]
    if args.limit:
        overrides.append(f"sample.max_queries={args.limit}")
    cfg = load_config(REPO / "configs" / "experiments" / "scifact.yaml", overrides)

    t0 = time.perf_counter()
    pipelines.sample.run(cfg)
    sample_seconds = time.perf_counter() - t0
    lucene = pyserini_module("pyserini.search.lucene", cfg.label.java_heap)  # JVM start-up, not timed
    t0 = time.perf_counter()
    index_dir = pipelines.label.build_teacher_index(cfg)
    index_seconds = time.perf_counter() - t0

    queries = schemas.read_shards(RunContext.at(work).artifact("queries"), "queries")
    qids, texts = queries.column("query_id").to_pylist(), queries.column("text").to_pylist()
    n = len(qids)
    searcher = lucene.LuceneSearcher(str(index_dir))
    searcher.set_bm25(cfg.label.k1, cfg.label.b)
    warm = min(n, 2000)  # JIT warm-up, shared by both (with less, the first timed run is ~40% slower)
    searcher.batch_search(texts[:warm], qids[:warm], args.k, args.threads)

    def peer() -> float:
        start = time.perf_counter()
        for b in range(0, n, args.batch_size):
            batch = qids[b:b + args.batch_size]
            results = searcher.batch_search(texts[b:b + args.batch_size], batch, args.k, args.threads)
            for qid in batch:
                [(hit.docid, hit.score) for hit in results[qid]]
        return n / (time.perf_counter() - start)

    labels_dir = RunContext.at(work).artifact("labels")

    def spar() -> float:
        shutil.rmtree(labels_dir, ignore_errors=True)
        shutil.rmtree(labels_dir.with_name("labels.partial"), ignore_errors=True)
        start = time.perf_counter()
        pipelines.label.run(cfg)
        return n / (time.perf_counter() - start)

    runs: dict[str, list[float]] = {"spar": [], "peer": []}
    for r in range(args.repeats):
        order = (("peer", peer), ("spar", spar)) if r % 2 == 0 else (("spar", spar), ("peer", peer))
        for name, fn in order:
            runs[name].append(round(fn(), 1))
            print(f"run {r}: {name} {runs[name][-1]} q/s", file=sys.stderr)

    stats = read_manifest(labels_dir)["stats"]
    spar_qps, peer_qps = max(runs["spar"]), max(runs["peer"])
    result = {
        "spar": spar_qps,
        "peer": peer_qps,
        "ratio": round(spar_qps / peer_qps, 3),
        "unit": "queries/s",
        "machine": machine(args.threads),
        "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} " + command_line(__file__, argv),
        "queries": n,
        "labelled": stats["labelled"],
        "dropped": stats["dropped"],
        "settings": {"k": args.k, "threads": args.threads, "batch_size": args.batch_size, "teacher": "bm25",
                     "k1": cfg.label.k1, "b": cfg.label.b, "passages": read_manifest(index_dir)["stats"]["passages"]},
        "runs": runs,
        "sample_seconds": round(sample_seconds, 1),
        "teacher_index_seconds": round(index_seconds, 1),
        "peer_definition": "LuceneSearcher.batch_search per batch + reading (docid, score) of every hit",
    }
    write_result(result, args.output)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
