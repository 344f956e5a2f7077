"""Artifacts: the one place where stage outputs get their layout, schema and manifest.

Every stage writes into ``<experiment.output_dir>/<artifact>/``. The directory is complete when it holds a
``manifest.json`` whose ``fingerprint`` matches what the current config and inputs would produce. A stage builds
its output in ``<artifact>.tmp-<pid>/`` (or fills a resumable ``<artifact>.partial/``) and renames it into place
only when done, so a killed run never leaves a directory that looks complete.

Example::

    >>> import tempfile, pathlib
    >>> from spar.core.artifacts import ArtifactWriter, read_manifest
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> with ArtifactWriter(root / "queries", kind="queries", config={"k": 1}, inputs={}) as w:
    ...     _ = (w.path / "part-00000.arrow").write_bytes(b"")
    ...     w.stats["queries"] = 0
    >>> read_manifest(root / "queries")["kind"]
    'queries'
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Sequence

from spar.core.errors import ArtifactError, no_space_left
from spar.core.fingerprint import file_sha256, fingerprint_dict

MANIFEST = "manifest.json"
#: Set by ``spar run`` for its stage processes: the command line that reproduces the whole run (recorded in results
#: and model cards).
RUN_COMMAND_ENV = "SPAR_RUN_COMMAND"
SCHEMA_VERSION = 1

#: Artifact directory names under ``experiment.output_dir`` (the pipeline's layout).
LAYOUT = {
    "queries": "queries",  # sample: Arrow shards of training/dev queries
    "teacher_index": "teacher_index",  # label: Lucene (BM25) or impact index of the corpus
    "labels": "labels",  # label: Arrow shards of teacher positives/negatives
    "lambda": "lambda",  # train: Λ query/passage encoders (HF + safetensors), Lightning checkpoints
    "embeddings": "embeddings",  # encode: <encoder>/<corpus|queries-split>/ .npy shards
    "tune": "tune",  # tune: tune.json (mu per variant, alpha), curve PNGs
    "index": "index",  # index: FAISS index of [P, PΛ]
    "evaluation": "evaluation",  # evaluate: TREC run files, per-system metrics
    "model": "model",  # publish: the combined SPAR model directory (default of publish.output)
    "frontier": "frontier",  # frontier: its work directory (static Λs being trained, points so far)
    "wandb": "wandb",  # W&B runs of every stage (wandb adds this name below the directory it is given)
}
#: The passages table of a run (in ``queries/``, written by sample) and of a model or corpus index directory.
PASSAGES_FILE = "passages.arrow"


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory so far (the JVM of Pyserini included: it runs in-process; Ray workers
    not). A stage run alone (``spar <stage>``) records its own peak; ``spar run`` the peak of every stage so far."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    return int(peak) * (1 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux


def artifact_dir(output_dir: str | Path, name: str) -> Path:
    """``<output_dir>/<LAYOUT[name]>``: call :meth:`spar.core.run_context.RunContext.artifact` instead (the one
    owner of a run's paths)."""
    if name not in LAYOUT:
        raise KeyError(f"unknown artifact {name!r}; known: {sorted(LAYOUT)}")
    return Path(output_dir) / LAYOUT[name]


def package_version() -> str:
    from spar import __version__

    return __version__


def read_manifest(path: str | Path) -> dict[str, Any]:
    mpath = Path(path) / MANIFEST
    if not mpath.exists():
        raise ArtifactError(f"{path}: no {MANIFEST}; the artifact is missing or incomplete (run its stage first)")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{mpath}:{exc.lineno}: corrupt manifest: {exc.msg}") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{mpath}: corrupt manifest: not a JSON object")
    return manifest


def manifest_fingerprint(path: str | Path) -> str:
    return read_manifest(path)["fingerprint"]


def is_complete(path: str | Path, fingerprint: str | None = None, content: bool = False) -> bool:
    """True when ``path`` holds a manifest (with this fingerprint, when one is given) and every file it records,
    at its recorded size (``content=True``: with its recorded SHA-256), so a deleted or truncated shard makes the
    artifact incomplete instead of "up to date"."""
    try:
        manifest = read_manifest(path)
    except ArtifactError:
        return False
    if fingerprint is not None and manifest.get("fingerprint") != fingerprint:
        return False
    return not changed_files(path, manifest, content=content)


def file_checksums(directory: str | Path, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of an artifact's files (all but the manifest and work stamps)."""
    d = Path(directory)
    if names is None:
        names = sorted(str(p.relative_to(d)) for p in d.rglob("*")
                       if p.is_file() and p.name not in (MANIFEST, ".fingerprint"))
    return {name: {"bytes": (d / name).stat().st_size, "sha256": file_sha256(d / name)} for name in names}


def changed_files(path: str | Path, manifest: dict[str, Any] | None = None, content: bool = False) -> list[str]:
    """The files an artifact's manifest records that are missing, resized or (``content=True``) rewritten since
    its stage wrote them, each as ``"<name> (why)"``; empty when all are as written."""
    d = Path(path)
    manifest = read_manifest(d) if manifest is None else manifest
    changed = []
    for name, record in (manifest.get("checksums") or {}).items():
        f = d / name
        if not f.is_file():
            changed.append(f"{name} (missing)")
        elif f.stat().st_size != record.get("bytes"):
            changed.append(f"{name} ({f.stat().st_size:,} bytes, written with {record.get('bytes'):,})")
        elif content and _checked_sha256(f) != record.get("sha256"):
            changed.append(f"{name} (content changed)")
    return changed


#: SHA-256 of files checked in this process, by their identity, size and mtime: a stage's plan and its runner may
#: check the same input artifact more than once, and hashing a large passages table again would cost seconds.
_CHECKED: dict[tuple[str, int, int, int], str] = {}


def _checked_sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path.absolute()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key not in _CHECKED:
        _CHECKED[key] = file_sha256(path)
    return _CHECKED[key]


def check_unchanged(path: str | Path, stage: str) -> None:
    """Fail naming the first file of an artifact that is not as its stage wrote it (content checked)."""
    changed = changed_files(path, content=True)
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise ArtifactError(f"{Path(path) / changed[0].split(' (')[0]}: {changed[0].split(' (', 1)[1][:-1]} since "
                            f"`spar {stage}` wrote it{more}; re-run `spar {stage} --force`")


def refresh_checksums(path: str | Path, names: Iterable[str]) -> None:
    """Record the new size and checksum of files a stage rewrote inside its finished artifact."""
    d = Path(path)
    manifest = read_manifest(d)
    if "checksums" in manifest:
        manifest["checksums"].update(file_checksums(d, names))
        write_json_atomic(d / MANIFEST, manifest)


def require(path: str | Path, kind: str) -> dict[str, Any]:
    """Read an input artifact's manifest and check its kind, with an error that says which stage to run."""
    manifest = read_manifest(path)
    if manifest.get("kind") != kind:
        raise ArtifactError(f"{path}: expected a '{kind}' artifact, found '{manifest.get('kind')}'")
    return manifest


def stage_fingerprint(kind: str, config: Any, inputs: dict[str, str]) -> str:
    """What a stage's output depends on: its kind, its config section, its inputs' fingerprints."""
    return fingerprint_dict({"kind": kind, "config": config, "inputs": inputs, "schema": SCHEMA_VERSION})


def ensure_writable(directory: str | Path) -> Path:
    """Create ``directory`` (and parents) or fail with a clear message naming it."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ArtifactError(f"cannot write to output directory {d}: {exc.strerror or exc}") from None
    return d


@contextlib.contextmanager
def atomic_file(path: str | Path):
    """``with atomic_file(p) as tmp:`` write ``tmp`` (``.<name>.tmp-<pid>`` beside ``p``); it replaces ``p`` on
    success and is removed on failure, so a full disk or a crash never leaves half a file under either name."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, payload: Any) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")


@dataclass(kw_only=True)
class ArtifactSpec:
    """What an artifact is besides where it lies, held once for the stage runner's unit
    (:class:`spar.core.stage.Unit`) and the writer it makes: its kind, the settings and input fingerprints its
    fingerprint hashes (:func:`stage_fingerprint`), whether a crash keeps its work directory, what it is made from."""

    kind: str
    config: Any
    #: Input fingerprints by key; a stage unit derives them from its dependencies (:mod:`spar.core.dependency`).
    inputs: dict[str, str] = field(default_factory=dict)
    resumable: bool = False
    #: What the artifact was made from (:func:`spar.core.lineage.source` records), kept in the manifest as ``sources``
    #: with paths relative to the artifact, so :func:`spar.core.lineage.check_current` can tell when one has changed.
    sources: Sequence[dict[str, str]] = ()

    def spec(self) -> dict[str, Any]:
        """These fields, to make another :class:`ArtifactSpec` (a writer) of the same artifact."""
        return {f.name: getattr(self, f.name) for f in fields(ArtifactSpec)}


@dataclass
class ArtifactWriter(ArtifactSpec):
    """Builds an artifact in a temporary sibling directory and renames it into place on success.

    ``resumable=True`` keeps the work directory (``<final>.partial``) across crashes so a stage can skip the
    parts it already wrote (e.g. finished shards); the caller decides what is reusable. The manifest is written
    last; its ``fingerprint`` is the :func:`stage_fingerprint` of (kind, config, inputs).
    """

    final: Path

    def __post_init__(self) -> None:
        self.final = Path(self.final)
        self.stats: dict[str, Any] = {}
        self.schema: dict[str, Any] = {}
        self.files: list[str] = []
        self.fingerprint = stage_fingerprint(self.kind, self.config, self.inputs)
        suffix = ".partial" if self.resumable else f".tmp-{os.getpid()}"
        self.path = self.final.with_name(self.final.name + suffix)

    def check_replaceable(self) -> None:
        """Refuse to write over anything but an earlier artifact of this kind (or an empty directory), and over an
        earlier artifact holding files its manifest does not list: spar never deletes what it did not write, e.g.
        ``publish.output`` pointing at a run, an ancestor of one, another artifact, a file, a directory of the
        user's files, or an earlier model the user added notes to."""
        final = self.final
        if not final.exists() and not final.is_symlink():
            return
        if final.is_symlink() or not final.is_dir():
            raise ArtifactError(f"{final}: exists and is not a directory; spar writes its {self.kind} directory "
                                "there: choose another path")
        if not any(final.iterdir()):
            return
        kind, ours = _spar_files(final)
        if kind != self.kind:
            what = f"a spar '{kind}' artifact" if kind else "not a spar artifact (no manifest.json of spar's)"
            raise ArtifactError(f"{final}: not empty and {what}; spar replaces only its own {self.kind} directory "
                                "and never deletes what it did not write: choose another (or an empty) directory")
        foreign = [name for name in _entries(final) if name not in ours and not _is_own_temporary(name)]
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise ArtifactError(f"{final}: holds files its earlier {kind} artifact does not list ({shown}); spar "
                                "replaces only what it wrote and never deletes the rest: move them out, or choose "
                                "another directory")

    def __enter__(self) -> "ArtifactWriter":
        ensure_writable(self.final.parent)
        self.check_replaceable()
        if self.final.is_dir():  # replaced in place (a mount point): must take files; known before the work
            ensure_writable(self.final)
        if self.resumable and self.path.exists():
            stamp = self.path / ".fingerprint"
            if not stamp.exists() or stamp.read_text() != self.fingerprint:
                shutil.rmtree(self.path)  # partial work from another config or input: not reusable
        elif self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / ".fingerprint").write_text(self.fingerprint)
        self._start = time.time()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            if not self.resumable:
                shutil.rmtree(self.path, ignore_errors=True)
            if exc is not None and not isinstance(exc, ArtifactError) and no_space_left(exc):
                kept = (f"finished parts are kept in {self.path}: free space and re-run to resume" if self.resumable
                        else "its temporary directory was removed: free space and re-run")
                raise ArtifactError(f"{self.final}: no space left on device while writing the {self.kind} "
                                    f"artifact ({kept})") from exc
            return
        manifest = {
            "kind": self.kind,
            "schema_version": SCHEMA_VERSION,
            "spar_version": package_version(),
            "fingerprint": self.fingerprint,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(time.time() - self._start, 3),
            "peak_rss_bytes": peak_rss_bytes(),
            "config": self.config,
            "inputs": self.inputs,
            "schema": self.schema,
            "files": sorted(self.files) or sorted(
                str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file() and p.name != ".fingerprint"
            ),
            "stats": self.stats,
        }
        if self.sources:
            manifest["sources"] = [{**s, "path": os.path.relpath(Path(s["path"]).absolute(), self.final.absolute())}
                                   for s in self.sources]
        (self.path / ".fingerprint").unlink(missing_ok=True)
        manifest["checksums"] = file_checksums(self.path)
        try:
            write_json_atomic(self.path / MANIFEST, manifest)
            self.check_replaceable()  # again: something may have appeared there while the stage ran
            if self.final.is_dir():
                self._replace_in_place()
            else:
                os.replace(self.path, self.final)
        except (ArtifactError, OSError) as error:  # one line, and no finished work left beside the target (#37)
            if not self.resumable:
                shutil.rmtree(self.path, ignore_errors=True)
            if isinstance(error, ArtifactError):
                raise
            left = f"its parts are kept in {self.path}" if self.resumable else "its temporary directory was removed"
            raise ArtifactError(f"{self.final}: cannot write the {self.kind} artifact there ({error.strerror or error}"
                                f"; {left}); make it writable or choose another directory") from None

    def _replace_in_place(self) -> None:
        """Move the finished artifact into the existing directory ``final`` (an earlier artifact of this kind, or an
        empty directory such as a mount point) without removing the directory itself: first a journal naming every
        old and new file, then the old manifest and files out, the new files in (manifest last), the journal out. A
        crash part-way leaves a directory without a manifest (not complete) whose every file spar can account for."""
        final = self.final
        _, old = _spar_files(final)
        old |= {name for name in _entries(final) if _is_own_temporary(name)}
        new = _entries(self.path)
        write_json_atomic(final / REPLACING, {"kind": self.kind, "files": sorted(old | set(new))})
        (final / MANIFEST).unlink(missing_ok=True)  # from here on it does not look complete
        for name in sorted(old - {REPLACING, MANIFEST}):
            _remove_file(final, name)
        for name in sorted(new, key=lambda n: n == MANIFEST):  # the manifest last
            target = final / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(self.path / name), str(target))  # a rename, or a copy onto another file system
        shutil.rmtree(self.path)
        (final / REPLACING).unlink()


#: Inside an artifact directory being replaced in place: every file of the old and the new artifact, written before
#: the first file is touched (see :meth:`ArtifactWriter._replace_in_place`).
REPLACING = ".spar-replacing.json"
#: Files a stage adds to its finished artifact after the manifest: spar's own too (the model's upload marker).
AFTER_MANIFEST = (".hub_push.json",)


def _entries(directory: Path) -> list[str]:
    """Every file (and link) under ``directory``, relative, sorted; directories themselves are not entries."""
    found = []
    for root, dirs, files in os.walk(directory):
        found += [os.path.relpath(os.path.join(root, n), directory) for n in files]
        found += [os.path.relpath(os.path.join(root, n), directory) for n in dirs
                  if os.path.islink(os.path.join(root, n))]
    return sorted(found)


def _spar_files(directory: Path) -> tuple[str | None, set[str]]:
    """(kind, the files spar wrote) of a directory, from its manifest and the journal of an interrupted
    replacement."""
    kind, files = None, set()
    for record in (directory / MANIFEST, directory / REPLACING):
        try:
            payload = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(payload, dict):
            kind = kind or payload.get("kind")
            files |= {str(f) for f in payload.get("files") or ()} | {str(f) for f in payload.get("checksums") or ()}
            files.add(record.name)
    if kind is not None:
        files |= {name for name in AFTER_MANIFEST if (directory / name).exists()}
    return kind, files


def _is_own_temporary(name: str) -> bool:
    """A half-written file of a dead spar process (``.<file>.tmp-<pid>``, :func:`atomic_file`)."""
    found = _TEMPORARY.search(name)
    return (found is not None and Path(name).name.startswith(".") and int(found.group(1)) != os.getpid()
            and not pid_alive(int(found.group(1))))


def _remove_file(directory: Path, name: str) -> None:
    """Delete ``directory/name`` and the folders it leaves empty, up to ``directory``."""
    path = directory / name
    path.unlink(missing_ok=True)
    parent = path.parent
    while parent != directory and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def check_files(path: str | Path, names: Iterable[str]) -> None:
    """Fail naming the first missing file of an artifact."""
    for name in names:
        if not (Path(path) / name).exists():
            raise ArtifactError(f"{path}: missing file '{name}' (the artifact is damaged; re-run its stage)")


# ----------------------------------------------------------------------------------------------------------------
# Stale temporaries
# ----------------------------------------------------------------------------------------------------------------

_TEMPORARY = re.compile(r"\.tmp-(\d+)(?:-|$)")


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(directory: str | Path, names: Iterable[str] | None = None) -> list[Path]:
    """Delete ``*.tmp-<pid>*`` work files and directories in ``directory`` whose process is dead (a killed stage's
    ``teacher_index.tmp-<pid>/``, its JSON collection copy, half-written files). Returns what was removed.

    ``names``: only the temporaries of these artifacts (``index`` -> ``index.tmp-<pid>/``, ``.index.tmp-<pid>``),
    and of directories only those spar's writer made (its ``.fingerprint`` stamp or a manifest inside) or empty ones:
    what a stage's runner clears beside its artifact, which may sit in a directory of the user's."""
    removed = []
    d = Path(directory)
    if not d.is_dir():
        return removed
    prefixes = None if names is None else tuple(f"{name}.tmp-" for name in names)
    for entry in d.iterdir():
        found = _TEMPORARY.search(entry.name)
        if found is None or pid_alive(int(found.group(1))) or int(found.group(1)) == os.getpid():
            continue
        is_dir = entry.is_dir() and not entry.is_symlink()
        if prefixes is not None:
            if not entry.name.lstrip(".").startswith(prefixes):
                continue
            if is_dir and any(entry.iterdir()) and not any((entry / n).exists() for n in (".fingerprint", MANIFEST)):
                continue
        if is_dir:
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


# ----------------------------------------------------------------------------------------------------------------
# Input file names
# ----------------------------------------------------------------------------------------------------------------

def is_compressed(path: str | Path) -> bool:
    """Whether ``path`` is read through gzip (its name ends in ``.gz``)."""
    return Path(path).suffix == ".gz"


def plain_name(path: str | Path) -> Path:
    """The file's name without a compression suffix (``corpus.jsonl.gz`` -> ``corpus.jsonl``)."""
    p = Path(path)
    return p.with_suffix("") if is_compressed(p) else p
