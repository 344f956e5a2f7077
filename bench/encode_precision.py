"""CPU encoding at ``encode.precision=auto`` against fp32: throughput (alternated runs) and the vectors' quality.

``auto`` is bf16 autocast on a CPU with native bf16 (AMX or AVX-512 BF16, detected from its flags) and fp32
elsewhere (:func:`spar.model.engines.resolve_precision`). Both runs are spar's own ``encode_passages`` over the same
passages, the same batches and threads, alternated ``--repeats`` times (best and median reported, with the CPU's
model and flags). ``--save DIR`` also encodes every passage and query of the corpus at both precisions and saves
the vectors; ``--evaluate DIR`` (on any machine) then scores them: nDCG@10 of the base alone and of SPAR with a run's
Λ vectors and tuned μ, fp32 against ``auto``, exact search (the quality gate: within 0.3 points).

    python -m bench.encode_precision --passages 1000 --threads 8 --save /tmp/prec     # on the CPU to measure
    python -m bench.encode_precision --evaluate /tmp/prec --run runs/scifact \\
        --qrels ../shared/datasets/scifact/qrels/test.tsv --out bench/results/encode_precision.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench._common import REPO, command_line, cpu_model, machine, write_result

SCIFACT = REPO.parent / "shared" / "datasets" / "scifact"


def measure(args) -> dict:
    import numpy as np
    import torch

    from spar.data.readers import read_corpus, read_queries
    from spar.model.embeddings import EncodeOptions, encode_passages, encode_queries
    from spar.model.stored_vectors import load_embeddings
    from spar.model.encoders import BiEncoder
    from spar.model.engines import cpu_bf16_support, resolve_precision

    torch.set_num_threads(args.threads)
    native = cpu_bf16_support()
    target = resolve_precision("cpu", "auto")
    encoder = BiEncoder.from_pretrained(args.model, pooling="mean", normalize=True)
    corpus = list(read_corpus(args.corpus))
    timed = corpus[: args.passages]

    def run(precision: str, items, out: Path, queries: bool = False):
        opts = EncodeOptions(batch_size=args.batch_size, accelerator="cpu", devices=1, precision=precision,
                             show_progress=False)
        start = time.perf_counter()
        if queries:
            encode_queries(encoder, items, out, options=opts)
        else:
            encode_passages(encoder, items, out, options=opts, force=True)
        return time.perf_counter() - start, np.asarray(load_embeddings(out).vectors)

    times: dict[str, list[float]] = {"32": [], "auto": []}
    vectors = {}
    with tempfile.TemporaryDirectory() as tmp:
        run("32", timed[:32], Path(tmp) / "warm")
        for r in range(args.repeats):
            for precision in ("32", "auto"):
                seconds, vectors[precision] = run(precision, timed, Path(tmp) / f"{precision}-{r}")
                times[precision].append(seconds)
    a, b = vectors["32"], vectors["auto"]
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    n = len(timed)
    result = {
        "spar": round(n / min(times["auto"]), 2), "peer": round(n / min(times["32"]), 2),
        "ratio": round(min(times["32"]) / min(times["auto"]), 3),
        "median_ratio": round(statistics.median(times["32"]) / statistics.median(times["auto"]), 3),
        "unit": "passages/s (best of alternated repeats)", "spar_name": f"encode.precision=auto ({target})",
        "peer_name": "encode.precision=32", "cpu": cpu_model(), "cpu_bf16": native,
        "passages": n, "threads": args.threads, "batch_size": args.batch_size,
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "cosine_vs_fp32": {"min": round(float(cosine.min()), 6), "mean": round(float(cosine.mean()), 6)},
        "max_abs_diff_vs_fp32": float(np.abs(a - b).max()),
        "machine": machine(args.threads), "command": command_line(__file__, None),
    }
    if args.save:
        save = Path(args.save)
        save.mkdir(parents=True, exist_ok=True)
        queries = [(q.id, q.text) for q in read_queries(args.queries)]
        for precision in ("32", "auto"):
            with tempfile.TemporaryDirectory() as tmp:
                _, p = run(precision, corpus, Path(tmp) / "p")
                _, q = run(precision, queries, Path(tmp) / "q", queries=True)
            np.save(save / f"passages-{precision}.npy", p)
            np.save(save / f"queries-{precision}.npy", q)
        (save / "ids.json").write_text(json.dumps({"passages": [p.id for p in corpus],
                                                   "queries": [q for q, _ in queries]}))
        (save / "measure.json").write_text(json.dumps(result, indent=1))
    return result


def evaluate(args) -> dict:
    """nDCG@10 from the saved vectors: base alone and SPAR (the run's Λ vectors and μ), fp32 against auto."""
    import numpy as np

    from spar.data.readers import read_qrels
    from spar.evaluate.metrics import evaluate_run, ranked_run
    from spar.evaluate.tuning import read_tuned
    from spar.model.stored_vectors import load_embeddings

    saved = Path(args.evaluate)
    ids = json.loads((saved / "ids.json").read_text())
    qrels = read_qrels(args.qrels)
    keep = [i for i, q in enumerate(ids["queries"]) if q in qrels]
    qids = [ids["queries"][i] for i in keep]
    run_dir = Path(args.run)
    lam_p = load_embeddings(run_dir / "embeddings" / "lambda" / "passages")
    lam_q = load_embeddings(run_dir / "embeddings" / "lambda" / "queries-test")
    assert lam_p.ids == ids["passages"], "the run's Λ passages are another corpus's"
    lq = np.asarray(lam_q.vectors)[[lam_q.ids.index(q) for q in qids]]
    mu = read_tuned(run_dir).mu()
    out = {}
    for precision in ("32", "auto"):
        p, q = np.load(saved / f"passages-{precision}.npy"), np.load(saved / f"queries-{precision}.npy")[keep]
        base = q @ p.T
        spar = base + mu * (lq @ np.asarray(lam_p.vectors).T)
        for name, scores in (("base", base), ("spar", spar)):
            rows = np.argsort(-scores, axis=1, kind="stable")[:, :100]
            run = ranked_run(qids, rows, np.take_along_axis(scores, rows, 1), ids["passages"])
            out[f"{name}_ndcg10_{precision}"] = round(evaluate_run(qrels, run, ["nDCG@10"])["nDCG@10"], 4)
    measured = json.loads((saved / "measure.json").read_text())
    result = {**measured, **out, "mu": mu, "qrels": str(args.qrels),
              "base_delta_points": round(100 * (out["base_ndcg10_auto"] - out["base_ndcg10_32"]), 2),
              "spar_delta_points": round(100 * (out["spar_ndcg10_auto"] - out["spar_ndcg10_32"]), 2),
              "evaluate_command": command_line(__file__, None)}
    return write_result(result, args.out)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--corpus", type=Path, default=SCIFACT / "corpus.jsonl")
    ap.add_argument("--queries", type=Path, default=SCIFACT / "queries.jsonl")
    ap.add_argument("--passages", type=int, default=1000, help="passages timed per run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--save", default=None, help="also encode the whole corpus and queries at both precisions here")
    ap.add_argument("--evaluate", default=None, help="score the vectors --save wrote (needs --run and --qrels)")
    ap.add_argument("--run", default=None, help="a spar run of the same corpus: its Λ vectors and tuned μ")
    ap.add_argument("--qrels", type=Path, default=SCIFACT / "qrels" / "test.tsv")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "encode_precision.json")
    args = ap.parse_args(argv)
    if args.evaluate:
        return evaluate(args)
    result = measure(args)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
