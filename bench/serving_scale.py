"""Where the lines cross (issue #46 item 4): one question's search time against the corpus size, for each half of the
hybrid as deployed and for SPAR's one index, on a run's real passages and questions.

BM25's cost grows with its postings (the paper timed Anserini at 55 ms over MS MARCO's 8.8M passages), a graph's
much more slowly. For each ``--sizes`` N this takes the **first N passages** of the run (the corpus's own order:
whole articles, a smaller deployment of the same collection; ``max``: all of them) and builds, over exactly those:

- **BM25**: a Lucene index of their text (``spar.teacher.teachers.build_bm25_index``, the teacher's fields), searched
  by Pyserini's ``LuceneSearcher.search``, one question at a time, at ``label``'s k1/b;
- **the base in HNSW**: :class:`spar.evaluate.served_hybrid.HnswBase` (M 32, efConstruction 200), efSearch calibrated
  at that size on the set's dev questions (:func:`~spar.evaluate.served_hybrid.calibrate_ef`: the smallest whose base
  alone loses at most 0.3 Acc@20 against its exact scan of the same N passages) or ``--peer-ef-search``;
- **the hybrid as deployed**: :class:`~spar.evaluate.served_hybrid.ServedHybrid`, both halves at once on two
  threads, fused at the tuned α;
- **SPAR**: the run's served index rebuilt over the N passages with the same type, storage, graph and search settings
  and fold (:meth:`spar.index.spar_index.SparIndex.build`), exact re-ranking reading the same rows from disk; over
  every passage, the run's index itself (the same build).

Each question's vectors are given (query encoding is the same constant for SPAR and the hybrid's dense half:
``bench/query_latency.py`` measures it), FAISS and Lucene on one thread per half, the systems alternated question by
question. ``--synthetic`` adds graph-only points beyond the corpus on random unit vectors of the base's and SPAR's
dimensions (random vectors are harder for a graph than real ones: the same kind of point is also taken at the
largest real size, so the ratio between the two says how far to trust them). The slopes are fitted in log-log space
(time ∝ N^b) per system, and the size where SPAR's median would meet the hybrid's is solved from them, said to be an
extrapolation when it lies beyond the sizes measured. Prints JSON; ``--report`` writes the table and the plot
(``results/serving-scale.{md,png}``).

    python -m bench.serving_scale -c configs/experiments/wiki-odqa.yaml --set nq --questions 200 \\
        --sizes 100000 200000 max --out bench/results/serving-scale-663k.json --report results/serving-scale
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench._common import command_line, machine, output_file, positive_int, write_result

SYSTEMS = ("bm25", "base_hnsw", "hybrid", "spar")


def size_arg(text: str) -> int | str:
    return "max" if text == "max" else positive_int(text)


def loglog_fit(sizes: list[int], ms: list[float]) -> dict[str, float]:
    """``ms ≈ a·N^b`` by least squares on logarithms: ``{"a": a, "b": b}`` (one size: b is 0)."""
    if len(sizes) < 2:
        return {"a": ms[0], "b": 0.0}
    b, log_a = np.polyfit(np.log(sizes), np.log(ms), 1)
    return {"a": float(math.exp(log_a)), "b": float(b)}


def crossing(spar: dict[str, float], hybrid: dict[str, float]) -> float | None:
    """The corpus size where two power laws meet (None when they never do: parallel, or SPAR's stays above)."""
    if abs(spar["b"] - hybrid["b"]) < 1e-9:
        return None
    n = math.exp(math.log(spar["a"] / hybrid["a"]) / (hybrid["b"] - spar["b"]))
    return n if math.isfinite(n) and n > 0 else None


def median_ms(times: list[float]) -> float:
    return round(1000 * statistics.median(times), 3)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--set", default=None, help="the question set whose dev questions are asked (never test; "
                    "default: the first one μ is tuned on)")
    ap.add_argument("--questions", type=positive_int, default=200, help="dev questions timed at each size")
    ap.add_argument("--calibration-questions", type=positive_int, default=500)
    ap.add_argument("--sizes", type=size_arg, nargs="+", default=[100_000, 200_000, "max"])
    ap.add_argument("--synthetic", type=positive_int, nargs="*", default=[],
                    help="graph-only sizes on random unit vectors (beyond the corpus)")
    ap.add_argument("--peer-ef-search", type=positive_int, default=None, help="default: calibrated at each size")
    ap.add_argument("--k", type=positive_int, default=100)
    ap.add_argument("--out", required=True, type=output_file)
    ap.add_argument("--report", default=None, type=output_file, help="write <report>.md and <report>.png")
    args = ap.parse_args(argv)

    import faiss

    from spar.core.config import load_config
    from spar.core.schemas import write_table
    from spar.data.passages import PassagesTable
    from spar.data.question_sets import sampled
    from spar.evaluate.exact import dense_search
    from spar.evaluate.served_hybrid import HnswBase, ServedHybrid, calibrate_ef
    from spar.evaluate.tuning import read_tuned
    from spar.experiment.inputs import ExperimentInputs
    from spar.index.spar_index import IndexOptions, SparIndex
    from spar.teacher.teachers import BM25Searcher, build_bm25_index

    cfg = load_config(args.config)
    run = Path(cfg.output_dir)
    inputs = ExperimentInputs(cfg)
    served = SparIndex.load(run / "index")
    info = served.info
    args.set = args.set or inputs.experiment.pooled()[0]
    tuned = read_tuned(run).for_set(args.set)
    mu, alpha = tuned.mu(), tuned.alpha
    base_e, lambda_e = inputs.passages["base"], inputs.passages["lambda"]
    total = len(base_e.ids)
    sizes = sorted({total if s == "max" else min(int(s), total) for s in args.sizes})
    dev = inputs.experiment.dev_split(args.set)
    timed_q = sampled(dev, args.questions, cfg.experiment.seed)
    calib_q = sampled(dev, args.calibration_questions, cfg.experiment.seed + 1)
    base_q, lambda_q = inputs.query_vectors("base", timed_q), inputs.query_vectors("lambda", timed_q)
    calib_vectors = inputs.query_vectors("base", calib_q)
    answers = inputs.answer_judge(calib_q, "Acc@20") if calib_q.answers is not None else None
    options = IndexOptions(**{key: value for key, value in info.get("options", {}).items()
                              if key in IndexOptions.model_fields and key != "type"})
    index_type, fold = info["type"], float(info.get("fold", 1.0))
    label = cfg.label
    table = PassagesTable.open(inputs.passages_arrow)
    pairs = timed_q.pairs()
    print(f"{total:,} passages; sizes {sizes}; {len(pairs)} timed questions; SPAR {index_type} {options.storage} "
          f"fold {fold:g}; μ {mu:g}, α {alpha}", file=sys.stderr, flush=True)

    rows = []
    with tempfile.TemporaryDirectory(prefix="spar-serving-scale-") as tmp:
        for n in sizes:
            ids = base_e.ids[:n]
            if table.ids[:n] != ids:
                raise SystemExit(f"{inputs.passages_arrow}: the passages table is not in the embeddings' order")
            arrow = Path(tmp) / f"passages-{n}.arrow"
            write_table(arrow, table.table.slice(0, n))
            base_n, lambda_n = base_e.sharded.head(n), lambda_e.sharded.head(n)
            started = time.perf_counter()
            lucene_dir = build_bm25_index(arrow, Path(tmp) / f"lucene-{n}", threads=2, fields=label.fields,
                                          heap=label.java_heap)
            bm25_build = time.perf_counter() - started
            bm25 = BM25Searcher(lucene_dir, label.k1, label.b, threads=1, heap=label.search_heap)

            faiss.omp_set_num_threads(2)
            graph = HnswBase.build(base_n, ids)
            if args.peer_ef_search:
                graph.ef_search, calibration = args.peer_ef_search, {"ef_search": args.peer_ef_search, "given": True}
            else:
                exact = dense_search(calib_vectors, base_n, calib_q.ids, ids, 20)
                calibration = calibrate_ef(graph, calib_q.ids, calib_vectors, exact,
                                           lambda *runs: inputs.judged(calib_q, answers, *runs))
            started = time.perf_counter()
            if n == total:  # every passage: the run's own index is this build (half an hour at 663k), loaded
                spar, spar_build = served, None
            else:
                spar = SparIndex.build(base_n, lambda_n, ids, index_type=index_type,
                                       options=options, fold=fold)
                spar_build = round(time.perf_counter() - started, 1)
                # exact re-ranking reads rows 0..n-1 of the run's embeddings: the prefix's own rows
                spar.info["embeddings"] = {"base": str(base_e.directory.resolve()),
                                           "lambda": str(lambda_e.directory.resolve())}
            faiss.omp_set_num_threads(1)

            lucene = LuceneOne(bm25)
            hybrid = ServedHybrid(graph, lucene, alpha, cfg.tune.hybrid_normalize)
            times = alternated({
                "bm25": lambda i: lucene.search([pairs[i]], args.k),
                "base_hnsw": lambda i: graph.search(base_q[i:i + 1], args.k),
                "hybrid": lambda i: hybrid.search(pairs[i][0], pairs[i][1], base_q[i], args.k),
                "spar": lambda i: spar.search(base_q[i:i + 1], lambda_q[i:i + 1], args.k, mu),
            }, len(pairs))
            hybrid.close()
            row = {"passages": n, "ms": times,
                   "peer_hnsw": {**graph.settings(), "calibration": calibration},
                   "bm25_build_s": round(bm25_build, 1), "spar_build_s": spar_build or "the run's index, loaded",
                   "bytes_per_passage": {"spar": round(faiss.serialize_index(spar.index).nbytes / n, 1),
                                         "base_hnsw": round(graph.nbytes() / n, 1)}}
            rows.append(row)
            print(row, file=sys.stderr, flush=True)

    synthetic = synthetic_points(args.synthetic + ([sizes[-1]] if args.synthetic else []), base_e.dim,
                                 base_e.dim + lambda_e.dim, options, index_type, rows, args.k, cfg.experiment.seed)
    measured = [r["passages"] for r in rows]
    fits = {name: loglog_fit(measured, [r["ms"][name] for r in rows]) for name in SYSTEMS}
    meets = crossing(fits["spar"], fits["hybrid"])
    result = {
        "benchmark": "search time per question against the corpus size: BM25 (Lucene), the base in HNSW, the hybrid "
                     "as deployed (both at once, fused) and SPAR's served index, over the first N passages "
                     "(issue #46 item 4)",
        "config": args.config, "set": args.set, "split": dev.split, "questions": len(pairs), "k": args.k,
        "mu": mu, "alpha": alpha, "spar_index": {"type": index_type, "storage": options.storage, "fold": fold,
                                                 "options": options.faiss_options()},
        "rows": rows, "synthetic": synthetic, "fits": fits,
        "spar_meets_hybrid_at": None if meets is None else round(meets),
        "extrapolated": meets is not None and not (measured[0] <= meets <= measured[-1]),
        "unit": "ms per question, median; query vectors given (encoding excluded: the same for both); 1 thread per "
                "half; fits: ms = a·N^b",
        "machine": machine(1), "command": command_line(__file__, argv),
    }
    if args.report:
        write_report(result, Path(args.report))
    return write_result(result, args.out)


def synthetic_points(sizes: list[int], base_dim: int, spar_dim: int, options, index_type: str, rows: list[dict],
                     k: int, seed: int) -> list[dict]:
    """Graph-only search time on random unit vectors: the base's HNSW (M 32, efConstruction 200, the efSearch of the
    largest real size) and SPAR's index type and settings at SPAR's dimension (no re-ranking: no rows on disk)."""
    if not sizes:
        return []
    from spar.evaluate.served_hybrid import HnswBase
    from spar.index.spar_index import SparIndex

    rng = np.random.default_rng(seed)
    ef = rows[-1]["peer_hnsw"]["ef_search"]
    points = []
    for n in sorted(set(sizes)):
        def unit(dim: int, count: int) -> np.ndarray:
            x = rng.standard_normal((count, dim)).astype(np.float32)
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        base = HnswBase.build(unit(base_dim, n), [str(i) for i in range(n)])
        base.ef_search = ef
        spar_vectors = unit(spar_dim, n)
        spar = SparIndex.build(spar_vectors[:, :base_dim], spar_vectors[:, base_dim:], index_type=index_type,
                               options=options.model_copy(update={"refine": 0}))
        q = unit(spar_dim, 50)
        points.append({"passages": n, "ms": alternated({
            "base_hnsw": lambda i: base.search(q[i:i + 1, :base_dim], k),
            "spar_index": lambda i: spar.search(q[i:i + 1, :base_dim], q[i:i + 1, base_dim:], k, 1.0)}, len(q))})
    return points


class LuceneOne:
    """One question through Pyserini's ``LuceneSearcher.search`` (no batch thread pool per call), answering as
    spar's BM25 searchers do: ``[(qid, text)], k -> {qid: hits}``."""

    def __init__(self, bm25):
        self.searcher = bm25.searcher

    def search(self, one, k: int) -> dict:
        (qid, text), = one
        return {qid: [(hit.docid, hit.score) for hit in self.searcher.search(text, k)]}


def alternated(systems: dict, questions: int) -> dict[str, float]:
    """Median ms per question of each system, one question at a time, the systems alternated question by question
    (after one warm call each: the JVM, the shards' file handles)."""
    for fn in systems.values():
        fn(0)
    times: dict[str, list[float]] = {name: [] for name in systems}
    for i in range(questions):
        for name, fn in systems.items():
            t0 = time.perf_counter()
            fn(i)
            times[name].append(time.perf_counter() - t0)
    return {name: median_ms(t) for name, t in times.items()}


def write_report(result: dict, stem: Path) -> None:
    """``<stem>.md`` (the table, the fits, the crossing) and ``<stem>.png`` (ms against N, log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [f"# Search time against the corpus size ({result['config']}, {result['questions']} dev questions of "
             f"{result['set']})", "", "```bash", result["command"], "```", "",
             "| passages | BM25 (Lucene) ms | base HNSW ms | hybrid as deployed ms | SPAR ms | SPAR / hybrid |",
             "|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        ms = row["ms"]
        lines.append(f"| {row['passages']:,} | {ms['bm25']} | {ms['base_hnsw']} | {ms['hybrid']} | {ms['spar']} | "
                     f"{ms['spar'] / ms['hybrid']:.2f}× |")
    lines += ["", "Fits (ms = a·N^b): " + "; ".join(f"{name} b = {fit['b']:.2f}" for name, fit in
                                                    result["fits"].items()), ""]
    meets = result["spar_meets_hybrid_at"]
    lines.append("SPAR's line never meets the hybrid's." if meets is None else
                 f"SPAR's line meets the hybrid's at {meets:,} passages"
                 + (" (an extrapolation beyond the sizes measured)." if result["extrapolated"] else "."))
    lines += ["", f"{result['unit']}. Machine: {result['machine']}."]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(6, 4))
    sizes = [row["passages"] for row in result["rows"]]
    for name in SYSTEMS:
        ax.plot(sizes, [row["ms"][name] for row in result["rows"]], marker="o", label=name)
    for point_name in ("base_hnsw", "spar_index"):
        points = result["synthetic"]
        if points:
            ax.plot([p["passages"] for p in points], [p["ms"][point_name] for p in points], linestyle=":",
                    marker="x", label=f"{point_name} (random vectors)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("passages")
    ax.set_ylabel("ms per question (median)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
