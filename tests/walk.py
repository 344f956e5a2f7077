"""Follow an experiment's config through the code that runs: which files a reader visits, and how often they climb.

A *walk* runs a function under :func:`sys.setprofile` and records every first-party function (``spar/``,
``pipelines/``) that is handed the config: the whole ``cfg``, one of its sections (any pydantic model reachable from
it: ``cfg.encode.lambda_`` is the config too, under another name), or an object that holds the config (``self.cfg``).
Those functions are what a reader follows to learn what the config means at that point.

- **files**: the files of those functions;
- **names**: the functions (``module:qualname``);
- **climbs**: the distinct calls between them that cross into another file (caller -> callee, each a place the
  reader descends into another file and must climb back up from to continue).

``python tests/walk.py`` prints both walks of issue #38 on a throw-away run of the embedded default (a fitted
projection Λ; nothing is encoded): ``pipelines/encode.py``'s plan, and "which Λ" (the part of that walk under the
functions that resolve the experiment's Λ).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel



def _root() -> Path:
    """The checkout whose spar is imported (``PYTHONPATH`` may point at another one, to walk its code)."""
    import spar

    return Path(spar.__file__).resolve().parents[1]


def config_parts(cfg: BaseModel) -> set[int]:
    """``id`` of the config and of every pydantic model reachable from it (its sections, nested sections, the
    sections of its question sets)."""
    found: set[int] = set()

    def visit(value: Any) -> None:
        if isinstance(value, BaseModel):
            if id(value) in found:
                return
            found.add(id(value))
            for name in type(value).model_fields:
                visit(getattr(value, name, None))
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    visit(cfg)
    return found


@dataclass
class Walk:
    names: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    climbs: set[tuple[str, str]] = field(default_factory=set)
    #: name -> the names it was reached from (the tree, for reading)
    callers: dict[str, set[str]] = field(default_factory=dict)

    def report(self) -> str:
        return (f"{len(self.files)} files, {len(self.names)} names, {len(self.climbs)} climbs\n  files: "
                + ", ".join(sorted(self.files)) + "\n  climbs: "
                + "; ".join(f"{a} -> {b}" for a, b in sorted(self.climbs)))


def walk(run: Callable[[], Any], cfg: BaseModel, within: Iterable[str] | None = None) -> Walk:
    """Run ``run()`` and record the walk of ``cfg`` through it; ``within``: only the part of the walk under the
    functions named (``module:qualname``), e.g. those that resolve Λ."""
    parts = config_parts(cfg)
    root = _root()
    first_party = (str(root / "spar") + "/", str(root / "pipelines") + "/")
    within = set(within or ())
    result = Walk()
    stack: list[tuple[Any, str | None, bool]] = []  # (frame, its name when it follows the config, inside `within`)

    def follows(frame) -> bool:
        code = frame.f_code
        for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
            value = frame.f_locals.get(name)
            if id(value) in parts or id(getattr(value, "cfg", None)) in parts:
                return True
        return False

    def profile(frame, event, arg):
        if event == "call":
            filename = frame.f_code.co_filename
            name = None
            if filename.startswith(first_party) and follows(frame):
                module = str(Path(filename).relative_to(root))
                name = f"{module}:{frame.f_code.co_qualname}"
            inside = bool(stack and stack[-1][2]) or (name is not None and name in within) or not within
            if name is not None and inside:
                caller = next((n for f, n, _ in reversed(stack) if n is not None), None)
                result.names.add(name)
                result.files.add(name.split(":")[0])
                if caller is not None:
                    result.callers.setdefault(name, set()).add(caller)
                    if caller.split(":")[0] != name.split(":")[0]:
                        result.climbs.add((caller, name))
            stack.append((frame, name, inside))
        elif event == "return" and stack and stack[-1][0] is frame:
            stack.pop()

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return result


#: The functions that answer "which Λ" in pipelines/encode.py's plan (before issue #38: three per encoder).
WHICH_LAMBDA = {"pipelines/encode.py:load_encoder", "pipelines/encode.py:configured_encoder",
                "pipelines/encode.py:encoder_sources", "spar/experiment/plan.py:Experiment.lambda_source",
                "spar/experiment/plan.py:Experiment.encoder"}


def throwaway_run(directory: Path) -> BaseModel:
    """The embedded default's config over ``directory``, holding a fitted projection Λ (``lambda/``) and nothing
    else: enough for encode's plan to resolve everything it needs."""
    from spar.core.config import load_config
    from spar.data.readers import read_corpus
    from spar.lexical.projection import ProjectionLambda

    cfg = load_config(None, [f"experiment.output_dir={directory}", "train.lexical.dim=32"])
    texts = [f"{p.title} {p.text}" for p in read_corpus(cfg.data.corpus)]
    ProjectionLambda.fit(texts, dim=32).save(directory / "lambda")
    return cfg


def encode_walks(directory: Path) -> tuple[Walk, Walk]:
    """(the walk of encode's plan, the which-Λ part of it) on a throw-away run in ``directory``."""
    import pipelines.encode

    cfg = throwaway_run(directory)

    def plan() -> None:
        for unit in pipelines.encode.plan(cfg):
            del unit

    return walk(plan, cfg), walk(plan, cfg, within=WHICH_LAMBDA)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        everything, which_lambda = encode_walks(Path(tmp))
    print("pipelines/encode.py's plan:", everything.report())
    print("which Λ:", which_lambda.report())
