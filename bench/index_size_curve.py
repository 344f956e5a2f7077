"""The index-size curve (Reimers & Gurevych, "The Curse of Dense Low-Dimensional Information Retrieval for Large
Index Sizes"): SQuAD's test questions against their gold paragraphs plus N distractor passages, for BM25, the base
retriever, the BM25 hybrid and SPAR. Does SPAR keep BM25's robustness to index size, where dense retrievers lose it?

    python -m bench.index_size_curve -c configs/experiments/wiki-odqa-50k.yaml --set squad-open \
        --distractors 0 10000 100000 all --out results/index-size-curve

Reads a finished experiment (its passage embeddings, query vectors, tuned weights of the question set, teacher
analyzer settings): the corpus is encoded once, and each point indexes a subset of it — the passages the set's qrels
judge (the gold paragraphs) plus the first N of a seeded permutation of the others. Dense systems and SPAR search
their subset exactly (SPAR over the passage vectors as the experiment's index stores them, with the set's μ); BM25
indexes its subset with Pyserini (idf and length statistics are those of the subset, as a real index of that size
would have them); the hybrid fuses base and BM25 with the set's α. Writes <out>.json, <out>.md and <out>.png.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench._common import command_line, machine, write_result

SYSTEMS = ("bm25", "base", "hybrid", "spar")


def subset_rows(n_passages: int, gold: np.ndarray, n: int, seed: int) -> np.ndarray:
    """The gold rows plus the first ``n`` of a seeded permutation of every other row, in row order."""
    others = np.setdiff1d(np.arange(n_passages), gold)
    chosen = np.random.default_rng(seed).permutation(others)[:n]
    return np.sort(np.concatenate([gold, chosen]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("--set", required=True, help="the question set (with qrels naming its gold passages)")
    parser.add_argument("--distractors", nargs="+", default=["0", "10000", "100000", "all"])
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--out", default="results/index-size-curve")
    args = parser.parse_args()

    from spar.core.config import load_config
    from spar.evaluate.evaluation import passage_texts
    from spar.experiment.inputs import ExperimentInputs
    from spar.evaluate.exact import dense_search
    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import IndexOptions
    from spar.evaluate.metrics import answer_accuracy, evaluate_run
    from spar.data.passages import PassagesTable
    from spar.experiment.plan import set_split
    from spar.core.schemas import PASSAGES, write_table
    from spar.teacher.teachers import BM25Searcher, build_bm25_index
    from spar.evaluate.candidates import hybrid_fuse
    from spar.evaluate.tuning import read_tuned

    cfg = load_config(args.config)
    inputs = ExperimentInputs(cfg)
    test = set_split(cfg, args.set, "test")
    tuned = read_tuned(cfg.output_dir).for_set(args.set)
    mu, alpha = tuned.mu(), tuned.alpha
    table = PassagesTable.open(inputs.passages_arrow)
    doc_ids = np.asarray(inputs.doc_ids, dtype=object)
    gold = np.unique([inputs.row_of[d] for rels in test.qrels.values() for d in rels if d in inputs.row_of])
    base_q, lambda_q = inputs.query_vectors("base", test), inputs.query_vectors("lambda", test)
    options = IndexOptions.from_section(cfg.index, seed=cfg.experiment.seed)
    served_base, served_lambda = served_passage_vectors(inputs.passage_vectors("base"),
                                                        inputs.passage_vectors("lambda"), "concat", cfg.index.type,
                                                        options)
    spar_q = np.hstack([base_q, mu * lambda_q]).astype(np.float32)
    k0 = max(args.k, int(tuned.candidates or 200))
    points = []
    for spec in args.distractors:
        n = len(doc_ids) - len(gold) if spec == "all" else int(spec)
        rows = subset_rows(len(doc_ids), gold, n, cfg.experiment.seed)
        ids = [str(d) for d in doc_ids[rows]]
        started = time.perf_counter()
        base_p = np.asarray(inputs.passage_vectors("base")[rows], np.float32)  # the base system: raw float32
        base_deep = dense_search(base_q, base_p, test.ids, ids, k0)
        spar_p = np.hstack([served_base[rows], served_lambda[rows]]).astype(np.float32)
        runs = {"base": {q: h[:args.k] for q, h in base_deep.items()},
                "spar": dense_search(spar_q, spar_p, test.ids, ids, args.k)}
        del spar_p, base_p
        with tempfile.TemporaryDirectory(prefix="spar-curve-") as tmp:
            subset = Path(tmp) / "passages.arrow"
            picked = table.table.take(rows)
            renumbered = picked.set_column(0, "row", pa.array(np.arange(len(rows), dtype=np.int64)))
            write_table(subset, renumbered.cast(PASSAGES))
            searcher = BM25Searcher(build_bm25_index(subset, Path(tmp) / "index", cfg.label.threads,
                                                     cfg.label.fields), cfg.label.k1, cfg.label.b, cfg.label.threads)
            bm25_deep = searcher.search(test.pairs(), k0)
        runs["bm25"] = {q: h[:args.k] for q, h in bm25_deep.items()}
        runs["hybrid"] = {q: hybrid_fuse(base_deep[q], bm25_deep.get(q, []), alpha, cfg.tune.hybrid_normalize,
                                         args.k) for q in test.ids}
        texts = passage_texts(inputs, {d for run in runs.values() for hits in run.values() for d, _ in hits})
        point = {"distractors": n, "passages": len(rows), "seconds": round(time.perf_counter() - started, 1)}
        for system in SYSTEMS:
            values = evaluate_run(test.qrels, runs[system], ["nDCG@10", "R@100"])
            values.update(answer_accuracy(runs[system], test.answers or {}, texts, [1, 20, 100], test.answer_match))
            point[system] = {m: round(v, 4) for m, v in values.items()}
        points.append(point)
        print(f"{len(rows):,} passages: " + ", ".join(f"{s} Acc@20 {point[s]['Acc@20']:.4f}" for s in SYSTEMS),
              flush=True)

    result = {"experiment": cfg.experiment.name, "set": args.set, "questions": len(test.ids), "gold": int(len(gold)),
              "mu": mu, "alpha": alpha, "storage": options.storage, "points": points,
              "losses": {s: {m: round(points[-1][s][m] - points[0][s][m], 4) for m in ("Acc@20", "nDCG@10")}
                         for s in SYSTEMS},
              "machine": machine(cfg.label.threads), "command": command_line(__file__)}
    out = Path(args.out)
    write_result(result, out.with_suffix(".json"))
    _write_markdown(result, out.with_suffix(".md"))
    _plot(result, out.with_suffix(".png"))


def _write_markdown(result: dict, path: Path) -> None:
    lines = [f"**Index-size curve**: {result['questions']:,} {result['set']} test questions, their "
             f"{result['gold']:,} gold paragraphs + N distractors (experiment {result['experiment']}, SPAR over "
             f"{result['storage']} vectors, μ = {result['mu']:g}, α = {result['alpha']:g})", "",
             "| distractors | passages | " + " | ".join(f"{s} Acc@20 | {s} nDCG@10" for s in SYSTEMS) + " |",
             "|---:|---:|" + "---:|" * (2 * len(SYSTEMS))]
    for p in result["points"]:
        lines.append(f"| {p['distractors']:,} | {p['passages']:,} | "
                     + " | ".join(f"{p[s]['Acc@20']:.4f} | {p[s]['nDCG@10']:.4f}" for s in SYSTEMS) + " |")
    lines += ["", "Change from the smallest to the largest index: " + "; ".join(
        f"{s} Acc@20 {v['Acc@20']:+.4f}, nDCG@10 {v['nDCG@10']:+.4f}" for s, v in result["losses"].items()),
        "", f"`{result['command']}`", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    xs = [p["passages"] for p in result["points"]]
    for ax, metric in zip(axes, ("Acc@20", "nDCG@10")):
        for system in SYSTEMS:
            ax.plot(xs, [p[system][metric] for p in result["points"]], marker="o", label=system)
        ax.set_xscale("log")
        ax.set_xlabel("passages in the index (gold + distractors)")
        ax.set_ylabel(metric)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{result['set']}: index size")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
