"""The Λ contract: what every kind of lexical model offers the pipeline, and what training calls.

Modelled on Tevatron's ``EncoderModel``: a Λ encodes queries and passages into vectors whose dot product imitates
the sparse teacher's score, and knows the objective it is trained with. Every stage after ``train`` (encode, tune,
index, evaluate, publish, search) sees only this contract, so the kinds are interchangeable:

================  =========================================================================================
kind              what it is
================  =========================================================================================
``transformer``   the paper's Λ: a DPR bi-encoder fine-tuned on the teacher's labels (a GPU job)
``projection``    the densified teacher, training-free: teacher term weights times a seeded random matrix
``static``        a learned bag of term embeddings, initialised from the projection and distilled from the
                  teacher's scores (minutes on a CPU)
================  =========================================================================================

A Λ directory holds ``spar_lambda.json`` (``kind``, ``dim`` and the kind's settings) beside the kind's own files;
:func:`spar.lexical.load_lambda` opens any of them.

The contract (:class:`LexicalModel`):

- ``encode_query(texts)`` / ``encode_passage(passages)`` -> ``np.ndarray`` [n, dim] float32; passages are
  ``(title, text)`` pairs or strings. ``similarity(q, p)`` is the dot product.
- Training (what :class:`spar.training.LambdaModule` calls): ``batch_preparer()`` builds picklable input
  preparation for DataLoader workers; ``forward_queries(batch)`` / ``forward_passages(batch)`` give tensors;
  ``training_loss(q, p, batch, context)`` returns the objective's terms (``"loss"`` is optimised).
- ``save(directory)`` / ``load(directory)``; ``describe()`` for manifests and model cards.
- ``with_statistics(passages)``: a term-based Λ used on another corpus than its own, with that corpus's statistics
  (``encode.lambda.statistics: target``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from spar.errors import ArtifactError, ConfigError

LAMBDA_CONFIG = "spar_lambda.json"
#: A transformer Λ written before the kinds existed has only this file.
LEGACY_ENCODER_CONFIG = "spar_encoder.json"
KINDS = ("transformer", "projection", "static")

PassageLike = tuple[str, str] | str


class TrainingContext(Protocol):
    """What a Λ's objective may ask of the training loop (implemented by the Lightning module)."""

    def gather_passages(self, p: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]: ...


class BatchPreparer(Protocol):
    """Turns raw training/validation inputs into a Λ's model inputs (runs in DataLoader workers: picklable)."""

    def queries(self, texts: Sequence[str]) -> dict[str, Any]: ...

    def passages(self, passages: Sequence[tuple[str, str]], rows: np.ndarray) -> dict[str, Any]: ...


class LexicalModel(nn.Module):
    """Base class of every Λ kind (see the module docstring)."""

    kind: ClassVar[str] = ""
    #: Whether ``spar train`` runs an optimiser for this kind (``projection`` is fitted, not trained).
    trainable: ClassVar[bool] = True
    #: Whether a passage's text is made by the Λ itself from whole ``(title, text)`` pairs (term-based kinds: the
    #: teacher's fields), rather than by ``data.title_field``.
    owns_passage_text: ClassVar[bool] = False

    # -- vectors ---------------------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        raise NotImplementedError

    def encode_query(self, texts: Iterable[str], batch_size: int = 256) -> np.ndarray:
        raise NotImplementedError

    def encode_passage(self, passages: Iterable[PassageLike], batch_size: int = 256) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def similarity(q, p):
        """Dot products [n_q, n_p] (the score Λ imitates the teacher with)."""
        return q @ p.T

    # -- training --------------------------------------------------------------------------------------------
    def batch_preparer(self, **options: Any) -> BatchPreparer:
        raise NotImplementedError

    def forward_queries(self, batch: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    def forward_passages(self, batch: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    def training_loss(self, q: torch.Tensor, p: torch.Tensor, batch: dict[str, Any],
                      context: TrainingContext) -> dict[str, torch.Tensor]:
        raise ConfigError(f"Λ kind '{self.kind}' is not trained with an optimiser")

    # -- corpus statistics -----------------------------------------------------------------------------------
    def with_statistics(self, passages: Iterable[PassageLike]) -> "LexicalModel":
        """This Λ with the teacher's corpus statistics refitted on ``passages`` (a target corpus): term-based kinds
        only (see :meth:`spar.lexical.terms.BM25Weights.refit`)."""
        raise ConfigError(f"a {self.kind} Λ has no corpus statistics to refit; use encode.lambda.statistics=carried")

    def trainable_parameters(self) -> Iterable[tuple[str, nn.Parameter]]:
        return ((n, p) for n, p in self.named_parameters() if p.requires_grad)

    # -- persistence -----------------------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        """The kind's settings (written to ``spar_lambda.json`` next to ``kind`` and ``dim``)."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim, **self.config_dict()}

    def save(self, directory: str | Path) -> None:
        raise NotImplementedError

    def write_config(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / LAMBDA_CONFIG).write_text(json.dumps(self.describe(), indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "LexicalModel":
        raise NotImplementedError


def read_lambda_config(directory: str | Path) -> dict[str, Any]:
    """``spar_lambda.json`` of a Λ directory (a legacy transformer Λ has only ``spar_encoder.json``)."""
    d = Path(directory)
    path = d / LAMBDA_CONFIG
    if path.exists():
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        if config.get("kind") not in KINDS:
            raise ArtifactError(f"{path}: unknown Λ kind {config.get('kind')!r} (known: {', '.join(KINDS)})")
        return config
    if (d / LEGACY_ENCODER_CONFIG).exists():
        return {"kind": "transformer"}
    if not d.exists():
        raise ArtifactError(f"{d}: no such Λ directory")
    raise ArtifactError(f"{d}: missing file '{LAMBDA_CONFIG}' (not a Λ directory; run `spar train`)")


def encode_in_batches(texts: Sequence[str], encode: Callable[[Sequence[str]], np.ndarray], dim: int,
                      batch_size: int) -> np.ndarray:
    """``encode`` over ``texts`` in slices of ``batch_size`` (bounds a term-based Λ's sparse matrices), stacked
    into [n, dim] float32."""
    parts = [encode(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
    return np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)


def passage_text(passage: PassageLike) -> str:
    """A passage as the BM25 teacher indexes it: non-empty title and text joined by one space."""
    if isinstance(passage, str):
        return passage
    from spar.passages import indexed_text

    return indexed_text(passage)
