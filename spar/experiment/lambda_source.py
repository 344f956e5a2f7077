"""Where an experiment's Λ comes from: this run's ``lambda/``, or one trained elsewhere (``encode.lambda``).

SPAR's claim is that one Λ, trained once (e.g. on Wikipedia), plugs into any dense retriever on any corpus. An
experiment names that Λ with ``encode.lambda``; every stage that needs Λ (encode, evaluate's fresh queries,
publish, search) opens it here, so there is one reading of the setting:

==========================  ==================================================================================
``encode.lambda.path``      what is read
==========================  ==================================================================================
unset                       this run's ``<output_dir>/lambda`` (written by ``spar train``)
a Λ directory               it (``spar_lambda.json``; copied from any run: Λ directories are self-contained)
a spar run's output dir     its ``lambda/``
a published spar model      its Λ route modules (``spar publish`` output)
a hub id (``owner/name``)   the published spar model or Λ directory downloaded from the Hugging Face Hub
a Hugging Face model        with ``passage_path`` (the context encoder): a DPR-style dual encoder, such as the
                            paper's released Λ, converted once (:mod:`spar.experiment.hf_lambda`)
==========================  ==================================================================================

``encode.lambda.kind`` / ``dim``, when given, are checked against what is found; ``statistics: target`` refits a
term-based Λ's corpus statistics on the experiment's own corpus
(:meth:`~spar.lexical.base.LexicalModel.with_statistics`).
The fingerprint of the source (its manifest's, else a hash of its files) goes into the embeddings' manifests, so
pointing ``encode.lambda`` elsewhere re-runs encode and every stage after it.

Example::

    >>> import tempfile
    >>> from spar.experiment.lambda_source import resolve_lambda
    >>> from spar.lexical.projection import ProjectionLambda
    >>> directory = tempfile.mkdtemp()
    >>> ProjectionLambda.fit(["sparse retrieval with BM25", "dense retrieval"], dim=16).save(directory)
    >>> source = resolve_lambda({"path": directory, "kind": "projection", "dim": 16}, output_dir="unused")
    >>> source.origin, source.kind, source.dim
    ('directory', 'projection', 16)
    >>> resolve_lambda({"path": directory, "dim": 384}, output_dir="unused")
    Traceback (most recent call last):
    ...
    spar.core.errors.ArtifactError: ...: Λ has 16 dimensions, but encode.lambda.dim expects 384
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from spar.core.errors import ArtifactError
from spar.core.run_context import RunContext
from spar.data.readers import OnBad
from spar.experiment.hf_lambda import import_dual_encoder, is_hf_model_dir
from spar.publish.model_dir import MODEL_CONFIG
from spar.model.resolve import HUB_ID as _HUB_ID  # a hub id: ``owner/name`` (when no such local path exists)


@dataclass
class LambdaSource:
    """A resolved Λ: where it is, what it is, and how to open it."""

    location: Path
    origin: str  # "run" (this run's lambda/), "directory", "published", "hub", "huggingface"
    kind: str
    dim: int
    statistics: str = "carried"
    spec: str | None = None
    #: The corpus ``statistics: target`` refits on (its ``(title, text)`` passages), and its file.
    target_passages: Callable[[], Iterable[tuple[str, str]]] | None = field(default=None, repr=False)
    target: Path | list[Path] | None = None
    _fingerprint: str | None = field(default=None, repr=False)

    @property
    def published(self) -> bool:
        return (self.location / MODEL_CONFIG).exists()

    def fingerprint(self) -> str:
        """The source's identity: a hash of its files (weights, vocabulary, statistics, configs and manifest: a
        retrained Λ keeps its manifest fingerprint when its config is unchanged, not its weights; of a Λ trained
        since #37 its content only: :func:`spar.core.fingerprint.files_fingerprint`), plus the target corpus's with
        ``statistics: target``."""
        if self._fingerprint is None:
            from spar.core.fingerprint import files_fingerprint, fingerprint_dict
            from spar.data.readers import corpus_fingerprint

            self._fingerprint = files_fingerprint(self.location)
            if self.statistics == "target":
                target = corpus_fingerprint(self.target) if self.target else None
                self._fingerprint = fingerprint_dict({"lambda": self._fingerprint, "statistics_from": target})
        return self._fingerprint

    def sources(self) -> list[dict[str, str]]:
        """What a Λ read from here depends on, as manifests record it (:mod:`spar.core.lineage`): its files, and the
        target corpus with ``statistics: target``."""
        from spar.core.fingerprint import files_fingerprint
        from spar.core.lineage import source

        found = [{"path": str(self.location.absolute()), "of": "files",
                  "fingerprint": self.fingerprint() if self.statistics != "target"
                  else files_fingerprint(self.location)}]
        if self.statistics == "target" and self.target is not None:
            from spar.data.readers import corpus_files

            found += [source(path, "file") for path in corpus_files(self.target) if path.exists()]
        return found

    def describe(self) -> dict[str, Any]:
        """For manifests, results and model cards."""
        return {"origin": self.origin, "path": str(self.location), "spec": self.spec, "kind": self.kind,
                "dim": self.dim, "statistics": self.statistics, "fingerprint": self.fingerprint(),
                **({"statistics_from": str(self.target)} if self.statistics == "target" else {})}

    def load(self, device: str = "cpu"):
        """The Λ as a :class:`~spar.lexical.base.LexicalModel`; with ``statistics: target``, refitted on the
        target corpus (``target_passages()``, read through the Λ's own fields)."""
        if self.published:
            from spar.publish.model_dir import load_published_encoder

            model = load_published_encoder(self.location, "lambda", device=device)
        else:
            from spar.lexical import load_lambda

            model = load_lambda(self.location, device=device)
        if self.statistics == "target":
            if self.target_passages is None:
                raise ValueError("statistics='target' needs the target corpus's passages")
            model = model.with_statistics(self.target_passages())
        return model


def _spec_fields(spec: str | Mapping[str, Any] | Any | None) -> dict[str, Any]:
    if spec is None:
        return {}
    if isinstance(spec, str):
        return {"path": spec}
    if isinstance(spec, Mapping):
        return dict(spec)
    return spec.model_dump()  # a config section


def _is_lambda_dir(d: Path) -> bool:
    from spar.lexical.base import LAMBDA_CONFIG

    return (d / LAMBDA_CONFIG).exists()


def _download(hub_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(hub_id))
    except Exception as exc:  # offline, unknown repo, no token: one line, naming the id
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"{hub_id}: encode.lambda is not a local path, and downloading it from the Hugging Face "
                            f"Hub failed ({first[:160]})") from None


def _local_or_hub(path: str, what: str) -> Path:
    d = Path(path).expanduser()
    if d.exists():
        return d
    if _HUB_ID.match(path) and not path.startswith((".", "/")):
        return _download(path)
    raise ArtifactError(f"{d}: encode.lambda.{what}: no such directory")


def _locate(path: str | None, output_dir: str | Path, fields: Mapping[str, Any] | None = None) -> tuple[Path, str]:
    fields = fields or {}
    if fields.get("passage_path") or (path and is_hf_model_dir(Path(path).expanduser())):
        # A Hugging Face dual encoder (the paper's released Λ, a Tevatron pair): converted once (hf_lambda.py).
        query = _local_or_hub(str(path), "path")
        if not is_hf_model_dir(query):
            raise ArtifactError(f"{query}: encode.lambda.passage_path is for a Hugging Face dual encoder, but "
                                "encode.lambda.path is not a Hugging Face model (config.json and weights)")
        passage = _local_or_hub(str(fields["passage_path"]), "passage_path") if fields.get("passage_path") else None
        if passage is not None and not is_hf_model_dir(passage):
            raise ArtifactError(f"{passage}: encode.lambda.passage_path is not a Hugging Face model (config.json and "
                                "weights)")
        return import_dual_encoder(query, passage, dict(fields), output_dir), "huggingface"
    if path is None:
        lam = RunContext.at(output_dir).artifact("lambda")
        if not _is_lambda_dir(lam):
            raise ArtifactError(f"{lam}: Λ is missing (run `spar train`, set encode.lambda to a Λ trained elsewhere, "
                                "or drop 'lambda' from encode.encoders)")
        return lam, "run"
    d = Path(path).expanduser()
    if not d.exists():
        if _HUB_ID.match(path) and not path.startswith((".", "/")):
            d, origin = _download(path), "hub"
        else:
            raise ArtifactError(f"{d}: encode.lambda: no such directory (a Λ directory, a spar run's output "
                                "directory, a published spar model, or a hub id)")
    else:
        origin = "directory"
    if not d.is_dir():
        raise ArtifactError(f"{d}: encode.lambda is a file; give the Λ's directory")
    if (d / MODEL_CONFIG).exists():
        return d, "published" if origin == "directory" else origin
    if _is_lambda_dir(d):
        return d, origin
    run_lambda = RunContext.at(d).artifact("lambda")
    if run_lambda.is_dir():
        if not _is_lambda_dir(run_lambda):
            raise ArtifactError(f"{run_lambda}: the run's Λ is incomplete (its `spar train` has not finished)")
        return run_lambda, origin
    raise ArtifactError(f"{d}: missing file 'spar_lambda.json' (encode.lambda must be a Λ directory, a spar run's "
                        "output directory, a published spar model, or a hub id)")


def _kind_and_dim(d: Path) -> tuple[str, int]:
    if (d / MODEL_CONFIG).exists():
        from spar.publish.model_dir import check_model_dir

        config = check_model_dir(d)
        encoder = config["encoders"]["lambda"]
        return encoder["kind"], int(config["dims"]["lambda"])
    from spar.lexical.base import read_lambda_config

    config = read_lambda_config(d)
    return config["kind"], int(config["dim"])


def _check_as_written(location: Path) -> None:
    """A Λ (or published model) directory must hold its files as spar wrote them, by its manifest (or, for a Λ
    without one, the checksums in ``spar_lambda.json``): a reordered ``vocab.txt`` or truncated weights would
    otherwise be read as a different, silently wrong Λ."""
    from spar.core.artifacts import MANIFEST, check_unchanged
    from spar.lexical.base import check_lambda_files
    from spar.model.resolve import check_weight_files

    check_weight_files(location)
    if (location / MANIFEST).exists():
        check_unchanged(location, "publish" if (location / MODEL_CONFIG).exists() else "train")
    elif _is_lambda_dir(location):  # a Λ without its manifest: checked by the checksums save() recorded
        check_lambda_files(location)


def resolve_lambda(spec: str | Mapping[str, Any] | Any | None, output_dir: str | Path) -> LambdaSource:
    """Find the Λ ``spec`` (``encode.lambda``: a path/hub id, or a mapping with ``path``, ``kind``, ``dim``,
    ``statistics``) names, check the expected kind and dimension, and return it unopened."""
    fields = _spec_fields(spec)
    location, origin = _locate(fields.get("path"), output_dir, fields)
    try:
        kind, dim = _kind_and_dim(location)
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{location}: cannot read the Λ's kind and dimension ({exc})") from None
    where = location / MODEL_CONFIG if (location / MODEL_CONFIG).exists() else location
    if fields.get("kind") and fields["kind"] != kind:
        raise ArtifactError(f"{where}: Λ is a {kind} Λ, but encode.lambda.kind expects {fields['kind']}")
    if fields.get("dim") and int(fields["dim"]) != dim:
        raise ArtifactError(f"{where}: Λ has {dim} dimensions, but encode.lambda.dim expects {fields['dim']}")
    statistics = fields.get("statistics") or "carried"
    from spar.lexical import lambda_class

    if statistics == "target" and not lambda_class(kind).term_based:
        raise ArtifactError(f"{where}: encode.lambda.statistics=target refits a term-based Λ's corpus statistics, but "
                            f"this Λ is a {kind} (use statistics: carried)")
    _check_as_written(location)
    return LambdaSource(location, origin, kind, dim, statistics, fields.get("path"))


def run_lambda(cfg) -> LambdaSource | None:
    """The Λ this run trained (``<output_dir>/lambda``, complete), whatever ``encode.lambda`` names; None when the
    run has none (the frontier scores it as one more point)."""
    from spar.core.artifacts import is_complete

    lam = RunContext(cfg).artifact("lambda")
    return resolve_lambda(None, cfg.output_dir) if is_complete(lam) else None


def with_target(source: LambdaSource, passages: Path | list[Path], corpus_format: str = "auto",
                on_bad_record: OnBad = "fail") -> LambdaSource:
    """``source``, refitting on the experiment's ``passages`` (``queries/passages.arrow`` or the corpus files)
    when its ``statistics`` is ``target``; picklable (a Ray worker loads it)."""
    if source.statistics == "target":
        source.target = passages
        source.target_passages = functools.partial(corpus_passages, passages, corpus_format, on_bad_record)
    return source


def corpus_passages(source: Path | list[Path], corpus_format: str = "auto",
                    on_bad_record: OnBad = "fail") -> Iterator[tuple[str, str]]:
    """Every passage an experiment encodes, as ``(title, text)``: the target corpus a term-based Λ refits its
    statistics on (``encode.lambda.statistics: target``), reading it through its own fields."""
    from spar.data.passages import PassagesTable

    if isinstance(source, Path) and source.suffix == ".arrow":
        for batch in PassagesTable.open(source).iter_columns(("id", "title", "text")):
            yield from zip(batch["title"], batch["text"])
        return
    from spar.data.readers import read_corpus

    for passage in read_corpus(source, corpus_format, on_bad_record=on_bad_record):
        yield passage.title, passage.text
