"""Retrieval quality per encode backend: nDCG@10 of base and SPAR, and the base vectors' distance to torch's.

Reads one finished run per backend, made with the run machinery into separate output directories (sample, label
and train once; the later runs copy ``queries/ labels/ teacher_index/ lambda/`` of the first and run encode, tune,
index and evaluate)::

    for b in onnx onnx-int8 torch; do for st in sample label train encode tune index evaluate; do
      spar $st -c configs/experiments/scifact.yaml experiment.output_dir=RUNS/sf-$b \\
          experiment.results_dir=RUNS/results-$b encode.backend=$b; done; done
    python -m bench.encode_backend_quality --runs RUNS

``spar``/``peer``/``ratio``: SPAR nDCG@10 of ``onnx`` / of ``torch`` / their ratio; ``backends`` has each backend's
base and SPAR nDCG@10, their difference to torch in points, the tuned μ and α, and the base vectors' max abs
difference and cosine to torch's for every split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, required=True, help="directory holding sf-<backend>/ and results-<backend>/")
    ap.add_argument("--dataset", default="scifact")
    ap.add_argument("--backends", nargs="+", default=["onnx", "onnx-int8"])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "encode_backend_quality.json")
    args = ap.parse_args(argv)

    import numpy as np

    from spar.model.stored_vectors import load_embeddings

    def results(backend: str) -> dict:
        return json.loads((args.runs / f"results-{backend}" / f"{args.dataset}.json").read_text())

    torch_results = results("torch")
    rows = {}
    for backend in ["torch", *args.backends]:
        r = results(backend)
        row = {"base": r["systems"]["base"]["nDCG@10"], "spar": r["systems"]["spar"]["nDCG@10"],
               "mu": r["mu"], "alpha": r["alpha"]}
        if backend != "torch":
            row["points_vs_torch"] = {k: round(100 * (row[k] - torch_results["systems"][k]["nDCG@10"]), 3)
                                      for k in ("base", "spar")}
            row["vectors_vs_torch"] = {}
            for split in ("passages", "queries-dev", "queries-test"):
                ref = np.asarray(load_embeddings(args.runs / "sf-torch" / "embeddings" / "base" / split).vectors)
                emb = load_embeddings(args.runs / f"sf-{backend}" / "embeddings" / "base" / split)
                vec = np.asarray(emb.vectors)
                cosine = (vec * ref).sum(1) / (np.linalg.norm(vec, axis=1) * np.linalg.norm(ref, axis=1))
                row["vectors_vs_torch"][split] = {
                    "count": len(vec), "max_abs_diff": float(np.abs(vec - ref).max()),
                    "cosine_mean": round(float(cosine.mean()), 6), "cosine_min": round(float(cosine.min()), 6)}
        rows[backend] = row
    first = args.backends[0]
    result = {
        "spar": rows[first]["spar"], "peer": rows["torch"]["spar"],
        "ratio": round(rows[first]["spar"] / rows["torch"]["spar"], 6),
        "unit": f"SPAR nDCG@10 on {args.dataset} test ({first} / torch; higher is better)",
        "machine": machine(), "command": command_line(__file__, argv), "backends": rows,
        "queries": torch_results.get("queries"),
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
