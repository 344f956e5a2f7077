"""Search latency at k=100 on a 100k-passage corpus: one FAISS search of the SPAR index vs the dense+BM25 hybrid.

- **spar**: one search of the SPAR index ``[P, PΛ]`` (384 + ``--lambda-dim`` dims, stored as each of
  ``--storages``: float32, or a quantizer such as 4-bit) with query ``[Q, μ·QΛ]``
  (:class:`spar.index.spar_index.SparIndex`).
- **peer** (hybrid): an ``IndexFlatIP`` search of the base vectors (384 dims) + a Pyserini BM25 search
  (``LuceneSearcher``, k1=0.9 b=0.4, over a Lucene index of the same passages built with
  :func:`spar.teacher.teachers.build_bm25_index`) + score fusion (:func:`spar.evaluate.candidates.hybrid_fuse`, dense +
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

    python -m bench.search_latency                      # 100k passages; flat and HNSW; 2 then 1 threads
    python -m bench.search_latency --lambda-dim 1536 --storages sq4 float32 --threads 1   # a quantized SPAR index

**Real vectors** (``--embeddings DIR --passages-table passages.arrow``): the base passage vectors of a real encode
(a complete ``embeddings/base/passages`` directory, or the finished shards of its ``passages.partial`` while the
encode runs), the first ``--limit`` of them, with their passages table; Λ is the projection at ``--lambda-dim``,
computed now from those passages' text (the teacher's statistics; ``-c CONFIG`` gives ``label``'s k1, b, fields and
``encode.base``, the query encoder); queries with judgments (``--queries``, ``--qrels-test``, ``--qrels-dev``). μ and
the hybrid's α are tuned on the dev judgments against the stored codes, as ``spar tune`` does; test reports
nDCG@10 and R@100 of the base, the hybrid, SPAR by exact scan of the codes, and SPAR through each index
(``--index flat hnsw ivf``, at each ``--ef-search`` / ``--nprobe``; HNSW only for storages it can hold; each built
by :meth:`spar.index.spar_index.SparIndex.build` as ``spar index`` and the frontier build it: an approximate index
holds ``[P, μ·PΛ]`` under the config's ``index.fold``, :mod:`spar.index.approximate`), and every
system's latency one query at a time and batched, side by side in one process with one FAISS thread. The headline
is the flat index of the first storage against the hybrid; each approximate row gives its nDCG@10 loss against
the exact scan of the same codes::

    python -m bench.search_latency --embeddings runs/scifact/embeddings/base/passages \
        --passages-table runs/scifact/queries/passages.arrow --queries ../shared/datasets/scifact/queries.jsonl \
        --qrels-test ../shared/datasets/scifact/qrels/test.tsv --qrels-dev ../shared/datasets/scifact/qrels/train.tsv \
        --index flat hnsw ivf --out bench/results/search_latency_real-scifact.json
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

from bench._common import REPO, command_line, machine, write_result


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


def base_vectors(directory: Path, limit: int | None):
    """(ids, float32 vectors) of the first ``limit`` rows of an embeddings directory: a complete one (its manifest),
    else the finished shards of a running encode (``part-N.npy`` with its ``part-N.json`` and ``ids-N.arrow``, in
    ``directory`` itself when it is the ``.partial`` one, else in ``<directory>.partial``)."""
    import numpy as np

    from spar.core.artifacts import is_complete
    from spar.model.stored_vectors import load_embeddings
    from spar.core.schemas import read_table

    if is_complete(directory):
        emb = load_embeddings(directory)
        n = len(emb.ids) if limit is None else min(limit, len(emb.ids))
        return emb.ids[:n], np.asarray(emb.sharded[0:n], dtype=np.float32)
    partial = directory if directory.name.endswith(".partial") else directory.with_name(directory.name + ".partial")
    ids: list[str] = []
    shards = []
    i = 0
    while (partial / f"part-{i:05d}.json").exists() and (limit is None or len(ids) < limit):
        shards.append(np.load(partial / f"part-{i:05d}.npy", mmap_mode="r"))
        ids += read_table(partial / f"ids-{i:05d}.arrow").column("id").to_pylist()
        i += 1
    if not shards:
        raise SystemExit(f"{directory}: no complete embeddings and no finished shard in {partial}")
    n = len(ids) if limit is None else min(limit, len(ids))
    return ids[:n], np.ascontiguousarray(np.concatenate(shards)[:n], dtype=np.float32)


def passages_subset(table: Path, ids: list[str], work: Path) -> Path:
    """The first ``len(ids)`` rows of a passages table as their own table (for Lucene and Λ's statistics), checked
    against the vectors' ids; reused when present."""
    import pyarrow as pa

    from spar.core.schemas import PASSAGES, read_table, write_table

    out = work / "passages.arrow"
    if out.exists() and read_table(out).column("id").to_pylist() == ids:
        return out
    rows = read_table(table).slice(0, len(ids))
    if rows.column("id").to_pylist() != ids:
        raise SystemExit(f"{table}: its first {len(ids):,} passages are not the vectors' (ids differ)")
    work.mkdir(parents=True, exist_ok=True)
    write_table(out, pa.table({name: rows.column(name) for name in PASSAGES.names}, schema=PASSAGES))
    return out


def judged(queries: Path, qrels: Path, known: set[str], limit: int, seed: int):
    """(ids, texts, qrels) of up to ``limit`` seeded queries with a judged passage among ``known``."""
    import random

    from spar.data.readers import read_qrels, read_queries

    texts = {q.id: q.text for q in read_queries(queries)}
    judgments = {q: {d: r for d, r in docs.items() if d in known and r > 0} for q, docs in read_qrels(qrels).items()}
    ids = sorted(q for q, docs in judgments.items() if docs and q in texts)
    ids = sorted(random.Random(seed).sample(ids, min(limit, len(ids))))
    return ids, [texts[q] for q in ids], {q: judgments[q] for q in ids}


def real_vectors(args, argv) -> dict:
    """The real-vector mode (module docstring)."""
    import numpy as np

    from spar.core.config import load_config
    from spar.model.encoders import BiEncoder
    from spar.evaluate.exact import top_k
    from spar.index.served import served_passage_vectors
    from spar.index.approximate import fold_factor
    from spar.index.spar_index import IndexOptions, SparIndex, build_faiss_index, faiss_threads
    from spar.index.combine import spar_query_vectors
    from spar.evaluate.latency import ratios, time_systems
    from spar.data.passages import corpus_texts
    from spar.lexical.projection import ProjectionLambda
    from spar.lexical.terms import BM25Weights
    from spar.evaluate.metrics import evaluate_run, ranked_run
    from spar.index.storage import code_bytes
    from spar.index.types.registry import registered_type
    from spar.teacher.teachers import BM25Searcher, build_bm25_index
    from spar.evaluate.candidates import hybrid_candidates, hybrid_fuse, tune_weight
    from spar.evaluate.tuning import tune_mu

    cfg = load_config(args.config)
    label, k = cfg.label, args.k
    clock = time.perf_counter()
    steps: dict[str, float] = {}

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        steps[name] = round(now - clock, 1)
        clock = now
        print(f"{name}: {steps[name]:.0f}s", file=sys.stderr)

    doc_ids, base_p = base_vectors(args.embeddings, args.limit)
    n = len(doc_ids)
    work = args.workdir / f"real-{n}"
    arrow = passages_subset(args.passages_table, doc_ids, work)
    lucene_dir = work / "lucene"
    if not any(lucene_dir.glob("segments_*")):
        shutil.rmtree(lucene_dir, ignore_errors=True)
        build_bm25_index(arrow, lucene_dir, threads=2, fields=label.fields)
    bm25 = BM25Searcher(lucene_dir, label.k1, label.b, threads=1)
    step("vectors, passages and Lucene index")

    known = set(doc_ids)
    dev = judged(args.queries, args.qrels_dev, known, args.dev_queries, 0)
    test = judged(args.queries, args.qrels_test, known, args.test_queries, 1)
    encoder = BiEncoder.from_section(cfg.encode.base)
    base_q = {"dev": encoder.encode_query(dev[1]), "test": encoder.encode_query(test[1])}
    del encoder
    step(f"base query vectors ({len(dev[0])} dev, {len(test[0])} test)")

    texts = list(corpus_texts(arrow, label.fields))
    weights = BM25Weights.fit(texts, k1=label.k1, b=label.b, fields=label.fields)
    lam = ProjectionLambda(weights, args.lambda_dim, cfg.train.lexical.projection, args.lambda_seed)
    lam_p = lam.term_vectors(weights, weights.passage_matrix(texts))
    lam_q = {s: lam.term_vectors(weights, weights.query_matrix(q[1])) for s, q in (("dev", dev), ("test", test))}
    del texts
    step(f"projection Λ ({args.lambda_dim} dims) of {n:,} passages")

    sparse = {s: bm25.search(list(zip(q[0], q[1])), k) for s, q in (("dev", dev), ("test", test))}
    with faiss_threads(1):
        base_flat = build_faiss_index([base_p], None, "flat", IndexOptions())
        base_run = {}
        for s, q in (("dev", dev), ("test", test)):
            scores, rows = base_flat.search(base_q[s], k)
            base_run[s] = ranked_run(q[0], rows, scores, doc_ids)
        alpha = tune_weight(hybrid_candidates(base_run["dev"], sparse["dev"]), dev[2], "nDCG@10").best
        hybrid_run = {q: hybrid_fuse(base_run["test"][q], sparse["test"].get(q, []), alpha, k=k) for q in test[0]}
        quality = {"base": evaluate_run(test[2], base_run["test"], METRICS),
                   "hybrid": evaluate_run(test[2], hybrid_run, METRICS), "bm25": evaluate_run(test[2], sparse["test"],
                                                                                            METRICS)}
        step("base, BM25 and the hybrid (α tuned on dev)")

        opts = {"hnsw_m": args.hnsw_m, "hnsw_ef_construction": args.hnsw_ef_construction,
                "train_size": args.train_size, "ivf_nlist": args.ivf_nlist}
        spar_systems: dict[str, tuple] = {}  # name -> (index, query vectors, row facts)
        rows_out: list[dict] = []
        for storage in args.storages:
            options = IndexOptions(storage=storage, **opts)
            # Its codec (trained once) codes the served vectors μ is tuned against.
            flat = SparIndex.build(base_p, lam_p, ids=doc_ids, variant="concat", index_type="flat", options=options)
            served = served_passage_vectors(base_p, lam_p, "concat", "flat", options, flat.index)
            tuned = tune_mu(base_q["dev"], lam_q["dev"], *served, dev[0], doc_ids, dev[2], "nDCG@10", "concat",
                            confirm=False)
            mu = tuned.search.best
            test_q = spar_query_vectors(base_q["test"], lam_q["test"], mu)
            scores, rows = top_k(test_q, np.hstack(served), k)
            exact = ranked_run(test[0], rows, scores, doc_ids)
            del served
            quality[f"spar/{storage}/exact"] = evaluate_run(test[2], exact, METRICS)
            step(f"{storage}: μ tuned on dev ({mu}), exact scan of the codes")
            nbytes = code_bytes(storage, base_p.shape[1] + args.lambda_dim)
            for index_type in args.index:
                if not registered_type(index_type).holds(storage):
                    continue
                # As `spar index` builds it: an approximate index folded by μ₀ = μ (index.fold: auto)
                built = flat if index_type == "flat" else SparIndex.build(
                    base_p, lam_p, ids=doc_ids, variant="concat", index_type=index_type, options=options,
                    fold=fold_factor(index_type, cfg.index.fold, mu))
                # [Q, (μ/μ₀)·QΛ] against [P, μ₀·PΛ]: the scores of [Q, μ·QΛ]·[P, PΛ]
                index, queries = built.index, built.query_vectors(base_q["test"], lam_q["test"], mu)
                step(f"{storage}: {index_type} index built")
                settings = ([("efSearch", v) for v in args.ef_search] if index_type == "hnsw" else
                            [("nprobe", v) for v in args.nprobe] if index_type == "ivf" else [(None, None)])
                for knob, value in settings:
                    if knob == "efSearch":
                        index.hnsw.efSearch = value
                    elif knob == "nprobe":
                        index.nprobe = min(value, index.nlist)
                    name = f"spar/{storage}/{index_type}" + (f"/{knob}={value}" if knob else "")
                    scores, rows = index.search(queries, k)
                    run = ranked_run(test[0], rows, scores, doc_ids)
                    quality[name] = evaluate_run(test[2], run, METRICS)
                    found = np.mean([len({d for d, _ in run[q][:10]} & {d for d, _ in exact[q][:10]})
                                     / max(1, min(10, len(exact[q]))) for q in test[0]])
                    # A fixed copy of the knob for timing (the index object is shared by its settings).
                    spar_systems[name] = (index, queries, knob, value)
                    rows_out.append({"system": name, "index": index_type, "storage": storage, knob or "params": value,
                                     "bytes_per_passage": nbytes, "mu": mu,
                                     "fold": float(built.info.get("fold", 1.0)),  # μ₀ of [P, μ₀·PΛ]
                                     **{m: round(v, 4) for m, v in quality[name].items()},
                                     "loss_vs_exact_points": round(100 * (quality[f"spar/{storage}/exact"]["nDCG@10"]
                                                                          - quality[name]["nDCG@10"]), 2),
                                     "overlap@10_vs_exact": round(float(found), 4)})
        if "hnsw" in args.index:
            base_hnsw = build_faiss_index([base_p], None, "hnsw", IndexOptions(**opts))
            base_hnsw.hnsw.efSearch = args.ef_search[0]
            step("base hnsw index built")
        del lam_p

        pairs = list(zip(test[0], test[1]))

        def hybrid(rows):
            scores, found = base_flat.search(base_q["test"][rows], k)
            for j, r in enumerate(rows):
                dense = [(doc_ids[d], float(x)) for d, x in zip(found[j], scores[j]) if d >= 0]
                hits = [(h.docid, h.score) for h in bm25.searcher.search(pairs[r][1], k)]
                hybrid_fuse(dense, hits, alpha, k=k)

        def searcher(index, queries, knob=None, value=None):
            def run(rows):
                if knob == "efSearch":
                    index.hnsw.efSearch = value
                elif knob == "nprobe":
                    index.nprobe = min(value, index.nlist)
                return index.search(queries[rows], k)
            return run

        systems = {"hybrid": hybrid, "base/flat": searcher(base_flat, base_q["test"])}
        if "hnsw" in args.index:
            systems["base/hnsw"] = searcher(base_hnsw, base_q["test"], "efSearch", args.ef_search[0])
        systems.update({name: searcher(*spec) for name, spec in spar_systems.items()})
        timings = time_systems(systems, len(test[0]), args.single)
        step("latency")
    for row in rows_out:
        timed = timings[row["system"]]
        row.update({"single_ms": timed["single_ms"], "p50_ms": timed["p50_ms"], "batched_ms": timed["batched_ms"],
                    "p50_vs_hybrid": round(timed["p50_ms"] / timings["hybrid"]["p50_ms"], 3),
                    "vs_hybrid": ratios(timings, row["system"], "hybrid"),
                    "vs_base_flat": ratios(timings, row["system"], "base/flat")})
    headline = rows_out[0]
    approximate = [r for r in rows_out if r["index"] != "flat" and r["storage"] == headline["storage"]]
    within = [r for r in approximate if r["loss_vs_exact_points"] <= 0.5]
    best_approximate = min(within, key=lambda r: r["single_ms"]) if within else None
    result = {
        "spar": headline["single_ms"], "peer": timings["hybrid"]["single_ms"],
        "ratio": headline["vs_hybrid"]["single_ms"],
        "unit": "ms per query, one query at a time, mean (lower is better); SPAR flat index of the first storage",
        "machine": machine(1), "command": command_line(__file__, argv),
        "peer_name": "hybrid: FAISS base flat float32 + Pyserini LuceneSearcher BM25 + hybrid_fuse (α tuned on dev)",
        "vectors": "real", "embeddings": str(args.embeddings), "passages": n, "k": k,
        "dims": {"base": int(base_p.shape[1]), "lambda": args.lambda_dim}, "lambda": "projection, computed now",
        "queries": {"dev": len(dev[0]), "test": len(test[0]), "one_at_a_time": min(args.single, len(test[0]))},
        "alpha": alpha, "quality_test": {name: {m: round(v, 4) for m, v in q.items()} for name, q in quality.items()},
        "timings": timings, "rows": rows_out,
        "targets": {
            "flat <= 1x hybrid": {"ratio": headline["vs_hybrid"]["single_ms"],
                                  "met": headline["vs_hybrid"]["single_ms"] <= 1.0},
            "approximate <= 0.5x hybrid at <= 0.5 points nDCG@10 loss": (
                {"system": best_approximate["system"], "ratio": best_approximate["vs_hybrid"]["single_ms"],
                 "loss_points": best_approximate["loss_vs_exact_points"],
                 "met": best_approximate["vs_hybrid"]["single_ms"] <= 0.5} if best_approximate
                else {"met": False, "why": "no approximate setting within 0.5 points of the exact scan"})},
        "hnsw": {"M": args.hnsw_m, "efConstruction": args.hnsw_ef_construction}, "seconds": steps,
        "excludes": "query encoding (base and Λ) on both sides",
    }
    return write_result(result, args.out)


METRICS = ("nDCG@10", "R@100")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1],
                    help="FAISS OpenMP threads and Lucene batch_search threads; each value is measured, the first "
                    "is the headline (default 2, then 1: OpenMP threads spin, which hurts on a shared machine)")
    ap.add_argument("--single", type=int, default=100, help="queries timed one at a time")
    ap.add_argument("--dim", type=int, default=384, help="base dimension (MiniLM: 384)")
    ap.add_argument("--lambda-dim", type=int, default=None,
                    help="Λ dimension (default: --dim; real vectors: the code's default, train.lexical.dim)")
    ap.add_argument("--storages", nargs="+", default=None,
                    help="passage storages of the SPAR index (spar.index.storage: float32 ... sq4, fs4, fs2); "
                    "each is measured against the hybrid, the first is the headline (default float32; real vectors: "
                    "the code's default, index.storage)")
    ap.add_argument("--index", nargs="+", default=["flat", "hnsw"], choices=["flat", "hnsw", "ivf"],
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
    real = ap.add_argument_group("real vectors (see the docstring)")
    real.add_argument("--embeddings", type=Path, default=None,
                      help="base passage embeddings directory (or its .partial while the encode runs)")
    real.add_argument("--passages-table", type=Path, default=None, help="the run's queries/passages.arrow")
    real.add_argument("--limit", type=int, default=None, help="first N passages (default: every finished shard)")
    real.add_argument("--queries", type=Path, help="queries (BEIR JSONL) of the judgments below")
    real.add_argument("--qrels-test", type=Path, help="judgments reported (nDCG@10, R@100)")
    real.add_argument("--qrels-dev", type=Path, help="judgments μ and α are tuned on (never the test ones)")
    real.add_argument("--test-queries", type=int, default=500, help="seeded sample of judged test queries")
    real.add_argument("--dev-queries", type=int, default=500, help="seeded sample of judged dev queries")
    real.add_argument("--lambda-seed", type=int, default=0, help="seed of the projection Λ")
    real.add_argument("--ef-search", type=int, nargs="+", default=[64, 128, 256], help="HNSW efSearch values")
    real.add_argument("--nprobe", type=int, nargs="+", default=[16, 32, 64], help="IVF nprobe values")
    real.add_argument("--ivf-nlist", type=int, default=None, help="IVF lists (default ~4*sqrt(N))")
    real.add_argument("-c", "--config", default=None,
                      help="experiment YAML for label (k1, b, fields), encode.base and train.lexical.projection "
                      "(default: the embedded default's)")
    args = ap.parse_args(argv)
    if args.embeddings is not None:
        if not (args.passages_table and args.queries and args.qrels_test and args.qrels_dev):
            ap.error("--embeddings needs --passages-table, --queries, --qrels-test and --qrels-dev")
        from spar.core.config import IndexSection, LexicalSection

        args.lambda_dim = args.lambda_dim or LexicalSection().dim  # the default point
        args.storages = args.storages or [IndexSection().storage]
        args.index = [t for t in dict.fromkeys(args.index)]
        return real_vectors(args, argv)

    args.storages = args.storages or ["float32"]
    import faiss
    import numpy as np

    from spar.core.config import IndexSection
    from spar.index.approximate import fold_factor
    from spar.index.spar_index import SparIndex, build_spar_index
    from spar.core.java import pyserini_module
    from spar.evaluate.metrics import ranked_run
    from spar.data.readers import read_qrels, read_queries
    from spar.teacher.teachers import build_bm25_index
    from spar.evaluate.candidates import hybrid_fuse

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
                                      fold=fold_factor(index_type, IndexSection().fold, args.mu), storage=storage,
                                      **opts)
            indexes[f"{index_type}/{storage}"] = (spar_ix, base_ix)
            print(f"built {index_type}/{storage} index in {time.perf_counter() - start:.0f}s", file=sys.stderr)
    del lambda_p
    spar = base_index = None

    def spar_search(bq, lq):
        return spar.search(bq, lq, k, mu=args.mu)

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
    from bench._common import run_cli

    run_cli(main)
