"""SPAR ranked by the exact scan beside the index that served it, on an evaluated run's test sets.

``spar evaluate`` with an approximate index (``index.type=auto`` above ``index.auto_flat_below`` passages: HNSW, μ
folded) reports SPAR as that index serves it. This adds, for the same test questions, the ``spar_exact`` system
(``evaluate.exact_spar``): ``[Q, μ·QΛ]·[P, PΛ]`` by an exact streamed scan of the stored float32 vectors, with the
μ each set is served with, judged exactly as evaluate judges (Acc@k over the passages' texts, qrels measures) — and
sets it beside the results files the run's evaluate wrote (the index's SPAR, the hybrid, the base). It runs the one
system only (no BM25, no JVM): an evaluation made before keeps its fingerprint, nothing of the run is rewritten.

Resumable: its own rankings and per-chunk progress live in ``--work`` (default ``<output_dir>/exact-beside``); a
killed run continues at its next chunk of 2,048 questions.

    python bench/exact_beside.py -c configs/experiments/wiki-odqa.yaml --out bench/results/exact-beside-663k.json
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import command_line, machine, write_result  # noqa: E402


def _reported(results_file: Path, name: str) -> dict:
    """One set's report in a results file evaluate wrote (several sets under ``sets``, one set at the top)."""
    payload = json.loads(results_file.read_text(encoding="utf-8"))
    report = payload.get("sets", {}).get(name) if "sets" in payload else payload
    if report is None:
        raise SystemExit(f"{results_file}: no results for set '{name}' (run `spar evaluate` first)")
    return report


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, help="rankings and progress (default: <output_dir>/exact-beside)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    from spar.core.config import load_config
    from spar.core.run_context import RunContext
    from spar.evaluate.evaluation import evaluate_sets
    from spar.experiment.inputs import resolved_index

    cfg = resolved_index(load_config(args.config, args.overrides))  # index.type auto made concrete, as evaluate does
    context = RunContext(cfg)
    work = args.work or Path(cfg.output_dir) / "exact-beside"
    started = time.perf_counter()
    reports = evaluate_sets(cfg, runs_dir=work / "runs", keep_runs=False, checkpoints=work / "progress",
                            progress=lambda line: print(line, flush=True), systems=("spar_exact",))
    seconds = time.perf_counter() - started

    stem_of = {name: stem for stem, names in context.results_groups.items() for name in names}
    sets = {}
    for name, report in reports.items():
        results_file = context.results_file(stem_of[name])[0]
        served = _reported(results_file, name)
        exact = report.systems["spar_exact"]
        if served.get("mu") != report.mu:
            raise SystemExit(f"{results_file}: set '{name}' was served at μ {served.get('mu')}, the run's tune.json "
                             f"says {report.mu} (re-run `spar evaluate`)")
        systems = served["systems"]
        row = {"queries": report.details["queries"], "mu": report.mu, "results_file": str(results_file.name),
               "index": served.get("index"), "passages": served.get("passages"),
               "spar_index": systems["spar"], "spar_exact": exact,
               "hybrid": systems.get("hybrid"), "base": systems.get("base")}
        row["index_minus_exact"] = {m: systems["spar"][m] - v for m, v in exact.items() if m in systems["spar"]}
        if systems.get("hybrid"):
            row["exact_minus_hybrid"] = {m: v - systems["hybrid"][m] for m, v in exact.items()
                                         if m in systems["hybrid"]}
        sets[name or "test"] = row
        shown = "Acc@20" if "Acc@20" in exact else next(iter(exact))
        print(f"{name or 'test'}: {shown} index {systems['spar'][shown]:.4f}, exact {exact[shown]:.4f}"
              + (f", hybrid {systems['hybrid'][shown]:.4f}" if systems.get("hybrid") else ""), flush=True)

    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kB
    result = {"experiment": cfg.experiment.name, "sets": sets, "seconds": round(seconds, 1),
              "peak_rss_gb": round(peak_gb, 3), "machine": machine(),
              "command": command_line(__file__, argv)}
    return write_result(result, args.out)


if __name__ == "__main__":
    from spar.core.errors import SparError

    try:
        main()
    except SparError as exc:  # spar's refusals (no index, an override the index cannot honour): one line
        raise SystemExit(f"exact_beside.py: error: {exc}") from None
