"""The docstring examples of every library module run as tests (what ``pytest --doctest-modules spar/`` would do).

Examples that need the JVM, a finished run under ``runs/`` or a GPU carry ``# doctest: +SKIP`` and say why in the
text before them. Examples run from the repository root (they read ``data/scifact-sample``).
"""

from __future__ import annotations

import doctest
import importlib
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted((ROOT / "spar").rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_modules_with_examples_are_found():
    assert {"spar.index.spar_index", "spar.evaluate.metrics", "spar.evaluate.tuning", "spar.train.training",
            "spar.model.embeddings", "spar.data.answers", "spar.evaluate.exact"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module, monkeypatch):
    monkeypatch.chdir(ROOT)
    mod = importlib.import_module(module)
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(mod, module) if t.examples]
    assert tests, f"{module}: has '>>>' but doctest finds no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    for test in tests:
        runner.run(test, out=report.write)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, report.getvalue()
