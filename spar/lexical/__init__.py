"""Λ, the lexical model, in three kinds behind one contract (:mod:`spar.lexical.base`).

- :mod:`spar.lexical.transformer`: the paper's DPR bi-encoder, trained with Lightning (a GPU job at scale).
- :mod:`spar.lexical.projection`: the densified teacher: BM25 term weights times a seeded random matrix.
- :mod:`spar.lexical.static`: a bag of term embeddings initialised from the projection and distilled from the
  teacher's scores (minutes on a CPU).

:func:`lambda_class` is the registry's one reader; :func:`build_lambda` makes the configured kind ready for training
(or, for a projection, fitted); :func:`load_lambda` opens any saved Λ.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Sequence

from spar.core.errors import ConfigError
import torch

from spar.lexical.base import KINDS, REGISTRY, LexicalModel, read_lambda_config

__all__ = ["KINDS", "LexicalModel", "build_lambda", "computed_kinds", "lambda_class", "load_lambda",
           "read_lambda_config"]


def lambda_class(kind: str) -> type[LexicalModel]:
    """The class of a Λ kind (the registry :data:`~spar.lexical.base.REGISTRY`)."""
    if kind not in REGISTRY:
        raise ConfigError(f"unknown Λ kind {kind!r}; use one of {', '.join(KINDS)}")
    module, _, name = REGISTRY[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def computed_kinds() -> tuple[str, ...]:
    """The kinds made from the teacher's term statistics alone (``term_based``: fitted, or trained from that fit),
    in registry order: what the frontier computes for itself; any other kind is a run's own trained Λ."""
    return tuple(kind for kind in KINDS if lambda_class(kind).term_based)


def load_lambda(directory: str | Path, device: str | torch.device = "cpu") -> LexicalModel:
    """Open any Λ directory written by ``spar train`` (or :meth:`LexicalModel.save`)."""
    from spar.model.resolve import check_weight_files

    config = read_lambda_config(directory)
    check_weight_files(directory)
    return lambda_class(config["kind"]).load(directory, device=device)


def build_lambda(train, passages_arrow: str | Path, *, teacher: str = "bm25", k1: float = 0.9, b: float = 0.4,
                 fields: Sequence[str] = ("title", "text"), seed: int = 42) -> LexicalModel:
    """The Λ of ``train.kind`` before training: a transformer from ``train.encoder``; a projection fitted on the
    corpus (BM25 statistics over ``fields``, ``train.lexical`` dim/projection/seed); a static Λ initialised from
    that projection. ``teacher``: the teacher's term weighting (``"bm25"`` for the BM25 teachers,
    :attr:`spar.teacher.registry.SparseTeacher.term_weighting`), else its name: a term-based Λ densifies BM25's."""
    return lambda_class(train.kind).build(train, passages_arrow, teacher=teacher, k1=k1, b=b, fields=tuple(fields),
                                          seed=seed)
