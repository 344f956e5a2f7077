"""The measured cost of each test file in each suite, for ordering it (tests/conftest.py: the longest files first).

pytest-xdist (``--dist loadfile``) hands each worker whole files; a long file handed out last keeps one worker busy
while the others wait. Starting the longest first (the classic longest-processing-time rule) shortens that tail. The
two suites are ordered by their own costs: a file's slow tests and its default ones cost different amounts
(``test_storage.py``: 656 s of default tests and 265 s of slow ones in the committed tables), and one table for both
put the slow suite's files in the wrong order. Costs come from real runs' ``--durations=0`` reports (setup + call +
teardown per file), one suite at a time::

    python -m pytest -q --durations=0 | python tests/file_costs.py default
    python -m pytest -q -m slow --durations=0 | python tests/file_costs.py slow

each writes its suite's table in ``tests/file_costs.json`` (the committed one: the default suite on 2 quiet cores,
2026-12-07, commit dff4a43 + docs; the slow suite on 2 busy cores, 2026-11-29). A file a table does not list is
placed as one of median cost; stale figures only change the order, never what runs.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("file_costs.json")
DURATION = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(tests/[^:\s]+\.py)::")
#: The suites ``.ci/run`` runs: pyproject's addopts (``-m "not slow"``) and ``-m slow``.
SUITES = {"not slow": "default", "slow": "slow"}


def costs_from_report(lines) -> dict[str, float]:
    """Seconds per test file, summed over a ``--durations=0`` report's lines."""
    costs: dict[str, float] = defaultdict(float)
    for line in lines:
        found = DURATION.match(line.strip())
        if found:
            costs[Path(found.group(2)).name] += float(found.group(1))
    return {name: round(seconds, 1) for name, seconds in sorted(costs.items(), key=lambda kv: -kv[1])}


def load_costs(markexpr: str = "") -> dict[str, float]:
    """Seconds per file in the suite that ``-m markexpr`` selects: the default or the slow suite's own table, and
    for any other selection (``-m "slow or not slow"``) both added up."""
    tables = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    suite = SUITES.get(markexpr.strip())
    if suite is not None:
        return dict(tables.get(suite, {}))
    both: dict[str, float] = defaultdict(float)
    for table in tables.values():
        for name, seconds in table.items():
            both[name] += seconds
    return dict(both)


def longest_first(files: list[str], costs: dict[str, float]) -> list[str]:
    """``files`` (names) from the costliest down; an unlisted file counts as the median; ties keep their order.

    >>> longest_first(["a.py", "b.py", "c.py", "d.py"], {"a.py": 1.0, "b.py": 9.0, "c.py": 5.0})
    ['b.py', 'c.py', 'd.py', 'a.py']
    """
    known = sorted(costs.values())
    median = known[len(known) // 2] if known else 0.0
    return sorted(files, key=lambda name: -costs.get(name, median))


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SUITES.values():
        sys.exit(f"usage: python -m pytest ... --durations=0 | python {sys.argv[0]} {{{','.join(SUITES.values())}}}")
    measured = costs_from_report(sys.stdin)
    if not measured:
        sys.exit("no `--durations=0` lines on stdin")
    tables = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    tables[sys.argv[1]] = measured
    TABLE.write_text(json.dumps(tables, indent=1) + "\n")
    print(f"{TABLE}: {sys.argv[1]} suite, {len(measured)} files, {sum(measured.values()):.0f} s in all")
