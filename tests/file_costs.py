"""The measured cost of each test file, for ordering the suite (tests/conftest.py: the longest files start first).

pytest-xdist (``--dist loadfile``) hands each worker whole files in collection order; a long file handed out last
keeps one worker busy while the others wait. Starting the longest first (the classic longest-processing-time rule)
shortens that tail. Costs come from real runs' ``--durations=0`` reports (setup + call + teardown per file), both
suites'::

    (python -m pytest -q --durations=0; python -m pytest -q -m slow --durations=0) | python tests/file_costs.py

writes ``tests/file_costs.json`` (the committed one: both suites on 2 busy cores, 2026-11-29). A file it does not
list is placed as one of median cost; stale figures only change the order, never what runs.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("file_costs.json")
DURATION = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(tests/[^:\s]+\.py)::")


def costs_from_report(lines) -> dict[str, float]:
    """Seconds per test file, summed over a ``--durations=0`` report's lines."""
    costs: dict[str, float] = defaultdict(float)
    for line in lines:
        found = DURATION.match(line.strip())
        if found:
            costs[Path(found.group(2)).name] += float(found.group(1))
    return {name: round(seconds, 1) for name, seconds in sorted(costs.items(), key=lambda kv: -kv[1])}


def load_costs() -> dict[str, float]:
    return json.loads(TABLE.read_text()) if TABLE.exists() else {}


def longest_first(files: list[str], costs: dict[str, float]) -> list[str]:
    """``files`` (names) from the costliest down; an unlisted file counts as the median; ties keep their order.

    >>> longest_first(["a.py", "b.py", "c.py", "d.py"], {"a.py": 1.0, "b.py": 9.0, "c.py": 5.0})
    ['b.py', 'c.py', 'd.py', 'a.py']
    """
    known = sorted(costs.values())
    median = known[len(known) // 2] if known else 0.0
    return sorted(files, key=lambda name: -costs.get(name, median))


if __name__ == "__main__":
    measured = costs_from_report(sys.stdin)
    if not measured:
        sys.exit("no `--durations=0` lines on stdin")
    TABLE.write_text(json.dumps(measured, indent=1) + "\n")
    print(f"{TABLE}: {len(measured)} files, {sum(measured.values()):.0f} s in all")
