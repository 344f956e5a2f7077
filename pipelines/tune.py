"""Stage ``tune``: choose μ (SPAR's weight of Λ) and α (the BM25 hybrid's weight) on the dev qrels.

Reads ``embeddings/`` (passages; dev query vectors when present, else encodes the dev queries), ``lambda/`` and
``teacher_index/``; writes ``tune/tune.json`` and ``tune/mu_curve.png`` (+ ``alpha_curve.png``); its W&B run has the
μ and α curves as line plots beside the PNGs (:func:`report`). Logic: :func:`spar.evaluate.tuning.tune_experiment`.
"""

from __future__ import annotations

from pathlib import Path

from spar.core.artifacts import ArtifactWriter, write_json_atomic
from spar.experiment.inputs import ExperimentInputs, resolved_index
from spar.experiment.plan import Experiment
from spar.core.stage import Stage, Unit
from spar.core.tracking import Line, Report
from spar.evaluate.tuning import TUNE_FILE, plot_curve, read_tuned, tune_experiment


def plan(cfg, force: bool = False) -> Unit:
    """``tune/`` as the experiment declares it (:func:`spar.experiment.declarations.tune`); never tunes on vectors
    encode would not make now (refused naming `spar encode`)."""
    experiment = Experiment.of(cfg)
    inputs = ExperimentInputs(cfg, experiment)
    inputs.check_embeddings(experiment.dev_pool_keys())
    return experiment.artifact("tune").unit(payload=inputs)


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    report = tune_experiment(cfg, unit.payload)
    tuned = report.payload
    experiment = Experiment.of(cfg)
    tuned["encoding"] = experiment.run.encoding()  # the vectors μ was tuned on: precision and backend (#48)
    write_json_atomic(w.path / TUNE_FILE, tuned)
    dev, metric = tuned["dev_scores"], experiment.tune.metric
    plot_curve(w.path / "mu_curve.png", report.mu_searches, metric, "μ",
               f"{experiment.name}: SPAR on dev ({tuned['dev_queries']} queries)",
               {"base": dev["base"], "Λ": dev["lambda"], "BM25": dev["bm25"]})
    plot_curve(w.path / "alpha_curve.png", {"base + α·BM25": report.alpha_search}, metric, "α",
               f"{experiment.name}: hybrid on dev", {"base": dev["base"], "BM25": dev["bm25"]})
    w.stats = {k: tuned[k] for k in ("variant", "metric", "mu", "confirmed", "alpha", "dev_queries", "storage",
                                     "encoding")}
    w.schema = {TUNE_FILE: "variant, metric, mu, grid, scores, confirmed, alpha, alpha_scores, variants, encoding"}
    stats = {"variant": tuned["variant"], "mu": tuned["mu"], "passages stored as": tuned["storage"],
             f"dev {tuned['metric']}": tuned["dev_scores"]["spar"],
             "confirmed": tuned["confirmed"], "alpha": tuned["alpha"], "extensions": tuned["extensions"],
             "dev scores": tuned["dev_scores"], "output": str(unit.output)}
    for variant, info in tuned["variants"].items():
        if variant != tuned["variant"]:
            stats[f"mu ({variant})"] = info["mu"]
    return stats


def report(cfg, written: dict) -> Report:
    """The W&B run's numbers: μ, α and the dev scores; the μ curve of every variant and the α curve as native line
    plots, beside the PNGs."""
    out = Path(next(iter(written)))  # tune/, as the runner recorded it
    tuned = read_tuned(Experiment.of(cfg).output_dir).payload
    metric = tuned["metric"]
    mu_rows = [[variant, float(mu), float(score)] for variant, info in tuned["variants"].items()
               for mu, score in sorted(info["scores"].items(), key=lambda item: float(item[0]))]
    alpha_rows = [[float(alpha), float(score)] for alpha, score in
                  sorted((tuned.get("alpha_scores") or {}).items(), key=lambda item: float(item[0]))]
    mu = Line(["variant", "mu", metric], mu_rows, "mu", metric, stroke="variant",
              title=f"SPAR on dev: {metric} against μ")
    alpha = Line(["alpha", metric], alpha_rows, "alpha", metric, title=f"base + α·BM25 on dev: {metric} against α")
    summary = {"mu": tuned["mu"], "alpha": tuned["alpha"], "confirmed": tuned["confirmed"], "variant": tuned["variant"],
               "dev_queries": tuned["dev_queries"], **{f"dev/{k}": v for k, v in tuned["dev_scores"].items()}}
    lines = {name: line for name, line in (("mu_curve", mu), ("alpha_curve", alpha)) if line.rows}  # no BM25: no α
    return Report(summary=summary, lines=lines,  # each plot's table is logged with it (<name>_table)
                  images={f"{name}_png": out / f"{name}.png" for name in lines if (out / f"{name}.png").exists()})


STAGE = Stage(name="tune", sections=("experiment", "data", "label", "encode", "tune", "index"),
              summary="tune mu (and the hybrid's alpha) on the dev qrels by exact re-scoring of candidates -> tune/",
              plan=plan, work=work, report=report,
              prepare=resolved_index)
run = STAGE.run
