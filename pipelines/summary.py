"""The one summary ``spar run`` prints at the end: per stage its time and what it dropped or skipped, the result
table with the index it was measured on (type, storage, bytes per passage), where the model, index, results and W&B
runs are, and the next commands.

Two times per stage, labelled: the stage's own (what its ``<stage>: done in`` line says) and its process's wall time
(``spar run`` starts each stage in a process of its own: the difference is Python, torch and model start-up). What a
stage dropped or skipped is read from its artifact's manifest (label's queries with too few hits, sample's bad
records and sentence fragments, encode's truncated passages, evaluate's skipped judgments), so an up-to-date stage
still reports it. Headings are wrapped between phrases, never inside one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spar.core.run_context import describe_encoding
from spar.experiment.plan import Experiment


def _manifest_stats(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "manifest.json").read_text()).get("stats") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}"


def stage_losses(experiment: Experiment, results: dict[str, Any] | None = None) -> dict[str, str]:
    """What each stage dropped or skipped, named with its count, from the artifacts' manifests ("none" when a stage
    that can drop records dropped none; absent for stages that never do)."""
    out: dict[str, str] = {}
    run = experiment.run
    queries = _manifest_stats(run.artifact("queries"))
    if queries:
        skipped = (queries.get("read") or {}).get("skipped") or {}
        parts = [_count(n, f"corpus records skipped ({reason})") for reason, n in skipped.items() if n]
        fragments = (queries.get("sampling") or {}).get("fragments_dropped") or 0
        if fragments:
            parts.append(_count(fragments, f"sentences dropped (< {experiment.sample.min_words} words)"))
        out["sample"] = "; ".join(parts) or "none"
    labels = _manifest_stats(run.artifact("labels"))
    if "dropped" in labels:
        dev = labels.get("dropped_dev") or 0
        out["label"] = (_count(labels["dropped"], "queries dropped (too few teacher hits") + f", {dev:,} dev)"
                        if labels["dropped"] else "none")
    encoded = []
    for name in ("base", "lambda"):
        stats = _manifest_stats(run.embeddings(name))
        if stats.get("truncated"):
            encoded.append(_count(stats["truncated"], f"passages truncated at {stats.get('max_length')} tokens "
                                                      f"({name})"))
        elif stats:
            encoded.append("")
    if encoded:
        out["encode"] = "; ".join(e for e in encoded if e) or "none"
    if results is not None:
        skipped_records = results.get("skipped_records") or {}
        parts = [f"{n:,} {reason} ({key})" for key, reasons in skipped_records.items() for reason, n in reasons.items()]
        not_run = sorted((results.get("skipped_systems") or results.get("details", {}).get("skipped_systems") or {}))
        if not_run:
            parts.append(f"not run: {', '.join(not_run)}")
        out["evaluate"] = "; ".join(parts) or "none"
    return out


def index_summary(experiment: Experiment) -> str | None:
    """``index flat, sq4: 2,880 B/passage (2,904 B/passage on disk)``: the index the results were measured on."""
    stats = _manifest_stats(experiment.run.artifact("index"))
    if not stats.get("storage"):
        return None
    code = f"{stats['code_bytes']:,} B/passage" if stats.get("code_bytes") else None
    disk = f"{stats['bytes_per_passage']:,.0f} B/passage on disk" if stats.get("bytes_per_passage") else None
    size = f"{code} ({disk})" if code and disk else code or disk or ""
    return f"index {stats.get('type')}, {stats['storage']}" + (f": {size}" if size else "")


def wrap_phrases(phrases: list[str], width: int, sep: str = "; ") -> list[str]:
    """Join ``phrases`` into lines of at most ``width`` characters, breaking only between phrases (a phrase longer
    than the width gets a line of its own)."""
    lines: list[str] = []
    for phrase in phrases:
        if lines and len(lines[-1]) + len(sep) + len(phrase) <= width:
            lines[-1] += sep + phrase
        else:
            lines.append(phrase)
    return lines


def _results_table(payload: dict):
    from rich.table import Table

    systems = payload.get("systems", {})
    metrics = list(next(iter(systems.values()), {}))
    table = Table(header_style="bold")
    table.add_column("system")
    for metric in metrics:
        table.add_column(metric, justify="right")
    table.add_column("RBO vs BM25", justify="right")
    table.add_column("shuffled Δ", justify="right")
    for name, values in systems.items():
        shuffled = payload.get("shuffled", {}).get(name)
        rbo = payload.get("rbo", {}).get(name)
        table.add_row(name, *[f"{values[m]:.4f}" for m in metrics], "" if rbo is None else f"{rbo:.3f}",
                      "" if not shuffled else f"{shuffled['delta']:+.4f}")
    return table


def _sets_table(payload: dict):
    """Several question sets: the first shared measure, systems x sets."""
    from rich.table import Table

    summary = payload.get("summary", {})
    measure = next(iter(summary), None)
    sets = list(payload.get("sets", {}))
    table = Table(header_style="bold")
    table.add_column("system")
    for name in sets:
        table.add_column(name, justify="right")
    for system, values in (summary.get(measure, {}) if measure else {}).items():
        table.add_row(system, *[f"{values[n]:.4f}" if n in values else "" for n in sets])
    return table


def _timing_table(stages: dict[str, dict], losses: dict[str, str]):
    from rich.table import Table

    timing = Table(header_style="bold")
    timing.add_column("stage")
    timing.add_column("status")
    timing.add_column("time", justify="right")
    timing.add_column("with start-up", justify="right")
    timing.add_column("dropped / skipped")
    own_total = wall_total = 0.0
    for name, stats in stages.items():
        status = "not needed" if stats.get("why") else "up to date" if stats.get("skipped") else "done"
        wall = float(stats.get("seconds", 0.0))
        own = float(stats.get("stage_seconds", wall))
        own_total, wall_total = own_total + own, wall_total + wall
        timing.add_row(name, status, f"{own:.1f} s", f"{wall:.1f} s", "" if stats.get("why") else losses.get(name, ""))
    timing.add_row("total", "", f"{own_total:.1f} s", f"{wall_total:.1f} s", "")
    return timing


def print_run_summary(cfg, stages: dict[str, dict], skipped: dict[str, dict[str, int]] | None = None,
                      console=None) -> None:
    """Print the summary of a ``spar run`` whose stages reported ``stages`` (name -> statistics: ``seconds``, the
    stage process's wall time, and ``stage_seconds``, the stage's own)."""
    from rich.console import Console


    console = console or Console()
    width = console.width

    def heading(phrases: list[str]) -> None:
        for i, line in enumerate(wrap_phrases(phrases, width)):
            console.print(f"[bold]{line}[/bold]" if i == 0 else line, highlight=False, soft_wrap=True)

    experiment = Experiment.of(cfg)
    context = experiment.run
    results = context.results[0]
    payloads = {stem: json.loads(path.read_text()) for stem in context.results_groups
                for path in [context.results_file(stem)[0]] if path.exists()}
    heading(["spar run", f"experiment {experiment.name}",
             "time: each stage's own, and with its process's start-up"])
    console.print(_timing_table(stages, stage_losses(experiment, next(iter(payloads.values()), None))))
    lam = "encode.lambda" if experiment.encode.lambda_ is not None else experiment.train.kind
    index = index_summary(experiment)
    encoding = context.encoding()  # which precision ran (#48): bf16 on CPUs with native bf16 under `auto`
    vectors = [f"vectors {describe_encoding(encoding)}"] if encoding else []
    for stem, payload in payloads.items():
        named = f" {stem}" if stem != experiment.name else ""
        if "sets" in payload:
            measure = next(iter(payload.get("summary", {})), "")
            phrases = [f"results{named}: {measure} by question set (test)", f"Λ {lam}"]
        else:
            phrases = [f"results{named} ({payload.get('dataset', '')} test)", f"Λ {lam}",
                       f"μ = {payload.get('mu')}, α = {payload.get('alpha')}"]
        heading(phrases + ([index] if index else []) + vectors)
        console.print(_sets_table(payload) if "sets" in payload else _results_table(payload))
    if skipped:
        from spar.experiment.preflight import describe_skipped

        console.print("[bold]skipped input records[/bold] (experiment.on_bad_record=skip): "
                      + describe_skipped(skipped), highlight=False, soft_wrap=True)
    where = []
    model = experiment.model_dir
    index_dir = context.artifact("index")
    for label, path in (("Λ (self-contained: use it elsewhere with encode.lambda)",
                         context.artifact("lambda")),
                        ("model", model), ("index", index_dir),
                        ("results", results), ("W&B runs (offline)", context.artifact("wandb"))):
        if path.exists():
            where.append(f"  {label}: {path}")
    if where:
        console.print("[bold]where[/bold]\n" + "\n".join(where), highlight=False, soft_wrap=True)
    nexts = []
    if model.exists():
        beside_run = model.resolve().parent == index_dir.resolve().parent or (model / "index").is_dir()
        nexts.append(f'spar search {model} "your query"' if beside_run
                     else f'spar search {index_dir} --model {model} "your query"')
        nexts.append(f"spar index --model {model} --corpus YOUR_CORPUS --output DIR   # any corpus, then search DIR")
    wandb_dir = context.artifact("wandb")
    if any(wandb_dir.glob("offline-run-*")):
        nexts.append(f"wandb sync {wandb_dir}/offline-run-*   # upload the runs to W&B")
    if nexts:
        console.print("[bold]next[/bold]\n" + "\n".join(f"  {n}" for n in nexts), highlight=False, soft_wrap=True)
