"""One thin driver per stage (Tevatron-style): parse typed config, wire library objects, print statistics.

Each stage module declares ``STAGE``, a :class:`spar.core.stage.Stage`: its name, one-line summary, the config sections
it reads (for ``--help``), a ``plan`` (what it writes and what that depends on) and its ``work``; the one runner,
:func:`spar.core.stage.run_unit`, skips an output whose manifest matches the current config and inputs, starts over on
``--force`` and writes atomically. ``run = STAGE.run`` is kept for callers.
"""

#: Stages in pipeline order; ``spar run`` chains them.
STAGES = ["sample", "label", "train", "encode", "tune", "index", "evaluate", "publish"]

#: Stages that make Λ (skipped when ``encode.lambda`` brings one trained elsewhere).
LAMBDA_STAGES = ("sample", "label", "train")


def skipped_by_config(cfg, stage: str) -> str | None:
    """Why ``spar run`` leaves ``stage`` out for this experiment, or None when it runs.

    - ``encode.lambda`` is set: Λ was trained elsewhere, so sample, label and train have nothing to do.
    - no ``data.question_sets``: a Λ-training experiment (e.g. wiki-vital): nothing to encode,
      tune or evaluate.
    """
    from spar.experiment.plan import Experiment

    experiment = Experiment.of(cfg)
    if stage in LAMBDA_STAGES and experiment.encode.lambda_ is not None:
        return f"Λ comes from encode.lambda: {experiment.encode.lambda_.path}"
    if stage not in LAMBDA_STAGES and not experiment.sets:
        return "no data.question_sets: a Λ-only experiment"
    return None
