"""Score Λ vectors made elsewhere (a lent GPU's ``spar encode encode.encoders=[lambda]``) against a run's base.

A Λ trained on another machine comes back as its embeddings (``embeddings/lambda/{passages,queries-dev,
queries-test}``) without its weights; this scores it the way ``spar tune`` + ``spar evaluate`` would, by exact
search over the run's own base vectors: μ chosen on the dev split's qrels from a log grid (never on test), then
test nDCG@10 and R@100 of the base, Λ alone and SPAR (``base + μ·Λ``).

    python -m bench.lambda_vectors -c configs/experiments/scifact.yaml \\
        --lambda .gpu/lambda/scifact-lambda/embeddings/lambda --name contrastive --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench._common import command_line, write_result

GRID = [float(x) for x in np.logspace(-4, 1, 51)]


def _aligned(base, other, what: str) -> np.ndarray:
    if base.ids == other.ids:
        return np.asarray(other.vectors)
    index = {pid: i for i, pid in enumerate(other.ids)}
    missing = [pid for pid in base.ids if pid not in index]
    if missing:
        raise SystemExit(f"{what}: {len(missing)} ids of the base are missing, e.g. {missing[:3]}")
    return np.asarray(other.vectors)[[index[pid] for pid in base.ids]]


def score(qids, pids, scores, qrels, k: int = 100) -> dict[str, float]:
    from spar.evaluate.metrics import evaluate_run, ranked_run

    rows = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    run = ranked_run(qids, rows, np.take_along_axis(scores, rows, 1), pids)
    return evaluate_run(qrels, run, ["nDCG@10", "R@100"])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--lambda", dest="lambda_dir", required=True, help="embeddings/lambda of the other machine")
    ap.add_argument("--name", default="lambda")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    from spar.core.config import load_config
    from spar.core.run_context import RunContext
    from spar.data.readers import read_qrels
    from spar.model.stored_vectors import load_embeddings

    cfg = load_config(args.config, args.overrides)
    run = RunContext(cfg)
    lam = Path(args.lambda_dir)
    base_p = load_embeddings(run.embeddings("base", "passages"))
    lam_p = _aligned(base_p, load_embeddings(lam / "passages"), "passages")
    pids = base_p.ids
    base_pv = np.asarray(base_p.vectors)
    result: dict = {"name": args.name, "lambda": str(lam), "grid": [GRID[0], GRID[-1], len(GRID)]}
    splits = {}
    default = cfg.data.question_sets["default"]
    for split, qrels_path in (("dev", default.qrels_dev), ("test", default.qrels_test)):
        bq = load_embeddings(run.embeddings("base", f"queries-{split}"))
        lq = _aligned(bq, load_embeddings(lam / f"queries-{split}"), f"queries-{split}")
        splits[split] = (bq.ids, np.asarray(bq.vectors) @ base_pv.T, lq @ lam_p.T, read_qrels(qrels_path))
    qids, base_dev, lam_dev, qrels_dev = splits["dev"]
    curve = {mu: score(qids, pids, base_dev + mu * lam_dev, qrels_dev)["nDCG@10"] for mu in GRID}
    mu = max(curve, key=lambda m: (curve[m], -m))
    qids, base_test, lam_test, qrels_test = splits["test"]
    result.update({
        "mu": mu, "dev_ndcg10": round(curve[mu], 4), "mu_at_grid_edge": mu in (GRID[0], GRID[-1]),
        "test": {"base": score(qids, pids, base_test, qrels_test), "lambda": score(qids, pids, lam_test, qrels_test),
                 "spar": score(qids, pids, base_test + mu * lam_test, qrels_test)},
        "command": command_line(__file__, argv),
    })
    manifest = lam.parent.parent / "lambda" / "manifest.json"
    if manifest.exists():
        stats = json.loads(manifest.read_text())["stats"]
        result["training"] = {k: stats.get(k) for k in ("steps", "epochs", "seconds", "passages_per_s",
                                                         "initial_valid_mrr", "best_valid_mrr", "best_step",
                                                         "precision")}
        result["objective"] = stats.get("lambda", {}).get("objective")
    print(json.dumps({k: result[k] for k in ("name", "mu", "dev_ndcg10", "test")}, indent=1))
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
