"""The layers: the library (``spar/``) below the stages (``pipelines/``) below the CLI.

- Static: every import in ``spar/`` (module level and inside functions) is parsed; no library module imports
  ``pipelines`` or the CLI, and the library's import graph has no cycle.
- Dynamic: every library module imports on its own (no hidden dependence on another module being imported first)
  and importing it loads nothing from ``pipelines``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPAR = ROOT / "spar"

#: Upward imports that still exist and are being removed elsewhere; each must still be present (a stale entry
#: fails, so the list only shrinks). Empty since the CLI moved to pipelines/cli.py.
KNOWN_UPWARD: set[tuple[str, str]] = set()
CLI_MODULES = {"spar.cli", "pipelines.cli"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def library_files() -> list[Path]:
    files = sorted(SPAR.rglob("*.py"))
    return files


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from spar import schemas`` names spar.core.schemas when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if (ROOT / candidate.replace(".", "/")).with_suffix(".py").exists() or \
                        (ROOT / candidate.replace(".", "/") / "__init__.py").exists():
                    found.add(candidate)
    return found


def import_graph() -> dict[str, set[str]]:
    """Library module -> the first-party modules (spar, pipelines) it imports."""
    graph = {}
    for path in library_files():
        first_party = {m for m in _imports(path) if m.split(".")[0] in ("spar", "pipelines")}
        graph[_module_name(path)] = first_party - {_module_name(path)}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the graph's nodes, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    # spar.evaluate.evaluation imports spar.index.spar_index only inside evaluate_experiment.
    assert "spar.index.spar_index" in graph["spar.evaluate.evaluation"]
    assert "spar.core.schemas" in graph["spar.teacher.labelling"]  # `from spar import schemas`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_library_never_imports_the_stages_or_the_cli():
    upward = {(module, imported) for module, imports in import_graph().items() for imported in imports
              if imported.split(".")[0] == "pipelines" or imported in CLI_MODULES}
    assert upward - KNOWN_UPWARD == set(), "library modules import the stages or the CLI"
    assert KNOWN_UPWARD - upward == set(), "stale KNOWN_UPWARD entries: remove them"


def test_library_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_every_library_module_imports_alone():
    """Each module imported with no other first-party module loaded before it (one fresh interpreter; spar and
    pipelines are dropped from sys.modules between modules, third-party libraries stay loaded to keep it fast)."""
    modules = [_module_name(p) for p in library_files()]
    script = f"""
import importlib, json, sys, traceback
results = {{}}
for name in {modules!r}:
    for loaded in [m for m in sys.modules if m.split('.')[0] in ('spar', 'pipelines')]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
        stages = sorted(m for m in sys.modules if m.split('.')[0] == 'pipelines')
        results[name] = 'imports pipelines: ' + ', '.join(stages) if stages else 'ok'
    except Exception:
        results[name] = traceback.format_exc(limit=3)
print(json.dumps(results))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(results) == set(modules)
    failures = {name: outcome for name, outcome in results.items() if outcome != "ok"}
    assert not failures, failures
