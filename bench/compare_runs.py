"""Paired comparison of runs that differ in one setting: per-query differences on the same test queries.

Each run directory's ``evaluation/runs/<system>.trec`` (written by ``spar evaluate``) is scored per query with
ir_measures (:func:`spar.evaluate.metrics.per_query_values`) on the given qrels; every run after the first is compared
with the first on the queries both answered: the mean difference and a 95% bootstrap interval over queries (10,000
resamples, seeded). A difference whose interval holds 0 is not one these queries can tell apart.

    python -m bench.compare_runs --qrels data/scifact-sample/qrels/test.tsv \\
        --runs runs/kl-proof-contrastive runs/kl-proof-kl-batch --systems spar lambda \\
        --out bench/results/compare_runs-kl-proof.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from bench._common import command_line, existing_file, output_file, write_result


def lambda_summary(run_dir: Path) -> dict:
    """What the run's Λ was trained with and which step it exported (its manifest's stats)."""
    manifest = run_dir / "lambda" / "manifest.json"
    if not manifest.exists():
        return {}
    stats = json.loads(manifest.read_text()).get("stats", {})
    keep = ("steps", "best_step", "initial_valid_mrr", "best_valid_mrr", "train_seconds")
    return {**{k: stats[k] for k in keep if k in stats},
            "objective": stats.get("lambda", {}).get("objective"),
            "pooling": stats.get("lambda", {}).get("encoder", {}).get("pooling")}


def bootstrap_interval(diffs: np.ndarray, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), size=(resamples, len(diffs)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main(argv: list[str] | None = None) -> dict:
    from spar.data.readers import read_qrels
    from spar.evaluate.metrics import as_scored, per_query_values, read_trec_run

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qrels", type=existing_file, required=True, help="the test qrels the runs were evaluated on")
    ap.add_argument("--runs", type=Path, nargs="+", required=True, help="run directories; the first is the reference")
    ap.add_argument("--systems", nargs="+", default=["spar"], help="evaluation/runs/<system>.trec of each run")
    ap.add_argument("--measure", default="nDCG@10")
    ap.add_argument("--out", type=output_file, required=True)
    args = ap.parse_args(argv)

    qrels = read_qrels(args.qrels)
    values: dict[str, dict[str, dict[str, float]]] = {}
    for run_dir in args.runs:
        for system in args.systems:
            trec = run_dir / "evaluation" / "runs" / f"{system}.trec"
            if not trec.exists():
                raise SystemExit(f"{trec}: missing (run `spar evaluate` for {run_dir})")
            values.setdefault(str(run_dir), {})[system] = per_query_values(qrels, as_scored(read_trec_run(trec)),
                                                                             args.measure)
    reference = str(args.runs[0])
    rows = []
    for run_dir in args.runs:
        row: dict = {"run": str(run_dir), "lambda": lambda_summary(run_dir), "systems": {}}
        for system in args.systems:
            mine = values[str(run_dir)][system]
            entry = {args.measure: round(float(np.mean(list(mine.values()))), 4), "queries": len(mine)}
            if str(run_dir) != reference:
                ref = values[reference][system]
                common = sorted(set(ref) & set(mine))
                diffs = np.array([mine[q] - ref[q] for q in common])
                low, high = bootstrap_interval(diffs)
                entry.update({"minus_reference": round(float(diffs.mean()), 4), "ci95": [round(low, 4), round(high, 4)],
                              "queries_better": int((diffs > 0).sum()), "queries_worse": int((diffs < 0).sum()),
                              "paired_queries": len(common)})
            row["systems"][system] = entry
        rows.append(row)
        print(row["run"], {s: e for s, e in row["systems"].items()}, file=sys.stderr)
    return write_result({"measure": args.measure, "qrels": str(args.qrels), "reference": reference, "rows": rows,
                         "command": command_line(__file__, argv)}, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
