"""Fingerprints: the one place spar hashes what identifies an output (settings, files, directories, records).

Every fingerprint is a hex prefix of a SHA-256 (16 characters unless said otherwise):

- :func:`fingerprint_dict`: a JSON-able payload (settings, a stage's config and inputs: :mod:`spar.core.stage`);
- :func:`file_fingerprint`: an input file, cheaply (size, first and last MiB); :func:`file_sha256`: all its bytes
  (manifest checksums, exported ONNX files);
- :func:`directory_fingerprint`: the weight, config and vocabulary files of a model or Λ directory (a retrained Λ
  keeps its manifest's fingerprint but not its weights); :func:`files_fingerprint`: the same, of its content only
  for an artifact that asks for it (a Λ trained or a model published since #37: not when or how fast it was made);
- :func:`records_fingerprint`: records held in memory (passages or queries given as Python objects);
- :func:`digest`: the primitive under all of them, over a stream of byte chunks (tensor samples, exported weights).

Hashes that are not identities stay with their owners: seeded draws (:mod:`spar.data.sampling`,
:func:`spar.data.readers.evaluation_qrels`, :func:`spar.data.question_sets.sampled`, the shuffled queries of
:mod:`spar.evaluate.evaluation`) and the projection's term hashing (:mod:`spar.lexical.random_tables`, shipped in
published models and so importing nothing of spar).

Example::

    >>> import pathlib, tempfile
    >>> from spar.core.fingerprint import digest, directory_fingerprint, fingerprint_dict
    >>> fingerprint_dict({"k1": 0.9, "b": 0.4}) == fingerprint_dict({"b": 0.4, "k1": 0.9})
    True
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "config.json").write_text("{}")
    >>> directory_fingerprint(d) == digest([b"config.json", b"2", b"{}"])
    True
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

#: The files of a model or Λ directory that identify it (weights, configs, vocabularies, term tables).
MODEL_FILES = (".json", ".safetensors", ".bin", ".txt", ".model", ".npy")


def digest(chunks: Iterable[bytes], length: int = 16) -> str:
    """SHA-256 over ``chunks`` in order, as its first ``length`` hex characters."""
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()[:length]


def fingerprint_dict(payload: Any, ascii_only: bool = True) -> str:
    """A JSON-able payload (keys sorted; ``ascii_only=False`` hashes non-ASCII text as UTF-8 instead of escapes)."""
    return digest([json.dumps(payload, sort_keys=True, default=str, ensure_ascii=ascii_only).encode()])


def file_fingerprint(path: str | Path, sample_bytes: int = 1 << 20) -> str:
    """Cheap content fingerprint of an input file: size, plus hashes of its first and last MiB."""
    p = Path(path)
    size = p.stat().st_size

    def chunks():
        yield str(size).encode()
        with p.open("rb") as fh:
            yield fh.read(sample_bytes)
            if size > sample_bytes:
                fh.seek(max(size - sample_bytes, sample_bytes))
                yield fh.read(sample_bytes)

    return digest(chunks())


def file_sha256(path: str | Path) -> str:
    """The full SHA-256 of a file (64 hex characters)."""
    def chunks():
        with Path(path).open("rb") as fh:
            while block := fh.read(1 << 22):
                yield block

    return digest(chunks(), 64)


def directory_fingerprint(directory: str | Path, full: bool = True, suffixes: tuple[str, ...] = MODEL_FILES,
                          relative_names: bool = True) -> str:
    """Content hash of a directory's ``suffixes`` files, each by its name, size and bytes (``full=False``: its first
    64 KiB), in sorted order. ``relative_names=False`` hashes a file's bare name instead of its path below
    ``directory`` (:func:`spar.model.resolve.model_fingerprint`'s way, kept so its fingerprints do not change)."""
    d = Path(directory)

    def chunks():
        for f in sorted(d.rglob("*")):
            if f.is_file() and f.suffix in suffixes:
                yield (str(f.relative_to(d)) if relative_names else f.name).encode()
                yield str(f.stat().st_size).encode()
                with f.open("rb") as fh:
                    if not full:
                        yield fh.read(1 << 16)
                        continue
                    while block := fh.read(1 << 22):
                        yield block

    return digest(chunks())


#: The mark (in a manifest's ``stats``) of an artifact identified by its content: :func:`files_fingerprint`.
CONTENT_IDENTITY = {"identity": "content"}
#: What is not the content of such an artifact: its manifest (timings, peak memory, where it was logged; its settings
#: fingerprint is hashed instead) and a Λ's training state (``checkpoints/``: ``exported.json``, ``last.ckpt``).
NOT_CONTENT = ("manifest.json", "checkpoints")


def files_fingerprint(directory: str | Path) -> str:
    """What identifies the files of a Λ or model directory read as a source: :func:`directory_fingerprint`, or, for an
    artifact whose manifest carries :data:`CONTENT_IDENTITY`, its content only: its settings fingerprint (config and
    inputs) and the same files but those of :data:`NOT_CONTENT`. Two identical trainings then get one fingerprint
    (the manifest records when and how fast each ran, #37); an artifact made before keeps the fingerprint it had, so
    the runs made from it stay up to date."""
    d = Path(directory)
    try:
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    stats = manifest.get("stats") if isinstance(manifest, dict) else None
    if not isinstance(stats, dict) or any(stats.get(k) != v for k, v in CONTENT_IDENTITY.items()):
        return directory_fingerprint(d)

    def chunks():
        yield b"content:" + str(manifest.get("fingerprint")).encode()
        for f in sorted(d.rglob("*")):
            relative = f.relative_to(d)
            if f.is_file() and f.suffix in MODEL_FILES and relative.parts[0] not in NOT_CONTENT:
                yield str(relative).encode()
                yield str(f.stat().st_size).encode()
                with f.open("rb") as fh:
                    while block := fh.read(1 << 22):
                        yield block

    return digest(chunks())


def model_files_fingerprint(directory: str | Path) -> str:
    """A local model directory's weights, as :func:`spar.model.resolve.model_fingerprint` identifies them: its
    config, weight and vocabulary files by bare name, size and first 64 KiB."""
    return directory_fingerprint(directory, full=False, suffixes=(".json", ".safetensors", ".bin", ".txt"),
                                 relative_names=False)


def records_fingerprint(records: Iterable[Any]) -> str:
    """Records held in memory (e.g. ``[id, title, text]`` lists), each hashed as its JSON (UTF-8) in order."""
    return digest(json.dumps(record, ensure_ascii=False).encode() for record in records)
