"""The layers: the library's packages import only downward, the library (``spar/``) sits below the stages
(``pipelines/``), which sit below the CLI.

- Packages: every module of ``spar/`` belongs to one package of :data:`LAYERS`; a package imports only packages of
  lower layers (siblings in one layer never import each other), so the package graph has no cycle.
- Static: every import in ``spar/`` (module level and inside functions) is parsed; no library module imports
  ``pipelines`` or the CLI, the library's module graph has no cycle, and every first-party import anywhere (library,
  stages, tests, benchmarks) names a module that exists.
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

#: The packages of ``spar/``, bottom layer first (docs/architecture.md draws the same picture). A package may import
#: any package of a lower layer; packages of one layer never import each other.
LAYERS: list[tuple[str, ...]] = [
    ("core",),                  # config, errors, console, artifacts, fingerprints, stage runner, run paths, schemas
    ("data",),                  # corpora, passages table, sampling, question sets, answers
    ("model",),                 # model resolution, bi-encoder, losses, engines, ONNX backend, embeddings on disk
    ("teacher", "lexical", "index"),  # sparse teachers, labelling | Λ kinds, the modules shipped in a published
                                      # model | the SPAR FAISS index (built from the embeddings' shards), storage
    ("train", "publish"),       # the Lightning loop and its data | model directory, card, search, corpus index
    ("experiment",),            # which Λ, an experiment's assembled inputs, preflight
    ("evaluate",),              # exact search, metrics, tuning μ/α, the evaluation table, latency timing
    ("sweep",),                 # the quality-per-byte frontier: its points, shared inputs, latency peers, report
]
#: Modules of ``spar/`` outside every package: the package root (its version), which imports nothing of spar.
ROOT_MODULES = {"spar"}
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


def _is_module(dotted: str) -> bool:
    base = ROOT / dotted.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _imports(path: Path, relative: bool = True) -> set[str]:
    """Every module ``path`` imports (``from spar.core import schemas`` names spar.core.schemas, a module);
    ``relative=False``: its absolute imports only."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and not relative:
                continue
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            for alias in node.names:
                if _is_module(f"{base}.{alias.name}"):
                    found.add(f"{base}.{alias.name}")
    return found


def import_graph() -> dict[str, set[str]]:
    """Library module -> the first-party modules (spar, pipelines) it imports."""
    graph = {}
    for path in library_files():
        first_party = {m for m in _imports(path) if m.split(".")[0] in ("spar", "pipelines")}
        graph[_module_name(path)] = first_party - {_module_name(path)}
    return graph


def package_of(module: str) -> str | None:
    """``spar.core.config`` -> ``core``; None for the root modules and anything outside spar."""
    parts = module.split(".")
    if parts[0] != "spar" or module in ROOT_MODULES or len(parts) < 2:
        return None
    return parts[1]


def layer_of(package: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(package, imported package) -> the module imports behind it."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, imports in graph.items():
        for imported in imports:
            a, b = package_of(module), package_of(imported)
            if a and b and a != b:
                edges.setdefault((a, b), []).append(f"{module} -> {imported}")
    return edges


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
    assert "spar.core.schemas" in graph["spar.teacher.labelling"]  # `from spar.core import schemas`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert package_edges({"spar.data.x": {"spar.core.y", "spar.data.z", "spar"}}) == \
        {("data", "core"): ["spar.data.x -> spar.core.y"]}


def test_every_library_module_belongs_to_a_declared_package():
    declared = {p for layer in LAYERS for p in layer}
    assert len(declared) == sum(len(layer) for layer in LAYERS), "a package is declared twice"
    modules = {_module_name(p) for p in library_files()}
    stray = sorted(m for m in modules if m not in ROOT_MODULES and package_of(m) not in declared)
    assert not stray, f"modules outside every declared package (add the package to LAYERS): {stray}"
    assert declared <= {package_of(m) for m in modules}, "a declared package has no module"
    # the root module imports nothing of spar's packages
    for module in ROOT_MODULES:
        assert {m for m in import_graph()[module] if package_of(m)} == set(), module


def test_packages_import_only_downward():
    edges = package_edges(import_graph())
    wrong = {f"{a} -> {b}": imports for (a, b), imports in sorted(edges.items()) if layer_of(b) >= layer_of(a)}
    assert not wrong, f"imports that do not go down the layers {LAYERS}: {wrong}"


def test_package_graph_has_no_cycle():
    graph: dict[str, set[str]] = {}
    for a, b in package_edges(import_graph()):
        graph.setdefault(a, set()).add(b)
    assert find_cycle(graph) is None


def test_library_never_imports_the_stages_or_the_cli():
    upward = {(module, imported) for module, imports in import_graph().items() for imported in imports
              if imported.split(".")[0] == "pipelines" or imported in CLI_MODULES}
    assert upward - KNOWN_UPWARD == set(), "library modules import the stages or the CLI"
    assert KNOWN_UPWARD - upward == set(), "stale KNOWN_UPWARD entries: remove them"


def test_library_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_every_first_party_import_names_a_module():
    """spar 0.2 dropped the flat module paths of spar 0.1 (``spar.config``, ``spar.tuning``, ...): every ``spar.*``
    and ``pipelines.*`` import of the library, the stages, the tests and the benchmarks names a module (or a name a
    module defines) that exists. The pre-move fixture maker is run with spar 0.1's code and is left out, and so are
    relative imports (those of the modules a published model ships, which name its own files)."""
    files = [*SPAR.rglob("*.py"), *(ROOT / "pipelines").rglob("*.py"), *(ROOT / "bench").rglob("*.py"),
             *(p for p in (ROOT / "tests").rglob("*.py") if "fixtures" not in p.parts)]
    missing = {}
    for path in sorted(files):
        gone = sorted(m for m in _imports(path, relative=False)
                      if m.split(".")[0] in ("spar", "pipelines", "bench") and not _is_module(m))
        if gone:
            missing[str(path.relative_to(ROOT))] = gone
    assert not missing, missing


def test_the_benchmarks_are_one_package():
    """``bench`` is a package run as ``python -m bench.NAME``: every script reaches its shared module as
    ``bench._common``, and none sets ``sys.path`` up (they did, four different ways, to import ``_common``)."""
    assert (ROOT / "bench" / "__init__.py").is_file()
    odd = {}
    for path in sorted((ROOT / "bench").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        sets_path = any(isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                        and node.value.id == "sys" for node in ast.walk(tree))
        imports = _imports(path, relative=False)
        if sets_path or "_common" in imports or (path.stem not in ("__init__", "_common")
                                                           and "bench._common" not in imports):
            odd[path.name] = sorted(m for m in imports if "_common" in m)
    assert not odd, odd


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


def test_the_docs_name_modules_that_exist():
    """Every ``spar/...py`` path README.md and docs/*.md name exists (the move rewrote them; a stale one fails), and
    docs/architecture.md names every package of :data:`LAYERS`."""
    import re

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = {}
    for doc in docs:
        paths = set(re.findall(r"(?<![\w/.])spar/[\w/]+\.py\b", doc.read_text(encoding="utf-8")))
        gone = sorted(p for p in paths if not (ROOT / p).exists())
        if gone:
            missing[doc.name] = gone
    assert not missing, missing
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert all(f"{package}/" in architecture for layer in LAYERS for package in layer)
