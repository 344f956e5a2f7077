"""What the JVM's heap limit costs evaluate's BM25 in memory: a run's BM25 index built and searched as ``spar
evaluate`` does (:attr:`spar.experiment.inputs.ExperimentInputs.bm25`: the teacher index, or one built of the run's
passages), in one child process per ``-Xmx``, each reporting its peak RSS (VmHWM) and anonymous RSS, and a hash of
its hits: a smaller heap must return the same hits, or it is no bound worth having.

    python -m bench.jvm_heap -c configs/experiments/wiki-odqa.yaml --set nq --questions 2048 --heaps 4g 1g \\
        --out bench/results/jvm_heap-663k.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import time
from pathlib import Path

from bench._common import command_line, machine, proc_status, self_command, write_result


def _status() -> dict[str, float]:
    """VmHWM, VmRSS and RssAnon of this process, in GB (1e9 bytes)."""
    return {k: v / 1e9 for k, v in proc_status().items() if k in ("VmHWM", "VmRSS", "RssAnon")}


def child(args) -> None:
    from spar.core.config import load_config
    from spar.experiment.inputs import ExperimentInputs

    cfg = load_config(args.config, [f"label.search_heap={args.child}", *args.overrides])
    inputs = ExperimentInputs(cfg)
    split = inputs.experiment.read(args.set, "test")
    from spar.evaluate.evaluation import question_subset

    part = question_subset(split, split.ids[:args.questions])
    start = time.perf_counter()
    inputs.bm25  # the index (built now when the run has no BM25 teacher index) and the searcher
    built = time.perf_counter() - start
    hits = inputs.bm25_search(part, args.k)
    searched = time.perf_counter() - start - built
    digest = hashlib.sha256(json.dumps([hits[q] for q in part.ids]).encode()).hexdigest()
    print(json.dumps({"heap": args.child, "build_seconds": round(built, 1), "search_seconds": round(searched, 1),
                      "hits_sha256": digest, **{k: round(v, 3) for k, v in _status().items()}}))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--set", required=True, help="the question set whose test questions are searched")
    ap.add_argument("--questions", type=int, default=2048)
    ap.add_argument("--k", type=int, default=1000, help="hits per question (evaluate searches as deep as tuning)")
    ap.add_argument("--heaps", nargs="+", default=["4g", "1g"], help="-Xmx values; the first is the peer")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    if args.child:
        return child(args) or {}
    rows = []
    for heap in args.heaps:
        cmd = [*self_command(__file__), "-c", args.config, "--set", args.set, "--questions", str(args.questions),
               "--k", str(args.k), "--child", heap, *args.overrides]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"heap {heap}: the child failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    peer, spar = rows[0], rows[-1]
    result = {"rows": rows, "same_hits": len({r["hits_sha256"] for r in rows}) == 1,
              "spar": spar["VmHWM"], "peer": peer["VmHWM"], "ratio": round(spar["VmHWM"] / peer["VmHWM"], 3),
              "unit": f"GB peak RSS of BM25 build + search ({args.questions} {args.set} test questions, k {args.k}): "
                      f"-Xmx{spar['heap']} against -Xmx{peer['heap']}",
              "machine": machine(), "command": command_line(__file__, argv)}
    return write_result(result, args.out) if args.out else result


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
