"""Each frontier point as a run of its own, made by the real stages: ``train`` and ``encode`` make its Λ and vectors,
``tune`` and ``index`` its μ and index, each artifact with its manifest, fingerprint and lineage.

A point (kind, dim, seed) is the run ``frontier/points/<kind>-d<dim>-s<seed>/``; the run's own trained Λ (a kind the
frontier does not make, e.g. ``transformer``) is ``frontier/points/own-<kind>/``. Its config is the frontier run's
with the point's settings (:meth:`PointRun.overrides`: its output directory, name and results directory, its Λ, its
index), written beside it as ``config.yaml``. What every point shares
is the frontier run's own artifacts, linked, never copied nor written: ``queries/``, ``teacher_index/``, ``labels/``
(a trainable kind) and ``embeddings/base/``. For each passage storage, ``<storage>/`` below the point is the run of
its ``tune`` and ``index`` (the exhaustive index type storing the passages that way, no exact re-ranking: the
frontier scores what the index finds), linking the point's ``lambda/`` and ``embeddings/``.

So a point asked again finds its stages up to date and costs nothing but its scoring; a point whose inputs changed
is rebuilt by the stage that owns the change; and each point is a run the other stages take as it is, e.g.
``spar evaluate -c frontier/points/projection-d384-s0/float32/config.yaml``. Written by the frontier
(:func:`spar.sweep.frontier.run_frontier`): the stages themselves live in ``pipelines/`` (above this package), so the
command hands them in (:class:`PointStages`).

The seed of a point is its run's ``experiment.seed`` and its projection's ``train.lexical.seed``: one seed draws the
projection, initialises a trained kind from it, orders its training and seeds its index's codec.

Example::

    >>> from spar.core.config import load_config
    >>> point = PointRun(load_config(None), kind="projection", dim=384, seed=1, root="runs/x/frontier/points")
    >>> str(point.directory), str(point.storage_dir("sq4"))
    ('runs/x/frontier/points/projection-d384-s1', 'runs/x/frontier/points/projection-d384-s1/sq4')
    >>> point.overrides("sq4")["index.storage"], point.overrides()["train.lexical.dim"]
    ('sq4', 384)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from spar.core.artifacts import is_complete, read_manifest
from spar.core.config import SparConfig, with_overrides, write_config
from spar.core.errors import ArtifactError
from spar.core.run_context import RunContext

__all__ = ["POINTS_DIR", "PointRun", "PointStages", "link"]

#: Where the point runs lie in the frontier's directory.
POINTS_DIR = "points"

#: The frontier run's artifacts a point reads and never writes (labels: only a trainable kind needs them).
SHARED = ("queries", "teacher_index", "labels")


@dataclass(frozen=True)
class PointStages:
    """The stages a point runs (:class:`spar.core.stage.Stage`: ``pipelines/<name>.py``'s ``STAGE``)."""

    train: Any
    encode: Any
    tune: Any
    index: Any


def link(target: Path, at: Path) -> None:
    """``at`` as a relative symbolic link to the directory ``target`` (kept when it already is one; a link of ours
    pointing elsewhere is replaced; anything else there is refused: never deleted)."""
    if at.is_symlink():
        if Path(os.path.realpath(at)) == Path(os.path.realpath(target)):
            return
        at.unlink()  # a link this module made (only links are removed: never what they point at)
    elif at.exists():
        raise ArtifactError(f"{at}: expected a link to {target}, found a {'directory' if at.is_dir() else 'file'} "
                            "(move it away: the frontier never deletes what it did not write)")
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(os.path.relpath(target, at.parent), target_is_directory=True)


@dataclass(frozen=True)
class PointRun:
    """One frontier point's run: ``kind``, ``dim`` and ``seed`` (None, None for the run's own Λ) under ``root``."""

    cfg: SparConfig
    kind: str
    dim: int | None
    seed: int | None
    root: Path | str

    @property
    def own(self) -> bool:
        """The run's own trained Λ (its ``lambda/``), not one the frontier makes."""
        return self.dim is None

    @property
    def name(self) -> str:
        return f"own-{self.kind}" if self.own else f"{self.kind}-d{self.dim}-s{self.seed}"

    @property
    def directory(self) -> Path:
        return Path(self.root) / self.name

    def storage_dir(self, storage: str) -> Path:
        return self.directory / storage

    def overrides(self, storage: str | None = None) -> dict[str, Any]:
        """The point's settings over the frontier run's config: its output directory and Λ, and (``storage``) its
        index: the exhaustive type storing ``storage``, concatenated, not re-ranked."""
        from spar.index.types.registry import exhaustive_type

        directory = (self.storage_dir(storage) if storage else self.directory).resolve()
        out: dict[str, Any] = {
            "experiment.output_dir": str(directory),
            # its own name and results: a point evaluated or published never replaces the run's results
            "experiment.name": "-".join([self.cfg.experiment.name, self.name, *([storage] if storage else [])]),
            "experiment.results_dir": str(directory / "results"),
            # the base's vectors are the frontier run's, linked; Λ is the point's lambda/ (the run's own: linked)
            "encode.encoders": ["lambda"], "encode.lambda": None}
        if not self.own:
            out.update({"experiment.seed": self.seed, "train.kind": self.kind, "train.lexical.dim": self.dim,
                        "train.lexical.seed": self.seed})
        if storage is not None:
            out.update({"index.type": exhaustive_type().name, "index.storage": storage, "index.refine": 0,
                        "index.variant": "concat"})
        return out

    def config(self, storage: str | None = None) -> SparConfig:
        """A new config object of the point's run (or of its ``storage`` run)."""
        return with_overrides(self.cfg, self.overrides(storage))

    # -- making it ----------------------------------------------------------------------------------------------

    def make_lambda(self, stages: PointStages, force: bool = False) -> None:
        """``lambda/`` by the train stage (not for the run's own Λ: linked) and ``embeddings/lambda/`` by encode."""
        parent, here = RunContext(self.cfg), RunContext.at(self.directory)
        self._link_shared(parent, here)
        link(parent.artifact("embeddings") / "base", here.artifact("embeddings") / "base")
        if self.own:  # the Λ the run trained (Experiment.own_lambda), whatever its encode.lambda names
            link(parent.artifact("lambda"), here.artifact("lambda"))
        self._write_config(self.directory, self.config())
        if not self.own:
            stages.train.run(self.config(), force=force)
        stages.encode.run(self.config(), force=force)

    def make_index(self, stages: PointStages, storage: str, force: bool = False) -> Path:
        """``<storage>/tune/`` and ``<storage>/index/`` by the tune and index stages; returns the storage run."""
        point, here = RunContext.at(self.directory), RunContext.at(self.storage_dir(storage))
        self._link_shared(RunContext(self.cfg), here)
        if is_complete(point.artifact("lambda")):
            link(point.artifact("lambda"), here.artifact("lambda"))
        link(point.artifact("embeddings"), here.artifact("embeddings"))
        self._write_config(self.storage_dir(storage), self.config(storage))
        stages.tune.run(self.config(storage), force=force)
        stages.index.run(self.config(storage), force=force)
        return self.storage_dir(storage)

    @staticmethod
    def _link_shared(parent: RunContext, here: RunContext) -> None:
        for name in SHARED:
            if is_complete(parent.artifact(name)):
                link(parent.artifact(name), here.artifact(name))

    @staticmethod
    def _write_config(directory: Path, cfg: SparConfig) -> None:
        write_config(cfg, directory / "config.yaml")

    # -- reading it ---------------------------------------------------------------------------------------------

    def lambda_facts(self) -> dict[str, Any]:
        """The Λ's kind and dimension (as encode found it) and its training's seconds and steps (its manifest)."""
        from spar.experiment.plan import Experiment

        source = Experiment(self.config()).lambda_source
        manifest = read_manifest(source.location) if is_complete(Path(source.location)) else {}
        stats = manifest.get("stats", {})
        seconds = stats.get("seconds", stats.get("train_seconds", 0.0)) if stats.get("steps") else 0.0
        return {"kind": source.kind, "dim": source.dim, "train_seconds": float(seconds or 0.0),
                "steps": int(stats.get("steps", 0) or 0)}

    def vectors(self, splits: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Λ's passage vectors and its query vectors of ``splits`` (``{name: SplitQueries}``), as encode stored
        them (in the frontier's passage order: checked by the caller against the base's ids)."""
        import numpy as np

        from spar.experiment.inputs import ExperimentInputs
        from spar.model.stored_vectors import load_embeddings

        inputs = ExperimentInputs(self.config())
        stored = load_embeddings(inputs.passage_dir("lambda"))
        queries = {name: np.asarray(inputs.query_vectors("lambda", split), dtype=np.float32)
                   for name, split in splits.items()}
        return stored, queries
