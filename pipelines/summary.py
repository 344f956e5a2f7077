"""The one summary ``spar run`` prints at the end: time per stage, the result table sized to the console, where the
model, index, results and W&B runs are, and the next commands."""

from __future__ import annotations

import json
from pathlib import Path

from spar.artifacts import artifact_dir


def _results_table(payload: dict, experiment: str):
    from rich.table import Table

    systems = payload.get("systems", {})
    metrics = list(next(iter(systems.values()), {}))
    table = Table(title=f"{experiment} ({payload.get('dataset', '')} test): μ = {payload.get('mu')}, "
                        f"α = {payload.get('alpha')}",
                  title_justify="left", header_style="bold")
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


def _sets_table(payload: dict, experiment: str):
    """Several question sets: the first shared measure, systems x sets."""
    from rich.table import Table

    summary = payload.get("summary", {})
    measure = next(iter(summary), None)
    sets = list(payload.get("sets", {}))
    table = Table(title=f"{experiment}: {measure} by question set (test)", title_justify="left",
                  header_style="bold")
    table.add_column("system")
    for name in sets:
        table.add_column(name, justify="right")
    for system, values in (summary.get(measure, {}) if measure else {}).items():
        table.add_row(system, *[f"{values[n]:.4f}" if n in values else "" for n in sets])
    return table


def print_run_summary(cfg, stages: dict[str, dict], skipped: dict[str, dict[str, int]] | None = None) -> None:
    """Print the summary of a ``spar run`` whose stages reported ``stages`` (name -> statistics with seconds)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    timing = Table(title="spar run", title_justify="left", header_style="bold")
    timing.add_column("stage")
    timing.add_column("status")
    timing.add_column("time", justify="right")
    for name, stats in stages.items():
        status = "not needed" if stats.get("why") else "up to date" if stats.get("skipped") else "done"
        timing.add_row(name, status, f"{stats.get('seconds', 0.0):.1f} s")
    timing.add_row("total", "", f"{sum(s.get('seconds', 0.0) for s in stages.values()):.1f} s")
    console.print(timing)

    from spar.run_context import RunContext

    context = RunContext(cfg)
    results = context.results[0]
    lam = "encode.lambda" if cfg.encode.lambda_ is not None else cfg.train.kind
    for stem in context.results_groups:
        path = context.results_file(stem)[0]
        if path.exists():
            payload = json.loads(path.read_text())
            title = f"experiment {cfg.experiment.name}" + (f" ({stem})" if stem != cfg.experiment.name else "")
            printer = _sets_table if "sets" in payload else _results_table
            console.print(printer(payload, f"{title}, Λ {lam}"))
    if skipped:
        from spar.preflight import describe_skipped

        console.print("[bold]skipped input records[/bold] (experiment.on_bad_record=skip): "
                      + describe_skipped(skipped), highlight=False, soft_wrap=True)
    where = []
    model = artifact_dir(cfg.output_dir, "model") if not cfg.publish.output else Path(cfg.publish.output)
    for label, path in (("Λ (self-contained: use it elsewhere with encode.lambda)",
                         artifact_dir(cfg.output_dir, "lambda")),
                        ("model", model), ("index", artifact_dir(cfg.output_dir, "index")),
                        ("results", results), ("W&B runs (offline)", Path(cfg.output_dir) / "wandb")):
        if path.exists():
            where.append(f"  {label}: {path}")
    if where:
        console.print("[bold]where[/bold]\n" + "\n".join(where), highlight=False, soft_wrap=True)
    nexts = []
    if model.exists():
        nexts.append(f'spar search {model} "your query"')
    wandb_dir = Path(cfg.output_dir) / "wandb"
    if any(wandb_dir.glob("offline-run-*")):
        nexts.append(f"wandb sync {wandb_dir}/offline-run-*   # upload the runs to W&B")
    if nexts:
        console.print("[bold]next[/bold]\n" + "\n".join(f"  {n}" for n in nexts), highlight=False, soft_wrap=True)
