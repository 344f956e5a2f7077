"""Searching with a published SPAR model: :class:`SparSearcher` (what ``spar search`` runs).

A searcher joins three things a run leaves: the published model directory (:mod:`spar.publish`: the encoders and
μ), the FAISS index (:class:`spar.index.SparIndex`) and the passages table (:class:`spar.passages.PassagesTable`,
for titles and texts). μ is the published model's (tuned by ``spar tune``), or the caller's.

Example (skipped in the doctest run: it needs a published run under ``runs/``)::

    >>> from spar.search import SparSearcher
    >>> searcher = SparSearcher.open("runs/scifact-sample/model")            # doctest: +SKIP
    >>> [h.id for h in searcher.search(["what causes scurvy"], k=3)[0]]     # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

from spar.errors import ArtifactError, ConfigError
from spar.lineage import check_current
from spar.publish import MODEL_CONFIG, SparEncoder, check_model_dir, is_model_dir


def resolve_index_location(model_dir: str | Path) -> tuple[Path, Path | None]:
    """Where a published model's index and passages are: inside it (``index/``) or recorded at publish time."""
    d = Path(model_dir)
    config = json.loads((d / MODEL_CONFIG).read_text(encoding="utf-8"))
    index = config.get("index") or {}
    if not index.get("index_dir"):
        if (d / "index").is_dir():
            return d / "index", (d / "index" / "passages.arrow") if (d / "index" / "passages.arrow").exists() else None
        raise ArtifactError(f"{d}: the model records no index (publish with publish.copy_index=true, or pass the "
                            "run's index directory to `spar search`)")
    index_dir = Path(index["index_dir"])
    index_dir = index_dir if index_dir.is_absolute() else d / index_dir
    passages = index.get("passages")
    passages_path = None if not passages else (Path(passages) if Path(passages).is_absolute() else d / passages)
    if not index_dir.exists():
        raise ArtifactError(f"{d / MODEL_CONFIG}: the recorded index {index_dir} does not exist (moved or deleted?)")
    return index_dir, passages_path


def find_passages_file(index_dir: Path) -> Path | None:
    """``queries/passages.arrow`` of the run an index belongs to (``<output_dir>/index`` -> ``<output_dir>``)."""
    for candidate in (index_dir / "passages.arrow", index_dir.parent / "queries" / "passages.arrow"):
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
        from spar.passages import PassagesTable

        return PassagesTable(self.passages)

    @classmethod
    def open(cls, path: str | Path, device: str = "cpu") -> "SparSearcher":
        from spar.index import SparIndex

        p = Path(path)
        if is_model_dir(p):
            model_dir = p
            check_model_dir(model_dir)
            check_current(model_dir)  # a model made from a Λ, μ or index that has changed since is refused
            index_dir, passages = resolve_index_location(model_dir)
        elif (p / "index.faiss").exists():
            index_dir, model_dir = p, p.parent / "model"
            if not is_model_dir(model_dir):
                raise ArtifactError(f"{p}: found the index but no published model at {model_dir} to encode queries "
                                    "with (run `spar publish`, or pass the model directory instead)")
            check_current(model_dir)
            passages = None
        elif not p.exists():
            raise ArtifactError(f"{p}: no such directory")
        else:
            raise ArtifactError(f"{p}: neither a SPAR model directory ({MODEL_CONFIG}) nor an index directory "
                                "(index.faiss)")
        if passages is None or not Path(passages).exists():
            passages = find_passages_file(index_dir)
        index = SparIndex.load(index_dir)
        encoder = SparEncoder.from_pretrained(model_dir, device=device)
        recorded = (encoder.metadata.get("provenance") or {}).get("index_fingerprints") or {}
        for key in ("base_fingerprint", "lambda_fingerprint"):
            if recorded.get(key) and index.info.get(key) and recorded[key] != index.info[key]:
                raise ArtifactError(f"{index_dir} was built with another {key.split('_')[0]} encoder "
                                    f"({index.info[key]}) than the model in {model_dir} ({recorded[key]}); "
                                    "re-run `spar publish` after `spar index`")
        tuned_storage = ((encoder.metadata.get("provenance") or {}).get("tuning") or {}).get("storage")
        if tuned_storage and tuned_storage != index.storage:
            raise ArtifactError(f"{index_dir} stores passages as {index.storage}, but the μ of {model_dir} was tuned "
                                f"against {tuned_storage}; re-run `spar tune`, `spar index` and `spar publish`")
        if index.variant != encoder.variant:
            raise ArtifactError(f"{index_dir} is a '{index.variant}' index but {model_dir} is a "
                                f"'{encoder.variant}' model")
        return cls(encoder, index, Path(passages) if passages else None, model_dir, index_dir)

    def search(self, queries: Sequence[str], k: int = 10, mu: float | None = None) -> list[list[Hit]]:
        """Top-``k`` passages per query by ``sim + μ·simΛ`` (μ: ``mu``, else the model's tuned μ).

        An empty (or whitespace-only) query, a query that is not valid UTF-8 text, and ``k < 1`` are refused: they
        would return arbitrary passages or fail deep inside a tokenizer."""
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
