"""Evaluation of every system of a SPAR experiment in one table, with the paper's analyses (§5, §6).

Systems, all on the same queries and qrels:

==========  =====================================================================================================
``bm25``    the sparse teacher: Pyserini BM25 (title + text, k1 0.9, b 0.4)
``base``    the base dense retriever (exact inner-product search of its passage embeddings)
``lambda``  Λ alone
``spar``    [Q, μ·QΛ] searched in the real combined FAISS index written by ``spar index`` (μ from ``spar tune``)
``spar_exact`` (``evaluate.exact_spar``) the same scores by an exact scan of the stored float32 vectors: what the
            index's approximation or quantization costs, beside it
``spar_sum`` the weighted-sum variant: Q + μ·QΛ against P + PΛ (needs equal dimensions; its own tuned μ)
``hybrid``  Pyserini-style hybrid of base and BM25: base + α·BM25 over the union of both top lists
``hybrid_served`` the same hybrid as users serve it, when SPAR itself is served approximately: the base's vectors in
            an HNSW graph (efSearch calibrated on dev questions, :mod:`spar.evaluate.served_hybrid`), fused alike
==========  =====================================================================================================

Analyses: rank-biased overlap (RBO_ext, p = 0.9, top-100) of each dense system's ranking with the teacher's, and
token-shuffled queries (seeded shuffle of each query's whitespace tokens; Δ of the metric per system).

The inputs are the pipeline's artifacts (``embeddings/``, ``lambda/``, ``index/``, ``tune/``, ``teacher_index/``);
query vectors come from ``embeddings/<encoder>/queries-<split>`` or are encoded on the fly when that is missing.

The query splits, exact dense search and the artifact access live in :mod:`spar.experiment.inputs`; μ and α come from
:func:`spar.evaluate.tuning.read_tuned`.

Example (library use, outside the pipeline)::

    >>> from spar.evaluate.evaluation import shuffle_query
    >>> shuffle_query("a b c d", seed=1) != "a b c d"
    True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from spar.core.artifacts import is_complete, read_manifest
from spar.core.config_sections import EXHAUSTIVE_INDEX_TYPES
from spar.core.errors import ArtifactError
from spar.experiment.inputs import ExperimentInputs
from spar.experiment.plan import Experiment
from spar.evaluate.exact import dense_search
from spar.data.question_sets import SplitQueries
from spar.evaluate.metrics import evaluate_run, mean_rbo, ranked_run, trec_lines
from spar.evaluate.candidates import hybrid_fuse
from spar.evaluate.results import SYSTEMS, EvaluationReport
from spar.evaluate.tuning import TUNE_FILE, read_tuned, resolve_candidates
from spar.index.types.registry import registered_type

log = logging.getLogger(__name__)

DENSE_SYSTEMS = ("lambda", "base", "spar", "spar_exact")


def evaluated_systems(exact_spar: bool, approximate: bool = False) -> tuple[str, ...]:
    """The systems an evaluation runs: every one, ``spar_exact`` only when asked for (``evaluate.exact_spar``),
    ``hybrid_served`` only beside an ``approximate`` SPAR index (beside an exact one, the exact hybrid is its peer)."""
    return tuple(name for name in SYSTEMS
                 if (name != "spar_exact" or exact_spar) and (name != "hybrid_served" or approximate))


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


def evaluate_experiment(cfg, inputs: ExperimentInputs | None = None, runs_dir: Path | None = None,
                        progress: Callable[[str], None] = log.info) -> EvaluationReport:
    """Run every system on the test split of the experiment's one question set: metrics, RBO, shuffled queries
    (:func:`evaluate_sets` for experiments with several)."""
    reports = evaluate_sets(cfg, inputs, runs_dir, progress)
    if len(reports) != 1:
        raise ValueError(f"the experiment has {len(reports)} test sets ({sorted(reports)}): use evaluate_sets")
    return next(iter(reports.values()))


def evaluate_sets(cfg, inputs: ExperimentInputs | None = None, runs_dir: Path | None = None,
                  progress: Callable[[str], None] = log.info, keep_runs: bool = True,
                  checkpoints: Path | None = None, systems: Sequence[str] | None = None,
                  sets: Sequence[str] | None = None, questions: int | None = None) -> dict[str, EvaluationReport]:
    """Run every system on every configured test split (:meth:`spar.experiment.plan.Experiment.test_splits`), each
    with the μ and α that serve its set: metrics (qrels) and Acc@k (answers), RBO and the shuffled-query analysis.

    ``runs_dir``: where ``<system>.trec`` files are written (``evaluation/runs`` in the pipeline; a named set's in
    ``<runs_dir>/<set>/``). ``keep_runs=False`` (with ``runs_dir``) leaves each report's ``runs`` empty once its
    files are written: the rankings of tens of thousands of questions (60,864 over six ODQA sets, five systems,
    top 100) are gigabytes of Python objects, and the pipeline reads them from the files.

    ``checkpoints`` (with ``runs_dir`` and ``keep_runs=False``): a directory where each set's progress is saved after
    every chunk of :data:`EVAL_CHUNK` questions (:class:`ChunkProgress`); a run killed part-way resumes at the first
    unfinished chunk, with the same means to the last digit (evaluating 60,864 questions over 668k passages takes
    hours on a few cores).

    ``systems``: a subset of :data:`SYSTEMS` to run (default :func:`evaluated_systems`); e.g. ``("spar_exact",)``
    adds the exact scan to an evaluation made before (``bench/exact_beside.py``). ``sets``: only these test sets, in
    this order; ``questions``: only each set's first ``questions`` test questions (in file order).
    """
    if systems is not None and set(systems) - set(SYSTEMS):
        raise ValueError(f"unknown systems {sorted(set(systems) - set(SYSTEMS))}: choose from {', '.join(SYSTEMS)}")
    if not keep_runs and runs_dir is None:
        raise ValueError("keep_runs=False needs runs_dir: the rankings would be lost")
    if checkpoints is not None and (keep_runs or runs_dir is None):
        raise ValueError("checkpoints need runs_dir and keep_runs=False: a resumed set's rankings are in its files")
    from spar.index.spar_index import SparIndex, build_spar_index, check_serves

    inputs = inputs or ExperimentInputs(cfg)
    index_dir = Experiment.of(cfg).run.artifact("index")
    if not is_complete(index_dir):
        raise ArtifactError(f"{index_dir}: the SPAR index is missing (run `spar index`)")
    spar_index = SparIndex.load(index_dir)
    inputs.check_index(index_dir, spar_index.info, spar_index.ids)
    check_serves(spar_index.info, cfg.index, cfg.experiment.seed, index_dir)  # what is recorded is what is served
    spar_index.set_search_params(**search_params(cfg))
    if systems is None:
        approximate = registered_type(spar_index.info.get("type", "flat")).approximate
        systems = evaluated_systems(cfg.evaluate.exact_spar, approximate)
    tuned_all = read_tuned(cfg.output_dir)
    tuned_all.check_served_by(spar_index.info, index_dir)  # μ tuned against other stored vectors is refused
    base_p, lambda_p = inputs.passage_vectors("base"), inputs.passage_vectors("lambda")
    sum_index = None
    if base_p.shape[1] == lambda_p.shape[1] and "spar_sum" in systems:
        sum_index = build_spar_index(base_p, lambda_p, "sum", "flat")  # added in float32 batches
    reports = {}
    splits = {test.name: test for test in inputs.experiment.test_splits()}
    missing = sorted(set(sets or ()) - set(splits))
    if missing:
        raise ValueError(f"no test set {missing} in this experiment: {', '.join(map(repr, splits))}")
    chosen = {name: first_questions(splits[name], questions) for name in sets or list(splits)}
    served = None
    if "hybrid_served" in systems:
        from spar.evaluate.served_hybrid import served_base_lists

        progress("the served hybrid: linking the base's passages into an HNSW graph, its efSearch calibrated on dev "
                 "questions")
        served = served_base_lists(inputs, base_p, chosen,
                                   {name: hybrid_depth(cfg, tuned_all.for_set(name)) for name in chosen})
    context = SharedInputs(inputs, spar_index, base_p, lambda_p, sum_index, served)
    for name, test in chosen.items():
        set_runs = None if runs_dir is None else (Path(runs_dir) / test.name if test.name else Path(runs_dir))
        checkpoint = None if checkpoints is None else Path(checkpoints) / f"{test.name or 'test'}.json"
        reports[test.name] = _evaluate_split(cfg, test, tuned_all.for_set(test.name), context, set_runs, progress,
                                             keep_runs, checkpoint, systems)
        if not keep_runs:
            reports[test.name].runs = {}
    return reports


#: Questions evaluated at a time (:func:`_evaluate_split`): what evaluate holds does not grow with a set's size.
EVAL_CHUNK = 2048


class WeightedMeans:
    """Per system, means of measures over chunks of queries, each chunk's mean weighted by the queries it averages
    over: the mean over all queries, exactly."""

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, float]] = {}
        self.weights: dict[str, dict[str, float]] = {}

    def add(self, system: str, values: dict[str, float], weight: int) -> None:
        sums, weights = self.sums.setdefault(system, {}), self.weights.setdefault(system, {})
        for measure, value in values.items():
            sums[measure] = sums.get(measure, 0.0) + float(value) * weight
            weights[measure] = weights.get(measure, 0.0) + weight

    def __contains__(self, system: str) -> bool:
        return system in self.sums

    def result(self, system: str) -> dict[str, float]:
        return {m: self.sums[system][m] / w for m, w in self.weights[system].items() if w}

    def state(self) -> dict[str, Any]:
        """Its sums and weights (JSON floats round-trip exactly: a restored instance continues to the same means)."""
        return {"sums": self.sums, "weights": self.weights}

    @classmethod
    def restored(cls, state: dict[str, Any]) -> "WeightedMeans":
        means = cls()
        means.sums, means.weights = state["sums"], state["weights"]
        return means


@dataclass
class ChunkProgress:
    """How far one test set's evaluation got: the first question not yet evaluated, the measures' running sums, and
    the bytes of each TREC run file written up to there (a file written past its last checkpoint is cut back).

    Saved after every chunk as one JSON file (atomically); valid only for the same questions in the same chunks
    (the artifact's fingerprint, kept with its ``.partial`` directory, covers the config and inputs)."""

    next_question: int
    questions: int
    chunk: int
    means: WeightedMeans
    rbo_means: WeightedMeans
    shuffled_means: WeightedMeans
    trec_bytes: dict[str, int]

    @classmethod
    def start(cls, questions: int) -> "ChunkProgress":
        return cls(0, questions, EVAL_CHUNK, WeightedMeans(), WeightedMeans(), WeightedMeans(), {})

    @classmethod
    def load(cls, path: Path | None, questions: int) -> "ChunkProgress":
        """The progress saved at ``path``, or a fresh start (none saved, or saved for other questions or chunks)."""
        if path is None or not path.is_file():
            return cls.start(questions)
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("questions") != questions or saved.get("chunk") != EVAL_CHUNK:
            return cls.start(questions)
        return cls(saved["next_question"], questions, EVAL_CHUNK, WeightedMeans.restored(saved["means"]),
                   WeightedMeans.restored(saved["rbo_means"]), WeightedMeans.restored(saved["shuffled_means"]),
                   {name: int(size) for name, size in saved["trec_bytes"].items()})

    def save(self, path: Path) -> None:
        from spar.core.artifacts import write_json_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"next_question": self.next_question, "questions": self.questions,
                                 "chunk": self.chunk, "means": self.means.state(),
                                 "rbo_means": self.rbo_means.state(), "shuffled_means": self.shuffled_means.state(),
                                 "trec_bytes": self.trec_bytes})


def question_subset(queries: SplitQueries, ids: Sequence[str]) -> SplitQueries:
    """The questions ``ids`` of ``queries`` (qrels, texts and answers restricted to them), in that order."""
    return SplitQueries(queries.split, {q: queries.qrels[q] for q in ids if q in queries.qrels},
                        {q: queries.texts[q] for q in ids},
                        None if queries.answers is None else {q: queries.answers[q] for q in ids
                                                              if q in queries.answers},
                        queries.answer_match, queries.name, queries.stored)


def first_questions(queries: SplitQueries, n: int | None) -> SplitQueries:
    """The first ``n`` questions of ``queries`` in file order (all when ``n`` is None): what
    ``evaluate_sets(questions=n)`` evaluates, so a comparison made beside it takes exactly the same ones.

        >>> from spar.data.question_sets import SplitQueries
        >>> test = SplitQueries("test", {"b": {"d1": 1}}, {"c": "who?", "b": "what?", "a": "when?"}, {"c": ["x"]})
        >>> part = first_questions(test, 2)
        >>> part.ids, part.qrels, part.answers, first_questions(test, None) is test
        (['c', 'b'], {'b': {'d1': 1}}, {'c': ['x']}, True)
    """
    return queries if n is None else question_subset(queries, queries.ids[:n])


def _score_runs(runs: dict, part: SplitQueries, metrics: Sequence[str], accuracy_at: Sequence[int], inputs,
                means: WeightedMeans, answers: dict | None = None) -> None:
    """Add the runs' measures over the questions ``part`` to ``means`` (qrels measures weighted by the judged
    questions, Acc@k by the questions with answers)."""
    answers = part.answers if answers is None else answers
    judged = [q for q in part.ids if part.qrels.get(q)]
    if metrics and judged:
        for name, run in runs.items():
            means.add(name, evaluate_run(part.qrels, run, metrics), len(judged))
    if accuracy_at and answers:
        from spar.evaluate.metrics import answer_accuracy

        texts = passage_texts(inputs, {d for run in runs.values() for hits in run.values() for d, _ in hits})
        for name, run in runs.items():
            means.add(name, answer_accuracy(run, answers, texts, accuracy_at, part.answer_match), len(answers))
    elif metrics and not judged:
        for name in runs:
            means.add(name, {}, 0)


class TrecWriters:
    """One TREC run file per system in ``runs_dir`` (none without), written chunk by chunk."""

    def __init__(self, runs_dir: Path | None, written: dict[str, int] | None = None):
        """``written``: ``{system: bytes}`` already in its file (a resumed evaluation); anything after is cut."""
        self.runs_dir, self.files, self.written = runs_dir, {}, dict(written or {})

    def write(self, runs: dict) -> None:
        if self.runs_dir is None:
            return
        for name, run in runs.items():
            if name not in self.files:
                path = Path(self.runs_dir) / f"{name}.trec"
                path.parent.mkdir(parents=True, exist_ok=True)
                if name in self.written:
                    os.truncate(path, self.written[name])
                    self.files[name] = path.open("a", encoding="utf-8")
                else:
                    self.files[name] = path.open("w", encoding="utf-8")
            self.files[name].writelines(trec_lines(run, f"spar-{name}"))

    def sizes(self) -> dict[str, int]:
        """``{system: bytes}`` written so far, flushed to disk (what a checkpoint records)."""
        for name, fh in self.files.items():
            fh.flush()
            os.fsync(fh.fileno())
            self.written[name] = fh.tell()
        return dict(self.written)

    def close(self) -> None:
        for fh in self.files.values():
            fh.close()


@dataclass
class SharedInputs:
    """What every test set's evaluation reads: the artifacts, the loaded SPAR index, passage vectors."""

    inputs: ExperimentInputs
    spar_index: Any
    base_p: Any
    lambda_p: Any
    sum_index: Any
    #: the served hybrid's dense lists per test set and its graph's settings
    #: (:func:`spar.evaluate.served_hybrid.served_base_lists`)
    served: tuple[dict[str, Any], dict[str, Any]] | None = None


def _evaluate_split(cfg, test: SplitQueries, tuned, shared: SharedInputs, runs_dir: Path | None,
                    progress: Callable[[str], None], keep_runs: bool = True,
                    checkpoint: Path | None = None, chosen: Sequence[str] = SYSTEMS) -> EvaluationReport:
    from spar.index.combine import SparPassageRows, spar_query_vectors

    ev = cfg.evaluate
    inputs, spar_index, sum_index = shared.inputs, shared.spar_index, shared.sum_index
    base_p, lambda_p = shared.base_p, shared.lambda_p
    index_dir = Experiment.of(cfg).run.artifact("index")
    mu = tuned.mu()
    alpha = tuned.alpha
    k0 = hybrid_depth(cfg, tuned)
    k = ev.k
    metrics = list(ev.metrics) if test.qrels else []
    doc_ids = inputs.doc_ids

    spar_variant = getattr(spar_index, "variant", None) or read_manifest(index_dir)["stats"].get("variant", "concat")
    if spar_variant not in tuned.variants:
        raise ArtifactError(f"{index_dir}: a '{spar_variant}' index, but μ in {tuned.path} was tuned for "
                            f"{', '.join(sorted(tuned.variants))} only: re-run `spar tune` with "
                            f"tune.variant={spar_variant}, or rebuild the index")
    spar_mu = tuned.mu(spar_variant)
    sum_mu = tuned.mu("sum") if "sum" in tuned.variants else None
    if sum_index is not None and sum_mu is None:
        log.warning("μ was not tuned for the 'sum' variant; spar_sum uses the concat μ=%g", mu)
        sum_mu = mu

    def run_systems(queries: SplitQueries, which: Sequence[str]) -> dict[str, dict[str, list[tuple[str, float]]]]:
        runs: dict[str, dict[str, list[tuple[str, float]]]] = {}
        need_bm25 = {"bm25", "hybrid", "hybrid_served"} & set(which)
        bm25_deep = inputs.bm25_search(queries, k0) if need_bm25 else {}
        base_q = inputs.query_vectors("base", queries) if set(which) - {"bm25"} else None
        uses_lambda = {"lambda", "spar", "spar_exact", "spar_sum"} & set(which)
        lambda_q = inputs.query_vectors("lambda", queries) if uses_lambda else None
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
        if "spar_exact" in which:  # what the index serves, unfolded and unquantized: [Q, μ·QΛ]·[P, PΛ]
            runs["spar_exact"] = dense_search(spar_query_vectors(base_q, lambda_q, spar_mu, spar_variant),
                                              SparPassageRows(base_p, lambda_p, spar_variant), ids, doc_ids, k)
        if "spar_sum" in which and sum_index is not None:
            q = spar_query_vectors(base_q, lambda_q, sum_mu, "sum")
            scores, rows = sum_index.search(np.ascontiguousarray(q, dtype=np.float32), k)
            runs["spar_sum"] = ranked_run(ids, rows, scores, doc_ids)
        if "hybrid" in which and alpha is not None:
            runs["hybrid"] = {q: hybrid_fuse(base_deep[q], bm25_deep.get(q, []), alpha,
                                             cfg.tune.hybrid_normalize, k) for q in ids}
        if "hybrid_served" in which and alpha is not None and shared.served is not None:
            graph_lists = shared.served[0][test.name]
            runs["hybrid_served"] = {q: hybrid_fuse(graph_lists.hits(q), bm25_deep.get(q, []), alpha,
                                                    cfg.tune.hybrid_normalize, k) for q in ids}
        return runs

    where = f"{len(test.ids)} test queries" + (f" of {test.name}" if test.name else "")
    progress(f"running {len(chosen)} systems on {where}")
    accuracy_at = [a for a in ev.accuracy_at if a <= k]
    primary = metrics[0] if metrics else f"Acc@{accuracy_at[0]}"
    shuffled_systems = tuple(name for name in ("bm25", "base", "lambda", "spar") if name in chosen)
    shuffled_test = shuffled_queries(test, cfg.experiment.seed) if ev.shuffled and shuffled_systems else None
    done = ChunkProgress.load(checkpoint, len(test.ids))
    if done.next_question:
        progress(f"resuming {where} at question {min(done.next_question, len(test.ids)):,} (earlier chunks saved)")
    means, rbo_means, shuffled_means = done.means, done.rbo_means, done.shuffled_means
    kept: dict[str, dict[str, list[tuple[str, float]]]] = {}
    writers = TrecWriters(runs_dir, done.trec_bytes)
    # Question by chunk: the rankings, passage texts and answer judgments of one chunk in memory at a time (a set
    # of 22,075 questions, five systems at depth 100-200, was gigabytes); every mean is exact (chunk means
    # weighted by the queries each one averages over).
    for start in range(done.next_question, len(test.ids), EVAL_CHUNK):
        part = question_subset(test, test.ids[start:start + EVAL_CHUNK])
        runs = run_systems(part, chosen)
        _score_runs(runs, part, metrics, accuracy_at, inputs, means)
        for name in DENSE_SYSTEMS:
            if name in runs and "bm25" in runs:
                rbo_means.add(name, {"rbo": mean_rbo(runs[name], runs["bm25"], ev.rbo_p, depth=k,
                                                     queries=part.ids)}, len(part.ids))
        if shuffled_test is not None:
            if start == 0:
                progress(f"re-running bm25, base, lambda and spar on token-shuffled {where}")
            shuffled_part = question_subset(shuffled_test, part.ids)
            shuffled_runs = run_systems(shuffled_part, shuffled_systems)
            _score_runs(shuffled_runs, shuffled_part, [primary] if metrics else [],
                        [] if metrics else accuracy_at[:1], inputs, shuffled_means, answers=part.answers)
            del shuffled_runs
        writers.write(runs)
        if keep_runs or runs_dir is None:
            for name, run in runs.items():
                kept.setdefault(name, {}).update(run)
        del runs
        if checkpoint is not None:
            done.next_question, done.trec_bytes = start + len(part.ids), writers.sizes()
            done.save(checkpoint)
    writers.close()
    runs = kept
    systems: dict[str, dict[str, float]] = {name: means.result(name) for name in SYSTEMS if name in means}
    rbo = {name: rbo_means.result(name)["rbo"] for name in DENSE_SYSTEMS if name in rbo_means}
    shuffled: dict[str, dict[str, float]] = {}
    if shuffled_test is not None:
        for name in shuffled_systems:
            if name in shuffled_means:
                value = shuffled_means.result(name)[primary]
                shuffled[name] = {primary: value, "delta": value - systems[name][primary]}
        changed = sum(1 for q in test.ids if shuffled_test.texts[q] != test.texts[q])
        shuffled_info = {"queries_changed": changed, "seed": cfg.experiment.seed}
    else:
        shuffled_info = {}

    details = {
        "split": "test", "queries": len(test.ids), "metrics": metrics, "k": k, "variant": spar_variant,
        "judged_by": test.judged_by, "answer_match": test.answer_match if test.answers is not None else None,
        "accuracy_at": accuracy_at if test.answers is not None else [],
        "mu_sum": sum_mu if sum_index is not None else None, "rbo_p": ev.rbo_p, "rbo_depth": k,
        "shuffled_metric": primary, "shuffled_info": shuffled_info,
        "hybrid": {"candidates": k0, "normalize": cfg.tune.hybrid_normalize},
        **({"hybrid_served": {"candidates": k0, **shared.served[1]}} if shared.served is not None else {}),
        # The passages searched and the index that served SPAR: a results file says at what scale it holds.
        "passages": len(spar_index),
        "index": {"type": spar_index.info.get("type"), "storage": spar_index.storage,
                  "code_bytes": spar_index.info.get("code_bytes"), "dim": spar_index.info.get("dim"),
                  "fold": spar_index.info.get("fold", 1.0),
                  **({"search": search_params(cfg)} if spar_index.info.get("type") not in EXHAUSTIVE_INDEX_TYPES
                     else {})},
        # The vectors' precision and backend (#48): bf16 vectors score otherwise in the third decimal.
        "encoding": Experiment.of(cfg).run.encoding(),
        # What was never scored (the rankings themselves may be gone: written chunk by chunk and dropped).
        "skipped_systems": {name: _why_skipped(name, sum_index, alpha) for name in chosen if name not in means},
    }
    if test.name:
        details.update(question_set=test.name, tuned_on=tuned.payload.get("dev_sets"))
    context = Experiment.of(cfg).run
    dataset = f"{context.dataset}: {test.name}" if test.name else context.dataset
    return EvaluationReport(dataset, metrics or [primary], systems, spar_mu, alpha, rbo, shuffled, runs, details,
                            context.command_line("evaluate"))


def hybrid_depth(cfg, tuned) -> int:
    """How deep each half of a hybrid is searched before fusing: as deep as the lists its α was tuned on."""
    return max(cfg.evaluate.k, int(tuned.candidates or resolve_candidates(cfg.tune.candidates, cfg.tune.metric)))


def search_params(cfg) -> dict[str, int]:
    """The search-time settings (``index.hnsw_ef_search``, ``index.nprobe``) the SPAR index is served with."""
    from spar.index.files import search_settings

    return search_settings(cfg.index)


def _why_skipped(name: str, sum_index, alpha) -> str:
    if name == "spar_sum" and sum_index is None:
        return "base and Λ dimensions differ (the sum variant needs equal dimensions)"
    if name in ("hybrid", "hybrid_served") and alpha is None:
        return f"α was not tuned (tune/{TUNE_FILE} has no alpha)"
    return "not run"


def _index_run(index, base_q: np.ndarray, lambda_q: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str],
               k: int, mu: float) -> dict[str, list[tuple[str, float]]]:
    """Search a loaded :class:`spar.index.spar_index.SparIndex`; its ids may be passage ids or rows."""
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


def passage_texts(inputs: ExperimentInputs, wanted: set[str]) -> dict[str, str]:
    """The text of the wanted passages, from the passages table (for answer matching: like DPR and Pyserini's
    ``evaluate_dpr_retrieval``, answers are looked for in the passage text, not its title)."""
    from spar.data.passages import PassagesTable

    table = PassagesTable.open(inputs.passages_arrow)
    wanted_ids = sorted(wanted)
    return {doc: record["text"] for doc, record in zip(wanted_ids, table.lookup(wanted_ids)) if record is not None}
