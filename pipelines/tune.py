"""Stage ``tune``: choose μ (SPAR's weight of Λ) and α (the BM25 hybrid's weight) on the dev qrels.

Reads ``embeddings/`` (passages; dev query vectors when present, else encodes the dev queries), ``lambda/`` and
``teacher_index/``; writes ``tune/tune.json`` and ``tune/mu_curve.png`` (+ ``alpha_curve.png``) and logs them to
W&B (``evaluate.wandb_mode``). Logic: :func:`spar.evaluate.tuning.tune_experiment`.
"""

from __future__ import annotations

from spar.core.artifacts import ArtifactWriter, write_json_atomic
from spar.core.fingerprint import file_fingerprint
from spar.experiment.inputs import ExperimentInputs, resolved_index
from spar.core.lineage import source
from spar.experiment.plan import Experiment
from spar.core.run_context import RunContext
from spar.core.stage import Stage, Unit
from spar.evaluate.tuning import TUNE_FILE, plot_curve, tune_experiment, tune_settings


def plan(cfg, force: bool = False) -> Unit:
    experiment = Experiment(cfg)
    inputs = ExperimentInputs(cfg, experiment)
    files = experiment.tune_files()
    fingerprints = {**inputs.input_fingerprints(experiment.dev_keys()),
                    **{key: file_fingerprint(path) for key, path in files.items()}}
    sources = [*inputs.sources(experiment.dev_keys()), *(source(path, "file") for path in files.values())]
    if inputs.bm25_fingerprint():
        fingerprints["teacher_index"] = inputs.bm25_fingerprint()
        sources.append(source(RunContext(cfg).artifact("teacher_index")))
    codec = experiment.index_options.scored_codec(cfg.index.type)
    config = {"tune": tune_settings(cfg), "bm25": {"k1": cfg.label.k1, "b": cfg.label.b}, "seed": cfg.experiment.seed,
              "served_passages": codec, **experiment.tune_settings()}
    return Unit(RunContext(cfg).artifact("tune"), kind="tune", config=config, inputs=fingerprints,
                payload=inputs, sources=sources)


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    report = tune_experiment(cfg, unit.payload)
    tuned = report.payload
    tuned["encoding"] = RunContext(cfg).encoding()  # the vectors μ was tuned on: precision and backend (#48)
    write_json_atomic(w.path / TUNE_FILE, tuned)
    dev = tuned["dev_scores"]
    plot_curve(w.path / "mu_curve.png", report.mu_searches, cfg.tune.metric, "μ",
               f"{cfg.experiment.name}: SPAR on dev ({tuned['dev_queries']} queries)",
               {"base": dev["base"], "Λ": dev["lambda"], "BM25": dev["bm25"]})
    plot_curve(w.path / "alpha_curve.png", {"base + α·BM25": report.alpha_search}, cfg.tune.metric, "α",
               f"{cfg.experiment.name}: hybrid on dev", {"base": dev["base"], "BM25": dev["bm25"]})
    w.stats = {k: tuned[k] for k in ("variant", "metric", "mu", "confirmed", "alpha", "dev_queries", "storage",
                                     "encoding")}
    w.schema = {TUNE_FILE: "variant, metric, mu, grid, scores, confirmed, alpha, alpha_scores, variants, encoding"}
    curve_rows = [[variant, float(mu), float(score)] for variant, search in report.mu_searches.items()
                  for mu, score in sorted(search.scores.items())]
    alpha_rows = [[float(a), float(s)] for a, s in sorted(report.alpha_search.scores.items())]
    summary = {"mu": tuned["mu"], "alpha": tuned["alpha"], "confirmed": tuned["confirmed"],
               **{f"dev/{k}": v for k, v in tuned["dev_scores"].items()}}
    RunContext(cfg).wandb_log(
        "tune", summary, mode=cfg.evaluate.wandb_mode, project=cfg.train.wandb_project,
        tables={"mu_curve": (["variant", "mu", cfg.tune.metric], curve_rows),
                "alpha_curve": (["alpha", cfg.tune.metric], alpha_rows)},
        images={"mu_curve_png": w.path / "mu_curve.png", "alpha_curve_png": w.path / "alpha_curve.png"})
    stats = {"variant": tuned["variant"], "mu": tuned["mu"], "passages stored as": tuned["storage"],
             f"dev {tuned['metric']}": tuned["dev_scores"]["spar"],
             "confirmed": tuned["confirmed"], "alpha": tuned["alpha"], "extensions": tuned["extensions"],
             "dev scores": tuned["dev_scores"], "output": str(unit.output)}
    for variant, info in tuned["variants"].items():
        if variant != tuned["variant"]:
            stats[f"mu ({variant})"] = info["mu"]
    return stats


STAGE = Stage(name="tune", sections=("experiment", "data", "label", "train", "encode", "tune", "index", "evaluate"),
              summary="tune mu (and the hybrid's alpha) on the dev qrels by exact re-scoring of candidates -> tune/",
              plan=plan, work=work,
              prepare=resolved_index)
run = STAGE.run
