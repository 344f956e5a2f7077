"""Which FAISS index serves SPAR at Wikipedia scale: quality, latency and bytes on an experiment's real vectors.

Issue #26 item 5 asks for the index type and storage at this size to be chosen by measurement on the real vectors.
This script reads a finished experiment's artifacts (``embeddings/`` of the base and Λ, ``tune/`` for μ, the
passages table) and, on the *dev* questions of one question set (never a test split), compares:

- **peer**: the exact scan of float32 ``[P, PΛ]`` with ``[Q, μ·QΛ]`` (FAISS brute force), the ranking every
  other row is judged against;
- each ``--configs`` entry ``TYPE:STORAGE[:scale=S][:nprobe=N][:ef=E]``: a SPAR index built as ``spar index``
  builds it (:func:`spar.index.spar_index.build_faiss_index`), holding ``[P, s·PΛ]`` and searched with
  ``[Q, (μ/s)·QΛ]`` — the same scores for every ``s``. ``scale=1`` is what the pipeline's index holds;
  ``scale=mu`` folds μ into the passages (as :mod:`spar.evaluate.frontier` does for IVF); ``scale=sqrt-mu`` splits it.
  Λ's half of ``[P, PΛ]`` has ~20× the base's norm, so k-means lists and HNSW neighbourhoods of the unscaled
  vectors follow Λ alone while a query with small μ is ranked by the base.

For each: Acc@k (DPR's ``has_answer`` on the set's answers), nDCG@10 where the set has qrels, overlap@20 with the
exact top-20, build seconds, search milliseconds per question (all questions in one batched call, ``--threads``
FAISS threads) and bytes per passage. ``ratio`` is each config's search time over the exact scan's.

    python bench/odqa_index.py -c configs/experiments/wiki-odqa-50k.yaml --set squad-open --questions 1000 \
        --configs flat:sq4 ivf:sq4:nprobe=64 ivf:sq4:scale=mu:nprobe=64 --out bench/results/odqa_index-50k.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import numpy as np  # noqa: E402

from _common import command_line, machine, write_result  # noqa: E402


def parse_config(text: str) -> dict:
    """``ivf:sq4:scale=mu:nprobe=64`` -> {"type": "ivf", "storage": "sq4", "scale": "mu", "nprobe": 64}."""
    parts = text.split(":")
    if len(parts) < 2:
        raise SystemExit(f"--configs {text!r}: expected TYPE:STORAGE[:key=value...]")
    out: dict = {"type": parts[0], "storage": parts[1], "scale": "1"}
    for part in parts[2:]:
        key, _, value = part.partition("=")
        if key not in ("scale", "nprobe", "ef", "nlist"):
            raise SystemExit(f"--configs {text!r}: unknown option {key!r} (scale, nprobe, ef, nlist)")
        out[key] = value if key == "scale" else int(value)
    return out


def scale_value(scale: str, mu: float) -> float:
    return {"mu": mu, "sqrt-mu": float(np.sqrt(mu))}.get(scale) or float(scale)


def judge(ranked_rows: np.ndarray, scores: np.ndarray, dev, doc_ids, texts_of, ks) -> dict[str, float]:
    from spar.evaluate.metrics import answer_accuracy, evaluate_run, ranked_run

    run = ranked_run(dev.ids, ranked_rows, scores, doc_ids)
    out = {}
    if dev.answers is not None:
        texts = texts_of({d for hits in run.values() for d, _ in hits})
        out.update(answer_accuracy(run, dev.answers, texts, ks, dev.answer_match))
    if dev.qrels:
        out.update(evaluate_run(dev.qrels, run, ["nDCG@10"]))
    return {k: round(v, 4) for k, v in out.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--set", required=True, help="the question set whose dev split is searched")
    parser.add_argument("--questions", type=int, default=1000, help="first N of the set's (sampled) dev questions")
    parser.add_argument("--configs", nargs="+", default=["flat:sq4", "ivf:sq4:nprobe=64", "ivf:sq4:scale=mu:nprobe=64"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--out", default="bench/results/odqa_index.json")
    parser.add_argument("overrides", nargs="*", help="section.key=value config overrides")
    args = parser.parse_args(argv)

    import faiss

    from spar.core.config import load_config
    from spar.data.question_sets import SplitQueries, dev_split
    from spar.evaluate.evaluation import passage_texts
    from spar.evaluate.tuning import read_tuned
    from spar.experiment.inputs import ExperimentInputs
    from spar.index.spar_index import IndexOptions, build_faiss_index, spar_query_vectors
    from spar.index.storage import code_bytes

    faiss.omp_set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    inputs = ExperimentInputs(cfg)
    full = dev_split(cfg, args.set)
    ids = full.ids[:args.questions]
    dev = SplitQueries(full.split, {q: full.qrels[q] for q in ids if q in full.qrels}, {q: full.texts[q] for q in ids},
                       None if full.answers is None else {q: full.answers[q] for q in ids if q in full.answers},
                       full.answer_match, full.name, full.stored)
    mu = read_tuned(cfg.output_dir).for_set(args.set).mu()
    base_p = np.asarray(inputs.passage_vectors("base"), dtype=np.float32)
    lambda_p = np.asarray(inputs.passage_vectors("lambda"), dtype=np.float32)
    base_q = inputs.query_vectors("base", dev)
    lambda_q = inputs.query_vectors("lambda", dev)
    doc_ids = inputs.doc_ids
    n, dim = base_p.shape[0], base_p.shape[1] + lambda_p.shape[1]
    ks = [1, 5, 20, 100]
    texts_of = lambda wanted: passage_texts(inputs, wanted)  # noqa: E731

    print(f"{n:,} passages, {dim} dims, {len(ids)} dev questions of {args.set}, μ = {mu:g}", file=sys.stderr)
    exact_q = spar_query_vectors(base_q, lambda_q, mu, "concat")
    start = time.perf_counter()
    index = faiss.IndexFlatIP(dim)
    for s in range(0, n, 65536):
        index.add(np.ascontiguousarray(np.hstack([base_p[s:s + 65536], lambda_p[s:s + 65536]])))
    built = time.perf_counter() - start
    start = time.perf_counter()
    exact_scores, exact_rows = index.search(exact_q, args.k)
    searched = time.perf_counter() - start
    del index
    peer = {"config": "flat:float32 (exact)", "build_s": round(built, 2), "bytes_per_passage": dim * 4,
            "ms_per_question": round(1000 * searched / len(ids), 3),
            **judge(exact_rows, exact_scores, dev, doc_ids, texts_of, ks)}
    print(peer, file=sys.stderr)
    exact_top20 = [set(r[:20].tolist()) for r in exact_rows]

    rows = []
    for text in args.configs:
        c = parse_config(text)
        s = scale_value(c["scale"], mu)
        options = IndexOptions(storage=c["storage"], seed=cfg.experiment.seed, threads=args.threads,
                               **({"nprobe": c["nprobe"]} if "nprobe" in c else {}),
                               **({"ivf_nlist": c["nlist"]} if "nlist" in c else {}),
                               **({"hnsw_ef_search": c["ef"]} if "ef" in c else {}))
        scaled = lambda_p if s == 1.0 else lambda_p * np.float32(s)
        start = time.perf_counter()
        index = build_faiss_index([base_p, scaled], "concat", c["type"], options)
        built = time.perf_counter() - start
        del scaled
        q = spar_query_vectors(base_q, lambda_q, mu / s, "concat")
        start = time.perf_counter()
        scores, found = index.search(q, args.k)
        searched = time.perf_counter() - start
        overlap = float(np.mean([len(exact_top20[i] & set(found[i, :20].tolist())) / 20 for i in range(len(ids))]))
        row = {"config": text, "scale": s, "build_s": round(built, 2),
               "bytes_per_passage": code_bytes(c["storage"], dim, options.pq_m, options.pq_nbits),
               "ms_per_question": round(1000 * searched / len(ids), 3),
               "ratio": round(searched / max(1e-9, peer["ms_per_question"] * len(ids) / 1000), 3),
               "overlap@20": round(overlap, 4), **judge(found, scores, dev, doc_ids, texts_of, ks)}
        row["Acc@20_loss_points"] = round(100 * (row.get("Acc@20", 0) - peer.get("Acc@20", 0)), 2)
        print(row, file=sys.stderr)
        rows.append(row)
        del index

    result = {"benchmark": "SPAR index choice on real vectors (issue #26 item 5)", "config": args.config,
              "question_set": args.set, "split": "dev", "questions": len(ids), "passages": n, "dim": dim, "mu": mu,
              "spar": rows, "peer": peer, "ratio": {r["config"]: r["ratio"] for r in rows},
              "unit": "ms per question (batched search), Acc@k on the dev questions",
              "machine": machine(args.threads), "command": command_line(__file__, argv)}
    return write_result(result, args.out)


if __name__ == "__main__":
    main()
