"""Stage ``evaluate``: BM25, base, Λ, SPAR (concat and sum) and the BM25 hybrid on the test qrels, in one table.

Also RBO of each dense system with the teacher and the token-shuffled-query analysis. Writes
``results/<experiment.name>.json`` and ``.md`` (``experiment.results_dir``), ``evaluation/runs/<system>.trec`` and
logs to W&B (``evaluate.wandb_mode``). Logic: :func:`spar.evaluation.evaluate_experiment`.
"""

from __future__ import annotations


from spar.artifacts import ArtifactWriter, artifact_dir, ensure_writable, file_fingerprint, is_complete, read_manifest
from spar.artifacts import write_json_atomic
from spar.evaluation import evaluate_experiment, wandb_log
from spar.preflight import check_inputs, skipped_records
from spar.experiment import ExperimentInputs

SECTIONS = ["experiment", "data", "label", "train", "encode", "tune", "evaluate"]
SUMMARY = "evaluate BM25, base, Λ, SPAR and hybrid on the test qrels; RBO; shuffled queries -> results/, evaluation/"


def run(cfg, force: bool = False) -> dict:
    inputs = ExperimentInputs(cfg)
    out = artifact_dir(cfg.output_dir, "evaluation")
    results_dir = cfg.results_dir
    json_path, md_path = results_dir / f"{cfg.experiment.name}.json", results_dir / f"{cfg.experiment.name}.md"
    fingerprints = inputs.input_fingerprints(["test"])
    for name in ("tune", "index", "teacher_index"):
        d = artifact_dir(cfg.output_dir, name)
        if is_complete(d):
            fingerprints[name] = read_manifest(d)["fingerprint"]
    d = cfg.data
    for name, path in {"queries": d.queries, "qrels_test": d.qrels_test, "answers": cfg.evaluate.answers}.items():
        if path:
            fingerprints[name] = file_fingerprint(path)
    config = {"evaluate": cfg.evaluate.model_dump(mode="json", exclude={"wandb_mode"}),
              "candidates": cfg.tune.candidates, "hybrid_normalize": cfg.tune.hybrid_normalize,
              "bm25": {"k1": cfg.label.k1, "b": cfg.label.b}, "dev_holdout_fraction": d.dev_holdout_fraction,
              "seed": cfg.experiment.seed, "results": str(json_path)}
    writer = ArtifactWriter(out, kind="evaluation", config=config, inputs=fingerprints)
    if not force and is_complete(out, writer.fingerprint) and json_path.exists() and md_path.exists():
        return {"skipped": True, "results": str(json_path), "table": md_path.read_text()}
    ensure_writable(results_dir)
    skipped = skipped_records(check_inputs(cfg))  # records the stages skipped (on_bad_record=skip), in the results
    with writer as w:
        report = evaluate_experiment(cfg, inputs, runs_dir=w.path / "runs")
        report.details["skipped_records"] = skipped
        payload = report.to_json()
        write_json_atomic(w.path / "results.json", payload)
        w.stats = {"systems": report.systems, "mu": report.mu, "alpha": report.alpha, "rbo": report.rbo,
                   "shuffled": report.shuffled}
        w.schema = {"runs/<system>.trec": "qid Q0 docid rank score tag", "results.json": "as results/<name>.json"}
    table = report.markdown()
    write_json_atomic(json_path, payload)
    md_path.write_text(table + f"\n`{report.command}`\n", encoding="utf-8")
    columns = ["system", *report.metrics, "rbo", "shuffled_delta"]
    rows = [[name, *[values.get(m) for m in report.metrics], report.rbo.get(name),
             report.shuffled.get(name, {}).get("delta")] for name, values in report.systems.items()]
    wandb_log(cfg, "evaluate", {f"{s}/{m}": v for s, values in report.systems.items() for m, v in values.items()},
              tables={"results": (columns, rows)})
    return {"results": str(json_path), "runs": str(out / "runs"), "table": table}
