"""Cost of tuning μ (``spar tune``'s sweep) against one evaluation pass, on the same data in the same process.

One evaluation pass = build the SPAR query vectors, one search of the combined flat FAISS index (top-100) and
ir_measures on the result. The tuning sweep = :func:`spar.evaluate.candidates.spar_candidates` (each part's
top-``candidates`` and their exact scores) + ranking and ir_measures for every μ of the 19-value grid. Also reported:
the sweep as the stage runs it (grid extension at an edge, then the confirming real search). Index building and query
encoding are the index and encode stages' work and are not timed. Each figure is the median of ``--repeat`` runs.

Data: an experiment's dev split (``data.qrels_dev``) and its ``embeddings/{base,lambda}/passages`` when they exist;
otherwise the corpus is encoded once into ``--work-dir`` with the configured base retriever and an *untrained* Λ
(``train.encoder``: MiniLM, CLS pooling) — timings do not depend on how well Λ is trained.

    python -m bench.tune_cost                                            # SciFact (shared datasets), 2 threads
    python -m bench.tune_cost --config configs/default.yaml --threads 1  # the embedded 600-abstract sample
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def median_time(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def passage_embeddings(cfg, work_dir: Path, max_length: int | None, threads: int):
    """(base, Λ) passage Embeddings of the experiment, or encoded now into ``work_dir`` (cached)."""
    from spar.model.embeddings import EncodeOptions, encode_passages
    from spar.model.stored_vectors import load_embeddings
    from spar.model.encoders import BiEncoder
    from spar.experiment.inputs import ExperimentInputs

    inputs = ExperimentInputs(cfg)
    try:
        return inputs.passages["base"], inputs.passages["lambda"], "experiment embeddings"
    except Exception:  # noqa: BLE001 - no encode stage output: encode here
        pass
    base_section = cfg.encode.base.model_copy(update={"passage_max_length": max_length} if max_length else {})
    lambda_section = cfg.train.encoder.model_copy(update={"passage_max_length": max_length} if max_length else {})
    encoders = {"base": BiEncoder.from_section(base_section), "lambda": BiEncoder.from_section(lambda_section)}
    options = EncodeOptions(batch_size=32, accelerator="cpu", show_progress=True)
    out = {}
    for name, encoder in encoders.items():
        encode_passages(encoder, cfg.data.corpus, work_dir / name / "passages", encoder_name=name, options=options)
        out[name] = load_embeddings(work_dir / name / "passages")
    return out["base"], out["lambda"], f"encoded here (base + untrained Λ, passage_max_length={max_length})"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "configs" / "experiments" / "scifact.yaml"))
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="where passages are encoded when the experiment has no embeddings "
                    "(default: .cache/bench-tune-cost/<experiment>)")
    ap.add_argument("--passage-max-length", type=int, default=256)
    ap.add_argument("--candidates", type=int, default=None, help="default: tune.candidates of the config (auto)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tune_cost.json")
    ap.add_argument("overrides", nargs="*", help="config overrides section.key=value")
    args = ap.parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    logging.basicConfig(level=logging.ERROR)  # the 19-value sweep warns that its best μ sits at the edge
    import faiss
    import numpy as np
    import torch

    from spar.core.config import load_config
    from spar.experiment.inputs import ExperimentInputs
    from spar.experiment.plan import split_queries
    from spar.index.spar_index import build_spar_index
    from spar.index.combine import spar_query_vectors
    from spar.evaluate.metrics import evaluate_run, ranked_run
    from spar.evaluate.tuning import resolve_candidates, tune_mu
    from spar.evaluate.candidates import spar_candidates, tune_weight

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    candidates = resolve_candidates(args.candidates or cfg.tune.candidates, cfg.tune.metric)
    metric, variant, k = cfg.tune.metric, cfg.tune.variant, cfg.evaluate.k
    work_dir = args.work_dir or REPO / ".cache" / "bench-tune-cost" / cfg.experiment.name
    base_emb, lambda_emb, source = passage_embeddings(cfg, work_dir, args.passage_max_length, args.threads)
    base_p = np.ascontiguousarray(base_emb.vectors, dtype=np.float32)
    lambda_p = np.ascontiguousarray(lambda_emb.vectors, dtype=np.float32)
    doc_ids = base_emb.ids

    dev = split_queries(cfg, "dev")
    inputs = ExperimentInputs(cfg)
    if source.startswith("encoded"):
        from spar.model.encoders import BiEncoder

        sections = {"base": cfg.encode.base, "lambda": cfg.train.encoder}
        queries = {name: BiEncoder.from_section(s).encode_query(list(dev.texts.values()))
                   for name, s in sections.items()}
    else:
        queries = {name: inputs.query_vectors(name, dev) for name in ("base", "lambda")}
    base_q, lambda_q = queries["base"], queries["lambda"]

    start = time.perf_counter()
    index = build_spar_index(base_p, lambda_p, variant, "flat")
    index_build = time.perf_counter() - start
    mu = 0.05  # any μ: an evaluation pass costs the same for all

    def evaluation_pass():
        q = spar_query_vectors(base_q, lambda_q, mu, variant)
        scores, rows = index.search(np.ascontiguousarray(q, dtype=np.float32), k)
        return evaluate_run(dev.qrels, ranked_run(dev.ids, rows, scores, doc_ids), [metric])[metric]

    def sweep_19():
        cands = spar_candidates(base_q, lambda_q, base_p, lambda_p, dev.ids, doc_ids, variant, candidates)
        return cands, tune_weight(cands, dev.qrels, metric, None, max_extensions=0)

    def stage_tuning():
        return tune_mu(base_q, lambda_q, base_p, lambda_p, dev.ids, doc_ids, dev.qrels, metric, variant, candidates,
                       None, cfg.tune.max_extensions, confirm=True)

    evaluation_pass()  # warm-up: BLAS/FAISS threads, ir_measures import
    eval_seconds, _ = median_time(evaluation_pass, args.repeat)
    sweep_seconds, (cands, search19) = median_time(sweep_19, args.repeat)
    cand_seconds, _ = median_time(lambda: spar_candidates(base_q, lambda_q, base_p, lambda_p, dev.ids, doc_ids,
                                                          variant, candidates), args.repeat)
    stage_seconds, tuned = median_time(stage_tuning, args.repeat)

    result = {
        "benchmark": "tune_cost",
        "command": command_line(__file__, argv or None),
        "machine": machine(args.threads),
        # The headline: the 19-value sweep against one evaluation pass of the combined index.
        "spar": round(sweep_seconds, 4), "peer": round(eval_seconds, 4),
        "ratio": round(sweep_seconds / eval_seconds, 2), "unit": "seconds (lower is better)",
        "data": {"experiment": cfg.experiment.name, "passages": len(doc_ids), "dev_queries": len(dev.ids),
                 "base_dim": int(base_p.shape[1]), "lambda_dim": int(lambda_p.shape[1]), "embeddings": source},
        "settings": {"metric": metric, "variant": variant, "candidates": candidates, "k": k, "repeat": args.repeat,
                     "candidates_per_query": round(cands.stats["candidates_per_query"], 1)},
        "seconds": {
            "evaluation_pass": round(eval_seconds, 4),
            "sweep_19_mu": round(sweep_seconds, 4),
            "of_which_candidates": round(cand_seconds, 4),
            "per_mu_value": round((sweep_seconds - cand_seconds) / len(search19.scores), 5),
            "stage_tuning": round(stage_seconds, 4),
            "stage_tuning_parts": tuned.seconds,
            "index_build_not_timed": round(index_build, 4),
        },
        "stage_mu_values": len(tuned.search.scores),
        "stage_extensions": tuned.search.extensions,
        "ratio_sweep_19_to_evaluation_pass": round(sweep_seconds / eval_seconds, 2),
        "ratio_stage_tuning_to_evaluation_pass": round(stage_seconds / eval_seconds, 2),
        "naive_alternative": f"{len(search19.scores)} evaluation passes (one combined-index search per μ), plus "
                             f"{len(search19.scores)} index builds if the index is built with μ in it",
        "mu": {"sweep_19": search19.best, "stage": tuned.search.best, "stage_confirmed": tuned.confirmed,
               "stage_rescored": round(tuned.search.best_score, 6)},
        "target_ratio": 2.0,
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
