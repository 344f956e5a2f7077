"""One thin driver per stage (Tevatron-style): parse typed config, wire library objects, print statistics.

Each stage module defines ``SECTIONS`` (the config sections it reads, for ``--help``), ``SUMMARY`` (one line)
and ``run(cfg: SparConfig, force: bool = False) -> dict`` which returns printable statistics. Every stage is
resumable: it returns at once when its output's manifest matches the current config and inputs.
"""

#: Stages in pipeline order; ``spar run`` chains them.
STAGES = ["sample", "label", "train", "encode", "tune", "index", "evaluate", "publish"]
