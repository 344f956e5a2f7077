"""One run's context: where its artifacts lie, the command that reproduces it and its dataset's name.

Stages and library functions ask a :class:`RunContext` instead of rebuilding paths from ``cfg.output_dir`` (the
layout of :data:`spar.core.artifacts.LAYOUT` plus the embeddings' ``<encoder>/<split>`` below it) or re-deriving the
command line.

Example::

    >>> from spar.core.config import load_config
    >>> run = RunContext(load_config(None))
    >>> str(run.embeddings("lambda", "queries-dev")), run.dataset
    ('runs/scifact-sample/embeddings/lambda/queries-dev', 'scifact-sample')
    >>> str(run.passages), str(RunContext.at("runs/other").artifact("lambda"))
    ('runs/scifact-sample/queries/passages.arrow', 'runs/other/lambda')
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from pathlib import Path
from typing import Any, Mapping

from spar.core.artifacts import PASSAGES_FILE, RUN_COMMAND_ENV, artifact_dir, is_complete, read_manifest


#: The encoders whose vectors a run stores (``embeddings/<encoder>/``): the base retriever and Λ.
ENCODERS = ("base", "lambda")


@dataclass(frozen=True)
class RunContext:
    """The run a config describes (``cfg``: a :class:`spar.core.config.SparConfig`)."""

    cfg: Any

    @classmethod
    def at(cls, output_dir: str | Path) -> "RunContext":
        """A run known by its output directory alone (another run's, a benchmark's): its artifact paths only."""
        return cls(SimpleNamespace(experiment=SimpleNamespace(output_dir=str(output_dir))))

    @property
    def output_dir(self) -> Path:
        return Path(self.cfg.experiment.output_dir)

    def artifact(self, name: str) -> Path:
        """``<output_dir>/<artifact>`` (:data:`spar.core.artifacts.LAYOUT`)."""
        return artifact_dir(self.output_dir, name)

    @property
    def passages(self) -> Path:
        """``queries/passages.arrow``: the passages table the sample stage writes (rows the labels refer to)."""
        return self.artifact("queries") / PASSAGES_FILE


    def embeddings(self, encoder: str, split: str = "passages") -> Path:
        """``embeddings/<encoder>/<split>``: encoder in {base, lambda}; split ``passages``, ``queries-dev`` or
        ``queries-test``."""
        return self.artifact("embeddings") / encoder / split

    def encoding(self) -> dict[str, dict[str, str]]:
        """How each encoder's passage vectors were made, from the embeddings' manifests: ``{"base": {"precision":
        "32", "backend": "torch"}, "lambda": {...}}`` (encoders not encoded yet are left out). Results, ``tune.json``,
        the summary and the model card state it: bf16 vectors (``precision: auto`` on a CPU with native bf16) move
        scores in the third decimal (:func:`describe_encoding`)."""
        out = {}
        for encoder in ("base", "lambda"):
            directory = self.embeddings(encoder)
            if is_complete(directory):
                stats = read_manifest(directory).get("stats", {})
                out[encoder] = {"precision": str(stats.get("precision", "32")),
                                "backend": str(stats.get("backend", "sparse"))}
        return out

    @property
    def results(self) -> tuple[Path, Path]:
        """``<results_dir>/<name>.json`` and ``.md``."""
        return self.results_file(self.cfg.experiment.name)

    def results_file(self, stem: str) -> tuple[Path, Path]:
        """``<results_dir>/<stem>.json`` and ``.md``."""
        return self.cfg.results_dir / f"{stem}.json", self.cfg.results_dir / f"{stem}.md"

    def results_paths(self) -> list[Path]:
        """Every results file of the run (``<results_dir>/<stem>.json`` and ``.md`` of each group)."""
        return [path for stem in self.results_groups for path in self.results_file(stem)]

    @property
    def results_groups(self) -> dict[str, list[str]]:
        """Results file stem -> the question sets whose tables it holds, by the names their outputs carry
        (``data.question_sets.<set>.results``, default the experiment's name; ``[""]``: the default set)."""
        from spar.core.config_sections import stored_set_name

        groups: dict[str, list[str]] = {}
        for name, qs in self.cfg.data.question_sets.items():
            if qs.test is not None:
                groups.setdefault(qs.results or self.cfg.experiment.name, []).append(stored_set_name(name))
        return groups or {self.cfg.experiment.name: []}

    @property
    def dataset(self) -> str:
        """The collection's name: a BEIR corpus file's directory (``.../scifact/corpus.jsonl`` -> ``scifact``); the
        experiment's name otherwise (a ``passages.tsv`` headed the results as "passages", #47), and for a corpus of
        several files."""
        from spar.core.artifacts import plain_name

        if not isinstance(self.cfg.data.corpus, str):
            return self.cfg.experiment.name
        corpus = plain_name(self.cfg.data.corpus)
        return corpus.parent.name if corpus.stem == "corpus" else self.cfg.experiment.name

    def command_line(self, stage: str) -> str:
        """The ``spar`` command that produced a result: the ``spar run`` that started this stage, else this
        process's own when it is the CLI, else an equivalent."""
        if os.environ.get(RUN_COMMAND_ENV):
            return os.environ[RUN_COMMAND_ENV]
        argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("")
        if (argv0.name in ("spar", "cli.py")) and len(sys.argv) > 1:  # `spar ...`, `python -m pipelines.cli ...`
            return "spar " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        source = f" --config {shlex.quote(self.cfg.source)}" if self.cfg.source else ""
        return f"spar {stage}{source}"


#: How a precision reads in results and cards.
PRECISION_NAMES = {"32": "fp32", "bf16-mixed": "bf16", "16-mixed": "fp16"}


def describe_encoding(encoding: Mapping[str, Mapping[str, str]]) -> str:
    """:meth:`RunContext.encoding` in one phrase.

        >>> describe_encoding({"base": {"precision": "bf16-mixed", "backend": "torch"},
        ...                    "lambda": {"precision": "32", "backend": "sparse"}})
        'base bf16 (torch), Λ fp32 (sparse)'
    """
    names = {"base": "base", "lambda": "Λ"}
    return ", ".join(f"{names.get(k, k)} {PRECISION_NAMES.get(v['precision'], v['precision'])} ({v['backend']})"
                     for k, v in encoding.items())


def published_model_dir(cfg) -> Path:
    """Where a run's model is published: ``publish.output``, else ``<output_dir>/model`` (a function, not a
    property of :class:`RunContext`, so that only the stages that call it read the publish section)."""
    return Path(cfg.publish.output) if cfg.publish.output else RunContext(cfg).artifact("model")
