"""SPAR ranked by the exact scan beside the index that served it, on an evaluated run's test sets.

``spar evaluate`` with an approximate index (``index.type=auto`` above ``index.auto_flat_below`` passages: HNSW, μ
folded) reports SPAR as that index serves it. This adds, for the same test questions, the ``spar_exact`` system
(``evaluate.exact_spar``): ``[Q, μ·QΛ]·[P, PΛ]`` by an exact streamed scan of the stored float32 vectors, with the
μ each set is served with, judged exactly as evaluate judges (Acc@k over the passages' texts, qrels measures) — and
sets it beside the results files the run's evaluate wrote (the index's SPAR, the hybrid, the base). It runs the one
system only (no BM25, no JVM): an evaluation made before keeps its fingerprint, nothing of the run is rewritten.

The served systems (the index's SPAR, the hybrid, the base, BM25) are re-scored from the rankings the run's evaluate
wrote (``evaluation/runs``), on exactly the questions the exact scan ranks: ``--questions N`` (each set's first N
test questions) gives a paired comparison at a fraction of the cost (one exact scan of 668k × 3,456-d vectors per
2,048 questions is minutes on 2 cores); over whole sets the re-scored figures are checked against the results files.

Resumable: its own rankings and per-chunk progress live in ``--work`` (default ``<output_dir>/exact-beside[-N]``);
a killed run continues at its next chunk of 2,048 questions.

    python -m bench.exact_beside -c configs/experiments/wiki-odqa.yaml --questions 2048 \
        --out bench/results/exact-beside-663k.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from bench._common import command_line, machine, output_file, positive_int, write_result


SERVED = ("spar", "hybrid", "base", "bm25")


def _served_runs(runs_dir: Path, wanted: set[str]) -> dict[str, dict]:
    """The rankings the run's evaluate wrote (``evaluation/runs/<set>/<system>.trec``), for the questions ``wanted``:
    read line by line, so a set's 100-deep runs of tens of thousands of questions are never all in memory."""
    runs: dict[str, dict] = {}
    for system in SERVED:
        path = runs_dir / f"{system}.trec"
        if not path.exists():
            continue
        ranked: dict[str, list[tuple[str, float]]] = {}
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                qid, _, doc, _, score, _ = line.split()
                if qid in wanted:
                    ranked.setdefault(qid, []).append((doc, float(score)))
        runs[system] = ranked  # written best first, as evaluate ranks them
    if "spar" not in runs:
        raise SystemExit(f"{runs_dir}: no spar.trec (run `spar evaluate` first)")
    return runs


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--out", type=output_file, required=True)
    ap.add_argument("--work", type=Path, help="rankings and progress (default: <output_dir>/exact-beside[-<N>])")
    ap.add_argument("--sets", help="comma-separated test sets, in this order (default: every one)")
    ap.add_argument("--questions", type=positive_int, help="each set's first N test questions (default: all); the "
                    "served systems are re-scored from the run's rankings on exactly these questions")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    from spar.core.config import load_config
    from spar.core.run_context import RunContext
    from spar.evaluate.evaluation import WeightedMeans, _score_runs, evaluate_sets
    from spar.experiment.inputs import ExperimentInputs, resolved_index

    cfg = resolved_index(load_config(args.config, args.overrides))  # index.type auto made concrete, as evaluate does
    context = RunContext(cfg)
    work = args.work or Path(cfg.output_dir) / ("exact-beside" + (f"-{args.questions}" if args.questions else ""))
    sets_wanted = [name.strip() for name in args.sets.split(",") if name.strip()] if args.sets else None
    inputs = ExperimentInputs(cfg)
    known = [test.name for test in inputs.experiment.test_splits()]
    unknown = [name for name in sets_wanted or () if name not in known]
    if sets_wanted is not None and (unknown or not sets_wanted):
        ap.error(f"--sets: unknown {', '.join(repr(n) for n in unknown) or 'empty list'}; the config's test sets: "
                 f"{', '.join(repr(n) for n in known)}")
    started = time.perf_counter()
    reports = evaluate_sets(cfg, inputs, runs_dir=work / "runs", keep_runs=False, checkpoints=work / "progress",
                            progress=lambda line: print(line, flush=True), systems=("spar_exact",),
                            sets=sets_wanted, questions=args.questions)
    seconds = time.perf_counter() - started

    from spar.evaluate.evaluation import first_questions

    splits = {test.name: test for test in inputs.experiment.test_splits()}
    stem_of = {name: stem for stem, names in context.results_groups.items() for name in names}
    sets = {}
    for name, report in reports.items():
        test = splits[name]
        part = first_questions(test, args.questions)
        runs_dir = context.artifact("evaluation") / "runs" / name if name else context.artifact("evaluation") / "runs"
        served = _served_runs(runs_dir, set(part.ids))
        means = WeightedMeans()
        accuracy_at = report.details["accuracy_at"]
        _score_runs(served, part, report.metrics if part.qrels else [], accuracy_at, inputs, means)
        figures = {system: means.result(system) for system in served}
        if args.questions is None:  # the whole set: the re-scored rankings are the results file's figures
            results_file = context.results_file(stem_of[name])[0]
            payload = json.loads(results_file.read_text(encoding="utf-8"))
            written = payload["sets"][name]["systems"] if "sets" in payload else payload["systems"]
            for system, values in figures.items():
                for measure, value in values.items():
                    if abs(written[system][measure] - value) > 1e-9:
                        raise SystemExit(f"{results_file}: {name} {system} {measure} {written[system][measure]} "
                                         f"but its rankings give {value}: the runs and the results differ")
        exact = report.systems["spar_exact"]
        row = {"questions": len(part.ids), "of": len(test.ids), "mu": report.mu, "index": report.details["index"],
               "passages": report.details["passages"], **{f"{s}": v for s, v in figures.items()},
               "spar_exact": exact,
               "index_minus_exact": {m: figures["spar"][m] - v for m, v in exact.items()}}
        if "hybrid" in figures:
            row["exact_minus_hybrid"] = {m: v - figures["hybrid"][m] for m, v in exact.items()}
            row["index_minus_hybrid"] = {m: figures["spar"][m] - figures["hybrid"][m] for m in exact}
        sets[name or "test"] = row
        shown = "Acc@20" if "Acc@20" in exact else next(iter(exact))
        print(f"{name or 'test'} ({len(part.ids):,} questions): {shown} index {figures['spar'][shown]:.4f}, "
              f"exact {exact[shown]:.4f}"
              + (f", hybrid {figures['hybrid'][shown]:.4f}" if "hybrid" in figures else ""), flush=True)

    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kB
    shown = "Acc@20" if all("Acc@20" in row["spar_exact"] for row in sets.values()) else \
        next(iter(next(iter(sets.values()))["spar_exact"]))
    spar = sum(row["spar"][shown] for row in sets.values()) / len(sets)
    peer = sum(row["spar_exact"][shown] for row in sets.values()) / len(sets)
    result = {"spar": spar, "peer": peer, "ratio": round(spar / peer, 4),
              "unit": f"{shown} of SPAR served by the run's index (spar) against the exact scan (peer), mean over "
                      "the sets' questions",
              "worst_index_minus_exact": min(row["index_minus_exact"][shown] for row in sets.values()),
              "experiment": cfg.experiment.name, "sets": sets, "seconds": round(seconds, 1),
              "peak_rss_gb": round(peak_gb, 3), "machine": machine(),
              "command": command_line(__file__, argv)}
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
