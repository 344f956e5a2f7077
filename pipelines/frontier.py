"""``spar frontier -c CONFIG``: the Λ fidelity-vs-dimension frontier of an experiment -> ``frontier/`` (+ results).

Needs the run's ``queries/``, ``labels/``, ``teacher_index/`` and base embeddings (``spar run --to encode
encode.encoders=[base]``, or a whole run). Every point fits or trains its Λ in memory (static ones under
``frontier/static-d<dim>-s<seed>/``); nothing else of the run changes. Options (``frontier.*`` is not a config
section: they are command-line flags of this command): ``--kinds``, ``--dims``, ``--seeds``. Writes
``frontier/frontier.{json,md,png}`` and copies them to ``<results_dir>/<name>-frontier.*``. Logic:
:mod:`spar.frontier`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from spar.artifacts import artifact_dir, ensure_writable, write_json_atomic

SECTIONS = ["experiment", "data", "label", "train", "tune"]
SUMMARY = "Λ kinds × dimensions × seeds: Λ fidelity and SPAR nDCG@10 against index size -> frontier/, results/"


def run(cfg, kinds=("projection", "static", "transformer"), dims=None, seeds=(0, 1, 2)) -> dict:
    from spar.evaluation import command_line
    from spar.frontier import DEFAULT_DIMS, run_frontier

    out = ensure_writable(Path(cfg.output_dir) / "frontier")
    report = run_frontier(cfg, kinds, dims or DEFAULT_DIMS, seeds, out, progress=print)
    report.details["command"] = command_line(cfg, "frontier")
    write_json_atomic(out / "frontier.json", report.to_json())
    table = report.markdown()
    (out / "frontier.md").write_text(table + f"\n`{report.details['command']}`\n", encoding="utf-8")
    report.plot(out / "frontier.png")
    results = ensure_writable(Path(cfg.experiment.results_dir))
    for suffix in ("json", "md", "png"):
        shutil.copyfile(out / f"frontier.{suffix}", results / f"{cfg.experiment.name}-frontier.{suffix}")
    return {"points": len(report.points), "table": table, "output": str(out),
            "results": str(results / f"{cfg.experiment.name}-frontier.md")}
