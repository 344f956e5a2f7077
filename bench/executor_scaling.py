"""Executor scaling: label and encode throughput with 1 and 2 Ray workers (1 thread each) on this machine.

One process starts Ray on this machine (``ray.init(num_cpus=2)``) and runs, on the same SciFact inputs:

- label: ``--queries`` sampled SciFact sentences (BM25, K = 50) in shards of ``--label-shard`` queries, by
  :class:`spar.teacher.labelling.ShardLabeller` workers: in this process (1 Lucene thread: the local executor), then on
  1 and on 2 Ray workers (``executor.cpus_per_worker=1``: 1 search thread each);
- encode: the first ``--passages`` passages with the bundled all-MiniLM-L6-v2 (mean pooling, ``--max-length``
  tokens) in shards of ``--encode-shard``, by :class:`spar.model.encode_workers.ShardEncoder` workers, the same three
  ways (torch with 1 thread per worker).

Workers are built before the clock starts (``Executor.start``: a JVM and a searcher, or a model, per worker) and do
one shard each to warm up (the JIT); their start-up is reported apart, and so is the end-to-end figure that includes
it (start-up plus the timed run). Every run's shards are compared by
SHA-256 with the local run's. The machine is shared: the load average is recorded before and after every timed run,
and so is the CPU time the workers' processes got (``cores_obtained``: CPU seconds per wall second; 2 workers can
scale only as far as the machine gives them a second core).

    OMP_NUM_THREADS=1 python -m bench.executor_scaling

Prints and writes ``bench/results/executor_scaling.json``: per stage ``{"spar": 2 workers, "peer": 1 worker,
"ratio": spar/peer, "local": this process, ...}``, plus ``unit``, ``machine`` and ``command``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench._common import REPO, command_line, machine, write_result


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _digests(directory: Path, pattern: str) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(directory.glob(pattern))}


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes (every thread: the JVM's search threads included)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _timed(items: int, run: Callable[[], None], pids: list[int]) -> dict[str, Any]:
    """Throughput of ``run``, the load average around it, and the CPU time its worker processes got: on a shared
    machine ``cores_obtained`` (CPU seconds / wall seconds) says how much of the machine the workers really had."""
    load, cpu = _load(), _cpu_seconds(pids)
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds(pids) - cpu
    return {"per_second": round(items / seconds, 2), "seconds": round(seconds, 2), "load_before": load,
            "load_after": _load(), "cpu_seconds": round(cpu, 2), "cores_obtained": round(cpu / seconds, 2),
            "per_cpu_second": round(items / cpu, 2) if cpu else None}


def _scaling(name: str, items: int, tasks: Callable[[Path], list], make: Callable[[Path], Any],
             local: Callable[[Path], Any], needs: Callable[[Path], dict], pattern: str, work: Path) -> dict[str, Any]:
    """The stage's workers in this process, then on 1 and on 2 Ray workers; shards compared with the local run's."""
    from spar.core.config import ExecutorSection
    from spar.core.executor import LocalExecutor, RayExecutor, WorkerSpec

    runs: dict[str, Any] = {}
    reference: dict[str, str] = {}
    for label, workers in (("local", 0), ("ray-1", 1), ("ray-2", 2)):
        out = work / f"{name}-{label}"
        out.mkdir(parents=True)
        if workers:
            executor: Any = RayExecutor(ExecutorSection(kind="ray", num_workers=workers, cpus_per_worker=1))
            spec = WorkerSpec(f"bench:{name}:{label}", make(out), needs=needs(out))
        else:
            executor, spec = LocalExecutor(), WorkerSpec(f"bench:{name}:local", make(out))
        with executor:
            begun = time.perf_counter()
            if workers:
                executor.start(spec)
            else:
                spec.local = local(out)  # built here, as the local executor uses the stage's own worker
            startup = time.perf_counter() - begun
            # JIT and caches warm: each worker does one shard first (redone, identically, in the timed run)
            warm = time.perf_counter()
            for _ in executor.map(spec, tasks(out)[:max(1, workers)]):
                pass
            warmup = time.perf_counter() - warm
            pids = list(executor.pids) if workers else [os.getpid()]
            result = _timed(items, lambda: [None for _ in executor.map(spec, tasks(out))], pids)
        result["startup_seconds"], result["warmup_seconds"] = round(startup, 2), round(warmup, 2)
        result["end_to_end_per_second"] = round(items / (startup + result["seconds"]), 2)
        digests = _digests(out, pattern)
        if not reference:
            reference = digests
        result["shards_identical_to_local"] = digests == reference and bool(digests)
        runs[label] = result
        print(f"{name} {label}: {result}", file=sys.stderr)
    return {"spar": runs["ray-2"]["per_second"], "peer": runs["ray-1"]["per_second"],
            "ratio": round(runs["ray-2"]["per_second"] / runs["ray-1"]["per_second"], 3),
            "end_to_end_ratio": round(runs["ray-2"]["end_to_end_per_second"]
                                      / runs["ray-1"]["end_to_end_per_second"], 3),
            "cores_obtained": {label: run["cores_obtained"] for label, run in runs.items()},
            "local": runs["local"]["per_second"], "runs": runs}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"))
    parser.add_argument("--queries", type=int, default=12_000, help="training queries labelled per run")
    parser.add_argument("--label-shard", type=int, default=1000)
    parser.add_argument("--passages", type=int, default=480, help="passages encoded per run")
    parser.add_argument("--encode-shard", type=int, default=40)
    parser.add_argument("--max-length", type=int, default=128, help="passage tokens")
    parser.add_argument("--work-dir", default=None, help="keep artifacts here (default: a temporary directory)")
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "executor_scaling.json"))
    args = parser.parse_args(argv)

    import ray

    import pipelines.label
    import pipelines.sample
    from spar.core import schemas
    from spar.core.config import EncoderSection, load_config
    from spar.core.run_context import RunContext
    from spar.model.embeddings import PassageShards
    from spar.model.encode_workers import EncodeOptions, EncodeTask, ShardEncoder
    from spar.model.encoders import BiEncoder
    from spar.core.java import jvm_signal_handlers_kept
    from spar.teacher.labelling import ShardLabeller
    from spar.teacher.registry import configured_teacher

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="spar-scaling-bench-"))
    cfg = load_config(REPO / "configs" / "experiments" / "scifact.yaml", [
        f"data.corpus={args.corpus}", f"experiment.output_dir={work / 'run'}", "sample.strategy=all",
        f"sample.max_queries={args.queries}", f"label.shard_size={args.label_shard}", "label.java_heap=1g",
        "label.threads=1"])
    pipelines.sample.run(cfg)
    index_dir = pipelines.label.build_teacher_index(cfg)
    queries_dir = RunContext(cfg).artifact("queries")
    section = cfg.label
    n_queries = schemas.read_shards(queries_dir, "queries").num_rows
    label_shards = list(range(-(-n_queries // args.label_shard)))
    teacher = functools.partial(configured_teacher, section, index_dir.resolve(), threads=1)

    with jvm_signal_handlers_kept():  # the teacher index was built by this process's JVM (see spar.core.executor)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    try:
        label = _scaling(
            "label", n_queries, lambda out: label_shards,
            lambda out: functools.partial(ShardLabeller, teacher, queries_dir.resolve(), out.resolve(), section),
            lambda out: ShardLabeller(teacher, queries_dir, out, section),
            lambda out: {"queries": queries_dir, "teacher index": index_dir, "output": out},
            "labels-*.arrow", work)

        passages = PassageShards(RunContext(cfg).passages, args.encode_shard)
        n_shards = -(-args.passages // args.encode_shard)
        n_passages = sum(len(passages[i]) for i in range(n_shards))
        options = EncodeOptions(batch_size=32, accelerator="cpu", show_progress=False)
        encoder = EncoderSection(passage_max_length=args.max_length)

        def encode_tasks(out: Path) -> list:
            return [EncodeTask(out.resolve(), i, "passage", "float32", i * args.encode_shard, source=passages)
                    for i in range(n_shards)]

        def local_encoder(out: Path) -> ShardEncoder:
            import torch

            torch.set_num_threads(1)  # the local run: one thread, as each Ray worker
            return ShardEncoder(options, make_encoder=functools.partial(BiEncoder.from_section, encoder))

        encode = _scaling(
            "encode", n_passages, encode_tasks,
            lambda out: functools.partial(ShardEncoder, options,
                                          make_encoder=functools.partial(BiEncoder.from_section, encoder)),
            local_encoder, lambda out: {"passages": RunContext(cfg).passages, "output": out},
            "part-*.npy", work)
    finally:
        with jvm_signal_handlers_kept():
            ray.shutdown()

    result = {
        "label": label, "encode": encode,
        "unit": {"label": "queries/s", "encode": "passages/s"},
        "definition": "spar: 2 Ray workers (1 CPU, 1 thread each); peer: 1 Ray worker; local: the worker in this "
                      "process (1 thread); workers built before timing (startup_seconds apart; end_to_end includes "
                      "it)",
        "machine": machine(1),
        "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} " + command_line(__file__, argv),
        "settings": {"queries": n_queries, "label_shard": args.label_shard, "k": section.k, "teacher": "bm25",
                     "passages": n_passages, "encode_shard": args.encode_shard, "max_length": args.max_length,
                     "model": encoder.model},
    }
    write_result(result, args.output)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
