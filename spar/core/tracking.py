"""W&B: one run per stage that does work, its own numbers, and its artifacts with their lineage.

The stage runner (:meth:`spar.core.stage.Stage.run`) opens a :class:`StageRun` for every stage; it starts a W&B run
only when a unit of the stage is about to be written (a stage that finds its outputs up to date logs nothing). The run
is named ``<experiment>-<stage>``, has ``job_type`` = the stage and the experiment's name as its group, and carries the
resolved config as nested keys (``train.lexical.dim``, ``index.storage``: filterable). Training logs into the same run
(Lightning's ``WandbLogger`` takes the run that is open: :mod:`spar.train.training`).

**Lineage comes from the manifests, here and nowhere else.** After a unit is written its manifest names what it was
made from (``sources``, :mod:`spar.core.lineage`); every such source becomes an input of the run
(:meth:`StageRun.add_output`) and the artifact itself its output. Each is a W&B *reference* artifact
(:func:`reference_artifact`): its files by path (``file://``, nothing read, nothing uploaded), plus its
``manifest.json`` checksummed, which records every file's SHA-256, so a new version appears exactly when a file
changed. An input is declared again by the same name, type and entries as the stage that wrote it logged it, so W&B
knows it as the same version (it de-duplicates by digest) and draws sample → label → train → encode → tune → index →
evaluate → publish. A source that is a plain file (the corpus, qrels) is a ``dataset`` artifact, a base model's
weights a ``model`` one; a file inside an artifact (``queries/passages.arrow``) is that artifact.

Gigabytes stay where they are unless asked: ``experiment.wandb_upload`` names the artifact kinds whose files are
uploaded instead (``[model]``: the published model on W&B).

The mode is ``experiment.wandb_mode`` (offline by default: runs sit in ``<output_dir>/wandb/``); ``WANDB_MODE=disabled``
in the environment, W&B's own switch, turns every run off (the test suite sets it). ``wandb`` is imported only when a
run starts (it costs seconds).

Example (no W&B run: ``disabled``)::

    >>> from spar.core.config import load_config
    >>> run = StageRun(load_config(None, ["experiment.wandb_mode=disabled"]), "index")
    >>> run.enabled, artifact_name("runs/demo/embeddings/base/passages", "runs/demo", "demo")
    (False, 'demo-embeddings-base-passages')
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from spar.core.artifacts import MANIFEST, read_manifest
from spar.core.errors import ArtifactError
from spar.core.lineage import STAGE_OF

#: Type of a reference to a plain input file (corpus, queries, qrels) and to a model's weights without a manifest.
DATASET, MODEL = "dataset", "model"
#: How far above a source file its artifact's manifest may lie (``embeddings/base/passages/shard.npy``: 1).
_ARTIFACT_DEPTH = 3


def wandb_mode(configured: str) -> str:
    """The W&B mode to run in: ``configured`` (``offline``, ``online`` or ``disabled``), unless the environment's
    ``WANDB_MODE`` is ``disabled`` (W&B's own switch: then nothing is logged, whatever the config says)."""
    return "disabled" if os.environ.get("WANDB_MODE") == "disabled" else configured


@dataclass(frozen=True)
class Line:
    """A native W&B line plot: ``rows`` of ``columns``, ``y`` against ``x``, one line per value of ``stroke``."""

    columns: list[str]
    rows: list[list]
    x: str
    y: str
    stroke: str | None = None
    title: str = ""


@dataclass
class Report:
    """What a stage logs besides its artifacts: numbers (the run summary), tables, line plots and images."""

    summary: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, tuple[list[str], list[list]]] = field(default_factory=dict)
    lines: dict[str, Line] = field(default_factory=dict)
    images: dict[str, Path] = field(default_factory=dict)


def figures(manifest: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """An artifact's figures for a run summary: its build time (``seconds``) and every number, word and flag of its
    manifest's ``stats``, nested keys joined by ``/``.

        >>> figures({"seconds": 2.5, "stats": {"queries": 10, "lambda": {"kind": "projection"}, "warnings": []}})
        {'seconds': 2.5, 'queries': 10, 'lambda/kind': 'projection'}
    """

    def flat(value: Any, key: str) -> dict[str, Any]:
        if isinstance(value, Mapping):
            return {k: v for name, item in value.items()
                    for k, v in flat(item, f"{key}/{name}" if key else name).items()}
        return {key: value} if isinstance(value, (int, float, str, bool)) else {}

    return {f"{prefix}{k}": v for k, v in flat({"seconds": manifest.get("seconds"), **(manifest.get("stats") or {})},
                                                 "").items()}


def default_report(written: Mapping[Path, Mapping[str, Any]], output_dir: str | Path) -> Report:
    """The report of a stage that declares none: each artifact's :func:`figures`, under its path in the run when the
    stage wrote more than one."""
    summary: dict[str, Any] = {}
    for path, manifest in written.items():
        where = Path(os.path.relpath(path, output_dir)).as_posix()
        summary.update(figures(manifest, f"{where}/" if len(written) > 1 else ""))
    return Report(summary=summary)


def artifact_name(path: str | Path, output_dir: str | Path, experiment: str) -> str:
    """The W&B name of what lies at ``path``: ``<experiment>-<path in the run>`` inside the run's output directory,
    else ``<parent>-<name>`` (another run's Λ, a corpus file, a model's weights); W&B's characters only."""
    p, root = Path(os.path.abspath(path)), Path(os.path.abspath(output_dir))
    parts = [experiment, *p.relative_to(root).parts] if p.is_relative_to(root) else [p.parent.name, p.name]
    return re.sub(r"[^A-Za-z0-9._-]", "-", "-".join(x for x in parts if x))[:128]


def _artifact_dir(path: Path) -> Path | None:
    """The artifact ``path`` is or lies in (the nearest directory with a spar manifest), else None."""
    for candidate in [path, *path.parents][:_ARTIFACT_DEPTH + 1]:
        if (candidate / MANIFEST).is_file():
            try:
                manifest = read_manifest(candidate)
            except ArtifactError:
                return None
            return candidate if {"kind", "fingerprint"} <= manifest.keys() else None  # spar's, not another tool's
    return None


def reference_artifact(path: Path, name: str, kind: str, metadata: Mapping[str, Any] | None = None,
                       upload: bool = False):
    """A W&B artifact that points at ``path`` (``file://``) without reading or uploading it: an artifact directory's
    files by path and its ``manifest.json`` by content (it holds every file's SHA-256); a plain file or a directory
    without a manifest by path. With ``upload`` (``experiment.wandb_upload``) its files themselves, to be uploaded."""
    import wandb

    artifact = wandb.Artifact(name, type=kind, metadata=dict(metadata or {}))
    if upload:
        if path.is_dir():
            artifact.add_dir(str(path))
        else:
            artifact.add_file(str(path), name=path.name)
    elif (path / MANIFEST).is_file():
        recorded = read_manifest(path).get("checksums") or {}
        for relative in sorted(recorded):
            if (path / relative).is_file():
                artifact.add_reference((path / relative).absolute().as_uri(), name=relative, checksum=False)
        artifact.add_reference((path / MANIFEST).absolute().as_uri(), name=MANIFEST, checksum=True)
    elif path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            artifact.add_reference(file.absolute().as_uri(), name=str(file.relative_to(path)), checksum=False)
    else:
        artifact.add_reference(path.absolute().as_uri(), name=path.name, checksum=False)
    return artifact


class StageRun:
    """The W&B run of one stage (``cfg``: a :class:`spar.core.config.SparConfig`): started by :meth:`start` when
    the stage first writes something, then told of each artifact written (:meth:`add_output`), then finished with
    the stage's :class:`Report`."""

    def __init__(self, cfg: Any, stage: str) -> None:
        self.cfg, self.stage = cfg, stage
        self.mode = wandb_mode(cfg.experiment.wandb_mode)
        self.run: Any = None
        self.outputs: list[Path] = []
        self._logged: set[Path] = set()

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def start(self) -> None:
        """Start the stage's run (once; nothing when disabled)."""
        if not self.enabled or self.run is not None:
            return
        import wandb

        cfg = self.cfg
        output_dir = Path(cfg.experiment.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)  # wandb adds wandb/: every stage's runs in one place
        self.run = wandb.init(project=cfg.train.wandb_project, name=f"{cfg.experiment.name}-{self.stage}",
                              job_type=self.stage, group=cfg.experiment.name, mode=self.mode,  # type: ignore[arg-type]
                              dir=str(output_dir), reinit="finish_previous",
                              config=cfg.model_dump(mode="json"))  # nested: filterable (#47)

    def add_output(self, directory: str | Path) -> None:
        """An artifact this stage has just written: logged as the run's output, and what its manifest says it was
        made from as the run's inputs (an artifact of this stage's own kinds, such as label's teacher index, as
        another output)."""
        if self.run is None:
            return
        directory = Path(directory).absolute()
        self.outputs.append(directory)
        for record in read_manifest(directory).get("sources") or ():
            path = Path(os.path.normpath(directory / record["path"]))
            if path.exists():
                self._declare(path, record["of"])
        self._declare(directory, "artifact", output=True)

    def _declare(self, path: Path, of: str, output: bool = False) -> None:
        found = _artifact_dir(path) if of in ("artifact", "file", "files") else None
        target = found or path
        if target in self._logged:
            return
        kind = DATASET if of == "file" else MODEL
        metadata: dict[str, Any] = {"path": str(target)}
        if found is not None:
            manifest = read_manifest(found)
            kind = str(manifest.get("kind"))
            metadata.update({k: manifest.get(k) for k in ("fingerprint", "created", "spar_version", "stats")})
            output = output or STAGE_OF.get(kind) == self.stage
        self._logged.add(target)
        # Uploaded or not by kind alone, so that a consumer declares an input exactly as its producer logged it.
        artifact = reference_artifact(target, artifact_name(target, self.cfg.experiment.output_dir,
                                                            self.cfg.experiment.name), kind, metadata,
                                      upload=kind in self.cfg.experiment.wandb_upload)
        if output:
            self.run.log_artifact(artifact)
        elif self.mode == "offline":
            # run.use_artifact refuses every artifact offline; this is what it does online for a new one (log it and
            # mark it used once committed), kept in the run's file until `wandb sync`.
            self.run._log_artifact(artifact, is_user_created=True, use_after_commit=True)
        else:
            self.run.use_artifact(artifact)

    def finish(self, report: Report | None = None, failed: bool = False) -> None:
        """Log ``report`` and close the run (marked failed when the stage failed)."""
        if self.run is None:
            return
        import wandb

        run, self.run = self.run, None
        try:
            if report is not None and not failed:
                for name, (columns, rows) in report.tables.items():
                    run.log({name: wandb.Table(columns=columns, data=rows)})
                for name, line in report.lines.items():
                    table = wandb.Table(columns=line.columns, data=line.rows)
                    run.log({name: wandb.plot.line(table, line.x, line.y, stroke=line.stroke, title=line.title)})
                for name, path in report.images.items():
                    run.log({name: wandb.Image(str(path))})
                run.summary.update(report.summary)
        finally:
            run.finish(exit_code=1 if failed else 0)
