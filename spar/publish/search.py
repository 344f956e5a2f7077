"""Searching with a published SPAR model: :class:`SparSearcher` (what ``spar search`` runs).

A searcher joins three things: the published model directory (:mod:`spar.publish.model_dir`: the encoders and μ), a
FAISS index (:class:`spar.index.spar_index.SparIndex`: a run's ``index/``, one copied into the model, or one built from
any corpus by ``spar index --model``, :mod:`spar.publish.corpus_index`) and the passages table
(:class:`spar.data.passages.PassagesTable`, for titles and texts). μ is the published model's (tuned by ``spar tune``),
or the caller's.

Example (skipped in the doctest run: it needs a published run under ``runs/``)::

    >>> from spar.publish.search import SparSearcher
    >>> searcher = SparSearcher.open("runs/scifact-sample/model")            # doctest: +SKIP
    >>> [h.id for h in searcher.search(["what causes scurvy"], k=3)[0]]     # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence, overload

from spar.core.artifacts import PASSAGES_FILE
from spar.core.errors import ArtifactError, ConfigError
from spar.core.lineage import check_current
from spar.core.run_context import RunContext
from spar.publish.model_dir import MODEL_CONFIG, SparEncoder, check_model_dir, is_model_dir


def resolve_index_location(model_dir: str | Path) -> tuple[Path, Path | None]:
    """Where a published model's index and passages are: inside it (``index/``, ``publish.copy_index``), recorded
    by an older spar, or the index of the run it was published in (``<output_dir>/index`` beside
    ``<output_dir>/model``, when its encoders are the ones the model records); else a one-line error that says how
    to give it one."""
    d = Path(model_dir)
    config = json.loads((d / MODEL_CONFIG).read_text(encoding="utf-8"))
    index = config.get("index") or {}
    if index.get("index_dir"):
        index_dir = Path(index["index_dir"])
        index_dir = index_dir if index_dir.is_absolute() else d / index_dir
        passages = index.get("passages")
        passages_path = None if not passages else (Path(passages) if Path(passages).is_absolute() else d / passages)
        if not index_dir.exists():
            raise ArtifactError(f"{d / MODEL_CONFIG}: the recorded index {index_dir} does not exist (moved or "
                                "deleted?)")
        return index_dir, passages_path
    if (d / "index").is_dir():
        return d / "index", (d / "index" / PASSAGES_FILE) if (d / "index" / PASSAGES_FILE).exists() else None
    run_index = RunContext.at(d.parent).artifact("index")  # a model published beside its run's index
    if _built_by(run_index, config):
        return run_index, None
    raise ArtifactError(f"{d}: the model holds no index; index a corpus with it (`spar index --model {d} --corpus "
                        "FILE_OR_BEIR_DIR --output DIR`, then `spar search DIR ...`), or publish it with "
                        "publish.copy_index=true")


def _built_by(index_dir: Path, config: dict) -> bool:
    """Whether ``index_dir`` is the index of the run a model was published from (no encoder fingerprint it records
    differs from the one the model's provenance records)."""
    from spar.index.files import index_info, is_index_dir

    info = index_info(index_dir, required=False) if is_index_dir(index_dir) else {}
    if not info:
        return False
    recorded = (config.get("provenance") or {}).get("index_fingerprints") or {}
    keys = ("base_fingerprint", "lambda_fingerprint")
    return not info.get("model") and all(recorded.get(k) == info.get(k) for k in keys
                                         if recorded.get(k) and info.get(k))


def find_passages_file(index_dir: Path) -> Path | None:
    """``queries/passages.arrow`` of the run an index belongs to (``<output_dir>/index`` -> ``<output_dir>``)."""
    for candidate in (index_dir / PASSAGES_FILE, RunContext.at(index_dir.parent).passages):
        if candidate.exists():
            return candidate
    return None


@dataclass
class Hit:
    """One search result: 1-based rank, passage id, score, and the passage's title and text when found."""

    rank: int
    id: str
    score: float
    title: str = ""
    text: str = ""


class SparSearcher:
    """A published SPAR model with its FAISS index and passages: ``search(queries, k, mu)`` -> hits.

    Open it from the model directory (which records or holds the index) or from a run's ``index/`` directory
    (the model is then the run's published ``model/`` beside it). Encoders always come from a published model
    directory, because only it records every setting (pooling, normalisation, prefixes, lengths) the index's
    vectors were made with; the index's encoder fingerprints are checked against the ones recorded at publish time.

    """

    def __init__(self, encoder: SparEncoder, index, passages: Path | None, model_dir: Path, index_dir: Path):
        self.encoder, self.index, self.passages = encoder, index, passages
        self.model_dir, self.index_dir = model_dir, index_dir

    @cached_property
    def passages_table(self):
        """The passages table, opened (and checked) once."""
        from spar.data.passages import PassagesTable

        return PassagesTable(self.passages)

    @classmethod
    def open(cls, path: str | Path, device: str = "cpu", model: str | Path | None = None,
             backend: str = "torch") -> "SparSearcher":
        """Open a model directory (with the index it holds or its run's) or an index directory: a run's
        ``index/`` (its model: ``model`` or the run's ``model/`` beside it) or one ``spar index --model`` built
        (its model: ``model`` or the one it records). An index built with other encoders than the model's is
        refused in one line.

        ``backend`` runs the query encoders' transformers (as ``encode.backend``): ``torch``, ``onnx`` (ONNX
        Runtime on the CPU, exported once and cached; the same vectors within 1e-6, so an index encoded with torch
        is searched exactly as before) or ``auto`` (onnx on the CPU). One query at a time ONNX Runtime is the
        faster path on the CPUs measured (``bench/query_latency.py``); a term-based Λ has no transformer and is
        unchanged."""
        from spar.index.files import INDEX_FILE, is_index_dir
        from spar.index.spar_index import SparIndex

        p = Path(path)
        if is_model_dir(p):
            if model is not None:
                raise ConfigError(f"{p} is a model directory: --model names the model of an index directory")
            model_dir = p
            check_model_dir(model_dir)
            check_current(model_dir)  # a model made from a Λ, μ or index that has changed since is refused
            index_dir, passages = resolve_index_location(model_dir)
        elif is_index_dir(p):
            index_dir, passages = p, None
            model_dir = _model_of_index(p, model)
            check_current(model_dir)
        elif not p.exists():
            raise ArtifactError(f"{p}: no such directory")
        else:
            raise ArtifactError(f"{p}: neither a SPAR model directory ({MODEL_CONFIG}) nor an index directory "
                                f"({INDEX_FILE})")
        if passages is None or not Path(passages).exists():
            passages = find_passages_file(index_dir)
        index = SparIndex.load(index_dir)
        encoder = SparEncoder.from_pretrained(model_dir, device=device)
        if index.info.get("model"):
            _check_corpus_index(index, index_dir, model_dir)
        else:
            _check_run_index(index, index_dir, encoder, model_dir)
        if index.variant != encoder.variant:
            raise ArtifactError(f"{index_dir} is a '{index.variant}' index but {model_dir} is a "
                                f"'{encoder.variant}' model")
        if backend != "torch":  # after the fingerprint checks: those compare the torch encoders the index was made by
            on_backend(encoder, backend, device)
        return cls(encoder, index, Path(passages) if passages else None, model_dir, index_dir)

    @overload
    def search(self, queries: str, k: int = 10, mu: float | None = None) -> list[Hit]: ...  # type: ignore[overload-overlap]

    @overload
    def search(self, queries: Sequence[str], k: int = 10, mu: float | None = None) -> list[list[Hit]]: ...

    def search(self, queries: str | Sequence[str], k: int = 10,
               mu: float | None = None) -> list[Hit] | list[list[Hit]]:
        """Top-``k`` passages by ``sim + μ·simΛ`` (μ: ``mu``, else the model's tuned μ): for one query string its
        hits, for a list of queries one list of hits per query (as ``SentenceTransformer.encode`` takes either).

        An empty (or whitespace-only) query, a query that is not valid UTF-8 text, and ``k < 1`` are refused: they
        would return arbitrary passages or fail deep inside a tokenizer."""
        if isinstance(queries, str):
            return self.search([queries], k=k, mu=mu)[0]
        if isinstance(queries, (bytes, bytearray)):
            raise ConfigError("queries must be text (str) or a list of texts, not bytes: decode them first")
        queries = list(queries)
        if k < 1:
            raise ConfigError(f"k must be at least 1, got {k}")
        if mu is not None and not math.isfinite(mu):
            raise ConfigError(f"mu must be a finite number, got {mu}")
        for i, query in enumerate(queries):
            if not isinstance(query, str) or not query.strip():
                raise ConfigError(f"query {i + 1} is empty: nothing to search for")
            try:
                query.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(f"query {i + 1} is not valid UTF-8 text (undecodable bytes)") from None
        base_q = self.encoder.base.encode_query(queries)
        lambda_q = self.encoder.lambda_.encode_query(queries)
        scores, ids = self.index.search(base_q, lambda_q, k, mu=self.encoder.mu if mu is None else mu)
        flat = [i for row in ids for i in row if i is not None]
        found = dict(zip(flat, self.passages_table.lookup(flat))) if self.passages and flat else {}
        results = []
        for row_scores, row_ids in zip(scores, ids):
            hits = []
            for rank, (score, pid) in enumerate(zip(row_scores, row_ids), start=1):
                if pid is None:
                    continue
                passage = found.get(pid) or {}
                hits.append(Hit(rank, pid, float(score), passage.get("title", ""), passage.get("text", "")))
            results.append(hits)
        return results


def on_backend(encoder: SparEncoder, backend: str, device: str = "cpu") -> SparEncoder:
    """Put ``encoder``'s transformers (the base, and a transformer Λ's) on ``backend``
    (:func:`spar.model.onnx_encoder.with_backend`), in place; returns it."""
    from spar.lexical.transformer import TransformerLambda
    from spar.model.onnx_encoder import with_backend

    encoder.base = with_backend(encoder.base, backend, device)
    if isinstance(encoder.lambda_, TransformerLambda):
        encoder.lambda_.encoder = with_backend(encoder.lambda_.encoder, backend, device)
    return encoder


def _model_of_index(index_dir: Path, model: str | Path | None) -> Path:
    """The model that encodes queries for an index directory: ``model`` when given; for an index built by
    ``spar index --model``, the model it records (relative to the index, or a hub id); for a run's index, the
    run's published ``model/`` beside it."""
    from spar.publish.model_dir import locate_model

    if model is not None:
        return locate_model(model)
    from spar.index.files import index_info

    recorded = index_info(index_dir, required=False).get("model") or {}
    if recorded.get("location"):
        where = recorded["location"]
        local = Path(os.path.normpath(index_dir / where))
        if local.exists() or not recorded.get("hub"):
            if not local.exists():
                raise ArtifactError(f"{index_dir}: it was built with the model at {local}, which is not there (moved "
                                    "or deleted?); name the model with --model")
            return locate_model(local)
        return locate_model(where)
    model_dir = RunContext.at(index_dir.parent).artifact("model")
    if not is_model_dir(model_dir):
        raise ArtifactError(f"{index_dir}: found the index but no published model at {model_dir} to encode queries "
                            "with (run `spar publish`, pass the model directory instead, or name it with --model)")
    return model_dir


def _check_corpus_index(index, index_dir: Path, model_dir: Path) -> None:
    """An index built by ``spar index --model`` is searched with that model only (its recorded fingerprint)."""
    from spar.publish.model_dir import published_fingerprint

    recorded = index.info["model"].get("fingerprint")
    current = published_fingerprint(model_dir)
    if recorded != current:
        raise ArtifactError(f"{index_dir} was built with another model (fingerprint {recorded}) than {model_dir} "
                            f"({current}); search it with its own model, or re-index with `spar index --model "
                            f"{model_dir} --corpus ... --output ...`")


def _check_run_index(index, index_dir: Path, encoder: SparEncoder, model_dir: Path) -> None:
    """A run's index: built with the encoders the model's provenance records, storing passages as μ was tuned."""
    recorded = (encoder.metadata.get("provenance") or {}).get("index_fingerprints") or {}
    for key in ("base_fingerprint", "lambda_fingerprint"):
        if recorded.get(key) and index.info.get(key) and recorded[key] != index.info[key]:
            raise ArtifactError(f"{index_dir} was built with another {key.split('_')[0]} encoder "
                                f"({index.info[key]}) than the model in {model_dir} ({recorded[key]}); "
                                "re-run `spar publish` after `spar index`")
    tuned_storage = ((encoder.metadata.get("provenance") or {}).get("tuning") or {}).get("storage")
    # An approximate index that re-ranks exactly (index.refine) serves float32 scores whatever it stores.
    served = "float32" if index.refine else index.storage
    if tuned_storage and tuned_storage != served:
        raise ArtifactError(f"{index_dir} stores passages as {index.storage}, but the μ of {model_dir} was tuned "
                            f"against {tuned_storage}; re-run `spar tune`, `spar index` and `spar publish`")
