"""The projection Λ on Wikipedia: vocabulary, memory and passage-encoding speed of the sparse table against the
Gaussian one, on enwiki-2015's 663,483 passages (title + text, the teacher's fields).

1. The teacher's statistics (:meth:`spar.lexical.terms.BM25Weights.fit`, the BM25 teacher's analyzer) are counted
   once over the streamed ``.jsonl.gz`` and saved to ``--statistics`` (reused when there): terms, document
   frequencies, the fit's time and peak RSS.
2. Each projection runs in its own process (its own peak RSS): the Λ is built on those statistics (the table's
   build time and bytes), then the first ``--passages`` passages (0: all) are encoded through the encode stage's own
   writer (:func:`spar.model.embeddings.encode_passages`: 100k-passage shards of float32 ``.npy``, as ``spar encode``),
   into ``--work``; the shards it wrote are deleted afterwards.

``spar`` is ``sparse`` (``--nonzeros`` entries per term), ``peer`` the ``gaussian`` table at the same dim; the ratio
is on peak RSS (target: ≤ 8 GB for the stage)::

    python -m bench.lexical_scale --dim 3072 --passages 0

Prints JSON and writes ``bench/results/lexical_scale.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from bench._common import REPO, command_line, machine, proc_status, self_command, write_result

CORPUS = REPO.parent / "shared" / "datasets" / "enwiki-2015" / "corpus.jsonl.gz"


def stream(path: Path, limit: int = 0) -> Iterator[tuple[str, str, str]]:
    """``(id, title, text)`` of a JSON-lines corpus, read through gzip when it ends in ``.gz``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if limit and n >= limit:
                return
            record = json.loads(line)
            yield str(record["_id"]), record.get("title") or "", record.get("text") or ""


def peak_rss_gb() -> float:
    """The process's peak RSS in GB (1e9 bytes; ``ru_maxrss`` is in KiB: it was divided by 1024² here, GiB, before
    the committed results were corrected)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, 3)


def current_rss_gb() -> float:
    return round(proc_status()["VmRSS"] / 1e9, 3)


def fit_statistics(corpus: Path, out: Path) -> dict:
    from spar.lexical.terms import BM25Weights
    from spar.data.passages import indexed_text

    start = time.perf_counter()
    weights = BM25Weights.fit(indexed_text((title, text)) for _, title, text in stream(corpus))
    seconds = time.perf_counter() - start
    weights.save(out)
    df = weights.df
    stats = {"passages": weights.num_docs, "terms": weights.vocab_size, "avg_length": round(weights.avg_length, 2),
             "terms_df_1": int((df == 1).sum()), **{f"terms_df_ge_{k}": int((df >= k).sum()) for k in (2, 3, 5, 10)},
             "fit_seconds": round(seconds, 1), "fit_peak_rss_gb": peak_rss_gb()}
    (out / "bench_fit.json").write_text(json.dumps(stats, indent=2))
    return stats


def worker(args) -> dict:
    import numpy as np
    import scipy.sparse as sp

    from spar.model.embeddings import encode_passages
    from spar.lexical.projection import ProjectionLambda
    from spar.lexical.terms import BM25Weights

    weights = BM25Weights.load(args.statistics)
    rss_statistics = current_rss_gb()
    start = time.perf_counter()
    lam = ProjectionLambda(weights, args.dim, args.worker, 0, args.nonzeros if args.worker == "sparse" else None)
    table = lam.matrix
    table_seconds = time.perf_counter() - start
    table_bytes = (table.data.nbytes + table.indices.nbytes + table.indptr.nbytes) if sp.issparse(table) \
        else table.nbytes
    rss_table = current_rss_gb()
    out = args.work / args.worker
    start = time.perf_counter()
    stats = encode_passages(lam, stream(args.corpus, args.passages), out, weights_fingerprint=args.worker,
                            encoder_name=f"lambda-{args.worker}", shard_size=args.shard_size, force=True)
    seconds = time.perf_counter() - start
    disk = sum(f.stat().st_size for f in out.rglob("*.npy"))
    first = np.load(out / "part-00000.npy", mmap_mode="r")
    assert first.shape[1] == args.dim
    shutil.rmtree(out)
    return {"projection": args.worker, "nonzeros": lam.nonzeros, "dim": args.dim, "terms": weights.vocab_size,
            "table_bytes": int(table_bytes), "table_seconds": round(table_seconds, 2),
            "rss_after_statistics_gb": rss_statistics, "rss_after_table_gb": rss_table,
            "passages": stats["count"], "encode_seconds": round(seconds, 1),
            "passages_per_second": round(stats["count"] / seconds, 1), "embeddings_bytes": disk,
            "peak_rss_gb": peak_rss_gb()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--statistics", type=Path, default=REPO / "runs" / "bench-lexical-scale" / "statistics")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench-lexical-scale")
    ap.add_argument("--dim", type=int, default=3072)
    ap.add_argument("--nonzeros", type=int, default=8)
    ap.add_argument("--passages", type=int, default=0, help="passages to encode (0: all)")
    ap.add_argument("--peer-passages", type=int, default=None, help="passages the Gaussian encodes (default: same)")
    ap.add_argument("--shard-size", type=int, default=100_000)
    ap.add_argument("--worker", choices=("sparse", "gaussian"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return {}

    fit_file = args.statistics / "bench_fit.json"
    vocabulary = json.loads(fit_file.read_text()) if fit_file.exists() else fit_statistics(args.corpus,
                                                                                          args.statistics)
    runs = {}
    for projection in ("sparse", "gaussian"):
        passages = args.passages if projection == "sparse" or args.peer_passages is None else args.peer_passages
        cmd = [*self_command(__file__), "--worker", projection, "--corpus", str(args.corpus), "--statistics",
               str(args.statistics), "--work", str(args.work), "--dim", str(args.dim), "--nonzeros",
               str(args.nonzeros), "--passages", str(passages), "--shard-size", str(args.shard_size)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            runs[projection] = {"failed": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"],
                                "returncode": done.returncode, "peak_rss_gb": None}
        else:
            runs[projection] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(runs[projection]), file=sys.stderr, flush=True)
    spar, peer = runs["sparse"].get("peak_rss_gb"), runs["gaussian"].get("peak_rss_gb")
    result = {
        "spar": spar, "peer": peer, "ratio": round(spar / peer, 3) if spar and peer else None,
        "unit": f"peak RSS (GB) of encoding enwiki-2015 passages with a {args.dim}-d projection Λ: sparse "
                f"({args.nonzeros} nonzeros) vs Gaussian",
        "vocabulary": vocabulary, "runs": runs, "limit_gb": 8,
        "machine": machine(1), "command": command_line(__file__, argv),
    }
    return write_result(result, REPO / "bench" / "results" / "lexical_scale.json")


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
