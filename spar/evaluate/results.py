"""What an evaluation reports: one question set's results (:class:`EvaluationReport`: ``results/<name>.json`` and
its table) and several sets' together (:func:`results_payload`, :func:`results_markdown`: a summary per shared
measure), in the order systems appear in (:data:`SYSTEMS`). :mod:`spar.evaluate.evaluation` computes them.

Example::

    >>> from spar.evaluate.results import EvaluationReport, results_payload
    >>> report = EvaluationReport("demo", ["nDCG@10"], {"bm25": {"nDCG@10": 0.5}}, mu=0.5, alpha=None, rbo={},
    ...                           shuffled={}, runs={})
    >>> results_payload({"": report})["systems"]
    {'bm25': {'nDCG@10': 0.5}}
    >>> print(report.markdown().splitlines()[2])
    | system | nDCG@10 | RBO vs BM25 | shuffled nDCG@10 (Δ) |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spar.core.run_context import describe_encoding
from spar.evaluate.published import Published

#: The order systems appear in tables.
SYSTEMS = ("bm25", "base", "lambda", "spar", "spar_exact", "spar_sum", "hybrid", "hybrid_served")


@dataclass
class EvaluationReport:
    """Everything ``results/<name>.json`` holds, plus the runs (``runs[system]``, test queries)."""

    dataset: str
    metrics: list[str]
    systems: dict[str, dict[str, float]]
    mu: float
    alpha: float | None
    rbo: dict[str, float]
    shuffled: dict[str, dict[str, float]]
    runs: dict[str, dict[str, list[tuple[str, float]]]] = field(repr=False)
    details: dict[str, Any] = field(default_factory=dict)
    command: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "systems": self.systems, "mu": self.mu, "alpha": self.alpha,
                "rbo": self.rbo, "shuffled": self.shuffled, "command": self.command, **self.details}

    def markdown(self) -> str:
        """The results table: one row per system, metrics, RBO with the teacher, Δ on shuffled queries."""
        primary = self.metrics[0]
        head = ["system", *self.metrics, "RBO vs BM25", f"shuffled {primary} (Δ)"]
        extra = [m for m in next(iter(self.systems.values()), {}) if m not in self.metrics]
        head[1 + len(self.metrics):1 + len(self.metrics)] = extra
        searched = self.details.get("passages")
        lines = [f"**{self.dataset}** ({self.details.get('queries', '?')} test queries"
                 + (f", {searched:,} passages searched" if searched else "") + "); "
                 f"μ = {self.mu:g}" + (f", α = {self.alpha:g}" if self.alpha is not None else "")
                 + (f"; SPAR index: {self.details['index']['type']}, passages stored as "
                    f"{self.details['index']['storage']} ({self.details['index']['code_bytes']:,} B/passage)"
                    if self.details.get("index", {}).get("code_bytes") else "")
                 + (f"; vectors: {describe_encoding(self.details['encoding'])}" if self.details.get("encoding")
                    else ""),
                 "", "| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
        for name, values in self.systems.items():
            cells = [name] + [f"{values[m]:.4f}" if m in values else "" for m in self.metrics + extra]
            cells.append(f"{self.rbo[name]:.3f}" if name in self.rbo else "")
            sh = self.shuffled.get(name)
            cells.append(f"{sh[primary]:.4f} ({sh['delta']:+.4f})" if sh else "")
            lines.append("| " + " | ".join(cells) + " |")
        if self.details.get("skipped_records"):
            from spar.experiment.preflight import describe_skipped

            lines += ["", "Input records skipped (experiment.on_bad_record=skip): "
                      + describe_skipped(self.details["skipped_records"]) + "."]
        return "\n".join(lines) + "\n"


def results_payload(reports: dict[str, EvaluationReport], published: Published | None = None) -> dict[str, Any]:
    """``results/<stem>.json``: one report as it always was, or several question sets' under ``sets`` with a
    ``summary`` (measure -> system -> set -> value) of the measures they share; ``published`` figures
    (``evaluate.published``) under their own key."""
    if list(reports) == [""]:
        payload = reports[""].to_json()
    else:
        first = next(iter(reports.values()))
        payload = {"dataset": first.dataset.split(":")[0], "sets": {name: r.to_json() for name, r in reports.items()},
                   "summary": _summary(reports), "command": first.command}
    if published is not None:
        payload["published"] = published.to_json()
    return payload


def _summary(reports: dict[str, EvaluationReport]) -> dict[str, dict[str, dict[str, float]]]:
    measures = [m for m in next(iter(reports.values())).systems.get("bm25", {})
                if all(m in r.systems.get("bm25", {}) for r in reports.values())]
    return {m: {system: {name: r.systems[system][m] for name, r in reports.items() if system in r.systems}
                for system in SYSTEMS if any(system in r.systems for r in reports.values())} for m in measures}


def results_markdown(reports: dict[str, EvaluationReport], published: Published | None = None) -> str:
    """The results tables: one report's table, or for several question sets a summary table per shared measure
    (systems x sets, with their mean), each followed by the ``published`` figures of that measure when given, then
    each set's own table."""
    if list(reports) == [""]:
        return reports[""].markdown()
    lines = []
    names = list(reports)
    for measure, by_system in _summary(reports).items():
        lines += [f"**{measure}** by question set", "", "| system | " + " | ".join(names) + " | mean |",
                  "|---|" + "---:|" * (len(names) + 1)]
        for system, values in by_system.items():
            cells = [f"{values[n]:.4f}" if n in values else "" for n in names]
            mean = f"{sum(values.values()) / len(values):.4f}" if len(values) == len(names) else ""
            lines.append(f"| {system} | " + " | ".join(cells) + f" | {mean} |")
        lines.append("")
        theirs = published.markdown(measure, names) if published is not None else ""
        if theirs:
            lines.append(theirs)
    return "\n".join(lines) + "\n" + "\n".join(r.markdown() for r in reports.values())
