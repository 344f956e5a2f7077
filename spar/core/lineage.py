"""Lineage: what each artifact was made from, and the one rule that keeps a stale artifact out of use.

**The rule.** An artifact is used only while everything it was made from still has the fingerprint it had then:
here and upstream, for every consumer (not only for the stage that would rebuild it). A stage's plan names what its
artifact reads (:func:`source`): another artifact (its manifest fingerprint), an input file
(:func:`spar.core.fingerprint.file_fingerprint`), a Λ's or a model's files
(:func:`spar.core.fingerprint.files_fingerprint`, :func:`spar.model.resolve.model_fingerprint`). The writer records
them in the manifest (``sources``, paths relative to the artifact). :func:`check_current` recomputes each and follows
artifacts upstream, deepest first, so its one-line refusal names the earliest stage to re-run. The runner
(:func:`spar.core.stage.run_unit`) applies it to every artifact a unit reads before it decides anything, and counts an
output whose own sources changed as out of date (the stage recomputes it); ``spar search`` applies it to the model it
opens.

A source that no longer exists is not checked: a Λ or a published model copied elsewhere travels without its run.
An artifact written before this rule records no sources and is checked as before (the stages' own comparisons).

Example::

    >>> import tempfile, pathlib
    >>> from spar.core.artifacts import ArtifactWriter
    >>> from spar.core.lineage import check_current, source
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> corpus = root / "corpus.jsonl"
    >>> _ = corpus.write_text('{"_id": "1", "text": "a"}\\n')
    >>> with ArtifactWriter(root / "queries", kind="queries", config={}, inputs={},
    ...                     sources=[source(corpus)]) as w:
    ...     _ = (w.path / "passages.arrow").write_bytes(b"")
    >>> check_current(root / "queries")
    >>> _ = corpus.write_text('{"_id": "1", "text": "b"}\\n')
    >>> check_current(root / "queries")
    Traceback (most recent call last):
    ...
    spar.core.errors.ArtifactError: .../queries: made from .../corpus.jsonl (...), which has changed since (...): ...
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from spar.core.artifacts import MANIFEST, manifest_fingerprint, read_manifest
from spar.core.fingerprint import file_fingerprint, files_fingerprint, model_files_fingerprint
from spar.core.errors import ArtifactError

Of = Literal["artifact", "file", "files", "model"]

#: The stage that writes each kind of artifact (named in refusals).
STAGE_OF = {"queries": "sample", "teacher_index": "label", "labels": "label", "labels-part": "label",
            "lambda": "train", "embeddings": "encode", "tune": "tune", "index": "index", "evaluation": "evaluate",
            "model": "publish"}


#: Content fingerprints of directories computed in this process, by the size and mtime of every file in them: a
#: stage checks its Λ once per unit it writes, and hashing a transformer's weights each time would add seconds.
_HASHED: dict[tuple[str, str], tuple[tuple, str]] = {}


def _stat_signature(directory: Path) -> tuple:
    return tuple(sorted((str(p.relative_to(directory)), p.stat().st_size, p.stat().st_mtime_ns)
                        for p in directory.rglob("*") if p.is_file()))


def fingerprint_of(path: str | Path, of: Of) -> str:
    """A source's fingerprint now: an artifact's manifest fingerprint, a file's, a Λ's files', a model's."""
    if of == "artifact":
        return manifest_fingerprint(path)
    if of == "file":
        return file_fingerprint(path)
    if of not in ("files", "model"):
        raise ValueError(f"unknown kind of source {of!r}")
    key, signature = (str(Path(path).absolute()), of), _stat_signature(Path(path))
    cached = _HASHED.get(key)
    if cached is None or cached[0] != signature:
        fingerprint = files_fingerprint(path) if of == "files" else model_files_fingerprint(path)
        cached = _HASHED[key] = (signature, fingerprint)
    return cached[1]


def source(path: str | Path, of: Of | None = None) -> dict[str, str]:
    """What a unit reads, as its manifest records it: ``{"path", "of", "fingerprint"}`` (``of``: an artifact when
    ``path`` is a directory with a manifest, the files of another directory, else a file)."""
    p = Path(path)
    if of is None:
        of = "artifact" if (p / MANIFEST).is_file() else "files" if p.is_dir() else "file"
    return {"path": str(p.absolute()), "of": of, "fingerprint": fingerprint_of(p, of)}


def _resolved(artifact: Path, record: Mapping[str, Any]) -> Path:
    return Path(os.path.normpath(artifact.absolute() / record["path"]))


def changed_sources(path: str | Path) -> list[str]:
    """The sources of the artifact at ``path`` whose fingerprint changed since it was made (not followed upstream),
    each as ``"<path> (<recorded>), which has changed since (<now>)"``; empty when none did or none are recorded."""
    d = Path(path)
    try:
        manifest = read_manifest(d)
    except ArtifactError:
        return []
    changed = []
    for record in manifest.get("sources") or ():
        src = _resolved(d, record)
        if not src.exists():
            continue
        try:
            now = fingerprint_of(src, record["of"])
        except ArtifactError:
            now = "incomplete"
        if now != record["fingerprint"]:
            changed.append(f"{src} ({record['fingerprint']}), which has changed since ({now})")
    return changed


def check_current(path: str | Path, _seen: set[Path] | None = None) -> None:
    """Refuse, in one line naming the stage to re-run, an artifact made from something that has changed since,
    here or anywhere upstream (deepest first)."""
    d = Path(path)
    seen = set() if _seen is None else _seen
    if d.absolute() in seen:
        return
    seen.add(d.absolute())
    try:
        manifest = read_manifest(d)
    except ArtifactError:
        return  # not an artifact: nothing recorded to check
    for record in manifest.get("sources") or ():
        src = _resolved(d, record)
        if _followed(src, record):
            check_current(src, seen)
    changed = changed_sources(d)
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        stage = STAGE_OF.get(str(manifest.get("kind")), str(manifest.get("kind")))
        raise ArtifactError(f"{d}: made from {changed[0]}{more}: re-run `spar {stage}`")


def _followed(src: Path, record: Mapping[str, Any]) -> bool:
    """Whether a source's own lineage matters to what reads it: an artifact's, and a Λ directory's (a Λ made from
    labels that changed since is stale). A published model read for its Λ is its files: its μ and index are not."""
    if not (src / MANIFEST).is_file():
        return False
    if record["of"] == "artifact":
        return True
    try:
        return read_manifest(src).get("kind") == "lambda"
    except ArtifactError:
        return False


def check_all_current(sources: Iterable[Mapping[str, Any]]) -> None:
    """:func:`check_current` of every artifact (and Λ directory) among ``sources``, what a unit reads."""
    seen: set[Path] = set()
    for record in sources:
        p = Path(record["path"])
        if _followed(p, record):
            check_current(p, seen)
