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

Example (library use, outside the pipeline)::

    >>> from spar.evaluation import shuffle_query, dense_search
    >>> import numpy as np
    >>> shuffle_query("a b c d", seed=1) != "a b c d"
    True
    >>> ranked = dense_search(np.eye(2, dtype="float32"), np.eye(2, dtype="float32"), ["q1", "q2"], ["d1", "d2"], 1)
    >>> ranked["q2"]
    [('d2', 1.0)]
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.artifacts import artifact_dir, is_complete, read_manifest
from spar.errors import ArtifactError, BadRecordError
from spar.metrics import evaluate_run, mean_rbo
from spar.readers import evaluation_qrels, read_queries
from spar.schemas import read_table
from spar.tuning import hybrid_fuse, resolve_candidates, top_k

log = logging.getLogger(__name__)

ENCODERS = ("base", "lambda")
#: The order systems appear in tables.
SYSTEMS = ("bm25", "base", "lambda", "spar", "spar_sum", "hybrid")
DENSE_SYSTEMS = ("lambda", "base", "spar")


# ----------------------------------------------------------------------------------------------------------------
# Queries and qrels of a split
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class SplitQueries:
    """The judged queries of one split: qrels and text, in a fixed (sorted) order."""

    split: str
    qrels: dict[str, dict[str, int]]
    texts: dict[str, str]

    @property
    def ids(self) -> list[str]:
        return list(self.texts)

    def pairs(self) -> list[tuple[str, str]]:
        return list(self.texts.items())


def split_queries(cfg, split: str) -> SplitQueries:
    """Qrels of ``split`` ("dev" or "test", via :func:`spar.readers.evaluation_qrels`) and their query texts."""
    if cfg.data.queries is None:
        raise BadRecordError("<config>", None, "data.queries is not set (evaluation needs the query texts)")
    on_bad = cfg.experiment.on_bad_record
    # Judgments naming unknown queries or passages: file:line errors, or skipped with on_bad_record=skip.
    passages = artifact_dir(cfg.output_dir, "queries") / "passages.arrow"
    known_passages = set(read_table(passages).column("id").to_pylist()) if passages.exists() else None
    known_queries = {q.id for q in read_queries(cfg.data.queries, on_bad)}
    qrels = evaluation_qrels(cfg.data, split, seed=cfg.experiment.seed, known_queries=known_queries,
                             known_passages=known_passages, on_bad_record=on_bad)
    if not qrels:
        raise BadRecordError("<config>", None, f"the {split} qrels hold no query")
    texts = {q.id: q.text for q in read_queries(cfg.data.queries, on_bad) if q.id in qrels}
    missing = sorted(set(qrels) - set(texts))
    if missing:
        raise BadRecordError(cfg.data.queries, None, f"{len(missing)} judged {split} queries have no text, e.g. "
                             f"{missing[:3]} (qrels and queries files do not match)")
    return SplitQueries(split, qrels, {q: texts[q] for q in sorted(texts)})


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
# Dense inputs: passage embeddings, query vectors, encoders
# ----------------------------------------------------------------------------------------------------------------


def dense_search(queries: np.ndarray, passages: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str],
                 k: int) -> dict[str, list[tuple[str, float]]]:
    """Exact inner-product top-``k`` of every query (FAISS brute force) as a ranked run."""
    scores, rows = top_k(queries, passages, k)
    return {qid: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i]) if r >= 0]
            for i, qid in enumerate(query_ids)}


class ExperimentInputs:
    """Lazy access to an experiment's artifacts for tuning and evaluation (each loaded at most once)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.out = cfg.output_dir
        self.embeddings_root = artifact_dir(self.out, "embeddings")
        self._encoders: dict[str, Any] = {}

    # -- passages ----------------------------------------------------------------------------------------------
    def passage_dir(self, encoder: str) -> Path:
        return self.embeddings_root / encoder / "passages"

    def query_dir(self, encoder: str, split: str) -> Path:
        return self.embeddings_root / encoder / f"queries-{split}"

    @cached_property
    def passages(self) -> dict[str, Any]:
        """``{"base": Embeddings, "lambda": Embeddings}`` of the corpus; both must list the same ids in order."""
        from spar.embeddings import load_embeddings

        out = {}
        for name in ENCODERS:
            d = self.passage_dir(name)
            if not is_complete(d):
                raise ArtifactError(f"{d}: passage embeddings of '{name}' are missing (run `spar encode`)")
            out[name] = load_embeddings(d)
        if out["base"].ids != out["lambda"].ids:
            raise ArtifactError(f"{self.passage_dir('base')} and {self.passage_dir('lambda')} list different passages "
                                "(re-run `spar encode`)")
        return out

    @property
    def doc_ids(self) -> list[str]:
        return self.passages["base"].ids

    def passage_vectors(self, encoder: str) -> np.ndarray:
        return self.passages[encoder].vectors

    # -- encoders ----------------------------------------------------------------------------------------------
    def encoder(self, name: str):
        """The base retriever (``encode.base``) or Λ (``lambda/``), loaded once."""
        if name not in self._encoders:
            from spar.encoders import BiEncoder

            if name == "base":
                self._encoders[name] = BiEncoder.from_section(self.cfg.encode.base)
            elif name == "lambda":
                lam = artifact_dir(self.out, "lambda")
                if not is_complete(lam):
                    raise ArtifactError(f"{lam}: Λ is missing (run `spar train`)")
                from spar.lexical import load_lambda

                self._encoders[name] = load_lambda(lam)
            else:
                raise KeyError(name)
        return self._encoders[name]

    def query_vectors(self, encoder: str, queries: SplitQueries, batch_size: int = 64) -> np.ndarray:
        """Query vectors in ``queries.ids`` order: stored ``queries-<split>`` embeddings when they hold every query
        and come from the same encoder as the passages, else encoded now."""
        from spar.embeddings import load_embeddings

        d = self.query_dir(encoder, queries.split)
        if is_complete(d):
            stored = load_embeddings(d)
            position = {q: i for i, q in enumerate(stored.ids)}
            same_model = stored.model_fingerprint == self.passages[encoder].model_fingerprint
            if not same_model:
                log.warning("%s: query vectors come from another encoder than the passages; encoding anew", d)
            elif all(q in position for q in queries.ids):
                return np.asarray(stored.vectors[[position[q] for q in queries.ids]], dtype=np.float32)
            else:
                log.warning("%s lacks some %s queries; encoding them anew", d, queries.split)
        log.info("encoding %d %s queries with %s", len(queries.ids), queries.split, encoder)
        return self.encoder(encoder).encode_query(list(queries.texts.values()), batch_size=batch_size)

    def input_fingerprints(self, splits: Sequence[str]) -> dict[str, str]:
        """Manifest fingerprints of every dense input that exists (passages required, query vectors optional)."""
        prints = {}
        for name in ENCODERS:
            d = self.passage_dir(name)
            if not is_complete(d):
                raise ArtifactError(f"{d}: passage embeddings of '{name}' are missing (run `spar encode`)")
            prints[f"{name}/passages"] = read_manifest(d)["fingerprint"]
            for split in splits:
                q = self.query_dir(name, split)
                if is_complete(q):
                    prints[f"{name}/queries-{split}"] = read_manifest(q)["fingerprint"]
        lam = artifact_dir(self.out, "lambda")
        if is_complete(lam):
            prints["lambda"] = read_manifest(lam)["fingerprint"]
        return prints

    # -- BM25 --------------------------------------------------------------------------------------------------
    @cached_property
    def bm25(self):
        """A BM25 searcher (k1/b from ``label``): the teacher index when the teacher is BM25, else one built now."""
        from spar.teachers import BM25Searcher, build_bm25_index

        teacher = artifact_dir(self.out, "teacher_index")
        label = self.cfg.label
        if is_complete(teacher) and _is_bm25_index(teacher):
            index_dir = teacher
        else:
            passages = artifact_dir(self.out, "queries") / "passages.arrow"
            if not passages.exists():
                raise ArtifactError(f"{passages}: missing (run `spar sample`); BM25 needs the corpus as Arrow")
            self._bm25_tmp = tempfile.TemporaryDirectory(prefix="spar-bm25-")
            log.info("the teacher index is not BM25; building a BM25 index of %s", passages)
            index_dir = build_bm25_index(passages, Path(self._bm25_tmp.name) / "index", label.threads)
        return BM25Searcher(index_dir, k1=label.k1, b=label.b, threads=label.threads)

    def bm25_fingerprint(self) -> str | None:
        teacher = artifact_dir(self.out, "teacher_index")
        return read_manifest(teacher)["fingerprint"] if is_complete(teacher) else None

    def bm25_search(self, queries: SplitQueries, k: int) -> dict[str, list[tuple[str, float]]]:
        hits = self.bm25.search(queries.pairs(), k)
        return {q: list(hits.get(q, [])) for q in queries.ids}


def _is_bm25_index(directory: Path) -> bool:
    manifest = read_manifest(directory)
    teacher = manifest.get("stats", {}).get("teacher") or manifest.get("config", {}).get("teacher")
    return teacher in (None, "bm25")


# ----------------------------------------------------------------------------------------------------------------
# Tuned weights
# ----------------------------------------------------------------------------------------------------------------


def read_tuned(output_dir: str | Path) -> dict[str, Any]:
    """``tune/tune.json`` of an experiment (fails naming the stage to run when it is missing)."""
    d = artifact_dir(output_dir, "tune")
    if not is_complete(d) or not (d / "tune.json").exists():
        raise ArtifactError(f"{d}: tuned weights are missing (run `spar tune`)")
    return json.loads((d / "tune.json").read_text())


def tuned_mu(tuned: Mapping[str, Any], variant: str) -> float | None:
    """μ tuned for ``variant`` ("concat" or "sum"), or None when that variant was not tuned."""
    if tuned.get("variant") == variant:
        return float(tuned["mu"])
    other = tuned.get("variants", {}).get(variant)
    return float(other["mu"]) if other else None


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
                 f"μ = {self.mu:g}" + (f", α = {self.alpha:g}" if self.alpha is not None else ""),
                 "", "| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
        for name, values in self.systems.items():
            cells = [name] + [f"{values[m]:.4f}" if m in values else "" for m in self.metrics + extra]
            cells.append(f"{self.rbo[name]:.3f}" if name in self.rbo else "")
            sh = self.shuffled.get(name)
            cells.append(f"{sh[primary]:.4f} ({sh['delta']:+.4f})" if sh else "")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"


def dataset_name(cfg) -> str:
    """The collection's name: the corpus file's directory (``.../scifact/corpus.jsonl`` -> ``scifact``)."""
    corpus = Path(cfg.data.corpus)
    return corpus.parent.name if corpus.stem == "corpus" else corpus.stem


def command_line(cfg, stage: str) -> str:
    """The ``spar`` command that produced a result: the ``spar run`` that started this stage, else this process's own
    when it is the CLI, else an equivalent."""
    from spar.cli import RUN_COMMAND_ENV

    if os.environ.get(RUN_COMMAND_ENV):
        return os.environ[RUN_COMMAND_ENV]
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("")
    if (argv0.name == "spar" or argv0.parent.name == "spar") and len(sys.argv) > 1:  # `spar ...`, `python -m spar`
        return "spar " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    source = f" --config {shlex.quote(cfg.source)}" if cfg.source else ""
    return f"spar {stage}{source}"


def evaluate_experiment(cfg, inputs: ExperimentInputs | None = None, runs_dir: Path | None = None,
                        progress: Callable[[str], None] = log.info) -> EvaluationReport:
    """Run every system on the test split, compute metrics, RBO and the shuffled-query analysis.

    ``runs_dir``: where ``<system>.trec`` files are written (``evaluation/runs`` in the pipeline).
    """
    from spar.index import SparIndex, build_spar_index, spar_query_vectors

    ev = cfg.evaluate
    inputs = inputs or ExperimentInputs(cfg)
    index_dir = artifact_dir(cfg.output_dir, "index")
    if not is_complete(index_dir):
        raise ArtifactError(f"{index_dir}: the SPAR index is missing (run `spar index`)")
    spar_index = SparIndex.load(index_dir)
    check_index_is_current(spar_index, index_dir, inputs)
    tuned = read_tuned(cfg.output_dir)
    mu = float(tuned["mu"])
    alpha = tuned.get("alpha")
    # The hybrid fuses lists as deep as the ones its α was tuned on.
    k0 = max(ev.k, int(tuned.get("candidates") or resolve_candidates(cfg.tune.candidates, cfg.tune.metric)))
    k = ev.k
    metrics = list(ev.metrics)
    primary = metrics[0]
    test = split_queries(cfg, "test")
    doc_ids = inputs.doc_ids
    base_p, lambda_p = inputs.passage_vectors("base"), inputs.passage_vectors("lambda")

    spar_variant = getattr(spar_index, "variant", None) or read_manifest(index_dir)["stats"].get("variant", "concat")
    spar_mu = tuned_mu(tuned, spar_variant) or mu
    sum_mu = tuned_mu(tuned, "sum")
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
            runs["spar_sum"] = {qid: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i]) if r >= 0]
                                for i, qid in enumerate(ids)}
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
        "skipped_systems": {name: _why_skipped(name, sum_index, alpha) for name in SYSTEMS if name not in runs},
    }
    return EvaluationReport(dataset_name(cfg), metrics, systems, spar_mu, alpha, rbo, shuffled, runs, details,
                            command_line(cfg, "evaluate"))


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


# ----------------------------------------------------------------------------------------------------------------
# W&B
# ----------------------------------------------------------------------------------------------------------------


def wandb_log(cfg, job_type: str, summary: Mapping[str, Any], tables: Mapping[str, tuple[list[str], list[list]]]
              | None = None, images: Mapping[str, Path] | None = None, mode: str | None = None) -> str | None:
    """Log a stage's results to W&B (``evaluate.wandb_mode``: offline by default, ``disabled`` skips).

    Returns the run directory (offline) or None.
    """
    mode = mode or cfg.evaluate.wandb_mode
    if mode == "disabled":
        return None
    import wandb

    from spar.config import dump_config

    wandb_dir = Path(cfg.experiment.output_dir) / "wandb"
    wandb_dir.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=cfg.train.wandb_project, name=f"{cfg.experiment.name}-{job_type}", job_type=job_type,
                     group=cfg.experiment.name, mode=mode, dir=str(wandb_dir), reinit="finish_previous",
                     config={"spar": dump_config(cfg)})
    try:
        for name, (columns, rows) in (tables or {}).items():
            run.log({name: wandb.Table(columns=columns, data=rows)})
        for name, path in (images or {}).items():
            run.log({name: wandb.Image(str(path))})
        for key, value in summary.items():
            run.summary[key] = value
        return str(run.dir)
    finally:
        run.finish()
