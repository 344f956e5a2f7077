"""Dependencies: what an artifact is made from, each written once, as one value.

A :class:`Dependency` is one thing an artifact reads: another artifact, an input file, a directory of input files (a
corpus), a model's or a Λ's files, or anything whose fingerprint and lineage its owner computes (a Λ source). From it
the stage runner derives, in one place (:class:`spar.core.stage.Unit`'s ``needs``), the three things a driver used to
write side by side by hand:

- the **check** (:meth:`Dependency.check`): an artifact that is missing, incomplete, of another kind or (``unchanged``)
  edited since its stage wrote it is refused in one line naming the stage to re-run;
- the **input fingerprint** (:meth:`Dependency.fingerprint`), under its key in the artifact's ``inputs``;
- the **lineage record(s)** (:meth:`Dependency.sources`, :func:`spar.core.lineage.source`).

The keys are the ones runs made before recorded (``queries``, ``base``, ``corpus``, ...): an artifact's fingerprint
is unchanged when its driver moves from hand-built ``inputs`` to dependencies (``tests/test_dependency.py``).

Example::

    >>> import tempfile, pathlib
    >>> from spar.core.artifacts import ArtifactWriter
    >>> from spar.core.dependency import artifact, file
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> corpus = root / "corpus.jsonl"
    >>> _ = corpus.write_text('{"_id": "1", "text": "a"}\\n')
    >>> queries = artifact("queries", root / "queries", kind="queries")
    >>> queries.check()
    Traceback (most recent call last):
    ...
    spar.core.errors.ArtifactError: .../queries: the queries artifact is missing or incomplete: run `spar sample`
    >>> with ArtifactWriter(root / "queries", kind="queries", config={}, inputs={}) as w:
    ...     _ = (w.path / "passages.arrow").write_bytes(b"")
    >>> queries.check()
    >>> queries.fingerprint() == ArtifactWriter(root / "queries", kind="queries", config={}, inputs={}).fingerprint
    True
    >>> [record["of"] for record in file("corpus", corpus).sources()]
    ['file']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from spar.core.artifacts import MANIFEST, check_unchanged, is_complete, require
from spar.core.errors import ArtifactError
from spar.core.lineage import STAGE_OF, Of, fingerprint_of, source


@dataclass(frozen=True)
class Dependency:
    """One thing an artifact is made from (see the module docstring)."""

    #: Its key in the artifact's ``inputs``; None: recorded in the lineage only, not fingerprinted.
    key: str | None
    #: What is read: an artifact's directory, a file, a directory whose files identify it.
    path: Path
    #: How its fingerprint is taken (:func:`spar.core.lineage.fingerprint_of`).
    of: Of = "artifact"
    #: The kind an artifact must be; its stage (:data:`spar.core.lineage.STAGE_OF`) is named when it is missing.
    kind: str | None = None
    #: Refuse it when a file's content changed since its stage wrote it, not only its size (a table read by rows).
    unchanged: bool = False
    #: Read only when complete: else neither checked, fingerprinted nor recorded (evaluate's tune/, index/).
    optional: bool = False
    #: The refusal when it is missing, instead of the default one (a stage's own wording, kept).
    missing: str | None = None
    #: Its fingerprint in ``inputs`` when that is not the source's own (a figure its producer recorded, a Λ's).
    value: str | Callable[[], str] | None = field(default=None, compare=False)
    #: Its lineage records when not ``[source(path, of)]`` (a corpus directory's files, a Λ's or a model's origin).
    records: Callable[[], list[dict[str, str]]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def stage(self) -> str:
        """The stage that writes it (named in refusals)."""
        return STAGE_OF.get(self.kind or "", self.kind or "its stage")

    def present(self) -> bool:
        """Whether it is there to be read (an artifact: complete; anything else: exists)."""
        if self.of == "artifact":
            return is_complete(self.path)
        if self.of == "file":  # an optional file (the results a card quotes) is there or not, whatever it records
            return self.path.exists()
        return self.path.exists() or self.records is not None

    def check(self) -> None:
        """Refuse it, in one line naming the stage to re-run, when it cannot be read as it was made."""
        if self.of != "artifact" or self.optional:
            return
        what = f"the {self.kind} artifact" if self.kind else "the input artifact"
        refusal = self.missing or f"{self.path}: {what} is missing or incomplete: run `spar {self.stage}`"
        if not (self.path / MANIFEST).is_file():
            raise ArtifactError(refusal)
        if self.kind is not None:
            require(self.path, self.kind)
        if self.unchanged:  # names the first file that is not as its stage wrote it
            check_unchanged(self.path, self.stage)
        elif not is_complete(self.path):
            raise ArtifactError(refusal)

    def fingerprint(self) -> str:
        """What it contributes to the artifact's ``inputs``."""
        if self.value is not None:
            return self.value() if callable(self.value) else self.value
        return fingerprint_of(self.path, self.of)

    def sources(self) -> list[dict[str, str]]:
        """What the artifact's manifest records of it (``sources``: :mod:`spar.core.lineage`)."""
        return self.records() if self.records is not None else [source(self.path, self.of)]


def artifact(key: str | None, path: str | Path, kind: str | None = None, *, unchanged: bool = False,
             optional: bool = False, missing: str | None = None,
             value: str | Callable[[], str] | None = None) -> Dependency:
    """Another stage's artifact, fingerprinted by its manifest (or by ``value``)."""
    return Dependency(key, Path(path), "artifact", kind, unchanged, optional, missing, value)


def file(key: str | None, path: str | Path) -> Dependency:
    """An input file, by :func:`spar.core.fingerprint.file_fingerprint`."""
    return Dependency(key, Path(path), "file")


def file_set(key: str | None, path: str | Path, fingerprint: str | Callable[[], str],
             files: Iterable[str | Path]) -> Dependency:
    """A directory of input files (a corpus): one fingerprint for all of them, one lineage record per file."""
    paths = [Path(p) for p in files]
    return Dependency(key, Path(path), "file", value=fingerprint,
                      records=lambda: [source(p, "file") for p in paths])


def computed(key: str | None, path: str | Path, fingerprint: str | Callable[[], str],
             sources: Callable[[], list[dict[str, str]]]) -> Dependency:
    """Something whose fingerprint and lineage its owner computes: a Λ source
    (:class:`spar.experiment.lambda_source.LambdaSource`), an encoder's weights."""
    return Dependency(key, Path(path), "files", value=fingerprint, records=sources)


def resolve(needs: Sequence[Dependency]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Check every dependency (in order: the first refusal is the one raised), then their ``inputs`` and lineage
    ``sources``; an optional one that is not there contributes nothing."""
    present = [need for need in needs if not need.optional or need.present()]
    for need in present:
        need.check()
    inputs: dict[str, str] = {}
    for need in present:
        if need.key is None:
            continue
        if need.key in inputs:
            raise ValueError(f"two dependencies under the input key {need.key!r}")
        inputs[need.key] = need.fingerprint()
    return inputs, [record for need in present for record in need.sources()]


def merged(inputs: Mapping[str, str], derived: Mapping[str, str]) -> dict[str, str]:
    """A unit's own ``inputs`` (values that are no file: a seed, μ₀) with those its dependencies derive."""
    clash = sorted(set(inputs) & set(derived))
    if clash:
        raise ValueError(f"input keys given both by hand and by a dependency: {clash}")
    return {**derived, **inputs}
