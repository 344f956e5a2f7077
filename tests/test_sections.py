"""Each stage's ``SECTIONS`` (what ``spar <stage> --help`` documents) lists every config section the stage reads.

Static: the stage module's source is walked for ``cfg.<section>`` accesses, and so is every library function or
class the stage hands the whole ``cfg`` to (followed transitively through the functions and classes those pass
``cfg`` on to, within ``spar``). A class built from ``cfg`` (the :class:`spar.experiment.plan.Experiment`) resolves
its parts lazily, so of a class only ``__init__`` is walked, and then those of its methods and properties whose names
the walked code uses (``experiment.encoder(...)``, ``self.teacher``): a stage reads the sections of the parts it asks
for, not of the whole experiment. Cheap, and it fails as soon as a stage starts reading a section it does not list.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from pipelines import STAGES
from spar.core.config import SparConfig

ROOT = Path(__file__).resolve().parent.parent
SECTION_NAMES = set(SparConfig.model_fields) - {"source"}
#: SparConfig properties and the section they read.
PROPERTIES = {"output_dir": "experiment"}


def _module_path(module: str) -> Path:
    path = ROOT / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _is_cfg(node: ast.AST) -> bool:
    """``cfg`` or ``self.cfg``."""
    if isinstance(node, ast.Name):
        return node.id == "cfg"
    return isinstance(node, ast.Attribute) and node.attr == "cfg" and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


class _Module:
    def __init__(self, name: str):
        self.name = name
        self.tree = ast.parse(_module_path(name).read_text(encoding="utf-8"))
        self.defs = {n.name: n for n in self.tree.body
                     if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
        # name -> module it is imported from (spar/pipelines only), at any level of the file
        self.imports: dict[str, str] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("spar", "pipelines"):
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = node.module


class _Walk:
    """Sections read, functions and classes followed, and the attribute names the walked code uses."""

    def __init__(self) -> None:
        self.found: set[str] = set()
        self.seen: set[tuple[str, str]] = set()
        self.attributes: set[str] = set()
        self.classes: list[tuple[str, ast.ClassDef]] = []
        self.methods: set[tuple[str, str, str]] = set()

    def visit(self, module: str, node: ast.AST) -> None:
        """Sections read under ``node`` of ``module``, following callees that receive ``cfg``."""
        mod = _Module(module)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                self.attributes.add(sub.attr)
                if _is_cfg(sub.value):
                    if sub.attr in SECTION_NAMES:
                        self.found.add(sub.attr)
                    elif sub.attr in PROPERTIES:
                        self.found.add(PROPERTIES[sub.attr])
            if isinstance(sub, ast.Call) and any(_is_cfg(a) for a in [*sub.args, *(k.value for k in sub.keywords)]):
                func = sub.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) \
                    else None
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                        and self.is_class(mod, module, func.value.id):
                    name = func.value.id  # a class built from cfg by a classmethod (Experiment.of(cfg)): the class
                if name is None:
                    continue
                target = (module, name) if name in mod.defs else (mod.imports[name], name) if name in mod.imports \
                    else None
                if target is None or target in self.seen:
                    continue
                self.seen.add(target)
                callee = _Module(target[0])
                definition = callee.defs.get(target[1])
                if isinstance(definition, ast.ClassDef):
                    self.enter_class(target[0], definition)
                elif definition is not None:
                    self.visit(target[0], definition)

    @staticmethod
    def is_class(mod: "_Module", module: str, name: str) -> bool:
        """Whether ``name`` in ``module`` is a class of spar's (defined there or imported from spar/pipelines)."""
        where = module if name in mod.defs else mod.imports.get(name)
        return where is not None and isinstance(_Module(where).defs.get(name), ast.ClassDef)

    def enter_class(self, module: str, cls: ast.ClassDef) -> None:
        """A class built from ``cfg``: its body but the methods, and ``__init__``; the rest on demand."""
        self.classes.append((module, cls))
        for stmt in cls.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.visit(module, stmt)
            elif stmt.name == "__init__":
                self.methods.add((module, cls.name, stmt.name))
                self.visit(module, stmt)

    def follow_used_methods(self) -> None:
        """Walk each entered class's methods the walked code names, until no new name turns up."""
        grown = True
        while grown:
            grown = False
            for module, cls in list(self.classes):
                for stmt in cls.body:
                    key = (module, cls.name, getattr(stmt, "name", ""))
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and key not in self.methods \
                            and stmt.name in self.attributes:
                        self.methods.add(key)
                        self.visit(module, stmt)
                        grown = True


def sections_read(stage: str) -> set[str]:
    module = f"pipelines.{stage}"
    walk = _Walk()
    walk.visit(module, _Module(module).tree)
    walk.follow_used_methods()
    return walk.found


@pytest.mark.parametrize("stage", STAGES)
def test_sections_list_exactly_the_sections_the_stage_reads(stage):
    declared = set(importlib.import_module(f"pipelines.{stage}").STAGE.sections)
    read = sections_read(stage)
    assert read, f"pipelines/{stage}.py: no cfg.<section> access found (the walk is broken)"
    assert read <= declared, f"pipelines/{stage}.py SECTIONS lacks {sorted(read - declared)}"
    # Every stage's help shows experiment and data (every config must set data.corpus); other extras are stale.
    extra = declared - read - {"experiment", "data"}
    assert not extra, f"pipelines/{stage}.py SECTIONS lists {sorted(extra)}, which it never reads"
    order = [name for name in SparConfig.model_fields if name in declared]
    assert list(importlib.import_module(f"pipelines.{stage}").STAGE.sections) == order, "SECTIONS in config order"


def test_the_walk_enters_a_class_built_by_a_classmethod():
    # publish builds its Experiment with Experiment.of(cfg) (one per stage run): the card's facts (sample, label,
    # train) are read by the Experiment's methods it calls.
    assert {"sample", "label", "train"} <= sections_read("publish")


def test_the_walk_follows_library_calls():
    # tune hands cfg to spar.evaluate.tuning.tune_experiment and ExperimentInputs, which read label.k1/b (BM25) and
    # encode.base.
    assert {"label", "encode", "tune"} <= sections_read("tune")
    # evaluate reads tune.candidates through spar.evaluate.evaluation.evaluate_experiment.
    assert "tune" in sections_read("evaluate")
