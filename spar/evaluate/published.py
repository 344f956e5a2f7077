"""Published figures printed beside an experiment's results (``evaluate.published``), for orientation only.

A paper's numbers come from another corpus, base retriever or split, so they are never mixed into our tables: the
results show them in a table of their own under each shared measure (systems x question sets, as published), and
``results/<name>.json`` carries them under ``published``. What to compare is the systems' order and gaps.

The file (JSON)::

    {"label": "who and where (corpus, models)", "source": "table / page", "unit": "percent" | "fraction",
     "systems": {"spar": "SPAR-Wiki", ...},            # our system name -> the paper's name (optional)
     "values": {"Acc@20": {"spar": {"nq": 83.0, ...}, ...}, ...}}   # measure -> our system -> our set -> value

Example::

    >>> p = Published.from_dict({"label": "paper", "unit": "percent",
    ...                          "values": {"Acc@20": {"spar": {"nq": 83.0}, "bm25": {"nq": 62.9}}}})
    >>> print(p.markdown("Acc@20", ["nq", "squad"]))
    **Acc@20** published (percent; paper)
    <BLANKLINE>
    | system | nq | squad |
    |---|---:|---:|
    | spar | 83.0 |  |
    | bm25 | 62.9 |  |
    <BLANKLINE>
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from spar.core.errors import ConfigError


@dataclass
class Published:
    """Published figures: ``values[measure][system][set]`` with the paper's ``label``, ``source`` and ``unit``."""

    label: str
    values: dict[str, dict[str, dict[str, float]]]
    unit: str = "fraction"
    source: str = ""
    systems: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, where: str = "published figures") -> "Published":
        """From the file's JSON object; a malformed one fails in one line naming ``where``."""
        if not isinstance(data, dict) or not isinstance(data.get("label"), str) or not data["label"].strip():
            raise ConfigError(f"{where}: expected a JSON object with a 'label' (who published these figures)")
        values = data.get("values")
        if not isinstance(values, dict) or not values:
            raise ConfigError(f"{where}: 'values' must map measure -> system -> question set -> number")
        for measure, by_system in values.items():
            if not isinstance(by_system, dict):
                raise ConfigError(f"{where}: values.{measure} must map system -> question set -> number")
            for system, by_set in by_system.items():
                bad = [k for k, v in (by_set.items() if isinstance(by_set, dict) else [("?", None)])
                       if not isinstance(v, (int, float)) or isinstance(v, bool)]
                if bad:
                    raise ConfigError(f"{where}: values.{measure}.{system}: not a number for {', '.join(bad)}")
        unit = data.get("unit", "fraction")
        if unit not in ("fraction", "percent"):
            raise ConfigError(f"{where}: unit must be 'fraction' or 'percent', not {unit!r}")
        return cls(data["label"], values, unit, str(data.get("source", "")), dict(data.get("systems", {})))

    @classmethod
    def read(cls, path: str | Path) -> "Published":
        """``evaluate.published``: fails in one line naming the file (and line, for invalid JSON)."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: evaluate.published: no such file") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: evaluate.published: not valid JSON: {exc.msg}") from None
        return cls.from_dict(data, str(path))

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "source": self.source, "unit": self.unit, "systems": self.systems,
                "values": self.values}

    def markdown(self, measure: str, sets: Sequence[str]) -> str:
        """The published ``measure`` of ``sets`` (one column each; blank where not published), or "" when the
        paper has none of them."""
        by_system = self.values.get(measure, {})
        if not any(name in values for values in by_system.values() for name in sets):
            return ""
        lines = [f"**{measure}** published ({self.unit}; {self.label})", "",
                 "| system | " + " | ".join(sets) + " |", "|---|" + "---:|" * len(sets)]
        for system, values in by_system.items():
            shown = f"{system} ({self.systems[system]})" if system in self.systems else system
            cells = [f"{values[n]:.1f}" if self.unit == "percent" and n in values else
                     f"{values[n]:.4f}" if n in values else "" for n in sets]
            lines.append(f"| {shown} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
