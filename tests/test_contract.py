"""The Λ contract is closed: outside ``spar/lexical/`` nothing branches on a Λ kind's name; what differs by kind is
asked of the kind's class (:data:`spar.lexical.base.REGISTRY`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIND_NAMES = ("transformer", "projection", "static")
NAMES = r"""["'](?:transformer|projection|static)["']"""
#: ``kind == "static"``, ``"static" != cfg.kind``, ``config["kind"] == "projection"``, ``.get("kind") in (...)``,
#: ``encoder.kind in ("projection", "static")``.
BRANCHES = [
    re.compile(r"""kind["']?\]?\s*(?:==|!=)\s*""" + NAMES),
    re.compile(NAMES + r"""\s*(?:==|!=)\s*[\w.\[\]"']*kind\b"""),
    re.compile(r"""\.kind\s+(?:not\s+)?in\b"""),
    re.compile(r"""["']kind["'][^)\]]*\)\s*(?:not\s+)?in\b"""),
]
#: Where the kind names are written: the config's ``LambdaKind`` (its one Literal) and ``train.kind``'s default.
NAMED_IN = {"spar/core/config_sections.py"}


def kind_branches(text: str) -> list[str]:
    """Lines that branch on a kind: the patterns above, and any kind name written in code (not in a docstring,
    not as a dict key): ``"projection" in kinds``, ``("static", dim) not in done``, ``kinds=("projection",
    "static")``, ``{"kind": "static"}`` all name a kind where the kind's class should be asked."""
    lines = text.splitlines()
    found = {i for i, line in enumerate(lines) if any(p.search(line) for p in BRANCHES)}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    if tree is not None:
        skip = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                    isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))  # a docstring
            if isinstance(node, ast.Dict):
                skip.update(id(k) for k in node.keys if k is not None)  # {"projection": cfg...projection}: a key
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in KIND_NAMES and id(node) not in skip:
                found.add(node.lineno - 1)
    return [lines[i].strip() for i in sorted(found)]


@pytest.mark.parametrize("line", ['if model.kind == "static":', 'if cfg.train.kind != "projection":',
                                  'config["kind"] == "transformer"', 'getattr(e, "kind", None) in ("a", "b")',
                                  'if lam.kind in ("projection", "static"):', '"static" == model.kind',
                                  'wanted = "projection" in kinds and todo',
                                  'other = kind not in ("projection", "static")',
                                  'todo = [s for s in storages if ("static", dim, seed, s) not in done]',
                                  'COMPUTED = ("projection", "static")',
                                  'x = cfg.model_copy(update={"kind": "static"})',
                                  'def run(cfg, kinds=("projection", "static")): pass', 'train(kind="transformer")'])
def test_the_scan_sees_a_kind_branch(line):
    assert kind_branches(line) == [line]


@pytest.mark.parametrize("line", ['x = [p for p in kept if (p["kind"], p["dim"]) not in asked]',
                                  'shared = {"projection": cfg.train.lexical.projection}',
                                  'def f():\n    """Fits a "projection" Λ."""', '# the "static" kind'])
def test_the_scan_passes_what_names_no_kind(line):
    assert kind_branches(line) == []


def test_the_kind_names_are_the_registry_s():
    from spar.lexical import KINDS

    assert set(KIND_NAMES) == set(KINDS)


def test_no_kind_branch_outside_spar_lexical():
    found = {}
    for path in sorted([*(ROOT / "spar").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]):
        if "lexical" in path.relative_to(ROOT).parts[:2] or path.relative_to(ROOT).as_posix() in NAMED_IN:
            continue
        lines = kind_branches(path.read_text(encoding="utf-8"))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert not found, found


def test_every_registered_kind_answers_the_contract():
    from spar.lexical import KINDS, lambda_class
    from spar.lexical.base import LexicalModel

    for kind in KINDS:
        cls = lambda_class(kind)
        assert issubclass(cls, LexicalModel) and cls.kind == kind
        assert cls.files and "spar_lambda.json" in cls.files and cls.published_files
        assert (cls.default_learning_rate is None) == (not cls.trainable)
        for method in ("build", "load", "load_published", "card_facts", "published_spec", "published_module",
                       "encode_query", "encode_passage", "save"):
            assert getattr(cls, method) is not getattr(LexicalModel, method), (kind, method)


def test_an_unknown_kind_is_one_line():
    from spar.core.errors import ConfigError
    from spar.lexical import lambda_class

    with pytest.raises(ConfigError, match="unknown Λ kind 'sparse'; use one of transformer, projection, static"):
        lambda_class("sparse")


def test_module_docstrings_open_with_two_or_three_lines():
    """Every library and stage module says what it is in at most three lines before any detail."""
    import ast

    long_openings = {}
    for path in sorted([*(ROOT / "spar").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc, f"{path.relative_to(ROOT)}: no module docstring"
        opening = doc.split("\n\n")[0].splitlines()
        if len(opening) > 3:
            long_openings[str(path.relative_to(ROOT))] = len(opening)
    assert not long_openings, long_openings
