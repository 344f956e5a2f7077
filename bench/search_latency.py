"""Search latency at k=100 on a 100k-passage corpus: one FAISS search of the SPAR index vs the dense+BM25 hybrid.

- **spar**: one search of the SPAR index ``[P, PΛ]`` (384 + ``--lambda-dim`` dims, stored as each of
  ``--storages``: float32, or a quantizer such as 4-bit) with query ``[Q, μ·QΛ]``
  (:class:`spar.index.spar_index.SparIndex`).
- **peer** (hybrid): an ``IndexFlatIP`` search of the base vectors (384 dims) + a Pyserini BM25 search
  (``LuceneSearcher``, k1=0.9 b=0.4, over a Lucene index of the same passages built with
  :func:`spar.teacher.teachers.build_bm25_index`) + score fusion (:func:`spar.evaluate.tuning.hybrid_fuse`, dense +
  α·BM25, both at depth k).

Passages: the real SciFact corpus repeated and perturbed to ``--passages`` (copy c > 0 of a passage drops a seeded
10% of its words), so BM25 sees real text statistics. Dense vectors: encoding 100k passages on CPU is too slow for
this benchmark, so P, PΛ, Q, QΛ are random unit vectors ("vectors": "synthetic"); flat-index latency depends only
on N and the dimension, not on the values. Queries: the SciFact test queries (BM25) with random query vectors.
Query encoding is excluded from both sides (SPAR runs two query encoders, the hybrid one encoder plus BM25's
analyser). Latency is wall-clock; "one at a time" is the mean over ``--single`` queries, "batched" is one call per
system for all queries, divided by their number.

The headline is the flat index (as specified). A flat scan is memory-bound and linear in the dimension, so one
768-d SPAR scan costs about two 384-d base scans; the same comparison with HNSW indexes (``--index hnsw``; on random
vectors, the hardest case for HNSW) shows the one-search advantage once the dense search is sub-linear. Each index
type is measured at every ``--threads`` value (OpenMP threads spin, so 1 thread can win on a loaded machine).

    python bench/search_latency.py                      # 100k passages; flat and HNSW; 2 then 1 threads
    python bench/search_latency.py --lambda-dim 1536 --storages sq4 float32 --threads 1   # a quantized SPAR index
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import command_line, machine, write_result  # noqa: E402


def datasets() -> Path:
    return Path(os.environ.get("SPAR_DATASETS", REPO.parent / "shared" / "datasets"))


def write_perturbed_corpus(corpus: Path, n: int, arrow: Path, seed: int = 0) -> int:
    """The corpus repeated to ``n`` passages; every copy after the first drops a seeded 10% of its words."""
    import pyarrow as pa

    from spar.data.readers import read_corpus
    from spar.core.schemas import PASSAGES, write_table

    base = list(read_corpus(corpus))
    rng = random.Random(seed)
    ids, titles, texts = [], [], []
    for i in range(n):
        p = base[i % len(base)]
        copy = i // len(base)
        text = p.text
        if copy:
            words = text.split()
            text = " ".join(w for w in words if rng.random() >= 0.1) or text
        ids.append(p.id if copy == 0 else f"{p.id}#{copy}")
        titles.append(p.title)
        texts.append(text)
    arrow.parent.mkdir(parents=True, exist_ok=True)
    write_table(arrow, pa.table({"row": list(range(n)), "id": ids, "title": titles, "text": texts}, schema=PASSAGES))
    return len(base)


def unit(rng, n: int, d: int):
    import numpy as np

    x = rng.standard_normal((n, d), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1],
                    help="FAISS OpenMP threads and Lucene batch_search threads; each value is measured, the first "
                    "is the headline (default 2, then 1: OpenMP threads spin, which hurts on a shared machine)")
    ap.add_argument("--single", type=int, default=100, help="queries timed one at a time")
    ap.add_argument("--dim", type=int, default=384, help="base dimension (MiniLM: 384)")
    ap.add_argument("--lambda-dim", type=int, default=None, help="Λ dimension (default: --dim)")
    ap.add_argument("--storages", nargs="+", default=["float32"],
                    help="passage storages of the SPAR index (spar.index.storage: float32, float16, sq8, sq6, sq4); "
                    "each is measured against the hybrid, the first is the headline")
    ap.add_argument("--index", nargs="+", default=["flat", "hnsw"], choices=["flat", "hnsw"],
                    help="index types, each measured for both systems; the first is the headline")
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--hnsw-ef-construction", type=int, default=40)
    ap.add_argument("--hnsw-ef-search", type=int, default=128)
    ap.add_argument("--train-size", type=int, default=20_000,
                    help="passages the quantizers train on (speed does not depend on it; fast-scan PQ trains slowly)")
    ap.add_argument("--mu", type=float, default=1.0)
    ap.add_argument("--alpha", type=float, default=0.1, help="hybrid weight of BM25 (timing does not depend on it)")
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "spar-bench-search",
                    help="where the perturbed corpus and its Lucene index are built (reused when present)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "search_latency.json")
    args = ap.parse_args(argv)

    import faiss
    import numpy as np

    from spar.index.spar_index import SparIndex, build_spar_index
    from spar.core.java import pyserini_module
    from spar.evaluate.metrics import ranked_run
    from spar.data.readers import read_qrels, read_queries
    from spar.teacher.teachers import build_bm25_index
    from spar.evaluate.tuning import hybrid_fuse

    scifact = datasets() / "scifact"
    if not (scifact / "corpus.jsonl").exists():
        raise SystemExit(f"SciFact not found under {datasets()} (set SPAR_DATASETS)")

    # Lucene side: real text, repeated/perturbed to N passages.
    work = args.workdir / f"n{args.passages}"
    arrow, lucene_dir = work / "passages.arrow", work / "lucene"
    lucene = pyserini_module("pyserini.search.lucene")
    if not (arrow.exists() and any(lucene_dir.glob("segments_*"))
            and lucene.LuceneSearcher(str(lucene_dir)).num_docs == args.passages):
        shutil.rmtree(lucene_dir, ignore_errors=True)
        start = time.perf_counter()
        real = write_perturbed_corpus(scifact / "corpus.jsonl", args.passages, arrow)
        build_bm25_index(arrow, lucene_dir, threads=args.threads[0])
        print(f"built Lucene index of {args.passages:,} passages ({real:,} real SciFact passages, repeated and "
              f"perturbed) in {time.perf_counter() - start:.0f}s", file=sys.stderr)
    from spar.core.schemas import read_table

    doc_ids = read_table(arrow).column("id").to_pylist()
    searcher = lucene.LuceneSearcher(str(lucene_dir))
    searcher.set_bm25(0.9, 0.4)

    test_qids = list(read_qrels(scifact / "qrels" / "test.tsv"))
    texts = {q.id: q.text for q in read_queries(scifact / "queries.jsonl")}
    qids = [q for q in test_qids if q in texts]
    qtexts = [texts[q] for q in qids]

    # Dense side: synthetic unit vectors of the real dimensions.
    rng = np.random.default_rng(0)
    n, d, k = args.passages, args.dim, args.k
    dl = args.lambda_dim or d
    base_p, lambda_p = unit(rng, n, d), unit(rng, n, dl)
    base_q, lambda_q = unit(rng, len(qids), d), unit(rng, len(qids), dl)
    faiss.omp_set_num_threads(max(args.threads))
    indexes = {}
    for index_type in args.index:
        opts = {"hnsw_m": args.hnsw_m, "hnsw_ef_construction": args.hnsw_ef_construction,
                "hnsw_ef_search": args.hnsw_ef_search, "train_size": args.train_size}
        base_ix = build_spar_index(base_p, None, index_type=index_type, **opts)
        for storage in args.storages:
            start = time.perf_counter()
            spar_ix = SparIndex.build(base_p, lambda_p, ids=doc_ids, variant="concat", index_type=index_type,
                                      storage=storage, **opts)
            indexes[f"{index_type}/{storage}"] = (spar_ix, base_ix)
            print(f"built {index_type}/{storage} index in {time.perf_counter() - start:.0f}s", file=sys.stderr)
    del lambda_p
    spar = base_index = None

    def spar_search(bq, lq):
        return spar.publish.search(bq, lq, k, mu=args.mu)

    def hybrid_search_one(bq, text):
        scores, rows = base_index.search(bq, k)
        dense = ranked_run(["q"], rows, scores, doc_ids)["q"]
        sparse = [(h.docid, h.score) for h in searcher.search(text, k)]
        return hybrid_fuse(dense, sparse, args.alpha, k=k)

    def hybrid_search_batch(bq, texts_, ids_, threads):
        scores, rows = base_index.search(bq, k)
        hits = searcher.batch_search(texts_, ids_, k, threads)
        dense = ranked_run(ids_, rows, scores, doc_ids)
        return [hybrid_fuse(dense[q], [(h.docid, h.score) for h in hits[q]], args.alpha, k=k) for q in ids_]

    def measure(threads: int) -> dict:
        faiss.omp_set_num_threads(threads)
        # Warm-up: JIT in the JVM, page cache, FAISS buffers.
        for i in range(min(20, len(qids))):
            spar_search(base_q[i:i + 1], lambda_q[i:i + 1])
            hybrid_search_one(base_q[i:i + 1], qtexts[i])

        # One query at a time, alternating systems.
        single = {"spar": [], "peer": []}
        order = list(range(len(qids)))[: args.single]
        for i in order:
            start = time.perf_counter()
            spar_search(base_q[i:i + 1], lambda_q[i:i + 1])
            single["spar"].append(time.perf_counter() - start)
            start = time.perf_counter()
            hybrid_search_one(base_q[i:i + 1], qtexts[i])
            single["peer"].append(time.perf_counter() - start)

        # Batched: every test query in one call per system (best of 3).
        batched = {"spar": [], "peer": []}
        for _ in range(3):
            start = time.perf_counter()
            spar_search(base_q, lambda_q)
            batched["spar"].append((time.perf_counter() - start) / len(qids))
            start = time.perf_counter()
            hybrid_search_batch(base_q, qtexts, qids, threads)
            batched["peer"].append((time.perf_counter() - start) / len(qids))

        # Breakdown of the hybrid's one-at-a-time cost.
        parts = {"faiss_base": [], "bm25": []}
        for i in order[:50]:
            start = time.perf_counter()
            base_index.search(base_q[i:i + 1], k)
            parts["faiss_base"].append(time.perf_counter() - start)
            start = time.perf_counter()
            searcher.search(qtexts[i], k)
            parts["bm25"].append(time.perf_counter() - start)
        return {"single": single, "batched": batched, "parts": parts}

    ms = lambda xs: round(1000 * statistics.mean(xs), 3)  # noqa: E731
    p50 = lambda xs: round(1000 * statistics.median(xs), 3)  # noqa: E731

    def summary(m: dict) -> dict:
        b_spar, b_peer = 1000 * min(m["batched"]["spar"]), 1000 * min(m["batched"]["peer"])
        return {
            "one_at_a_time": {"spar": ms(m["single"]["spar"]), "peer": ms(m["single"]["peer"]),
                              "ratio": round(ms(m["single"]["spar"]) / ms(m["single"]["peer"]), 3),
                              "p50": {"spar": p50(m["single"]["spar"]), "peer": p50(m["single"]["peer"])}},
            "batched": {"spar": round(b_spar, 3), "peer": round(b_peer, 3), "ratio": round(b_spar / b_peer, 3),
                        "unit": f"ms per query, {len(qids)} queries in one call per system, best of 3"},
            "peer_breakdown_ms": {"faiss_base": ms(m["parts"]["faiss_base"]), "bm25": ms(m["parts"]["bm25"])},
        }

    by_index: dict[str, dict] = {}
    for name, (spar, base_index) in indexes.items():
        by_index[name] = {str(t): summary(measure(t)) for t in args.threads}
        by_index[name]["bytes_per_passage"] = spar.info["code_bytes"]
    headline = f"{args.index[0]}/{args.storages[0]}"
    main_run = by_index[headline][str(args.threads[0])]
    one = main_run["one_at_a_time"]
    result = {
        "spar": one["spar"],
        "peer": one["peer"],
        "ratio": one["ratio"],
        "unit": "ms per query, one query at a time, mean (lower is better)",
        "machine": machine(args.threads[0]),
        "command": command_line(__file__, argv),
        "peer_name": "hybrid: FAISS base search (same index type) + Pyserini LuceneSearcher BM25 + hybrid_fuse",
        "threads": args.threads[0],
        "batched": main_run["batched"],
        "p50_one_at_a_time": one["p50"],
        "peer_breakdown_ms": main_run["peer_breakdown_ms"],
        "by_index_and_threads": by_index,
        "index": headline,
        "hnsw": {"M": args.hnsw_m, "efConstruction": args.hnsw_ef_construction, "efSearch": args.hnsw_ef_search},
        "passages": n, "k": k, "dims": {"spar": d + dl, "base": d, "lambda": dl}, "storages": args.storages,
        "vectors": "synthetic", "text": f"SciFact corpus repeated/perturbed to {n:,} passages (real BM25 statistics)",
        "queries": {"one_at_a_time": min(args.single, len(qids)), "batched": len(qids)},
        "excludes": "query encoding",
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    main()
