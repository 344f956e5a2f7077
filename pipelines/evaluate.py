"""Stage ``evaluate``: BM25, base, Λ, SPAR (concat and sum) and the BM25 hybrid on the test qrels, in one table.

Also RBO of each dense system with the teacher and the token-shuffled-query analysis. Writes
``results/<experiment.name>.json`` and ``.md`` (``experiment.results_dir``), ``evaluation/runs/<system>.trec`` and
logs to W&B (``evaluate.wandb_mode``). Logic: :func:`spar.evaluation.evaluate_experiment`.
"""

from __future__ import annotations

import json

from spar.artifacts import ArtifactWriter, artifact_dir, ensure_writable, file_fingerprint, is_complete, read_manifest
from spar.artifacts import write_json_atomic
from spar.evaluation import evaluate_experiment
from spar.experiment import ExperimentInputs
from spar.index import INDEX_MANIFEST, check_serves
from spar.lineage import source
from spar.preflight import check_inputs, skipped_records
from spar.run_context import RunContext
from spar.stage import Stage, Unit, settings


def plan(cfg, force: bool = False) -> Unit:
    inputs = ExperimentInputs(cfg)
    json_path, md_path = RunContext(cfg).results
    fingerprints = inputs.input_fingerprints(["test"])
    sources = inputs.sources(["test"])
    for name in ("tune", "index", "teacher_index"):
        d = artifact_dir(cfg.output_dir, name)
        if is_complete(d):
            fingerprints[name] = read_manifest(d)["fingerprint"]
            sources.append(source(d))
    index_info = artifact_dir(cfg.output_dir, "index") / INDEX_MANIFEST
    if index_info.is_file():  # an override the index cannot honour is refused, also when the results are up to date
        check_serves(json.loads(index_info.read_text()), cfg.index, cfg.experiment.seed, index_info.parent)
    d = cfg.data
    for name, path in {"queries": d.queries, "qrels_test": d.qrels_test, "answers": cfg.evaluate.answers}.items():
        if path:
            fingerprints[name] = file_fingerprint(path)
            sources.append(source(path, "file"))
    config = {"evaluate": settings(cfg.evaluate),
              "candidates": cfg.tune.candidates, "hybrid_normalize": cfg.tune.hybrid_normalize,
              "bm25": {"k1": cfg.label.k1, "b": cfg.label.b}, "dev_holdout_fraction": d.dev_holdout_fraction,
              "seed": cfg.experiment.seed, "results": str(json_path)}
    if cfg.index.type != "flat":  # the search-time settings evaluate serves the index with
        config["search"] = {k: getattr(cfg.index, k) for k in ("hnsw_ef_search", "nprobe")}
    return Unit(artifact_dir(cfg.output_dir, "evaluation"), kind="evaluation", config=config, inputs=fingerprints,
                current=lambda: json_path.exists() and md_path.exists(), payload=inputs, sources=sources)


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    json_path, md_path = RunContext(cfg).results
    ensure_writable(cfg.results_dir)
    skipped = skipped_records(check_inputs(cfg))  # records the stages skipped (on_bad_record=skip), in the results
    report = evaluate_experiment(cfg, unit.payload, runs_dir=w.path / "runs")
    report.details["skipped_records"] = skipped
    payload = report.to_json()
    write_json_atomic(w.path / "results.json", payload)
    w.stats = {"systems": report.systems, "mu": report.mu, "alpha": report.alpha, "rbo": report.rbo,
               "shuffled": report.shuffled, "skipped_records": skipped}
    w.schema = {"runs/<system>.trec": "qid Q0 docid rank score tag", "results.json": "as results/<name>.json"}
    table = report.markdown()
    write_json_atomic(json_path, payload)
    md_path.write_text(table + f"\n`{report.command}`\n", encoding="utf-8")
    columns = ["system", *report.metrics, "rbo", "shuffled_delta"]
    rows = [[name, *[values.get(m) for m in report.metrics], report.rbo.get(name),
             report.shuffled.get(name, {}).get("delta")] for name, values in report.systems.items()]
    figures = {f"{s}/{m}": v for s, values in report.systems.items() for m, v in values.items()}
    RunContext(cfg).wandb_log("evaluate", figures, tables={"results": (columns, rows)},
                              mode=cfg.evaluate.wandb_mode, project=cfg.train.wandb_project)
    return {"results": str(json_path), "runs": str(unit.output / "runs"), "table": table}


def on_skip(cfg, manifest: dict) -> dict:
    json_path, md_path = RunContext(cfg).results
    return {"results": str(json_path), "table": md_path.read_text()}


STAGE = Stage(name="evaluate", sections=("experiment", "data", "label", "train", "encode", "tune", "index", "evaluate"),
              summary="evaluate BM25, base, Λ, SPAR and hybrid on the test qrels; RBO; shuffled queries -> results/, "
              "evaluation/", plan=plan, work=work, on_skip=on_skip)
run = STAGE.run
