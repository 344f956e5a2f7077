"""Stages as data, one runner: what a stage reads and writes is declared; checking, skipping and writing are here.

A stage (``pipelines/<name>.py``) declares a :class:`Stage`: its name, summary, the config sections it reads, a
``plan`` (the :class:`Unit`: output directory, kind, the settings and input fingerprints it depends on) and its
``work`` (fills the artifact's temporary directory, returns printable statistics). :func:`run_unit` does the rest
for every artifact of every stage: up to date means skipped, ``--force`` starts over, the output is written
atomically with its manifest. Options that never change an output (threads, W&B mode, devices, ...) are marked on
their config field (:data:`spar.core.config_fields.RUNTIME`) and left out of fingerprints by :func:`settings`. A stage
that writes something logs one W&B run (:class:`spar.core.tracking.StageRun`): its ``report`` and every artifact it
wrote, with what each was made from.

Example::

    >>> import tempfile, pathlib
    >>> from spar.core.stage import Unit, run_unit
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "tune"
    >>> unit = Unit(out, kind="tune", config={"metric": "nDCG@10"}, inputs={})
    >>> def work(writer):
    ...     _ = (writer.path / "tune.json").write_text("{}")
    ...     return {"mu": 1.0}
    >>> run_unit(unit, work), run_unit(unit, work)
    ({'mu': 1.0}, {'skipped': True})
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from pydantic import BaseModel

from spar.core.artifacts import ArtifactSpec, ArtifactWriter, is_complete, read_manifest, remove_stale_temporaries
from spar.core.dependency import Dependency, merged, resolve
from spar.core.output_lock import holds_output_lock
from spar.core.stage_scope import stage_scope
from spar.core.lineage import changed_sources, check_all_current
from spar.core.tracking import Report, StageRun, default_report


@dataclass
class Unit(ArtifactSpec):
    """One artifact a stage writes: where, and (:class:`spar.core.artifacts.ArtifactSpec`: kind, settings, inputs,
    resumable, sources) what it is and depends on (its fingerprint)."""

    output: Path
    #: Up to date only while every file still has the checksum its manifest records (not just its size).
    verify_content: bool = False
    #: More than the manifest that must hold for the output to be up to date (e.g. evaluate's results files).
    current: Callable[[], bool] | None = None
    #: What ``work`` needs besides the config (e.g. the encoder and the items of one embedding split).
    payload: Any = field(default=None, repr=False)
    #: False on a worker rank of a multi-process job: it works in the primary's directory and never writes the
    #: artifact (nor discards it on ``--force``); the primary does.
    primary: bool = True
    #: What it is made from, each one value (:mod:`spar.core.dependency`): checked here (a missing or edited input is
    #: refused naming its stage), and its fingerprints and lineage records added to ``inputs`` and ``sources``.
    needs: Sequence[Dependency] = ()
    # sources (ArtifactSpec): every artifact among them must be current before this unit is skipped or written, and a
    # change to any of them makes the output out of date.

    def __post_init__(self) -> None:
        self.output = Path(self.output)
        if self.needs:
            inputs, sources = resolve(self.needs)
            self.inputs = merged(self.inputs, inputs)
            self.sources = [*sources, *self.sources]

    def writer(self) -> ArtifactWriter:
        return ArtifactWriter(self.output, **self.spec())

    def up_to_date(self, fingerprint: str) -> bool:
        return (is_complete(self.output, fingerprint, content=self.verify_content)
                and (self.current is None or self.current()) and not changed_sources(self.output))


@dataclass
class Declared:
    """An artifact as its experiment declares it (:meth:`spar.experiment.plan.Experiment.artifact`): where it goes,
    its kind, the settings its fingerprint hashes, what it is made from (:mod:`spar.core.dependency`) and the few
    values of its inputs that are no file (a seed, μ₀). A stage's plan makes it a :class:`Unit` (:meth:`unit`)."""

    output: Path
    kind: str
    settings: Any
    needs: Sequence[Dependency] = ()
    #: Input values that are not read from anything (``{"seed": "13"}``, a Λ's description); the rest come from
    #: ``needs``.
    values: dict[str, Any] = field(default_factory=dict)
    resumable: bool = False
    verify_content: bool = False

    def unit(self, **options: Any) -> Unit:
        """The stage runner's unit of this artifact (``options``: :class:`Unit`'s other fields, e.g. ``payload``)."""
        return Unit(self.output, kind=self.kind, config=self.settings, inputs=dict(self.values), needs=self.needs,
                    resumable=options.pop("resumable", self.resumable),
                    verify_content=options.pop("verify_content", self.verify_content), **options)


def is_current(unit: Unit) -> bool:
    """Whether ``unit``'s output is up to date (its stage would skip it); refuses, as running it would, an input
    artifact made from something that has changed since (:func:`spar.core.lineage.check_current`)."""
    check_all_current(unit.sources)
    return unit.up_to_date(unit.writer().fingerprint)


def run_unit(unit: Unit, work: Callable[[ArtifactWriter], dict], force: bool = False,
             on_skip: Callable[[dict], dict] | None = None, guard: Callable[[], None] | None = None) -> dict:
    """Write ``unit`` with ``work`` unless it is up to date (then ``{"skipped": True, **on_skip(manifest)}``).

    ``work`` fills ``writer.path`` (and ``writer.stats`` / ``writer.schema`` for the manifest) and returns the
    statistics to print. ``guard`` may refuse to replace what is there (not called with ``force``). ``force``
    discards a resumable unit's finished parts and writes it again.

    Every run first refuses an input artifact made from something that has changed since
    (:func:`spar.core.lineage.check_current`), and, while this process holds the output directory's lock, removes the
    temporaries (``<artifact>.tmp-<pid>/``) that killed runs left beside the unit's output.
    """
    current = is_current(unit)
    if unit.primary and holds_output_lock():
        remove_stale_temporaries(unit.output.parent, [unit.output.name])
    writer = unit.writer()
    if not force and current:
        return {"skipped": True, **(on_skip(read_manifest(unit.output)) if on_skip else {})}
    if guard is not None and not force:
        guard()
    if not unit.primary:
        return work(writer)
    if force and unit.resumable:
        shutil.rmtree(writer.path, ignore_errors=True)  # start over instead of resuming
    with writer:
        return work(writer)


@dataclass(frozen=True)
class Stage:
    """A pipeline stage as data. ``plan(cfg, force)`` says what it writes (and makes what that depends on, e.g.
    label's teacher index, through :func:`run_unit`); ``work(cfg, writer, unit)`` writes it;
    ``on_skip(cfg, manifest)`` adds statistics when it is up to date; ``guard(cfg, unit)`` may refuse to replace
    what is there unless ``--force``; ``finish(cfg, stats, plan)`` runs either way, after the artifact (publish's
    upload, label's merge of a multi-machine job's parts). ``plan`` may return an iterable of units (encode: one
    per encoder and split, one encoder loaded at a time), each run on its own; then ``finish`` receives
    ``{unit output: stats}`` and no unit."""

    name: str
    summary: str
    #: Config sections the stage reads (its ``--help`` lists their options).
    sections: Sequence[str]
    plan: Callable[[Any, bool], "Unit | Iterable[Unit]"]
    work: Callable[[Any, ArtifactWriter, Unit], dict]
    on_skip: Callable[[Any, dict], dict] | None = None
    guard: Callable[[Any, Unit], None] | None = None
    finish: Callable[[Any, dict, Any], dict] | None = None
    #: ``prepare(cfg) -> cfg``: settings that depend on earlier stages' outputs, made concrete before the plan
    #: (``index.type: auto`` becomes a type once the number of passages is known).
    prepare: Callable[[Any], Any] | None = None
    #: ``report(cfg, {output: manifest})``: the stage's own numbers, tables and plots for its W&B run, from the
    #: artifacts it wrote this time (:class:`spar.core.tracking.Report`); default: each artifact's figures
    #: (:func:`spar.core.tracking.default_report`).
    report: Callable[[Any, dict[Path, dict]], Report] | None = None

    def run(self, cfg: Any, force: bool = False) -> dict:
        """Run the stage on ``cfg`` (see :func:`run_unit`); returns its printable statistics. When it writes
        something, its W&B run records it (:class:`spar.core.tracking.StageRun`). Its plan, work and report share
        one resolved experiment (:mod:`spar.core.stage_scope`)."""
        with stage_scope():
            return self._run_scoped(cfg, force)

    def _run_scoped(self, cfg: Any, force: bool) -> dict:
        cfg = self.prepare(cfg) if self.prepare is not None else cfg
        tracking = StageRun(cfg, self.name)
        try:
            stats = self._run_plan(cfg, force, tracking)
        except BaseException:
            tracking.finish(failed=True)
            raise
        written = {path: read_manifest(path) for path in tracking.outputs}  # empty unless W&B is on
        report = None if not written else self.report(cfg, written) if self.report is not None \
            else default_report(written, cfg.experiment.output_dir)
        tracking.finish(report)
        return stats

    def _run_plan(self, cfg: Any, force: bool, tracking: StageRun) -> dict:
        plan = self.plan(cfg, force)
        if isinstance(plan, Unit):
            stats = self._run(cfg, plan, force, tracking)
            return self.finish(cfg, stats, plan) if self.finish else stats
        results = {}
        for unit in plan:  # made one at a time: a unit is dropped once written (encode frees each encoder)
            results[str(unit.output)] = self._run(cfg, unit, force, tracking)
            del unit
        return self.finish(cfg, results, None) if self.finish else results

    def status(self, cfg: Any) -> dict[str, bool]:
        """``{output: up to date}`` of every artifact the stage would write now, writing none of them (a plan still
        makes what it depends on: label's teacher index). Refuses what running the stage would refuse."""
        with stage_scope():
            cfg = self.prepare(cfg) if self.prepare is not None else cfg
            plan = self.plan(cfg, False)
            return {str(unit.output): is_current(unit) for unit in ([plan] if isinstance(plan, Unit) else plan)}

    def _run(self, cfg: Any, unit: Unit, force: bool, tracking: StageRun) -> dict:
        skipped, guarded = self.on_skip, self.guard
        on_skip = (lambda manifest: skipped(cfg, manifest)) if skipped is not None else None
        guard = functools.partial(guarded, cfg, unit) if guarded is not None else None
        stats = run_unit(unit, functools.partial(_work_on, self.work, cfg, unit, tracking), force, on_skip, guard)
        if unit.primary and not stats.get("skipped"):
            tracking.add_output(unit.output)
        return stats


def _work_on(work: Callable[[Any, ArtifactWriter, Unit], dict], cfg: Any, unit: Unit, tracking: StageRun,
             writer: ArtifactWriter) -> dict:
    if unit.primary:  # the run starts before the work: training logs its curves into it
        tracking.start()
    return work(cfg, writer, unit)


def settings(section: BaseModel) -> dict[str, Any]:
    """A config section as its outputs depend on it: every option but those marked runtime-only on their field
    (:data:`spar.core.config_fields.RUNTIME`) and those added later while at their default
    (:data:`spar.core.config_fields.ADDED_LATER`); nested sections likewise."""
    from spar.core.config_fields import is_omitted_at_default, is_runtime_only

    dump = section.model_dump(mode="json")
    values: dict[str, Any] = {}
    for name, info in type(section).model_fields.items():
        key = info.alias or name
        value = getattr(section, name)
        if is_runtime_only(info):
            continue
        if is_omitted_at_default(info) and value == info.get_default(call_default_factory=True):
            continue
        values[key] = settings(value) if isinstance(value, BaseModel) else dump[key]
    return values
