"""Stage ``evaluate``: BM25, base, Λ, SPAR (concat and sum) and the BM25 hybrid on the test qrels, in one table.

Also RBO of each dense system with the teacher and the token-shuffled-query analysis. Writes
``results/<experiment.name>.json`` and ``.md`` (``experiment.results_dir``) and ``evaluation/runs/<system>.trec``; its
W&B run has the results table and every set's figures (:func:`report`). Logic:
:func:`spar.evaluate.evaluation.evaluate_experiment`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from spar.core.artifacts import ArtifactWriter, ensure_writable, write_json_atomic
from spar.evaluate.evaluation import evaluate_sets
from spar.evaluate.results import results_markdown, results_payload
from spar.evaluate.published import Published
from spar.experiment.costs import costs_markdown, stage_costs
from spar.experiment.inputs import ExperimentInputs, resolved_index
from spar.index.files import index_info
from spar.index.spar_index import check_serves
from spar.experiment.preflight import check_inputs, skipped_records
from spar.experiment.plan import Experiment
from spar.core.run_context import RunContext
from spar.core.stage import Stage, Unit
from spar.core.tracking import Report


def plan(cfg, force: bool = False) -> Unit:
    """``evaluation/`` as the experiment declares it (:func:`spar.experiment.declarations.evaluation`), up to date
    while its results files are there; never evaluates vectors encode would not make now, nor an index with an
    override it cannot honour (refused also when the results are up to date)."""
    experiment = Experiment.of(cfg)
    inputs = ExperimentInputs(cfg, experiment)
    inputs.check_embeddings(experiment.test_split_keys())
    index_dir = experiment.run.artifact("index")
    info = index_info(index_dir, required=False)
    if info:
        check_serves(info, experiment.index, experiment.seed, index_dir)
    paths = experiment.run.results_paths()
    return experiment.artifact("evaluation").unit(payload=inputs, current=lambda: all(p.exists() for p in paths))


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    experiment = Experiment.of(cfg)
    context, published_file = experiment.run, experiment.evaluate.published
    ensure_writable(cfg.results_dir)
    skipped = skipped_records(check_inputs(cfg))  # records the stages skipped (on_bad_record=skip), in the results
    published = Published.read(published_file) if published_file else None  # fails before the work
    progress_dir = w.path / "progress"
    reports = evaluate_sets(cfg, unit.payload, runs_dir=w.path / "runs", keep_runs=False, checkpoints=progress_dir)
    costs = stage_costs(_run_dirs(cfg, unit.payload))
    tables, written = [], []
    for stem, names in context.results_groups.items():
        group = {name: reports[name] for name in names}
        for report in group.values():
            report.details["skipped_records"] = skipped
        payload, table = results_payload(group, published), results_markdown(group, published)
        payload["costs"] = costs
        json_path, md_path = context.results_file(stem)
        write_json_atomic(json_path, payload)
        md_path.write_text(table + "\n" + costs_markdown(costs) + f"\n`{next(iter(group.values())).command}`\n",
                           encoding="utf-8")
        tables.append(table)
        written.append(str(json_path))
    write_json_atomic(w.path / "results.json", {name or context.dataset: r.to_json() for name, r in reports.items()})
    shutil.rmtree(progress_dir, ignore_errors=True)  # spar's own checkpoints: the finished artifact holds results
    w.stats = {name or "test": {"systems": r.systems, "mu": r.mu, "alpha": r.alpha, "rbo": r.rbo,
                                "shuffled": r.shuffled} for name, r in reports.items()}
    if list(reports) == [""]:  # one set: the stats as they always were
        w.stats = w.stats["test"]
    w.stats["skipped_records"] = {k: sum(v.values()) for k, v in skipped.items()}
    w.schema = {"runs/[<set>/]<system>.trec": "qid Q0 docid rank score tag",
                "results.json": "as results/<name>.json, by question set"}
    return {"results": ", ".join(written), "runs": str(unit.output / "runs"), "table": "\n".join(tables)}


def _run_dirs(cfg, inputs: ExperimentInputs) -> list[Path]:
    """This run's directory, and the run whose Λ it carries (``encode.lambda`` naming a run: its sample, label and
    train ran there)."""
    location = inputs.lambda_source.location
    run = RunContext.at(location.parent)
    carried = [location.parent] if location == run.artifact("lambda") and run.artifact("labels").is_dir() else []
    return [cfg.output_dir, *carried]


def on_skip(cfg, manifest: dict) -> dict:
    context = Experiment.of(cfg).run
    files = [context.results_file(stem) for stem in context.results_groups]
    return {"results": ", ".join(str(j) for j, _ in files), "table": "\n".join(md.read_text() for _, md in files)}


def report(cfg, written: dict) -> Report:
    """The W&B run's results: one table for every set (the union of the sets' measures: a set judged by answers only
    has no nDCG@10) and each set's figures in the summary (``spar/nDCG@10``; ``<set>/spar/nDCG@10`` for named sets,
    with their μ, α and RBO), from what the stage wrote (``evaluation/``'s manifest)."""
    stats = next(iter(written.values()))["stats"]  # evaluation/'s manifest, as the runner read it
    sets = {"": stats} if "systems" in stats else {k: v for k, v in stats.items() if k != "skipped_records"}
    measures = list(dict.fromkeys(m for figures in sets.values() for values in figures["systems"].values()
                                  for m in values))
    rows, summary = [], {}
    for name, figures in sets.items():
        prefix = f"{name}/" if name else ""
        for system, values in figures["systems"].items():
            rows.append([name, system, *[values.get(m) for m in measures], figures["rbo"].get(system),
                         figures["shuffled"].get(system, {}).get("delta")])
            summary.update({f"{prefix}{system}/{m}": v for m, v in values.items()})
        summary.update({f"{prefix}mu": figures["mu"], f"{prefix}alpha": figures["alpha"],
                        **{f"{prefix}{system}/rbo": v for system, v in figures["rbo"].items()}})
    return Report(summary=summary, tables={"results": (["set", "system", *measures, "rbo", "shuffled_delta"], rows)})


STAGE = Stage(name="evaluate", sections=("experiment", "data", "label", "train", "encode", "tune", "index", "evaluate"),
              summary="evaluate BM25, base, Λ, SPAR and hybrid on the test qrels; RBO; shuffled queries -> results/, "
              "evaluation/", plan=plan, work=work, on_skip=on_skip, report=report,
              prepare=resolved_index)
run = STAGE.run
