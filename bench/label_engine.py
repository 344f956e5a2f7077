"""Label engines: spar's in-memory BM25 teacher (``label.engine=memory``) vs Pyserini's Lucene searcher.

One invocation samples the queries (or reuses a sampled run), builds the Lucene teacher index, then:

1. **throughput, in this process**: both teachers label the same queries with ``spar.teacher.labelling.label_queries``
   (search, positive/negative selection, Arrow shards), shard by shard, alternating which engine goes first, so the
   shared machine's load hits both alike. The memory engine's start-up (analysing every passage through
   Pyserini's analyzer, building the postings) is timed apart.
2. **identity**: the sha256 of every label shard of both engines.
3. **peak RSS of each**: ``spar label`` with ``label.engine=lucene`` and ``=memory`` end to end, each in a child
   process started by a small launcher (so each peak is the stage's own), on the same queries and teacher index.

    python -m bench.label_engine -c configs/experiments/scifact.yaml --name scifact
    python -m bench.label_engine -c configs/experiments/wiki-vital.yaml --corpus CORPUS.jsonl --limit 10000 --name X

Prints and writes ``bench/results/label_engine-<name>.json``: ``{"spar": memory q/s, "peer": lucene q/s, "ratio",
"unit", "identical_shards", "peak_rss_gb", "start_seconds", "machine", "command", ...}``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _link_tree(src: Path, dst: Path) -> None:
    """A copy of an artifact directory made of hard links where the file system allows (the index can be large)."""
    shutil.copytree(src, dst, copy_function=lambda s, d: _link_or_copy(s, d))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _child_run(config: str | None, overrides: list[str], engine: str, work: Path, parent: Path) -> dict:
    """``spar label`` with one engine in a child process, on links to the parent run's queries and teacher index;
    returns its wall time, peak RSS and shard hashes."""
    out = work / f"rss-{engine}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name in ("queries", "teacher_index"):
        _link_tree(parent / name, out / name)
    cmd = [sys.executable, "-m", "pipelines.cli", "label", "-q", *(["-c", config] if config else []), *overrides,
           f"experiment.output_dir={out}", f"label.engine={engine}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    # A process forked from this (large) one starts with its pages counted in its peak RSS, even after exec: a small
    # launcher runs the stage and reports the stage process's own peak (getrusage of its one child).
    launcher = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
                "stderr=subprocess.PIPE); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
                "sys.stderr.write(p.stderr.decode(errors='replace')[-2000:] if p.returncode else ''); "
                "sys.exit(p.returncode)")
    done = subprocess.run([sys.executable, "-c", launcher, *cmd], cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"child `{' '.join(cmd)}` failed: {done.stderr.strip()[-500:]}")
    peak_kb = int(done.stdout.strip().splitlines()[-1])
    shards = {p.name: _sha256(p) for p in sorted((out / "labels").glob("labels-*.arrow"))}
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": round(seconds, 1), "peak_rss_gb": round(peak_kb / 2**20, 3), "shards": shards}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-c", "--config", default=str(REPO / "configs" / "experiments" / "scifact.yaml"))
    parser.add_argument("--corpus", default=None, help="data.corpus override (e.g. a JSONL subset of enwiki-2015)")
    parser.add_argument("--limit", type=int, default=None, help="sample.max_queries (default: every sampled query)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--shard-size", type=int, default=5000, help="queries per shard: the unit of alternation")
    parser.add_argument("--no-rss", action="store_true", help="skip the child processes (peak RSS)")
    parser.add_argument("--work-dir", default=None, help="keep the sampled run here (default: a temporary directory)")
    parser.add_argument("--name", default="scifact")
    parser.add_argument("--output", default=None, help="default: bench/results/label_engine-<name>.json")
    args = parser.parse_args(argv)

    import pipelines.label
    import pipelines.sample
    from spar.core.artifacts import read_manifest
    from spar.core.run_context import RunContext
    from spar.teacher.bm25_memory import MemoryBM25
    from spar.core.config import load_config
    from spar.teacher.labelling import label_queries, passage_row_map
    from spar.teacher.teachers import BM25Searcher

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="spar-label-engine-"))
    overrides = [f"label.threads={args.threads}", f"label.k={args.k}", f"label.batch_size={args.batch_size}",
                 f"label.shard_size={args.shard_size}"]
    overrides += [f"data.corpus={args.corpus}"] if args.corpus else []
    overrides += [f"sample.max_queries={args.limit}"] if args.limit else []
    cfg = load_config(args.config, [*overrides, f"experiment.output_dir={work}"])
    s = cfg.label

    pipelines.sample.run(cfg)
    t0 = time.perf_counter()
    index_dir = pipelines.label.build_teacher_index(cfg)
    index_seconds = time.perf_counter() - t0
    queries_dir = RunContext.at(work).artifact("queries")
    passages = RunContext.at(work).passages
    rows = passage_row_map(passages)
    n_queries = read_manifest(queries_dir)["stats"]["queries"]

    lucene = BM25Searcher(index_dir, s.k1, s.b, s.threads, heap=s.java_heap)
    t0 = time.perf_counter()
    memory = MemoryBM25.from_section(passages, s, index_dir)
    start_seconds = time.perf_counter() - t0
    teachers = {"lucene": lucene, "memory": memory}

    from spar.core import schemas

    table = schemas.read_shards(queries_dir, "queries")
    warm = list(zip(table.column("query_id").to_pylist()[:2000], table.column("text").to_pylist()[:2000]))
    for teacher in teachers.values():  # JIT and caches warm for both, not timed
        teacher.search(warm, s.k)

    total_shards = -(-n_queries // s.shard_size)
    seconds = {"lucene": 0.0, "memory": 0.0}
    outs = {name: work / f"labels-{name}" for name in teachers}
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    for shard in range(total_shards):
        order = ("lucene", "memory") if shard % 2 == 0 else ("memory", "lucene")
        for name in order:
            start = time.perf_counter()
            label_queries(teachers[name], queries_dir, outs[name], s, passage_rows=rows, num_shards=total_shards,
                          shard_index=shard, progress=False)
            seconds[name] += time.perf_counter() - start
        print(f"shard {shard + 1}/{total_shards}: lucene {seconds['lucene']:.1f} s, memory {seconds['memory']:.1f} s "
              "so far", file=sys.stderr)
    hashes = {name: {p.name: _sha256(p) for p in sorted(out.glob("labels-*.arrow"))} for name, out in outs.items()}
    qps = {name: round(n_queries / seconds[name], 1) for name in teachers}

    result = {
        "spar": qps["memory"],
        "peer": qps["lucene"],
        "ratio": round(qps["memory"] / qps["lucene"], 3),
        "unit": "queries/s (label_queries: search + selection + Arrow shards; alternating shard by shard)",
        "identical_shards": hashes["lucene"] == hashes["memory"] and len(hashes["lucene"]) == total_shards,
        "shards": len(hashes["memory"]),
        "sha256": hashes["memory"],
        "start_seconds": round(start_seconds, 1),
        "start_definition": "MemoryBM25.from_section: analyse every passage with Pyserini's analyzer, build the "
                            "postings, check them against the teacher index",
        "teacher_index_seconds": round(index_seconds, 1),
        "memory_engine": {**memory.stats, "array_gb": round(memory.nbytes() / 2**30, 3)},
        "passages": memory.num_docs,
        "queries": n_queries,
        "settings": {"k": s.k, "threads": s.threads, "batch_size": s.batch_size, "shard_size": s.shard_size,
                     "k1": s.k1, "b": s.b, "fields": list(s.fields)},
        "machine": machine(args.threads),
        "command": command_line(__file__, argv),
    }
    del teachers, memory, lucene
    if not args.no_rss:
        children = {engine: _child_run(args.config, overrides, engine, work, work) for engine in ("lucene", "memory")}
        result["peak_rss_gb"] = {engine: child["peak_rss_gb"] for engine, child in children.items()}
        result["stage_seconds"] = {engine: child["seconds"] for engine, child in children.items()}
        result["stage_definition"] = ("`spar label` end to end in a child process (teacher index reused; the memory "
                                      "engine's start-up included), peak RSS of that process alone")
        result["identical_shards_stage"] = children["lucene"]["shards"] == children["memory"]["shards"] == hashes[
            "memory"]
        result["machine"] = machine(args.threads)
    write_result(result, args.output or REPO / "bench" / "results" / f"label_engine-{args.name}.json")
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
