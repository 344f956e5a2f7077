"""Index size per passage: the SPAR index ([P, PΛ], 384 + 384 dims) vs the base index (P, 384 dims).

For each FAISS type spar builds (flat, HNSW, IVF-PQ) both indexes are built with
:func:`spar.index.spar_index.build_spar_index` over the same N synthetic unit vectors of the real dimensions (MiniLM
base and MiniLM-initialised Λ: 384 each) and serialised; the figure is bytes of ``index.faiss`` per passage
(``ids.arrow`` is the same for both and excluded). Sizes do not depend on the vector values (flat, HNSW) or barely
(IVF-PQ: codes have a fixed size), so synthetic vectors give the real figures. IVF-PQ uses the same ``pq_m`` for both,
i.e. the same code size: SPAR's PQ codes then spend half as many bits per dimension (the accuracy cost is for the
evaluate stage to measure).

    python -m bench.index_size                 # N = 50,000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=50_000)
    ap.add_argument("--base-dim", type=int, default=384)
    ap.add_argument("--lambda-dim", type=int, default=384)
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--hnsw-ef-construction", type=int, default=40,
                    help="build effort only (the graph's size depends on M, not on this)")
    ap.add_argument("--pq-m", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "index_size.json")
    args = ap.parse_args(argv)

    import faiss
    import numpy as np

    from spar.index.spar_index import build_spar_index
    from spar.index.types.ivf import default_nlist

    faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(0)

    def unit(n: int, d: int) -> np.ndarray:
        x = rng.standard_normal((n, d), dtype=np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    n = args.passages
    base_p, lambda_p = unit(n, args.base_dim), unit(n, args.lambda_dim)
    opts = {"hnsw_m": args.hnsw_m, "hnsw_ef_construction": args.hnsw_ef_construction, "pq_m": args.pq_m}
    rows: dict[str, dict] = {}
    for index_type in ("flat", "hnsw", "ivfpq"):
        row = {}
        for system, lam in (("base", None), ("spar", lambda_p)):
            start = time.perf_counter()
            index = build_spar_index(base_p, lam, "concat", index_type, **opts)
            built = time.perf_counter() - start
            size = int(faiss.serialize_index(index).nbytes)
            row[system] = {"bytes_per_passage": round(size / n, 2), "bytes": size, "dim": int(index.d),
                           "build_seconds": round(built, 1)}
            if index_type == "ivfpq":
                ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
                row[system].update(nlist=int(ivf.nlist), pq_m=int(ivf.pq.M), pq_nbits=int(ivf.pq.nbits))
            del index
        row["ratio"] = round(row["spar"]["bytes_per_passage"] / row["base"]["bytes_per_passage"], 3)
        rows[index_type] = row
        print(f"{index_type}: {row}", file=sys.stderr)

    flat = rows["flat"]
    result = {
        "spar": flat["spar"]["bytes_per_passage"],
        "peer": flat["base"]["bytes_per_passage"],
        "ratio": flat["ratio"],
        "unit": "bytes per passage of index.faiss, flat index (lower is better); see by_type for HNSW and IVF-PQ",
        "machine": machine(args.threads),
        "command": command_line(__file__, argv),
        "peer_name": "base retriever's index (same type, base vectors only)",
        "by_type": rows,
        "passages": n, "dims": {"base": args.base_dim, "lambda": args.lambda_dim,
                                "spar": args.base_dim + args.lambda_dim},
        "params": {"hnsw_m": args.hnsw_m, "pq_m": args.pq_m, "ivf_nlist": default_nlist(n)},
        "vectors": "synthetic",
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
