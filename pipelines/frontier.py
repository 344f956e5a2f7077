"""``spar frontier -c CONFIG``: the quality-per-byte frontier of an experiment -> ``frontier/`` (+ results).

Needs the run's ``queries/``, ``labels/``, ``teacher_index/`` and base embeddings (``spar run --to encode
encode.encoders=[base]``, or a whole run). Every point fits or trains its Λ in memory (static ones under
``frontier/static-d<dim>-s<seed>/``); nothing else of the run changes. Options (``frontier.*`` is not a config
section: they are command-line flags of this command): ``--kinds``, ``--dims``, ``--seeds``, ``--storages``;
``section.key=value`` overrides apply as for the stages (e.g. the static Λ's ``train.max_steps``). Points computed
earlier under the same settings are kept (``--force`` recomputes them), so a frontier can be grown kind by kind. Writes
``frontier/frontier.{json,md,png}`` and copies them to ``<results_dir>/<name>-frontier.*``. Logic:
:mod:`spar.evaluate.frontier`.
"""

from __future__ import annotations

import shutil

from spar.core.artifacts import ensure_writable, write_json_atomic

SUMMARY = "Λ kinds × dimensions × seeds: Λ fidelity and SPAR nDCG@10 against index size -> frontier/, results/"


def settings_fingerprint(cfg, kind: str) -> str:
    """What a ``kind`` point depends on besides (dim, seed): points computed under other settings are recomputed.
    A projection depends on the teacher, the data and the base; a trained kind also on every training option."""
    from spar.core.fingerprint import fingerprint_dict
    from spar.core.artifacts import manifest_fingerprint
    from spar.lexical import lambda_class
    from spar.core.run_context import RunContext
    from spar.core.stage import settings
    from spar.evaluate.tuning import tune_settings

    shared = {"label": settings(cfg.label), "tune": tune_settings(cfg), "data": settings(cfg.data),
              "projection": cfg.train.lexical.projection,
              **({"nonzeros": cfg.train.lexical.nonzeros} if cfg.train.lexical.projection == "sparse" else {}),
              "base": manifest_fingerprint(RunContext(cfg).embeddings("base"))}
    if lambda_class(kind).trainable:  # runtime-only options (W&B, workers, checkpoints) change no point
        shared["train"] = settings(cfg.train)
        shared["labels"] = manifest_fingerprint(RunContext(cfg).artifact("labels"))
    return fingerprint_dict(shared)


def run(cfg, kinds=("projection", "static", "transformer"), dims=None, seeds=None, force: bool = False,
        storages=("float32",)) -> dict:
    import json

    from spar.core.run_context import RunContext
    from spar.evaluate.frontier import DEFAULT_DIMS, FrontierPoint, run_frontier
    from spar.lexical import KINDS
    from spar.index.storage import check_storage

    storages = tuple(check_storage(s) for s in storages)

    out = ensure_writable(RunContext(cfg).artifact("frontier"))
    settings = {kind: settings_fingerprint(cfg, kind) for kind in KINDS}
    known = []
    if not force and (out / "frontier.json").exists():
        previous = json.loads((out / "frontier.json").read_text())
        # Points of earlier invocations made with the same settings are kept (add kinds, dims or seeds bit by bit).
        known = [FrontierPoint(**p) for p in previous["points"]
                 if previous.get("settings", {}).get(p["kind"]) == settings[p["kind"]]]
    def save_progress(points) -> None:  # a killed frontier keeps what it computed; the next run reuses it
        from dataclasses import asdict

        previous = json.loads((out / "frontier.json").read_text()) if (out / "frontier.json").exists() else {}
        write_json_atomic(out / "frontier.json", {**previous, "settings": settings,
                                                  "points": [asdict(p) for p in points]})

    report = run_frontier(cfg, kinds, dims or DEFAULT_DIMS, seeds or (0, 1, 2), storages, out, progress=print,
                          known=known, on_point=save_progress)
    report.details["settings"] = settings
    report.details["command"] = RunContext(cfg).command_line("frontier")
    write_json_atomic(out / "frontier.json", report.to_json())
    table = report.markdown()
    (out / "frontier.md").write_text(table + f"\n`{report.details['command']}`\n", encoding="utf-8")
    report.plot(out / "frontier.png")
    results = ensure_writable(cfg.results_dir)
    for suffix in ("json", "md", "png"):
        shutil.copyfile(out / f"frontier.{suffix}", results / f"{cfg.experiment.name}-frontier.{suffix}")
    return {"points": len(report.points), "table": table, "output": str(out),
            "results": str(results / f"{cfg.experiment.name}-frontier.md")}
