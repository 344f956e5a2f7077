"""``spar frontier -c CONFIG``: the quality-per-byte frontier of an experiment -> ``frontier/`` (+ results).

Needs the run's ``queries/``, ``labels/``, ``teacher_index/`` and base embeddings (``spar run --to encode
encode.encoders=[base]``, or a whole run). Every point is a run of the stages under
``frontier/points/<kind>-d<dim>-s<seed>/`` (``train`` and ``encode`` make its Λ; per storage, ``<storage>/``'s
``tune`` and ``index`` its μ and index), linking the run's artifacts; nothing else of the run changes
(:mod:`spar.sweep.points`). A point's run is one the other stages take as it is: ``spar evaluate -c
frontier/points/<point>/<storage>/config.yaml``. Options (``frontier.*`` is not a config
section: they are command-line flags of this command): ``--kinds``, ``--dims``, ``--seeds``, ``--storages``,
``--indexes`` (index types timed on the first seed: the exhaustive ``flat``, what the default rule needs, and any
other registered type, e.g. the approximate ``hnsw`` and ``ivf``, built as ``spar index`` builds them and also scored
against the exact scan); ``section.key=value`` overrides apply as for the stages
(e.g. the static Λ's ``train.max_steps``, ``index.nprobe``).

Points computed earlier under the same settings are kept, so a frontier can be grown kind by kind, dimension by
dimension (and a point scored again finds its stages' artifacts up to date); ``--force`` recomputes the points this
command asks for, their stages included, and keeps the others. Points made under other
settings (another teacher, base or training option) are not mixed in: they are moved to
``frontier/superseded-<settings>.json``, never dropped. Every command that added to the frontier is recorded.
Writes ``frontier/frontier.{json,md,png}`` and copies them to ``<results_dir>/<name>-frontier.*`` (a results copy
holding points this frontier lacks is first kept as ``frontier/replaced-<name>-frontier.json``); a command that
would leave the frontier empty is refused and writes nothing. Logic: the package :mod:`spar.sweep`
(:mod:`spar.sweep.frontier`), the report and the default rule: :mod:`spar.sweep.report`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

from spar.core.artifacts import ensure_writable, write_json_atomic
from spar.core.config_fields import MAX_SEED
from spar.core.errors import ConfigError

SUMMARY = "Λ kinds × dimensions × seeds: Λ fidelity and SPAR nDCG@10 against index size -> frontier/, results/"

#: What names one measured point of the frontier (a point asked again with --force is recomputed).
POINT_KEY = ("kind", "dim", "seed", "storage")


def settings_fingerprint(cfg, kind: str) -> str:
    """What a ``kind`` point depends on besides (dim, seed): points computed under other settings are recomputed.
    A projection depends on the teacher, the data and the base; a trained kind also on every training option."""
    from spar.core.fingerprint import fingerprint_dict
    from spar.core.artifacts import is_complete, manifest_fingerprint
    from spar.lexical import lambda_class
    from spar.core.stage import settings
    from spar.data.question_sets import data_settings
    from spar.experiment.declarations import tune_section
    from spar.experiment.plan import Experiment

    experiment = Experiment.of(cfg)
    lexical = experiment.train.lexical
    shared = {"label": settings(experiment.label), "tune": tune_section(cfg), "data": data_settings(experiment.data),
              "projection": lexical.projection,
              **({"nonzeros": lexical.nonzeros} if lexical.projection == "sparse" else {}),
              "base": manifest_fingerprint(experiment.run.embeddings("base"))}
    if lambda_class(kind).trainable:  # runtime-only options (W&B, workers, checkpoints) change no point
        shared["train"] = settings(experiment.train)
        labels = experiment.run.artifact("labels")  # none yet: no trained point can be made (nor kept)
        shared["labels"] = manifest_fingerprint(labels) if is_complete(labels) else None
    return fingerprint_dict(shared)


def _listed(flag: str, values: Sequence, allowed: Sequence | None = None) -> tuple:
    """``values`` as given on the command line, refused when empty, repeated, or (``allowed``) unknown."""
    values = tuple(values)
    if not values:
        raise ConfigError(f"{flag} is empty: give at least one value")
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ConfigError(f"{flag} lists {', '.join(repeated)} more than once")
    if allowed is not None:
        unknown = [str(v) for v in values if v not in allowed]
        if unknown:
            raise ConfigError(f"{flag}: unknown {', '.join(map(repr, unknown))}; use {', '.join(map(str, allowed))}")
    return values


def check_arguments(cfg, kinds: Sequence[str] | None, dims, seeds, storages, index_types) -> tuple[tuple, ...]:
    """Refuse what no frontier can be made of, in one line each (#31 item 7), before anything is computed: unknown
    or repeated values, empty lists, dimensions below 1, and a kind named that the run cannot provide
    (``transformer``: the run's own trained Λ of that kind). ``kinds=None``: every kind, the run's own Λ when it
    has one."""
    from spar.index.types.registry import index_type_names
    from spar.lexical import KINDS, computed_kinds
    from spar.index.storage import STORAGES

    if kinds is not None:
        kinds = _listed("--kinds", kinds, KINDS)
        for kind in kinds:
            if kind not in computed_kinds():
                _check_run_lambda(cfg, kind)
    dims = _listed("--dims", dims)
    if any(d < 1 for d in dims):
        raise ConfigError(f"--dims must be positive, got {', '.join(str(d) for d in dims if d < 1)}")
    seeds = _listed("--seeds", seeds)
    bad = [s for s in seeds if not 0 <= s <= MAX_SEED]  # numpy's generators and Lightning's seed_everything take
    if bad:  # 0 ... 2**32 - 1: past that a traceback after the first point's work (#37, #48)
        raise ConfigError(f"--seeds must be between 0 and {MAX_SEED:,}, got {', '.join(str(s) for s in bad)}")
    return (tuple(KINDS) if kinds is None else kinds, dims, seeds,
            _listed("--storages", storages, STORAGES), _listed("--indexes", index_types, index_type_names()))


def _check_run_lambda(cfg, kind: str) -> None:
    from spar.experiment.plan import Experiment

    experiment = Experiment.of(cfg)
    lam_dir = experiment.run.artifact("lambda")
    source = experiment.own_lambda  # the Λ the frontier scores as the run's own point
    found = source.kind if source is not None else None
    if found != kind:
        held = f"holds a {found} Λ" if found else "holds no trained Λ"
        raise ConfigError(f"--kinds {kind}: the frontier scores the run's own trained {kind} Λ, but {lam_dir} "
                          f"{held} (train one with `spar train -c CONFIG train.kind={kind}`, or leave {kind} out)")


def point_stages():
    """The stages a frontier point runs (:class:`spar.sweep.points.PointStages`)."""
    from pipelines import encode, index, train, tune
    from spar.sweep.points import PointStages

    return PointStages(train=train.STAGE, encode=encode.STAGE, tune=tune.STAGE, index=index.STAGE)


def run(cfg, kinds: Sequence[str] | None = None, dims=None, seeds=None, force: bool = False,
        storages: Sequence[str] = ("float32",), index_types: Sequence[str] | None = None) -> dict:
    """Compute the frontier's missing points and write it. ``kinds=None``: projection, static, and the run's own
    trained Λ when it is of another kind; kinds given explicitly must all be computable. ``index_types=None``: the
    exhaustive type (:func:`spar.index.types.registry.exhaustive_type`)."""
    from spar.core.stage_scope import stage_scope

    with stage_scope():  # one Experiment for the command: its checks, settings and every point share it
        return _checked_run(cfg, kinds, dims, seeds, force, storages, index_types)


def _checked_run(cfg, kinds, dims, seeds, force: bool, storages, index_types) -> dict:
    from spar.index.types.registry import exhaustive_type
    from spar.sweep.frontier import DEFAULT_DIMS
    from spar.lexical import KINDS
    from spar.experiment.plan import Experiment

    kinds, dims, seeds, storages, index_types = check_arguments(
        cfg, kinds, DEFAULT_DIMS if dims is None else dims, (0, 1, 2) if seeds is None else seeds, storages,
        (exhaustive_type().name,) if index_types is None else index_types)

    # What the points depend on, the run's base embeddings first: a run without them is refused before frontier/
    # exists (it was left behind empty).
    settings = {kind: settings_fingerprint(cfg, kind) for kind in KINDS}
    out = Experiment.of(cfg).run.artifact("frontier")
    created = not out.exists()
    try:
        return _run(cfg, kinds, dims, seeds, force, storages, index_types, ensure_writable(out), settings)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # made here and still empty: nothing to keep
        raise


def _run(cfg, kinds, dims, seeds, force: bool, storages, index_types, out: Path, settings: dict) -> dict:
    import json
    from dataclasses import asdict

    from spar.experiment.plan import Experiment
    from spar.sweep.frontier import run_frontier
    from spar.sweep.report import FrontierPoint

    previous = json.loads((out / "frontier.json").read_text()) if (out / "frontier.json").exists() else {}
    kept, superseded = [], []
    for p in previous.get("points", []):
        (kept if previous.get("settings", {}).get(p["kind"]) == settings[p["kind"]] else superseded).append(p)
    if superseded:  # measurements of other settings: never mixed in, never lost
        aside = out / f"superseded-{previous.get('settings', {}).get(superseded[0]['kind'], 'unknown')[:12]}.json"
        earlier = json.loads(aside.read_text()).get("points", []) if aside.exists() else []
        write_json_atomic(aside, {**previous, "points": [p for p in earlier if p not in superseded] + superseded})
        print(f"frontier: {len(superseded)} point(s) made under other settings moved to {aside}")
    if force:  # recompute what this command asks for; keep every other point
        asked = {(k, d, s, st) for k in kinds for d in dims for s in seeds for st in storages}
        kept = [p for p in kept if tuple(p[f] for f in POINT_KEY) not in asked
                and not (p["seed"] is None and p["kind"] in kinds and p["storage"] in storages)]
    known = [FrontierPoint.from_json(p) for p in kept]
    experiment = Experiment.of(cfg)
    command = experiment.run.command_line("frontier")
    commands = [*previous.get("commands", [previous["command"]] if previous.get("command") else []), command]

    def save_progress(points) -> None:  # a killed frontier keeps what it computed; the next run reuses it
        write_json_atomic(out / "frontier.json", {**previous, "settings": settings, "commands": commands,
                                                  "points": [asdict(p) for p in points]})

    report = run_frontier(cfg, point_stages(), kinds, dims, seeds, storages, out, progress=print, known=known,
                          on_point=save_progress, index_types=index_types, force=force)
    if not report.points:
        raise ConfigError(f"no frontier point was computed for --kinds {','.join(kinds)} and none is kept in "
                          f"{out / 'frontier.json'}: nothing written")
    report.details.update({"settings": settings, "commands": commands, "command": command})
    write_json_atomic(out / "frontier.json", report.to_json())
    table = report.markdown(commands)
    (out / "frontier.md").write_text(table, encoding="utf-8")
    report.plot(out / "frontier.png")
    results, name = ensure_writable(cfg.results_dir), experiment.name
    _keep_richer_results(results / f"{name}-frontier.json", report.points, out)
    for suffix in ("json", "md", "png"):
        shutil.copyfile(out / f"frontier.{suffix}", results / f"{name}-frontier.{suffix}")
    choice = report.choice()
    return {"points": len(report.points), "table": table, "output": str(out),
            "results": str(results / f"{name}-frontier.md"),
            **({"choice": f"{choice.kind} {choice.dim} {choice.storage}"} if choice else {})}


def _keep_richer_results(target: Path, points, out: Path) -> None:
    """Before ``target`` (the results copy) is replaced: if it holds points this frontier lacks (a committed
    frontier, made in another run directory), copy it to ``out`` first and say so: nothing is lost."""
    import json

    if not target.exists():
        return
    try:
        earlier = json.loads(target.read_text()).get("points", [])
    except (OSError, ValueError, AttributeError):
        earlier = []
    have = {(p.kind, p.dim, p.seed, p.storage) for p in points}
    missing = [p for p in earlier if isinstance(p, dict) and (p.get("kind"), p.get("dim"), p.get("seed"),
                                                              p.get("storage")) not in have]
    if missing:
        aside = out / f"replaced-{target.name}"
        shutil.copyfile(target, aside)
        print(f"frontier: {target} held {len(missing)} point(s) this frontier lacks: kept as {aside} before "
              "replacing it")
