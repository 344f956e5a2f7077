"""Evaluation of every system of a SPAR experiment in one table, with the paper's analyses (§5, §6).

Systems, all on the same queries and qrels:

==========  =====================================================================================================
``bm25``    the sparse teacher: Pyserini BM25 (title + text, k1 0.9, b 0.4)
``base``    the base dense retriever (exact inner-product search of its passage embeddings)
``lambda``  Λ alone
``spar``    [Q, μ·QΛ] searched in the real combined FAISS index written by ``spar index`` (μ from ``spar tune``)
``spar_sum`` the weighted-sum variant: Q + μ·QΛ against P + PΛ (needs equal dimensions; its own tuned μ)
``hybrid``  Pyserini-style hybrid of base and BM25: base + α·BM25 over the union of both top lists
==========  =====================================================================================================

Analyses: rank-biased overlap (RBO_ext, p = 0.9, top-100) of each dense system's ranking with the teacher's, and
token-shuffled queries (seeded shuffle of each query's whitespace tokens; Δ of the metric per system).

The inputs are the pipeline's artifacts (``embeddings/``, ``lambda/``, ``index/``, ``tune/``, ``teacher_index/``);
query vectors come from ``embeddings/<encoder>/queries-<split>`` or are encoded on the fly when that is missing.

The query splits, exact dense search and the artifact access live in :mod:`spar.experiment`; μ and α come from
:func:`spar.tuning.read_tuned`.

Example (library use, outside the pipeline)::

    >>> from spar.evaluation import shuffle_query
    >>> shuffle_query("a b c d", seed=1) != "a b c d"
    True
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from spar.artifacts import artifact_dir, is_complete, read_manifest
from spar.errors import ArtifactError, BadRecordError
from spar.experiment import ExperimentInputs, SplitQueries, dense_search, split_queries
from spar.metrics import evaluate_run, mean_rbo, ranked_run
from spar.run_context import RunContext
from spar.tuning import hybrid_fuse, read_tuned, resolve_candidates

log = logging.getLogger(__name__)

#: The order systems appear in tables.
SYSTEMS = ("bm25", "base", "lambda", "spar", "spar_sum", "hybrid")
DENSE_SYSTEMS = ("lambda", "base", "spar")


# ----------------------------------------------------------------------------------------------------------------
# Token-shuffled queries
# ----------------------------------------------------------------------------------------------------------------


def shuffle_query(text: str, seed: int) -> str:
    """The query's whitespace tokens in a random order, seeded by ``seed`` (a one-token query is unchanged)."""
    tokens = text.split()
    random.Random(seed).shuffle(tokens)
    return " ".join(tokens)


def shuffled_queries(queries: SplitQueries, seed: int) -> SplitQueries:
    """Every query token-shuffled with a per-query seed derived from ``seed`` and the query id (order-independent)."""
    def query_seed(qid: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{seed}:{qid}".encode()).digest()[:8], "big")

    return SplitQueries(queries.split + "-shuffled", queries.qrels,
                        {q: shuffle_query(t, query_seed(q)) for q, t in queries.texts.items()})


# ----------------------------------------------------------------------------------------------------------------
# The evaluation
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class EvaluationReport:
    """Everything ``results/<name>.json`` holds, plus the runs (``runs[system]``, test queries)."""

    dataset: str
    metrics: list[str]
    systems: dict[str, dict[str, float]]
    mu: float
    alpha: float | None
    rbo: dict[str, float]
    shuffled: dict[str, dict[str, float]]
    runs: dict[str, dict[str, list[tuple[str, float]]]] = field(repr=False)
    details: dict[str, Any] = field(default_factory=dict)
    command: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "systems": self.systems, "mu": self.mu, "alpha": self.alpha,
                "rbo": self.rbo, "shuffled": self.shuffled, "command": self.command, **self.details}

    def markdown(self) -> str:
        """The results table: one row per system, metrics, RBO with the teacher, Δ on shuffled queries."""
        primary = self.metrics[0]
        head = ["system", *self.metrics, "RBO vs BM25", f"shuffled {primary} (Δ)"]
        extra = [m for m in next(iter(self.systems.values()), {}) if m not in self.metrics]
        head[1 + len(self.metrics):1 + len(self.metrics)] = extra
        lines = [f"**{self.dataset}** ({self.details.get('queries', '?')} test queries); "
                 f"μ = {self.mu:g}" + (f", α = {self.alpha:g}" if self.alpha is not None else "")
                 + (f"; SPAR index: {self.details['index']['type']}, passages stored as "
                    f"{self.details['index']['storage']} ({self.details['index']['code_bytes']:,} B/passage)"
                    if self.details.get("index", {}).get("code_bytes") else ""),
                 "", "| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
        for name, values in self.systems.items():
            cells = [name] + [f"{values[m]:.4f}" if m in values else "" for m in self.metrics + extra]
            cells.append(f"{self.rbo[name]:.3f}" if name in self.rbo else "")
            sh = self.shuffled.get(name)
            cells.append(f"{sh[primary]:.4f} ({sh['delta']:+.4f})" if sh else "")
            lines.append("| " + " | ".join(cells) + " |")
        if self.details.get("skipped_records"):
            from spar.preflight import describe_skipped

            lines += ["", "Input records skipped (experiment.on_bad_record=skip): "
                      + describe_skipped(self.details["skipped_records"]) + "."]
        return "\n".join(lines) + "\n"


def evaluate_experiment(cfg, inputs: ExperimentInputs | None = None, runs_dir: Path | None = None,
                        progress: Callable[[str], None] = log.info) -> EvaluationReport:
    """Run every system on the test split, compute metrics, RBO and the shuffled-query analysis.

    ``runs_dir``: where ``<system>.trec`` files are written (``evaluation/runs`` in the pipeline).
    """
    from spar.index import SparIndex, build_spar_index, check_serves, spar_query_vectors

    ev = cfg.evaluate
    inputs = inputs or ExperimentInputs(cfg)
    index_dir = artifact_dir(cfg.output_dir, "index")
    if not is_complete(index_dir):
        raise ArtifactError(f"{index_dir}: the SPAR index is missing (run `spar index`)")
    spar_index = SparIndex.load(index_dir)
    check_index_is_current(spar_index, index_dir, inputs)
    check_serves(spar_index.info, cfg.index, cfg.experiment.seed, index_dir)  # what is recorded is what is served
    search_params = {k: getattr(cfg.index, k) for k in ("hnsw_ef_search", "nprobe")}
    spar_index.set_search_params(**search_params)
    tuned = read_tuned(cfg.output_dir)
    tuned.check_served_by(spar_index.info, index_dir)  # μ tuned against other stored vectors is refused
    mu = tuned.mu()
    alpha = tuned.alpha
    # The hybrid fuses lists as deep as the ones its α was tuned on.
    k0 = max(ev.k, int(tuned.candidates or resolve_candidates(cfg.tune.candidates, cfg.tune.metric)))
    k = ev.k
    metrics = list(ev.metrics)
    primary = metrics[0]
    test = split_queries(cfg, "test")
    doc_ids = inputs.doc_ids
    base_p, lambda_p = inputs.passage_vectors("base"), inputs.passage_vectors("lambda")

    spar_variant = getattr(spar_index, "variant", None) or read_manifest(index_dir)["stats"].get("variant", "concat")
    if spar_variant not in tuned.variants:
        raise ArtifactError(f"{index_dir}: a '{spar_variant}' index, but μ in {tuned.path} was tuned for "
                            f"{', '.join(sorted(tuned.variants))} only: re-run `spar tune` with "
                            f"tune.variant={spar_variant}, or rebuild the index")
    spar_mu = tuned.mu(spar_variant)
    sum_mu = tuned.mu("sum") if "sum" in tuned.variants else None
    sum_index = None
    if base_p.shape[1] == lambda_p.shape[1]:
        sum_index = build_spar_index(np.asarray(base_p, np.float32), np.asarray(lambda_p, np.float32), "sum", "flat")
        if sum_mu is None:
            log.warning("μ was not tuned for the 'sum' variant; spar_sum uses the concat μ=%g", mu)
            sum_mu = mu

    def run_systems(queries: SplitQueries, which: Sequence[str]) -> dict[str, dict[str, list[tuple[str, float]]]]:
        runs: dict[str, dict[str, list[tuple[str, float]]]] = {}
        need_bm25 = {"bm25", "hybrid"} & set(which)
        bm25_deep = inputs.bm25_search(queries, k0) if need_bm25 else {}
        base_q = inputs.query_vectors("base", queries) if set(which) - {"bm25"} else None
        lambda_q = inputs.query_vectors("lambda", queries) if {"lambda", "spar", "spar_sum"} & set(which) else None
        ids = queries.ids
        if "bm25" in which:
            runs["bm25"] = {q: hits[:k] for q, hits in bm25_deep.items()}
        base_deep = dense_search(base_q, base_p, ids, doc_ids, k0) if {"base", "hybrid"} & set(which) else {}
        if "base" in which:
            runs["base"] = {q: hits[:k] for q, hits in base_deep.items()}
        if "lambda" in which:
            runs["lambda"] = dense_search(lambda_q, lambda_p, ids, doc_ids, k)
        if "spar" in which:
            runs["spar"] = _index_run(spar_index, base_q, lambda_q, ids, doc_ids, k, spar_mu)
        if "spar_sum" in which and sum_index is not None:
            q = spar_query_vectors(base_q, lambda_q, sum_mu, "sum")
            scores, rows = sum_index.search(np.ascontiguousarray(q, dtype=np.float32), k)
            runs["spar_sum"] = ranked_run(ids, rows, scores, doc_ids)
        if "hybrid" in which and alpha is not None:
            runs["hybrid"] = {q: hybrid_fuse(base_deep[q], bm25_deep.get(q, []), alpha,
                                             cfg.tune.hybrid_normalize, k) for q in ids}
        return runs

    progress(f"running {len(SYSTEMS)} systems on {len(test.ids)} test queries")
    runs = run_systems(test, SYSTEMS)
    systems = {name: evaluate_run(test.qrels, runs[name], metrics) for name in SYSTEMS if name in runs}

    if ev.answers:
        from spar.metrics import answer_accuracy, read_answers

        answers = {q: a for q, a in read_answers(ev.answers).items() if q in test.texts}
        if not answers:
            raise BadRecordError(ev.answers, None, "no answers for any test query")
        texts = passage_texts(cfg, {d for run in runs.values() for hits in run.values() for d, _ in hits})
        ks = [a for a in ev.accuracy_at if a <= k]
        for name, run in runs.items():
            systems[name].update(answer_accuracy(run, answers, texts, ks, ev.answer_match))

    rbo = {name: mean_rbo(runs[name], runs["bm25"], ev.rbo_p, depth=k, queries=test.ids)
           for name in DENSE_SYSTEMS if name in runs}

    shuffled: dict[str, dict[str, float]] = {}
    if ev.shuffled:
        progress("re-running bm25, base, lambda and spar on token-shuffled test queries")
        shuffled_test = shuffled_queries(test, cfg.experiment.seed)
        shuffled_runs = run_systems(shuffled_test, ("bm25", "base", "lambda", "spar"))
        for name, run in shuffled_runs.items():
            value = evaluate_run(test.qrels, run, [primary])[primary]
            shuffled[name] = {primary: value, "delta": value - systems[name][primary]}
        changed = sum(1 for q in test.ids if shuffled_test.texts[q] != test.texts[q])
        shuffled_info = {"queries_changed": changed, "seed": cfg.experiment.seed}
    else:
        shuffled_info = {}

    if runs_dir is not None:
        from spar.metrics import write_trec_run

        for name, run in runs.items():
            write_trec_run(Path(runs_dir) / f"{name}.trec", run, tag=f"spar-{name}")

    details = {
        "split": "test", "queries": len(test.ids), "metrics": metrics, "k": k, "variant": spar_variant,
        "mu_sum": sum_mu if sum_index is not None else None, "rbo_p": ev.rbo_p, "rbo_depth": k,
        "shuffled_metric": primary, "shuffled_info": shuffled_info,
        "hybrid": {"candidates": k0, "normalize": cfg.tune.hybrid_normalize},
        "index": {"type": spar_index.info.get("type"), "storage": spar_index.storage,
                  "code_bytes": spar_index.info.get("code_bytes"), "dim": spar_index.info.get("dim"),
                  **({"search": search_params} if spar_index.info.get("type") != "flat" else {})},
        "skipped_systems": {name: _why_skipped(name, sum_index, alpha) for name in SYSTEMS if name not in runs},
    }
    context = RunContext(cfg)
    return EvaluationReport(context.dataset, metrics, systems, spar_mu, alpha, rbo, shuffled, runs, details,
                            context.command_line("evaluate"))


def check_index_is_current(spar_index, index_dir: Path, inputs: ExperimentInputs) -> None:
    """Refuse an index built from other passage embeddings than the current ones (e.g. Λ retrained and the corpus
    re-encoded, but not re-indexed): the SPAR row would silently come from the old Λ."""
    for name, key in (("base", "base_fingerprint"), ("lambda", "lambda_fingerprint")):
        recorded, current = spar_index.info.get(key), inputs.passages[name].model_fingerprint
        if recorded is None:
            raise ArtifactError(f"{index_dir}: the index records no {name} encoder fingerprint, so it cannot be "
                                f"checked against {inputs.passage_dir(name)}: re-run `spar index`")
        if recorded != current:
            raise ArtifactError(f"{index_dir}: built from {name} encoder {recorded}, but {inputs.passage_dir(name)} "
                                f"comes from {current}: the index is stale, re-run `spar index`")
    if list(spar_index.ids) != list(inputs.doc_ids):
        raise ArtifactError(f"{index_dir}: indexes other passages than {inputs.passage_dir('base')}: the index is "
                            "stale, re-run `spar index`")


def _why_skipped(name: str, sum_index, alpha) -> str:
    if name == "spar_sum" and sum_index is None:
        return "base and Λ dimensions differ (the sum variant needs equal dimensions)"
    if name == "hybrid" and alpha is None:
        return "α was not tuned (tune/tune.json has no alpha)"
    return "not run"


def _index_run(index, base_q: np.ndarray, lambda_q: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str],
               k: int, mu: float) -> dict[str, list[tuple[str, float]]]:
    """Search a loaded :class:`spar.index.SparIndex`; its ids may be passage ids or rows."""
    scores, ids = index.search(base_q, lambda_q, k, mu=mu)
    ids = np.asarray(ids)
    names = getattr(index, "ids", None) or doc_ids
    run = {}
    for i, qid in enumerate(query_ids):
        hits = []
        for j in range(ids.shape[1]):
            ident = ids[i, j]
            if np.issubdtype(ids.dtype, np.integer):
                if ident < 0:
                    continue
                ident = names[int(ident)]
            elif ident is None or ident == "":
                continue
            hits.append((str(ident), float(scores[i, j])))
        run[qid] = hits
    return run


def passage_texts(cfg, wanted: set[str]) -> dict[str, str]:
    """The text of the wanted passages, streamed from the corpus (for answer matching: like DPR and Pyserini's
    ``evaluate_dpr_retrieval``, answers are looked for in the passage text, not its title)."""
    from spar.readers import read_corpus

    texts = {}
    for p in read_corpus(cfg.data.corpus, cfg.data.corpus_format, cfg.experiment.on_bad_record):
        if p.id in wanted:
            texts[p.id] = p.text
    return texts
