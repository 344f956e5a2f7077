"""Tuning the weight of the lexical model (μ) and of the BM25 hybrid (α) on dev qrels, without one index per value.

Both combinations are *affine* in their weight. SPAR concat scores ``⟨[Q, μQΛ], [P, PΛ]⟩ = sim + μ·simΛ``; the weighted
sum scores ``⟨Q + μQΛ, P + PΛ⟩ = Q·(P+PΛ) + μ·QΛ·(P+PΛ)``; the hybrid scores ``dense + α·bm25``. So for every query we
gather a candidate set once (the union of each part's top ``candidates``), hold both parts' exact scores in two
matrices, and rank ``s0 + w·s1`` with numpy for every w of the grid
(:class:`~spar.evaluate.candidates.AffineCandidates`). Only the candidate set is an approximation (a passage outside
every part's top-k could in principle enter the combined top-k); :func:`confirm_mu` therefore re-checks the chosen μ
with one real search of the combined FAISS index. Passages are scored as the index stores them
(:func:`spar.index.served.served_passage_vectors` of ``index.storage``), and the confirming search runs on the
configured index itself.

The candidate sets and the sweep live in :mod:`spar.evaluate.candidates`, the weight grid and its search in
:mod:`spar.evaluate.grid`.

``tune/tune.json`` is the one record of μ and α: :func:`read_tuned` is its one reader (``evaluate`` and ``publish``
use it; the index stores vectors only, so ``index`` does not depend on ``tune``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from spar.core.artifacts import is_complete
from spar.core.config import Variant
from spar.core.run_context import RunContext
from spar.core.errors import ArtifactError
from spar.experiment.inputs import ExperimentInputs
from spar.evaluate.candidates import hybrid_candidates, spar_candidates, tune_weight
from spar.evaluate.exact import dense_search
from spar.evaluate.grid import GridSearch, grid_values
from spar.evaluate.metrics import Qrels, evaluate_run, measure_depth, ranked_run

log = logging.getLogger(__name__)



# ----------------------------------------------------------------------------------------------------------------
# Tuning
# ----------------------------------------------------------------------------------------------------------------


def confirm_mu(base_q: np.ndarray, lambda_q: np.ndarray, base_p: np.ndarray, lambda_p: np.ndarray,
               query_ids: Sequence[str], doc_ids: Sequence[str], qrels: Qrels, mu: float, metric: str,
               variant: Variant = "concat", depth: int | None = None, index_type: str = "flat",
               options: Any = None, judge: Any = None) -> tuple[float, dict[str, list[tuple[str, float]]]]:
    """One real search of the combined FAISS index (:func:`spar.index.spar_index.build_spar_index`: ``index_type``
    storing ``options.storage``, default flat float32) at ``mu``.

    Returns the metric and the ranking, so callers can compare it with the re-scored sweep.
    """

    from spar.index.spar_index import build_spar_index
    from spar.index.combine import spar_query_vectors

    depth = depth or measure_depth(metric)
    if isinstance(base_p, np.ndarray) and isinstance(lambda_p, np.ndarray):
        base_p, lambda_p = np.asarray(base_p, dtype=np.float32), np.asarray(lambda_p, dtype=np.float32)
    index = build_spar_index(base_p, lambda_p, variant, index_type,  # streamed inputs are added batch by batch
                             **(options.faiss_options() if options is not None else {}))
    q = spar_query_vectors(base_q, lambda_q, mu, variant)
    scores, rows = index.search(np.ascontiguousarray(q, dtype=np.float32), min(depth, len(doc_ids)))
    ranked = ranked_run(query_ids, rows, scores, doc_ids)
    if judge is not None:  # the passages this search ranks outside the candidates are judged too
        qrels = _merged(qrels, judge.qrels({q: rows[i] for i, q in enumerate(query_ids)}))
    return evaluate_run(qrels, ranked, [metric])[metric], ranked


def _merged(*qrels: Qrels) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for part in qrels:
        for q, rels in part.items():
            out.setdefault(q, {}).update(rels)
    return out


def plot_curve(path, results: Mapping[str, GridSearch], metric: str, xlabel: str = "μ",
               title: str | None = None, references: Mapping[str, float] | None = None) -> None:
    """Log-x plot of metric against weight, one line per labelled search, the best point marked; ``references``
    (e.g. the base retriever's and BM25's dev scores) are drawn as dashed horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for label, result in results.items():
        xs = sorted(result.scores)
        ax.plot(xs, [result.scores[x] for x in xs], marker="o", markersize=3, label=label)
        ax.scatter([result.best], [result.best_score], s=60, zorder=3, facecolors="none", edgecolors="black")
    for (label, value), style in zip((references or {}).items(), ("--", ":", "-.", (0, (5, 1)))):
        ax.axhline(value, color="grey", linestyle=style, linewidth=1, label=label)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------------
# The tune stage
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class MuTuning:
    """μ of one SPAR variant: the grid search over re-scored candidates and the confirming real search."""

    variant: str
    search: GridSearch
    confirmed: float | None
    candidates: dict
    seconds: dict[str, float]

    def to_json(self) -> dict:
        return {"variant": self.variant, "mu": self.search.best, "grid": self.search.grid,
                "scores": self.search.scores_by_name(), "confirmed": _round(self.confirmed),
                "extensions": self.search.extensions, "at_edge": self.search.at_edge,
                "candidates": self.candidates, "seconds": self.seconds}


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def resolve_candidates(candidates: int | None, metric: str) -> int:
    """``tune.candidates``, or by default 10 x the metric's cutoff and at least 100 (nDCG@10: 100, R@100: 1000)."""
    if candidates is not None:
        return int(candidates)
    return max(100, 10 * measure_depth(metric, default=100))


def tune_mu(base_q: np.ndarray, lambda_q: np.ndarray, base_p: np.ndarray, lambda_p: np.ndarray,
            query_ids: Sequence[str], doc_ids: Sequence[str], qrels: Qrels, metric: str = "nDCG@10",
            variant: Variant = "concat", candidates: int | None = None, grid: Sequence[float] | None = None,
            max_extensions: int = 4, confirm: bool = True, confirm_with: tuple | None = None,
            judge: Any = None) -> MuTuning:
    """Tune μ of ``variant`` on ``qrels``: re-scored candidate sweep, then one real combined-index search.

    ``base_p``/``lambda_p`` are the passage vectors as served (:func:`spar.index.served.served_passage_vectors`);
    ``confirm_with=(base_p, lambda_p, index_type, options)``: the original vectors and the index that serves them,
    for the confirming search (default: a flat float32 index of ``base_p``/``lambda_p``). ``judge``: an
    :class:`spar.data.question_sets.AnswerJudge` for questions judged by their answers (Acc@k): ``qrels`` are then made
    over every candidate passage (and every passage the confirming search ranks)."""
    import time

    start = time.perf_counter()
    candidates = resolve_candidates(candidates, metric)
    cands = spar_candidates(base_q, lambda_q, base_p, lambda_p, query_ids, doc_ids, variant, candidates)
    if judge is not None:
        qrels = judge.qrels({q: cands.rows[i] for i, q in enumerate(query_ids)})
    gathered = time.perf_counter()
    search = tune_weight(cands, qrels, metric, grid, max_extensions)
    swept = time.perf_counter()
    confirmed = None
    if confirm:
        served_p, served_l, index_type, options = confirm_with or (base_p, lambda_p, "flat", None)
        confirmed, _ = confirm_mu(base_q, lambda_q, served_p, served_l, query_ids, doc_ids, qrels, search.best,
                                  metric, variant, index_type=index_type, options=options, judge=judge)
        if abs(confirmed - search.best_score) > 1e-4:
            log.warning("%s: the real search at μ=%g gives %s=%.4f, the re-scored candidates %.4f (%s)", variant,
                        search.best, metric, confirmed, search.best_score, _why_confirmation_differs(confirm_with))
    done = time.perf_counter()
    seconds = {"candidates": round(gathered - start, 3), "sweep": round(swept - gathered, 3),
               "confirm": round(done - swept, 3)}
    return MuTuning(variant, search, confirmed, cands.stats, seconds)


def _why_confirmation_differs(confirm_with) -> str:
    """The causes that apply to the index the confirming search ran on (#48: a flat sq4 index was told of approximate
    indexes and fast-scan tables, neither of which it has)."""
    from spar.index.storage import FAST_SCAN
    from spar.index.types.registry import is_approximate

    index_type, options = (confirm_with[2], confirm_with[3]) if confirm_with else ("flat", None)
    storage = getattr(options, "storage", "float32")
    causes = []
    if is_approximate(index_type):
        causes.append(f"the {index_type} index is approximate: it misses passages the sweep scored")
    if storage in FAST_SCAN:
        causes.append(f"{storage} scores with rounded look-up tables")
    causes.append("the sweep re-scores only the top tune.candidates passages of each question: raise it")
    return "; ".join(causes)


def choose_mu(cfg, base_q: np.ndarray, lambda_q: np.ndarray, served_base: np.ndarray, served_lambda: np.ndarray,
              dev, doc_ids: Sequence[str], variant: Variant | None = None, metric: str | None = None,
              confirm: bool | None = None, confirm_with: tuple | None = None, judge: Any = None) -> MuTuning:
    """μ chosen on the dev questions ``dev`` (a :class:`spar.data.question_sets.SplitQueries`) with the ``tune``
    section's grid, candidate depth and extensions: the one place μ is chosen (``spar tune`` and each frontier
    point). ``variant``: default ``index.variant``; ``metric``: default ``tune.metric``; ``confirm``: default
    ``tune.confirm``; the rest as :func:`tune_mu`."""
    t = cfg.tune
    return tune_mu(base_q, lambda_q, served_base, served_lambda, dev.ids, doc_ids, dev.qrels, metric or t.metric,
                   variant or cfg.index.variant, t.candidates, grid_values(t.grid), t.max_extensions,
                   t.confirm if confirm is None else confirm, confirm_with=confirm_with, judge=judge)


@dataclass
class TuneReport:
    """What the tune stage found: ``payload`` is ``tune/tune.json``; the searches feed the plots."""

    payload: dict
    mu_searches: dict[str, GridSearch]
    alpha_search: GridSearch


def tune_experiment(cfg, inputs=None, progress: Callable[[str], None] = log.info) -> TuneReport:
    """The ``tune`` stage on an experiment's artifacts: μ (configured variant, and the other one when
    ``tune.tune_both_variants``) and the hybrid's α, on dev questions only (never a test split): the dev pool of
    :meth:`spar.experiment.plan.Experiment.dev_pool`, then each set that tunes its own μ (``own_mu``) on its own dev
    split (recorded under ``sets``)."""
    inputs = inputs or ExperimentInputs(cfg)
    experiment = inputs.experiment
    report = tune_split(cfg, inputs, experiment.dev_pool(), progress)
    own = {name: tune_split(cfg, inputs, experiment.dev_split(name), progress) for name in experiment.own_mu()}
    if own:
        report.payload["sets"] = {name: {k: r.payload[k] for k in SET_KEYS} for name, r in own.items()}
    return report


#: What ``tune.json`` records of a set tuned on its own dev split.
SET_KEYS = ("mu", "alpha", "dev_queries", "dev_sets", "dev_scores", "confirmed", "variants", "at_edge")


def tune_split(cfg, inputs, dev, progress: Callable[[str], None] = log.info) -> TuneReport:
    """μ (and α) tuned on the dev questions ``dev`` (a :class:`spar.data.question_sets.SplitQueries`)."""
    import time

    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import IndexOptions

    t = cfg.tune
    base_p, lambda_p = inputs.passage_vectors("base"), inputs.passage_vectors("lambda")
    # μ is tuned against the passage vectors the index will serve (decoded codes), never float32 then served 4-bit.
    options = IndexOptions.from_section(cfg.index, seed=cfg.experiment.seed)
    doc_ids = inputs.doc_ids
    judge = inputs.answer_judge(dev, t.metric)
    base_q = inputs.query_vectors("base", dev)
    lambda_q = inputs.query_vectors("lambda", dev)
    candidates = resolve_candidates(t.candidates, t.metric)
    where = f"{len(dev.ids)} dev queries" + (f" of {dev.name}" if dev.name else "")

    variant_of_index = cfg.index.variant  # the one variant setting: μ is tuned for the index's combination
    variants = [variant_of_index]
    other = "sum" if variant_of_index == "concat" else "concat"
    if t.tune_both_variants and (other == "concat" or base_p.shape[1] == lambda_p.shape[1]):
        variants.append(other)
    tuned: dict[str, MuTuning] = {}
    for variant in variants:
        progress(f"tuning μ ({variant}) on {where}, {t.metric}, passages stored as {options.storage}")
        served_base, served_lambda = served_passage_vectors(base_p, lambda_p, variant, cfg.index.type, options)
        tuned[variant] = choose_mu(cfg, base_q, lambda_q, served_base, served_lambda, dev, doc_ids, variant,
                                   confirm_with=(base_p, lambda_p, cfg.index.type, options), judge=judge)

    progress(f"tuning α of base + α·BM25 on {where}")
    start = time.perf_counter()
    base_deep = dense_search(base_q, base_p, dev.ids, doc_ids, candidates)
    bm25_deep = inputs.bm25_search(dev, candidates)
    lambda_run = dense_search(lambda_q, lambda_p, dev.ids, doc_ids, measure_depth(t.metric))
    qrels = inputs.judged(dev, judge, base_deep, bm25_deep, lambda_run)
    searched = time.perf_counter()
    alpha = tune_weight(hybrid_candidates(base_deep, bm25_deep, t.hybrid_normalize), qrels, t.metric,
                        grid_values(t.hybrid_alphas), t.max_extensions)
    base_score = evaluate_run(qrels, base_deep, [t.metric])[t.metric]
    bm25_score = evaluate_run(qrels, bm25_deep, [t.metric])[t.metric]
    lambda_score = evaluate_run(qrels, lambda_run, [t.metric])[t.metric]

    main = tuned[variant_of_index]
    payload = {
        "variant": variant_of_index, "metric": t.metric, "mu": main.search.best, "grid": main.search.grid,
        "scores": main.search.scores_by_name(), "confirmed": _round(main.confirmed),
        "alpha": alpha.best, "alpha_grid": alpha.grid, "alpha_scores": alpha.scores_by_name(),
        "split": "dev", "dev_queries": len(dev.ids), "dev_sets": dev.name.split("+") if dev.name else [],
        "judged_by": dev.judged_by, "candidates": candidates,
        "storage": options.scored_codec(cfg.index.type)["storage"], "codec": options.scored_codec(cfg.index.type),
        "extensions": main.search.extensions, "at_edge": main.search.at_edge,
        "dev_scores": {"bm25": _round(bm25_score), "base": _round(base_score), "lambda": _round(lambda_score),
                       "spar": _round(main.search.best_score), "hybrid": _round(alpha.best_score)},
        "hybrid": {"normalize": t.hybrid_normalize, "alpha_extensions": alpha.extensions,
                   "at_edge": alpha.at_edge, "seconds": {"searches": round(searched - start, 3),
                                                         "sweep": round(time.perf_counter() - searched, 3)}},
        "variants": {v: m.to_json() for v, m in tuned.items()},
    }
    return TuneReport(payload, {v: m.search for v, m in tuned.items()}, alpha)


# ----------------------------------------------------------------------------------------------------------------
# Reading the tuned weights (the one reader of tune/tune.json)
# ----------------------------------------------------------------------------------------------------------------

TUNE_FILE = "tune.json"


@dataclass
class TunedWeights:
    """``tune/tune.json``: μ of each tuned SPAR variant, the hybrid's α and the tuning record (``payload``).

    >>> tuned = TunedWeights(Path("tune.json"), {"variant": "concat", "mu": 0.5, "alpha": 0.2,
    ...                                          "variants": {"concat": {"mu": 0.5}, "sum": {"mu": 0.3}}})
    >>> tuned.mu(), tuned.mu("sum"), tuned.alpha, sorted(tuned.variants)
    (0.5, 0.3, 0.2, ['concat', 'sum'])
    """

    path: Path
    payload: dict[str, Any]

    @property
    def variant(self) -> str:
        """The configured variant (``index.variant``), the one whose μ is the record's main ``mu``."""
        return self.payload.get("variant", "concat")

    @property
    def variants(self) -> set[str]:
        """Every variant μ was tuned for."""
        return {self.variant, *self.payload.get("variants", {})}

    def mu(self, variant: str | None = None) -> float:
        """μ tuned for ``variant`` (default: the configured one); fails naming the file when it was not tuned."""
        variant = variant or self.variant
        if variant == self.variant:
            return float(self.payload["mu"])
        other = self.payload.get("variants", {}).get(variant)
        if not other:
            raise ArtifactError(f"{self.path}: μ was not tuned for the '{variant}' variant (tuned: "
                                f"{sorted(self.variants)}); re-run `spar tune` with index.variant={variant}")
        return float(other["mu"])

    @property
    def alpha(self) -> float | None:
        """α of the BM25 hybrid, or None when it was not tuned."""
        return self.payload.get("alpha")

    @property
    def candidates(self) -> int | None:
        """The candidate depth the weights were tuned with."""
        return self.payload.get("candidates")

    @property
    def storage(self) -> str:
        """How the passage vectors μ was tuned against were stored (:mod:`spar.index.storage`)."""
        return self.payload.get("storage", "float32")

    def for_set(self, name: str) -> "TunedWeights":
        """The weights that serve question set ``name``: its own (``own_mu``) when tuned on its dev split, else the
        experiment's."""
        own = self.payload.get("sets", {}).get(name)
        if not own:
            return self
        return TunedWeights(self.path, {**self.payload, **own, "sets": {}})

    def check_served_by(self, index_info: Mapping[str, Any], index_dir: str | Path) -> None:
        """Refuse an index that scores its passages otherwise than the vectors μ was tuned against (an index that
        re-ranks exactly, ``index.refine``, scores float32 vectors whatever it stores)."""
        from spar.index.types.registry import is_approximate, stored_storage

        served = stored_storage(index_info)
        codec = index_info.get("codec", {"storage": served})
        if index_info.get("options", {}).get("refine") and is_approximate(index_info.get("type", "flat")):
            served, codec = "float32", {"storage": "float32"}
        tuned_codec = self.payload.get("codec", {"storage": self.storage})
        same_codec = codec == tuned_codec
        if served != self.storage or not same_codec:
            raise ArtifactError(f"{index_dir}: the index stores passages as {index_info.get('codec', served)}, but μ "
                                f"in {self.path} was tuned against {self.payload.get('codec', self.storage)}; re-run "
                                "`spar tune` and `spar index` with the same index settings")


def read_tuned(output_dir: str | Path) -> TunedWeights:
    """``tune/tune.json`` of an experiment (fails naming the stage to run when it is missing or unreadable)."""
    d = RunContext.at(output_dir).artifact("tune")
    path = d / TUNE_FILE
    if not is_complete(d) or not path.exists():
        raise ArtifactError(f"{d}: tuned weights are missing (run `spar tune`)")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(payload, dict) or "mu" not in payload:
        raise ArtifactError(f"{path}: no 'mu' (re-run `spar tune`)")
    return TunedWeights(path, payload)
