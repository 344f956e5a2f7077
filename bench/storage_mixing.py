"""Does one quantizer over [P, PΛ] lose anything against a bit width per part (base 8-bit, Λ 4-bit)?

FAISS's scalar quantizers learn a range per dimension but one bit width per index, so spar codes the whole SPAR
passage vector with one codec. Before building anything more complex (two indexes, or a custom codec), this
measures what that costs: for the densified teacher (projection Λ) at each ``--dims`` and ``--seeds``, μ is tuned on
the dev split against each stored form and SPAR nDCG@10 is reported on test:

- ``one codec``: ``sq4``, ``sq6``, ``sq8`` over the whole vector (what ``index.storage`` builds);
- ``per part``: the base and Λ each through its own scalar quantizer (``sq8`` base + ``sq4`` Λ, the mix of the
  issue's outside measurement; and float32 base + ``sq4`` Λ), decoded and concatenated — what a two-codec index
  would serve.

Needs a run's artifacts up to the base embeddings (as ``spar frontier``)::

    python -m bench.storage_mixing -c configs/experiments/scifact.yaml --dims 1536 3072 --seeds 0 1 2

Prints JSON and writes ``bench/results/storage_mixing-<name>.json``; ``ratio`` is the mean SPAR nDCG@10 of the
single 4-bit codec over that of the 8/4-bit mix at the same Λ dimension (1.0: nothing lost).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench._common import REPO, command_line, machine, write_result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--dims", type=int, nargs="+", default=[1536, 3072])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args(argv)

    import numpy as np

    from spar.core.config import load_config
    from spar.sweep.frontier import METRICS, FrontierInputs
    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import IndexOptions
    from spar.index.combine import spar_query_vectors
    from spar.evaluate.exact import dense_search
    from spar.lexical.projection import ProjectionLambda
    from spar.evaluate.metrics import evaluate_run
    from spar.index.storage import code_bytes
    from spar.evaluate.tuning import tune_mu

    cfg = load_config(args.config)
    inputs = FrontierInputs(cfg)
    base_dim = inputs.base_p.shape[1]

    def part(matrix: np.ndarray, storage: str) -> np.ndarray:  # one part through its own codec
        zeros = np.zeros((matrix.shape[0], 0), dtype=np.float32)
        return served_passage_vectors(matrix, zeros, "concat", "flat", IndexOptions(storage=storage))[0]

    def score(served_base, served_lambda, lam_q) -> dict:
        dev, test = inputs.dev, inputs.test
        tuned = tune_mu(inputs.base_q["dev"], lam_q["dev"], served_base, served_lambda, dev.ids, inputs.doc_ids,
                        dev.qrels, "nDCG@10", "concat", confirm=False)
        q = spar_query_vectors(inputs.base_q["test"], lam_q["test"], tuned.search.best, "concat")
        run = dense_search(q, np.hstack([served_base, served_lambda]), test.ids, inputs.doc_ids, 100)
        return {"mu": tuned.search.best, **{m: round(v, 6) for m, v in evaluate_run(test.qrels, run, METRICS).items()}}

    rows = []
    for dim in args.dims:
        for seed in args.seeds:
            model = ProjectionLambda(inputs.weights, dim, cfg.train.lexical.projection, seed)
            lam_p, lam_q = inputs.lambda_vectors(model)
            forms = {f"one codec {s}": (served_passage_vectors(inputs.base_p, lam_p, "concat", "flat",
                                                               IndexOptions(storage=s)), code_bytes(s, base_dim + dim))
                     for s in ("sq8", "sq6", "sq4")}
            forms["per part sq8 + sq4"] = ((part(inputs.base_p, "sq8"), part(lam_p, "sq4")),
                                           code_bytes("sq8", base_dim) + code_bytes("sq4", dim))
            forms["per part float32 + sq4"] = ((inputs.base_p, part(lam_p, "sq4")),
                                               code_bytes("float32", base_dim) + code_bytes("sq4", dim))
            for name, ((served_base, served_lambda), size) in forms.items():
                rows.append({"dim": dim, "seed": seed, "form": name, "bytes_per_passage": size,
                             **score(served_base, served_lambda, lam_q)})
                print(f"d={dim} seed={seed} {name}: {rows[-1]['nDCG@10']:.4f} at {size} B", file=sys.stderr)

    table = {}
    for row in rows:
        table.setdefault((row["dim"], row["form"]), []).append(row["nDCG@10"])
    summary = {f"{dim} {form}": {"nDCG@10": round(statistics.mean(v), 4),
                                 "sd": round(statistics.stdev(v), 4) if len(v) > 1 else 0.0,
                                 "bytes_per_passage": next(r["bytes_per_passage"] for r in rows
                                                           if r["dim"] == dim and r["form"] == form)}
               for (dim, form), v in sorted(table.items())}
    spar = {d: summary[f"{d} one codec sq4"]["nDCG@10"] for d in args.dims}
    peer = {d: summary[f"{d} per part sq8 + sq4"]["nDCG@10"] for d in args.dims}
    result = {
        "spar": spar, "peer": peer, "ratio": {d: round(spar[d] / peer[d], 4) for d in args.dims},
        "unit": "SPAR nDCG@10 on test (mean over seeds), one sq4 codec over [P, PΛ] vs base sq8 + Λ sq4",
        "summary": summary, "rows": rows, "dataset": cfg.experiment.name,
        "machine": machine(1), "command": command_line(__file__, argv),
    }
    return write_result(result, REPO / "bench" / "results" / f"storage_mixing-{cfg.experiment.name}.json")


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
