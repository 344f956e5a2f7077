"""The stage drivers read the Experiment, not the config (issue #49 item 1).

Every driver in ``pipelines/`` gets its settings from :class:`spar.experiment.plan.Experiment` (its sections and
resolved parts, its artifact declarations, its run paths as ``experiment.run``); what it may still read off the
config itself is the runtime options that change no artifact, listed in :data:`RUNTIME`. A driver that reads a
setting from the config again (``cfg.label.k1``, ``experiment.cfg.train``, ``getattr(cfg, "index")``) fails here,
as does one that builds its own ``RunContext(cfg)`` or ``Experiment(cfg)`` beside the stage's one
(``Experiment.of``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What a driver may read off the config (a dotted path, and anything below it), and why it is no setting.
RUNTIME = {
    "executor": "where shards run (local or Ray) and with how many CPUs: the same output either way",
    "output_dir": "the run's directory: its output lock, and where a run carried in is",
    "results_dir": "where the results files are copied (checked writable before the work)",
    "model_dump": "the whole config as a record: W&B's run config, the published model's spar_config.yaml",
    "experiment.wandb_mode": "W&B online, offline or disabled",
}


def _chain(node: ast.Attribute) -> str:
    """``a.b.c`` of the longest attribute chain that ``node`` starts."""
    parts = [node.attr]
    parent = getattr(node, "spar_parent", None)
    while isinstance(parent, ast.Attribute) and parent.value is node:
        parts.append(parent.attr)
        node, parent = parent, getattr(parent, "spar_parent", None)
    return ".".join(parts)


def _is_config(node: ast.AST) -> bool:
    """The config itself: the name ``cfg``, or anything's ``.cfg`` (``experiment.cfg``, ``self.cfg``)."""
    return (isinstance(node, ast.Name) and node.id == "cfg") or (isinstance(node, ast.Attribute) and node.attr == "cfg")


def config_reads(source: str, name: str = "<source>") -> list[str]:
    """Every read off the config in ``source``: ``file:line: path`` (``path``: the dotted attributes read, or
    ``getattr`` for a read by name)."""
    tree = ast.parse(source)
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child.spar_parent = parent  # type: ignore[attr-defined]
    reads: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_config(node.value):
            reads.append((node.lineno, node.col_offset, _chain(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars")
              and node.args and _is_config(node.args[0])):
            reads.append((node.lineno, node.col_offset, "getattr"))
    return [f"{name}:{line}: {path}" for line, _, path in sorted(reads)]


def _runtime(read: str) -> bool:
    path = read.rsplit(": ", 1)[1]
    return any(path == allowed or path.startswith(allowed + ".") for allowed in RUNTIME)


def _drivers() -> list[Path]:
    return sorted((ROOT / "pipelines").glob("*.py"))


def test_the_checker_sees_every_way_of_reading_a_setting():
    source = ("def work(cfg, experiment):\n"
              "    a = cfg.label.k1\n"
              "    b = experiment.cfg.train\n"
              "    c = getattr(cfg, 'index')\n"
              "    d = make_executor(cfg.executor)\n"
              "    return cfg.output_dir, cfg.executor.cpus_per_worker\n")
    reads = config_reads(source, "x.py")
    assert reads == ["x.py:2: label.k1", "x.py:3: train", "x.py:4: getattr", "x.py:5: executor",
                     "x.py:6: output_dir", "x.py:6: executor.cpus_per_worker"]
    assert [r for r in reads if not _runtime(r)] == ["x.py:2: label.k1", "x.py:3: train", "x.py:4: getattr"]


def test_drivers_read_only_runtime_options_off_the_config():
    reads = [read for path in _drivers()
             for read in config_reads(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    settings = [read for read in reads if not _runtime(read)]
    assert not settings, ("drivers read settings off the config (take them from the Experiment, "
                          "spar/experiment/plan.py):\n" + "\n".join(settings))
    assert reads, "no runtime read found: the scan no longer sees the drivers"


def test_drivers_build_no_run_context_nor_experiment_of_their_own():
    built = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in _drivers()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\b(RunContext|Experiment)\(", line)]
    assert not built, "use Experiment.of(cfg) (its .run for the paths):\n" + "\n".join(built)
