"""What the term-based Λ kinds (``projection``, ``static``) share: a table of term vectors over the teacher's
BM25 statistics, published as a :class:`~spar.lexical.st_modules.LexicalBag` on each route."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spar.core.errors import ArtifactError, ConfigError
from spar.lexical.base import LexicalModel

#: Files of a term-based Λ's published folder (a :class:`spar.lexical.st_modules.LexicalBag`).
BAG_FILES = ("lexical_bag.json", "vocab.txt", "model.safetensors")
#: What a term-based Λ directory holds besides its kind's own files.
STATISTICS_FILES = {"vocab.txt": "the teacher's terms (row order)", "document_frequencies.npy": "int64 [V]",
                    "term_statistics.json": "k1, b, passages, average length, analyzer, fields"}


def require_bm25(kind: str, teacher: str) -> None:
    if teacher != "bm25":
        raise ConfigError(f"train.kind={kind!r} densifies the teacher's term weights, which spar computes for "
                          f"the BM25 teacher only (label.teacher={teacher!r}); use label.teacher=bm25 or "
                          "train.kind=transformer")


class TermLambda(LexicalModel):
    """A Λ whose vectors are term weights (passages: BM25, queries: counts) times a [V, dim] term table."""

    term_based = True
    published_files = BAG_FILES
    weights: Any  # spar.lexical.terms.BM25Weights

    def term_table(self) -> np.ndarray:
        """The term table as a dense float32 [V, dim] array (what a published model stores)."""
        raise NotImplementedError

    def shares_sides(self) -> bool:
        return True

    def published_spec(self, side: str, weight: float) -> dict[str, Any]:
        return {"type": "lexical", "input": "query" if side == "query" else "passage", "pooling": "sum",
                "normalize": False, "prefix": "", "max_length": 0, "weight": float(weight)}

    def published_table(self) -> tuple[np.ndarray | None, dict[str, Any] | None]:
        """(the dense table a published bag holds in memory, or None; the spec that regenerates it instead of storing
        it, or None: stored as is). A learnt table is stored."""
        return self.term_table(), None

    def published_module(self, side: str) -> tuple[Any, None]:
        import torch

        from spar.lexical.st_modules import LexicalBag

        w = self.weights
        table, spec = self.published_table()
        dense = None if table is None else torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32))
        return LexicalBag(w.vocab, torch.from_numpy(w.df), w.num_docs, w.avg_length, w.k1, w.b, dense,
                          "query" if side == "query" else "passage", w.analyzer.config(), table=spec), None

    @staticmethod
    def published_bag(directory: Path):
        """The :class:`~spar.lexical.st_modules.LexicalBag` of a published route folder (a regenerated table
        checked)."""
        from spar.lexical.st_modules import LexicalBag

        try:
            return LexicalBag.load(str(directory))
        except (ValueError, FileNotFoundError) as exc:
            raise ArtifactError(str(exc)) from None

    @staticmethod
    def published_weights(bag, entry: dict[str, Any]):
        """The teacher's statistics a published bag holds, as :class:`~spar.lexical.terms.BM25Weights`."""
        from spar.lexical.terms import DEFAULT_FIELDS, BM25Weights

        fields = tuple(entry.get("teacher", {}).get("fields", DEFAULT_FIELDS))
        return BM25Weights(bag.vocab, bag.df.numpy(), bag.num_docs, bag.avg_length, bag.k1, bag.b, bag.analyzer,
                           fields=fields)

    @classmethod
    def load_published(cls, query_dir: Path, document_dir: Path, entry: dict[str, Any],
                       device: str = "cpu") -> LexicalModel:
        """A published term-based Λ as a :class:`~spar.lexical.static.StaticLambda` (a projection published with
        its whole table as term embeddings gives the same vectors)."""
        from spar.lexical import lambda_class

        bag = cls.published_bag(query_dir)
        if document_dir != query_dir and cls.published_bag(document_dir).dim != bag.dim:
            raise ArtifactError(f"{query_dir} and {document_dir} hold term embeddings of different shapes")
        if bag.embeddings is None:
            raise ArtifactError(f"{query_dir}: a regenerated sparse table is a projection Λ's, not a {cls.kind} Λ's")
        static = lambda_class("static")
        return static(cls.published_weights(bag, entry), bag.embeddings.detach(),
                      init={"from": "published model"}).eval()

    def _card_facts(self, train, train_details: dict[str, Any]) -> dict[str, Any]:
        return {"train_details": train_details,
                "lambda_init": f"{self.kind} Λ: the teacher's terms, {train.lexical.projection} projection "
                               f"(dim {self.dim})",
                "lambda_pooling": "term bag (query counts, passage BM25 weights)", "lambda_normalize": False}

    @staticmethod
    def fit_weights(passages_arrow: str | Path, k1: float, b: float, fields: Sequence[str]):
        from spar.data.passages import corpus_texts
        from spar.lexical.terms import BM25Weights

        return BM25Weights.fit(corpus_texts(passages_arrow, fields), k1=k1, b=b, fields=fields)
