"""Which FAISS index serves SPAR at Wikipedia scale: each index type against the exact scan of the same vectors.

Reads a finished experiment's embeddings (base and Λ passages, dev questions) and measures, on the **dev** questions
of each ``--sets`` entry (never a test split), every ``--configs`` entry against the exact scan of float32
``[P, PΛ]`` with ``[Q, μ·QΛ]`` (μ from ``tune/tune.json``, each set's own where it tunes its own; ``--mu`` before
``spar tune`` has run):

- Acc@20 (and Acc@1/5/100; DPR's ``has_answer``) and its loss against the exact scan in points, overlap@20 with the
  exact top-20, nDCG@10 where the set has qrels;
- the **base alone** through the same index type (its own loss against its own exact scan: the reference an
  approximate SPAR index should not fall behind);
- search time per question: batched (``--threads``), and one question at a time with 1 and 2 threads (query
  vectors given, as the paper times search; re-ranking included), with the hybrid as deployed timed in the same
  run as the peer (:class:`spar.evaluate.served_hybrid.ServedHybrid`: the base in an HNSW graph whose efSearch is
  calibrated on the first set's dev questions, Pyserini BM25 beside it at once on two threads, fused at the tuned
  α), and the old flat-scan hybrid (every base vector scanned, then BM25) kept as ``flat_peer``, labelled;
- build seconds and bytes per passage in memory (the serialized index).

A config is ``TYPE:STORAGE[:key=value...]`` (``built:run``: the index ``spar index`` built for the run, read from its
``index/`` folder with its own fold, nothing built), keys ``nlist``, ``nprobe``, ``ef`` (efSearch), ``m`` (HNSW M),
``refine`` (re-rank the top refine·k with exact float32 scores read from the embeddings on disk:
:mod:`spar.index.approximate`), ``fold`` (``mu``: the index holds ``[P, μ₀·PΛ]``, as ``spar index`` builds an
approximate index; a number: that μ₀, e.g. the geometric middle of the sets' μ; ``1``: unfolded), ``quantizer``
(``hnsw``: an HNSW coarse quantizer for large ``nlist``), ``walk`` (:data:`WALKS`: how a set served at its own μ
walks a folded index), ``lam`` (a **smaller Λ for the candidates**: the index holds ``[P, μ₀·S(PΛ)]`` where S sums
Λ's vector over blocks of ``lam`` dimensions (:class:`BlockSummed`), itself a random projection of the same term
weights to ``lam`` dimensions, so the graph walks ``base + lam`` dimensions instead of ``base + Λ``; with ``refine``
the candidates are re-ranked by the full ``[P, μ·PΛ]``).
``--subset N`` measures on a seeded N-passage sample of the corpus (exploration); without it every passage is
searched, streamed from its shards.

    python -m bench.odqa_index -c configs/experiments/wiki-odqa.yaml --sets nq trivia entityq squad-open \\
        --questions 500 --configs flat:fs4 ivf:fs4:nlist=4096:nprobe=128:refine=4 hnsw:sq4:ef=256:refine=4 \\
        --out bench/results/odqa_index-663k.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from bench._common import command_line, directory_bytes, machine, write_result

KEYS = ("nlist", "nprobe", "ef", "efc", "m", "refine", "fold", "quantizer", "walk", "lam")

#: How a folded index is walked for a set served at μ ≠ μ₀: ``served`` with ``[Q, (μ/μ₀)·QΛ]`` (what
#: ``SparIndex.search`` does), ``mu0`` with ``[Q, QΛ]`` (the query the graph was built for), ``both``: the union of
#: the two walks' candidates, re-ranked exactly at μ (two searches).
WALKS = ("served", "mu0", "both")


def parse_config(text: str) -> dict:
    """``ivf:fs4:nprobe=64:refine=4`` -> {"type": "ivf", "storage": "fs4", "nprobe": 64, "refine": 4, ...}."""
    parts = text.split(":")
    if len(parts) < 2:
        raise SystemExit(f"--configs {text!r}: expected TYPE:STORAGE[:key=value...]")
    out: dict = {"type": parts[0], "storage": parts[1], "fold": "mu", "refine": 0, "text": text}
    for part in parts[2:]:
        key, _, value = part.partition("=")
        if key not in KEYS:
            raise SystemExit(f"--configs {text!r}: unknown option {key!r} ({', '.join(KEYS)})")
        if key == "walk":
            out[key] = value.split("/") if "/" in value else value
            for walk in out[key] if isinstance(out[key], list) else [out[key]]:
                if walk not in WALKS:
                    raise SystemExit(f"--configs {text!r}: walk={walk!r}: one of {', '.join(WALKS)}")
        elif key in ("fold", "quantizer"):
            out[key] = value
        elif key in SWEPT and "/" in value:
            out[key] = [int(v) for v in value.split("/")]
        else:
            out[key] = int(value)
    return out


#: Search-time options a config may list several values of (``nprobe=16/64/256``): one build, one row per value.
SWEPT = ("nprobe", "ef", "refine", "walk")


def search_settings(c: dict) -> list[dict]:
    """Every combination of the config's search-time values (lists), as concrete configs."""
    import itertools

    keys = [k for k in SWEPT if isinstance(c.get(k), list)]
    if not keys:
        return [c]
    out = []
    for values in itertools.product(*(c[k] for k in keys)):
        one = {**c, **dict(zip(keys, values))}
        one["text"] = c["text"].split(":")[0] + ":" + c["storage"] + "".join(
            f":{k}={one[k]}" for k in KEYS if k in one and k not in ("fold",) or (k == "fold" and one[k] != "mu"))
        out.append(one)
    return out


def apply_search(index, c: dict) -> None:
    import faiss

    if "nprobe" in c:
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.nprobe = int(c["nprobe"])
            quantizer = faiss.downcast_index(ivf.quantizer)
            if hasattr(quantizer, "hnsw"):
                quantizer.hnsw.efSearch = max(2 * int(c["nprobe"]), 64)
    if "ef" in c and hasattr(index, "hnsw"):
        index.hnsw.efSearch = int(c["ef"])


class Rows:
    """Rows ``rows`` (or all) of a streamed matrix, read block by block (slices) or gathered."""

    def __init__(self, matrix, rows: np.ndarray | None):
        self.matrix, self.rows = matrix, rows
        self.shape = (len(rows) if rows is not None else matrix.shape[0], matrix.shape[1])
        self.dtype, self.ndim = np.dtype(np.float32), 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        if self.rows is None:
            return np.asarray(self.matrix[key], dtype=np.float32)
        if isinstance(key, slice):
            key = np.arange(*key.indices(self.shape[0]))
        return np.asarray(self.matrix[self.rows[np.asarray(key)]], dtype=np.float32)


class BlockSummed:
    """Rows of a Λ matrix summed over consecutive blocks of ``dim`` columns: ``x.reshape(-1, D/dim, dim).sum(1)``.

    A random projection summed over blocks is a random projection to ``dim`` dimensions of the same term weights:
    a Gaussian one's blocks are independent N(0, 1/D) matrices, so their sum is N(0, blocks/D) = N(0, 1/dim); the
    sparse one puts each term once in every block (±1/√nonzeros), so the sum hashes it to ``nonzeros`` entries of
    ``dim`` dimensions, a count-sketch of the same norm. Inner products keep their expectation, with the variance
    of a ``dim``-dimensional projection: a cheaper, noisier Λ, for choosing candidates only.

    >>> x = np.arange(12, dtype=np.float32).reshape(2, 6)
    >>> BlockSummed(x, 3)[:2].tolist()
    [[3.0, 5.0, 7.0], [15.0, 17.0, 19.0]]
    """

    def __init__(self, matrix, dim: int):
        if matrix.shape[1] % dim:
            raise SystemExit(f"lam={dim}: Λ's {matrix.shape[1]} dimensions are not a whole number of {dim}-blocks")
        self.matrix, self.dim, self.blocks = matrix, dim, matrix.shape[1] // dim
        self.shape, self.dtype, self.ndim = (matrix.shape[0], dim), np.dtype(np.float32), 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        rows = np.asarray(self.matrix[key], dtype=np.float32)
        return rows.reshape(rows.shape[0], self.blocks, self.dim).sum(axis=1)


def judge(rows: np.ndarray, scores: np.ndarray, dev, doc_ids, texts_of, ks) -> dict[str, float]:
    from spar.evaluate.metrics import ranked_run

    return judge_run(ranked_run(dev.ids, rows, scores, doc_ids), dev, texts_of, ks)


def judge_run(run: dict, dev, texts_of, ks) -> dict[str, float]:
    """Acc@k (and nDCG@10 where the set has qrels) of a ranked run ``{qid: [(docid, score), ...]}``."""
    from spar.evaluate.metrics import answer_accuracy, evaluate_run

    out = {}
    if dev.answers is not None:
        texts = texts_of({d for hits in run.values() for d, _ in hits})
        out.update(answer_accuracy(run, dev.answers, texts, ks, dev.answer_match))
    if dev.qrels:
        out.update(evaluate_run(dev.qrels, run, ["nDCG@10"]))
    return {k: round(v, 4) for k, v in out.items()}


def index_bytes(index) -> int:
    import faiss

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "index.faiss")
        faiss.write_index(index, path)
        return os.path.getsize(path)


def build(c: dict, base_p, lambda_p, fold: float, seed: int, threads: int):
    """The FAISS index of config ``c`` over ``[P, fold·PΛ]`` (``lambda_p=None``: over ``P`` alone), built by the
    library as ``spar index`` builds it (:meth:`SparIndex.build <spar.index.spar_index.SparIndex.build>`: codec trained
    on a seeded sample, rows folded and added in blocks). ``quantizer=hnsw`` (an IVF whose coarse quantizer is an HNSW
    graph, which ``spar index`` does not build) is made here and trained and filled by the same library steps."""
    from spar.index.approximate import FoldedRows
    from spar.index.spar_index import IndexOptions, SparIndex, add_passages, build_spar_index, train_faiss_index

    options = IndexOptions(storage=c["storage"], seed=seed, threads=threads,
                           **({"ivf_nlist": c["nlist"]} if "nlist" in c else {}),
                           **({"hnsw_m": c["m"]} if "m" in c else {}),
                           **({"hnsw_ef_construction": c["efc"]} if "efc" in c else {}))
    if c["type"] == "ivf" and c.get("quantizer") == "hnsw":
        import faiss

        from spar.index.storage import factory_component

        matrices, variant = ([base_p], None) if lambda_p is None else (
            [base_p, FoldedRows(lambda_p, fold) if fold != 1.0 else lambda_p], "concat")
        dim = base_p.shape[1] + (lambda_p.shape[1] if lambda_p is not None else 0)
        index = faiss.index_factory(dim, f"IVF{c['nlist']}_HNSW32,{factory_component(c['storage'], dim=dim)}",
                                    faiss.METRIC_INNER_PRODUCT)
        return add_passages(train_faiss_index(index, matrices, variant, options), matrices, variant)
    if lambda_p is None:
        return build_spar_index(base_p, None, index_type=c["type"], **options.faiss_options())
    if c.get("lam"):  # the candidates' smaller Λ (the exact re-ranking reads the full one)
        lambda_p = BlockSummed(lambda_p, c["lam"])
    return SparIndex.build(base_p, lambda_p, index_type=c["type"], options=options, fold=fold).index


def graph_lambda(c: dict, lambda_q: np.ndarray) -> np.ndarray:
    """The questions' Λ half as the index holds Λ: block-summed for a ``lam`` config, else as encoded."""
    return BlockSummed(lambda_q, c["lam"])[:] if c.get("lam") else lambda_q


def search(index, qvecs: np.ndarray, k: int, refine: int, passage_rows, base_q, lambda_q, mu, subset,
           walk: str = "served"):
    """(scores, rows) of the index's top k, re-ranked exactly from refine·k when ``refine``; ``walk`` as
    :data:`WALKS` (``qvecs`` is the served query ``[Q, (μ/μ₀)·QΛ]``; the μ₀ one is made here)."""
    from spar.index.approximate import refine_top_k
    from spar.index.combine import spar_query_vectors

    if walk != "served":
        at_mu0 = spar_query_vectors(base_q, lambda_q, 1.0, "concat")
        qvecs = at_mu0 if walk == "mu0" else np.vstack([qvecs, at_mu0])
    scores, rows = index.search(np.ascontiguousarray(qvecs, dtype=np.float32), k * max(1, refine))
    if walk == "both":  # each question's two candidate lists side by side (refine_top_k drops repeats)
        half = len(rows) // 2
        scores, rows = np.hstack([scores[:half], scores[half:]]), np.hstack([rows[:half], rows[half:]])
    if not refine:
        if walk == "both":
            raise SystemExit("walk=both needs refine (the two walks' scores are for different queries)")
        return scores, rows
    glob = np.where(rows >= 0, subset[np.maximum(rows, 0)] if subset is not None else rows, -1)
    scores, found = refine_top_k(passage_rows, base_q, lambda_q, mu, glob, k)
    if subset is not None:  # back to subset rows (``subset`` is sorted); a dict of every subset row built per call
        # cost ~80 ms, which the single-question timings used to charge to the index
        at = np.minimum(np.searchsorted(subset, found), len(subset) - 1)
        found = np.where((found >= 0) & (subset[at] == found), at, -1)
    return scores, found


def timed_single(fn, n: int, threads: int) -> float:
    """Milliseconds per question, one question at a time, on ``threads`` FAISS threads."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        fn(0)  # warm
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        return round(1000 * (time.perf_counter() - start) / n, 3)
    finally:
        faiss.omp_set_num_threads(before)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--sets", nargs="+", required=True, help="question sets whose dev splits are searched")
    ap.add_argument("--questions", type=int, default=500, help="first N of each set's (sampled) dev questions")
    ap.add_argument("--configs", nargs="+", required=True)
    ap.add_argument("--subset", type=int, default=None, help="a seeded sample of N passages (exploration)")
    ap.add_argument("--mu", type=float, default=None, help="μ before `spar tune` ran (every set; folding too)")
    ap.add_argument("--single", type=int, default=100, help="questions timed one at a time")
    ap.add_argument("--single-every-set", action="store_true",
                    help="time one question at a time (1 thread) on every set, not only the first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--no-base", action="store_true", help="skip the base-alone rows")
    ap.add_argument("--no-hybrid", action="store_true", help="skip timing the hybrid")
    ap.add_argument("--out", required=True)
    ap.add_argument("overrides", nargs="*", help="section.key=value config overrides")
    args = ap.parse_args(argv)

    import faiss

    from spar.core.config import load_config
    from spar.data.question_sets import SplitQueries
    from spar.experiment.plan import dev_split
    from spar.evaluate.evaluation import passage_texts
    from spar.evaluate.exact import top_k
    from spar.evaluate.metrics import ranked_run
    from spar.experiment.inputs import ExperimentInputs
    from spar.index.approximate import PassageRows
    from spar.index.combine import SparPassageRows, spar_query_vectors
    from spar.model.stored_vectors import load_embeddings

    faiss.omp_set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    inputs = ExperimentInputs(cfg)
    base_emb, lam_emb = load_embeddings(inputs.passage_dir("base")), load_embeddings(inputs.passage_dir("lambda"))
    n_all = len(base_emb.ids)
    subset = None
    if args.subset and args.subset < n_all:
        subset = np.sort(np.random.default_rng(cfg.experiment.seed).choice(n_all, size=args.subset, replace=False))
    base_p, lam_p = Rows(base_emb.sharded, subset), Rows(lam_emb.sharded, subset)
    doc_ids = inputs.doc_ids if subset is None else [inputs.doc_ids[i] for i in subset]
    passage_rows = PassageRows(base_emb.part_files, lam_emb.part_files)
    n, dim = base_p.shape[0], base_p.shape[1] + lam_p.shape[1]
    texts_of = lambda wanted: passage_texts(inputs, wanted)  # noqa: E731
    ks = [1, 5, 20, 100]

    tuned = None
    if args.mu is None:
        from spar.evaluate.tuning import read_tuned

        tuned = read_tuned(cfg.output_dir)
    mu0 = args.mu if tuned is None else tuned.mu()
    sets = {}
    for name in args.sets:
        full = dev_split(cfg, name)
        ids = full.ids[:args.questions]
        dev = SplitQueries(full.split, {q: full.qrels[q] for q in ids if q in full.qrels},
                           {q: full.texts[q] for q in ids},
                           None if full.answers is None else {q: full.answers[q] for q in ids if q in full.answers},
                           full.answer_match, full.name, full.stored)
        mu = mu0 if tuned is None else tuned.for_set(name).mu()
        sets[name] = {"dev": dev, "mu": mu, "base_q": inputs.query_vectors("base", dev),
                      "lambda_q": inputs.query_vectors("lambda", dev)}
    described = ", ".join(f"{name}: {len(v['dev'].ids)} (μ {v['mu']:g})" for name, v in sets.items())
    print(f"{n:,} passages, {dim} dims, μ₀ = {mu0:g}, sets {described}", file=sys.stderr, flush=True)

    # The exact scans: SPAR over float32 [P, PΛ], and the base alone.
    exact: dict = {}
    start = time.perf_counter()
    for name, s in sets.items():
        q = spar_query_vectors(s["base_q"], s["lambda_q"], s["mu"], "concat")
        scores, rows = top_k(q, SparPassageRows(base_p, lam_p), args.k)
        base_scores, base_rows = top_k(s["base_q"], base_p, args.k)
        s["exact_base_run"] = ranked_run(s["dev"].ids, base_rows, base_scores, doc_ids)  # the exact hybrid's half
        exact[name] = {"spar": judge(rows, scores, s["dev"], doc_ids, texts_of, ks),
                       "base": judge(base_rows, base_scores, s["dev"], doc_ids, texts_of, ks),
                       "top20": [set(r[:20].tolist()) for r in rows],
                       "base_top20": [set(r[:20].tolist()) for r in base_rows]}
        print(name, "exact", exact[name]["spar"], "base", exact[name]["base"], file=sys.stderr, flush=True)
    exact_seconds = time.perf_counter() - start

    peer = {"name": "hybrid as deployed: base in HNSW (efSearch calibrated on dev) and Pyserini BM25 at once on two "
                    "threads, fused; query vectors given"}
    flat_peer = {"name": "hybrid with a flat base scan (the peer before issue #46): base flat float32, then Pyserini "
                         "BM25, fused, one question at a time"}
    if not args.no_hybrid:
        from spar.evaluate.candidates import hybrid_fuse
        from spar.evaluate.served_hybrid import HnswBase, ServedHybrid, calibrate_ef

        flat = faiss.IndexFlatIP(base_p.shape[1])
        for start in range(0, n, 65536):
            flat.add(base_p[start:start + 65536])
        s = next(iter(sets.values()))
        pairs = s["dev"].pairs()
        searcher = inputs.bm25
        alpha = 0.04 if tuned is None else (tuned.alpha or 0.04)
        normalize = cfg.tune.hybrid_normalize  # as `evaluate` fuses
        searcher.search(pairs[:1], 100)  # the JVM warm

        def hybrid(i: int) -> None:
            d, r = flat.search(s["base_q"][i:i + 1], 100)
            dense = [(doc_ids[j], float(v)) for j, v in zip(r[0], d[0]) if j >= 0]
            sparse = searcher.search(pairs[i:i + 1], 100).get(pairs[i][0], [])
            hybrid_fuse(dense, list(sparse), alpha, normalize)

        def dense_only(i: int) -> None:
            flat.search(s["base_q"][i:i + 1], 100)

        def bm25_only(i: int) -> None:
            searcher.search(pairs[i:i + 1], 100)

        single = min(args.single, len(pairs))
        flat_peer.update({"ms_1_thread": timed_single(hybrid, single, 1),
                          "ms_2_threads": timed_single(hybrid, single, 2),
                          "base_flat_ms_1_thread": timed_single(dense_only, single, 1),
                          "bm25_ms": timed_single(bm25_only, single, 1), "questions_timed": single,
                          "bytes_per_passage_base": base_p.shape[1] * 4})
        del flat

        graph = HnswBase.build(base_p, doc_ids)
        dev = s["dev"]
        base_scores, base_rows = top_k(s["base_q"], base_p, 20)
        exact_base = {q: [(doc_ids[j], float(v)) for j, v in zip(r, d) if j >= 0]
                      for q, r, d in zip(dev.ids, base_rows, base_scores)}
        answers = inputs.answer_judge(dev, "Acc@20") if dev.answers is not None else None
        calibration = calibrate_ef(graph, dev.ids, s["base_q"], exact_base,
                                   lambda *runs: inputs.judged(dev, answers, *runs))
        served = ServedHybrid(graph, searcher, alpha, normalize)

        def served_one(i: int) -> None:
            served.search(pairs[i][0], pairs[i][1], s["base_q"][i], 100)

        def graph_only(i: int) -> None:
            graph.search(s["base_q"][i:i + 1], 100)

        # Its answers on every set's dev questions, beside the exact hybrid's (the same BM25 lists, the base's exact
        # top-k instead of the graph's), each set at its own α as `evaluate` fuses it.
        peer["sets"] = {}
        for name, one_set in sets.items():
            dev_pairs = one_set["dev"].pairs()
            set_alpha = alpha if tuned is None else (tuned.for_set(name).alpha or alpha)
            bm25_lists = searcher.search(dev_pairs, args.k)
            graph_lists = graph.run(one_set["dev"].ids, one_set["base_q"], args.k)
            fused = {"served": {}, "exact": {}}
            for qid in one_set["dev"].ids:
                sparse = list(bm25_lists.get(qid, []))
                fused["served"][qid] = hybrid_fuse(graph_lists.get(qid, []), sparse, set_alpha, normalize, args.k)
                fused["exact"][qid] = hybrid_fuse(one_set["exact_base_run"].get(qid, []), sparse, set_alpha,
                                                  normalize, args.k)
            exact[name]["hybrid"] = judge_run(fused["exact"], one_set["dev"], texts_of, ks)
            peer.setdefault("base_hnsw_sets", {})[name] = judge_run(graph_lists, one_set["dev"], texts_of, ks)
            served_acc = judge_run(fused["served"], one_set["dev"], texts_of, ks)
            peer["sets"][name] = {**served_acc, "alpha": set_alpha, "Acc@20_loss_points": round(
                100 * (served_acc.get("Acc@20", 0) - exact[name]["hybrid"].get("Acc@20", 0)), 2)}
            print(name, "hybrid exact", exact[name]["hybrid"], "served", peer["sets"][name], file=sys.stderr,
                  flush=True)
        peer.update({"ms_1_thread": timed_single(served_one, single, 1), "base_hnsw_ms_1_thread":
                     timed_single(graph_only, single, 1), "bm25_ms": flat_peer["bm25_ms"], "questions_timed": single,
                     "hnsw": graph.settings(), "calibration": calibration,
                     "bytes_per_passage_base": round(graph.nbytes() / n, 1), "threads": "1 per half"})
        index_dir = getattr(searcher, "index_dir", None)  # Lucene's directory, which it memory-maps
        if index_dir is not None:
            peer["bytes_per_passage_bm25"] = round(directory_bytes(index_dir) / n, 1)
            peer["bytes_per_passage"] = round(peer["bytes_per_passage_base"] + peer["bytes_per_passage_bm25"], 1)
        served.close()
        del graph
        print("hybrid", peer, "flat-scan hybrid", flat_peer, file=sys.stderr, flush=True)

    rows_out = []

    def one_query(index, q, s, c):
        """Search the ``i``-th question of set ``s`` alone (its query vector from ``q``), as configured by ``c``."""

        def one(i: int) -> None:
            search(index, q[i:i + 1], args.k, c["refine"], passage_rows, s["base_q"][i:i + 1],
                   s["lambda_q"][i:i + 1], s["mu"], subset, c.get("walk", "served"))

        return one

    for text in args.configs:
        parsed = parse_config(text)
        if parsed.get("lam") and (parsed["type"] == "built" or not parsed["refine"]
                                  or parsed.get("walk", "served") != "served"):
            raise SystemExit(f"--configs {text!r}: lam= needs a built index type, refine and the served walk (its "
                             "graph holds a smaller Λ than the one scores are made of)")
        if parsed["type"] == "built":  # the run's own index, as `spar index` built it (its fold, its graph)
            from spar.core.run_context import RunContext
            from spar.index.files import INDEX_FILE
            from spar.index.spar_index import SparIndex

            if subset is not None:
                raise SystemExit("built:run holds every passage; drop --subset")
            index_dir = RunContext(cfg).artifact("index")
            served = SparIndex.load(index_dir)  # the index package reads its own files
            index, built = served.index, None
            fold = float(served.info.get("fold", 1.0))
            size = (index_dir / INDEX_FILE).stat().st_size
            parsed.setdefault("ef", served.info.get("options", {}).get("hnsw_ef_search"))
        else:
            if parsed["type"] == "flat":
                fold = 1.0
            else:  # "mu": μ₀ as `spar index` folds it; a number: that μ₀ (1: unfolded)
                fold = mu0 if parsed["fold"] == "mu" else float(parsed["fold"])
            start = time.perf_counter()
            index = build(parsed, base_p, lam_p, fold, cfg.experiment.seed, args.threads)
            built = round(time.perf_counter() - start, 1)
            size = index_bytes(index)
        bindex = None
        if not args.no_base and parsed["type"] != "built":  # the base alone through the same index type
            start = time.perf_counter()
            bindex = build({**parsed, "refine": 0}, base_p, None, 1.0, cfg.experiment.seed, args.threads)
            base_built = time.perf_counter() - start

        for c in search_settings(parsed):
            apply_search(index, c)
            row = {"config": c["text"], "fold": fold, "refine": c["refine"], "build_s": built,
                   "bytes_per_passage": round(size / n, 1), "sets": {},
                   "graph_dim": base_p.shape[1] + (c.get("lam") or lam_p.shape[1])}  # what the index holds
            for name, s in sets.items():
                q = spar_query_vectors(s["base_q"], graph_lambda(c, s["lambda_q"]), s["mu"] / fold, "concat")
                start = time.perf_counter()
                scores, found = search(index, q, args.k, c["refine"], passage_rows, s["base_q"], s["lambda_q"],
                                       s["mu"], subset, c.get("walk", "served"))
                batched = time.perf_counter() - start
                measured = judge(found, scores, s["dev"], doc_ids, texts_of, ks)
                overlap = float(np.mean([len(exact[name]["top20"][i] & set(found[i, :20].tolist())) / 20
                                         for i in range(len(found))]))
                entry = {**measured, "overlap@20": round(overlap, 4),
                         "Acc@20_loss_points": round(100 * (measured.get("Acc@20", 0)
                                                            - exact[name]["spar"]["Acc@20"]), 2),
                         "ms_batched": round(1000 * batched / len(found), 3)}
                if c.get("walk", "served") != "served" or args.single_every_set:  # a walk's cost is its set's
                    entry["ms_1_thread"] = timed_single(one_query(index, q, s, c), min(args.single, len(q)), 1)
                row["sets"][name] = entry
                print(c["text"], name, entry, file=sys.stderr, flush=True)
            s = next(iter(sets.values()))
            q = spar_query_vectors(s["base_q"], graph_lambda(c, s["lambda_q"]), s["mu"] / fold, "concat")
            one = one_query(index, q, s, c)
            single = min(args.single, len(q))
            row["ms_1_thread"], row["ms_2_threads"] = timed_single(one, single, 1), timed_single(one, single, 2)
            del one
            if peer.get("ms_1_thread"):
                row["vs_hybrid_1_thread"] = round(row["ms_1_thread"] / peer["ms_1_thread"], 3)
                row["vs_flat_hybrid_1_thread"] = round(row["ms_1_thread"] / flat_peer["ms_1_thread"], 3)
            row["worst_Acc@20_loss_points"] = min(e["Acc@20_loss_points"] for e in row["sets"].values())
            if bindex is not None:
                apply_search(bindex, c)
                row["base"] = {"build_s": round(base_built, 1), "sets": {}}
                for name, s in sets.items():
                    scores, found = bindex.search(np.ascontiguousarray(s["base_q"], dtype=np.float32),
                                                  args.k * max(1, c["refine"]))
                    if c["refine"]:  # exact base scores of the candidates
                        glob = np.where(found >= 0, subset[np.maximum(found, 0)] if subset is not None else found, -1)
                        exact_base = np.stack([passage_rows.part(0, np.maximum(r, 0)) @ s["base_q"][i]
                                               for i, r in enumerate(glob)])
                        exact_base[found < 0] = -np.inf
                        order = np.argsort(-exact_base, axis=1, kind="stable")[:, :args.k]
                        scores, found = np.take_along_axis(exact_base, order, 1), np.take_along_axis(found, order, 1)
                    measured = judge(found, scores, s["dev"], doc_ids, texts_of, ks)
                    row["base"]["sets"][name] = {
                        **measured, "Acc@20_loss_points": round(100 * (measured.get("Acc@20", 0)
                                                                       - exact[name]["base"]["Acc@20"]), 2)}
                row["base"]["worst_Acc@20_loss_points"] = min(e["Acc@20_loss_points"]
                                                              for e in row["base"]["sets"].values())
                print(c["text"], "base", row["base"], file=sys.stderr, flush=True)
            rows_out.append(row)
        del index, bindex

    result = {"benchmark": "approximate SPAR indexes against the exact scan (issue #35 item 2)", "config": args.config,
              "passages": n, "subset": args.subset, "dim": dim, "mu0": mu0, "questions_per_set": args.questions,
              "split": "dev", "exact": {k: {key: v[key] for key in ("spar", "base", "hybrid") if key in v}
                                                        for k, v in exact.items()},
              "lambda": {"run": str(cfg.output_dir), **{k: lam_emb.manifest["stats"].get(k) for k in (
                  "kind", "dim", "pooling", "transport")}},  # which Λ: the frontier names its points by it
              "exact_seconds": round(exact_seconds, 1), "spar": rows_out, "peer": peer, "flat_peer": flat_peer,
              "ratio": {r["config"]: r.get("vs_hybrid_1_thread") for r in rows_out},
              "unit": "Acc@20 loss in points against the exact scan; ms per question",
              "machine": machine(args.threads), "command": command_line(__file__, argv)}
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
