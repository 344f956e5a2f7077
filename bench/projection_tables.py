"""The projection Λ at Wikipedia scale: today's dense Gaussian table against the cures, by SPAR quality and bytes.

A ``gaussian`` projection holds a vocabulary × dim float32 table in memory (and, before tables were regenerated, in
every published model): 515,936 analysed terms × 3,072 dims = 6.3 GB for enwiki-2015's 663k passages
(``bench/lexical_scale.py`` measures the vocabulary). The cures scored here, each on the same run's frontier inputs
(:class:`spar.sweep.frontier.FrontierInputs`; each point is :func:`spar.sweep.frontier.score_points`: μ tuned on
dev against the stored passage vectors, SPAR nDCG@10 on test):

- ``gaussian``: today's table (rows drawn in vocabulary order from ``numpy.random.default_rng(seed)``): the peer;
- ``hashed-gaussian``: N(0, 1/dim) rows regenerated per term (NumPy's Philox keyed by blake2b(seed, term)): no
  table stored, but each row costs a generator call (defined here only: not a spar option);
- ``countsketch`` and ``sparse-<s>``: ``s`` entries ±1/√s per term, hashed (:mod:`spar.lexical.random_tables`);
- ``gaussian-df<k>``: the Gaussian table without the terms of document frequency < k (their rows zeroed: those terms
  no longer count in Λ), the other cure for memory.

Needs a run's artifacts up to the base embeddings (as ``spar frontier``)::

    python -m bench.projection_tables -c configs/experiments/scifact.yaml \\
        experiment.output_dir=/path/to/run --dims 1536 3072 --seeds 0 1 2

Prints JSON and writes ``bench/results/projection_tables-<name>.json``; ``ratio`` is the mean SPAR nDCG@10 (sq4) of
``sparse-8`` over the Gaussian's at the same dim (1.0: nothing lost). ``table_bytes`` is each table's size in memory
at ``--vocabulary`` terms (enwiki-2015's, measured).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result

VARIANTS = ("gaussian", "hashed-gaussian", "countsketch", "sparse-2", "sparse-4", "sparse-8", "sparse-16",
            "gaussian-df2", "gaussian-df3")


def hashed_gaussian(vocab, dim: int, seed: int):
    """N(0, 1/dim) rows, each from its own Philox generator keyed by the term (independent of vocabulary order)."""
    import numpy as np

    out = np.empty((len(vocab), dim), dtype=np.float32)
    scale = np.float32(1 / np.sqrt(dim))
    for i, term in enumerate(vocab):
        key = int.from_bytes(hashlib.blake2b(f"{seed}\0{term}".encode(), digest_size=16).digest(), "little")
        out[i] = np.random.Generator(np.random.Philox(key=key)).standard_normal(dim, dtype=np.float32) * scale
    return out


def table_bytes(variant: str, vocabulary: int, dim: int, df_kept: dict[int, int]) -> int:
    """Bytes of the table in memory at ``vocabulary`` terms: dense float32, or CSR (int32 index + float32 value
    per entry, int64 row pointer)."""
    if variant in ("gaussian", "hashed-gaussian"):
        return vocabulary * dim * 4
    if variant.startswith("gaussian-df"):
        return df_kept[int(variant.removeprefix("gaussian-df"))] * dim * 4
    s = 1 if variant == "countsketch" else int(variant.removeprefix("sparse-"))
    return vocabulary * s * 8 + (vocabulary + 1) * 8


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("overrides", nargs="*", help="section.key=value config overrides (e.g. experiment.output_dir)")
    ap.add_argument("--dims", type=int, nargs="+", default=[1536, 3072])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--storages", nargs="+", default=["float32", "sq4"])
    ap.add_argument("--vocabulary", type=int, default=515_936, help="terms to size the tables at (enwiki-2015)")
    ap.add_argument("--df-kept", type=int, nargs=2, default=[233_898, 163_207],
                    help="enwiki-2015 terms with df >= 2 and df >= 3")
    ap.add_argument("--out", type=Path, default=None,
                    help="result file (default: bench/results/projection_tables-<name>.json)")
    args = ap.parse_args(argv)


    from spar.core.config import load_config
    from spar.sweep.frontier import FrontierInputs, score_points
    from spar.lexical.projection import ProjectionLambda

    cfg = load_config(args.config, args.overrides)
    inputs = FrontierInputs(cfg)
    df = inputs.weights.df
    df_kept = dict(zip((2, 3), args.df_kept))

    def model(variant: str, dim: int, seed: int) -> ProjectionLambda:
        if variant in ("countsketch", "gaussian"):
            return ProjectionLambda(inputs.weights, dim, variant, seed)
        if variant.startswith("sparse-"):
            return ProjectionLambda(inputs.weights, dim, "sparse", seed, int(variant.removeprefix("sparse-")))
        lam = ProjectionLambda(inputs.weights, dim, "gaussian", seed)
        if variant == "hashed-gaussian":
            lam.__dict__["matrix"] = hashed_gaussian(inputs.weights.vocab, dim, seed)
        else:  # gaussian-df<k>: the same Gaussian rows, the rare terms' dropped
            table = lam.matrix.copy()
            table[df < int(variant.removeprefix("gaussian-df"))] = 0.0
            lam.__dict__["matrix"] = table
        return lam

    rows = []
    for dim in args.dims:
        for variant in args.variants:
            for seed in args.seeds:
                start = time.perf_counter()
                lam = model(variant, dim, seed)
                _ = lam.matrix
                table_s = time.perf_counter() - start
                for p in score_points(inputs, lam, seed, 0.0, 0, args.storages):
                    rows.append({"variant": variant, "dim": dim, "seed": seed, "storage": p.storage, "mu": p.mu,
                                 "dev_spar": p.dev_spar, "spar": p.spar, "lambda_alone": p.lambda_alone,
                                 "rbo": p.rbo, "table_seconds": round(table_s, 3)})
                    print(f"d={dim} {variant} seed={seed} {p.storage}: SPAR {p.spar['nDCG@10']:.4f}, Λ alone "
                          f"{p.lambda_alone['nDCG@10']:.4f}, RBO {p.rbo:.3f}", file=sys.stderr, flush=True)

    groups: dict[tuple[int, str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["dim"], row["variant"], row["storage"]), []).append(row)

    def mean_sd(values: list[float]) -> list[float]:
        return [round(statistics.mean(values), 4), round(statistics.stdev(values), 4) if len(values) > 1 else 0.0]

    summary = {f"{dim} {variant} {storage}": {
        "spar_nDCG@10": mean_sd([r["spar"]["nDCG@10"] for r in g]),
        "dev_spar": mean_sd([r["dev_spar"] for r in g]),
        "lambda_alone_nDCG@10": mean_sd([r["lambda_alone"]["nDCG@10"] for r in g]),
        "rbo": mean_sd([r["rbo"] for r in g]),
        "table_bytes": table_bytes(variant, args.vocabulary, dim, df_kept),
    } for (dim, variant, storage), g in sorted(groups.items())}
    storage = "sq4" if "sq4" in args.storages else args.storages[0]
    pick = "sparse-8" if "sparse-8" in args.variants else args.variants[-1]
    spar = {d: summary[f"{d} {pick} {storage}"]["spar_nDCG@10"][0] for d in args.dims}
    peer = {d: summary[f"{d} gaussian {storage}"]["spar_nDCG@10"][0] for d in args.dims}
    result = {
        "spar": spar, "peer": peer, "ratio": {d: round(spar[d] / peer[d], 4) for d in args.dims},
        "unit": f"SPAR nDCG@10 on test (mean over seeds, {storage}), {pick} projection vs the Gaussian table",
        "summary": summary, "rows": rows, "dataset": cfg.experiment.name,
        "vocabulary": {"terms": inputs.weights.vocab_size, "sized_at": args.vocabulary},
        "machine": machine(1), "command": command_line(__file__, argv),
    }
    out = args.out or REPO / "bench" / "results" / f"projection_tables-{cfg.experiment.name}.json"
    return write_result(result, out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
