"""What each stage of an experiment cost on the machine that ran it: seconds and peak RSS, read from the manifests
of its artifacts (:class:`spar.core.artifacts.ArtifactWriter` records both), for the results.

An experiment may carry artifacts of another run (``encode.lambda`` naming a run's Λ: its sample, label and train
ran there), so the costs are gathered over several run directories, each row naming its run.

Example::

    >>> print(costs_markdown([{"stage": "tune", "artifact": "tune", "run": "runs/x", "seconds": 95.0,
    ...                        "peak_rss_gb": 3.2}]))
    **Cost per stage** (from the artifacts' manifests: wall-clock time of the stage, peak RSS of its process)
    <BLANKLINE>
    | stage | artifact | run | time | peak RSS |
    |---|---|---|---:|---:|
    | tune | tune | runs/x | 1.6 min | 3.20 GB |
    <BLANKLINE>
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from spar.core.artifacts import is_complete, read_manifest
from spar.core.run_context import RunContext

#: The artifacts of a run in pipeline order, with the stage that writes each.
STAGE_ARTIFACTS = (("sample", "queries"), ("label", "teacher_index"), ("label", "labels"), ("train", "lambda"),
                   ("encode", "embeddings"), ("tune", "tune"), ("index", "index"))


def stage_costs(run_dirs: Sequence[str | Path]) -> list[dict[str, Any]]:
    """One row per complete artifact of each run directory: stage, artifact (``embeddings/<encoder>/passages``;
    an encoder's query splits summed as ``embeddings/<encoder>/queries-*``), run (its directory's name: results
    and model cards travel, a machine's paths stay home), seconds, peak RSS in GB (None where the manifests predate
    the record)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for run in dict.fromkeys(Path(r) for r in run_dirs):
        context = RunContext.at(run)
        for stage, name in STAGE_ARTIFACTS:
            directory = context.artifact(name)
            for d in sorted(directory.glob("*/*")) if name == "embeddings" else [directory]:
                if not is_complete(d):
                    continue
                manifest = read_manifest(d)
                artifact = str(d.relative_to(run))
                if name == "embeddings" and d.name.startswith("queries-"):
                    artifact = str(d.parent.relative_to(run) / "queries-*")
                row = rows.setdefault((str(run), artifact), {"stage": stage, "artifact": artifact,
                                                             "run": run.resolve().name, "seconds": 0.0,
                                                             "peak_rss_gb": None})
                row["seconds"] = round(row["seconds"] + float(manifest.get("seconds") or 0.0), 3)
                if manifest.get("peak_rss_bytes") is not None:
                    peak = round(manifest["peak_rss_bytes"] / 1e9, 2)
                    row["peak_rss_gb"] = max(peak, row["peak_rss_gb"] or 0.0)
    return list(rows.values())


def costs_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a table (time in minutes, or hours past two)."""
    def duration(seconds: float | None) -> str:
        if seconds is None:
            return ""
        return f"{seconds / 3600:.2f} h" if seconds >= 7200 else f"{seconds / 60:.1f} min"

    lines = ["**Cost per stage** (from the artifacts' manifests: wall-clock time of the stage, peak RSS of its "
             "process)", "", "| stage | artifact | run | time | peak RSS |", "|---|---|---|---:|---:|"]
    for row in rows:
        peak = "" if row["peak_rss_gb"] is None else f"{row['peak_rss_gb']:.2f} GB"
        lines.append(f"| {row['stage']} | {row['artifact']} | {row['run']} | {duration(row['seconds'])} | {peak} |")
    return "\n".join(lines) + "\n"
