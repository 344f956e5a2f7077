"""The Λ contract: what every kind of lexical model offers the pipeline, and the registry of kinds.

Modelled on Tevatron's ``EncoderModel``: a Λ encodes queries and passages into vectors whose dot product imitates
the sparse teacher's score, knows its objective, saves and loads itself. Everything outside ``spar/lexical/`` asks
the kind (:func:`spar.lexical.lambda_class` over :data:`REGISTRY`), never its name:

- vectors: ``encode_query(texts)`` / ``encode_passage(passages)`` -> float32 [n, dim] (passages are ``(title,
  text)`` pairs or strings); ``similarity`` is the dot product; ``batch_encoder()`` is what the encode engines drive;
- building and training: ``build`` (the configured kind before training), ``trainable``, ``default_learning_rate``,
  ``fingerprint_settings``, ``batch_preparers`` (picklable, for DataLoader workers), ``forward_queries`` /
  ``forward_passages``, ``training_loss``;
- term statistics: ``term_based``, ``with_statistics(passages)`` (``encode.lambda.statistics: target``),
  ``term_vectors`` (the frontier's fast path);
- persistence: ``save`` / ``load`` (``spar_lambda.json``: kind, dim, settings; ``files``), ``describe()``;
- publishing: ``published_spec`` / ``published_module`` / ``shares_sides`` / ``published_config`` /
  ``published_files`` / ``load_published``, and ``card_facts`` for the model card.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Protocol, Sequence, get_args

import numpy as np
import torch
from torch import nn

from spar.core.config import LambdaKind
from spar.core.errors import ArtifactError, ConfigError

LAMBDA_CONFIG = "spar_lambda.json"
#: The key of ``spar_lambda.json`` that records its Λ's files (size and SHA-256), as a manifest does.
CHECKSUMS = "checksums"
#: The registry: every Λ kind and the class that implements it (``module:Class``, imported on first use), derived
#: from the kind names written once in the config (:data:`spar.core.config.LambdaKind`): kind ``k`` is the class
#: ``<K>Lambda`` of ``spar/lexical/<k>.py``. A new kind is that module and its name in ``LambdaKind``.
REGISTRY = {kind: f"spar.lexical.{kind}:{kind.capitalize()}Lambda" for kind in get_args(LambdaKind)}
KINDS = tuple(REGISTRY)

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
    #: Whether the kind is made of the teacher's term statistics (analyzer, vocabulary, BM25 weights): it needs the
    #: BM25 teacher, refits on a target corpus (``encode.lambda.statistics: target``), and makes a passage's text
    #: itself from whole ``(title, text)`` pairs through the teacher's fields (not ``data.title_field``).
    term_based: ClassVar[bool] = False
    #: ``train.learning_rate`` when unset (None: not trained with an optimiser).
    default_learning_rate: ClassVar[float | None] = None
    #: What a saved Λ directory of the kind holds (the train stage's manifest schema).
    files: ClassVar[dict[str, str]] = {}
    #: Files each route folder of a published model holds for this kind (checked when a model directory opens).
    published_files: ClassVar[tuple[str, ...]] = ()

    # -- building --------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, train, passages_arrow: str | Path, *, teacher: str, k1: float, b: float, fields: Sequence[str],
              seed: int) -> "LexicalModel":
        """The kind before training (or, for a fitted kind, ready): see :func:`spar.lexical.build_lambda`."""
        raise NotImplementedError

    @classmethod
    def fingerprint_settings(cls, train: dict[str, Any]) -> dict[str, Any]:
        """The part of the ``train`` section (as JSON) that changes this kind's Λ (the train stage fingerprint)."""
        return train

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

    def batch_preparers(self, **options: Any) -> tuple[BatchPreparer, BatchPreparer]:
        """The preparers of the training loop: (for CPU batches, for accelerator batches)."""
        preparer = self.batch_preparer(**options)
        return preparer, preparer

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

    def term_vectors(self, weights: Any, matrix: Any) -> np.ndarray | None:
        """Vectors of the rows of a term matrix made with the statistics ``weights`` (the frontier's fast path,
        which shares one matrix between many Λs), or None when this Λ has other statistics or no term table."""
        return None

    # -- encoding and publishing ------------------------------------------------------------------------------
    def batch_encoder(self) -> Any:
        """What the encode stage drives over a corpus: this Λ, or (transformer) the bi-encoder its tokenised,
        length-sorted, multi-device engines run."""
        return self

    def card_facts(self, train) -> dict[str, Any]:
        """The published model card's facts about this Λ: ``train_details``, ``lambda_init``, ``lambda_pooling``,
        ``lambda_normalize``, from the experiment's ``train`` section
        (:class:`~spar.core.config_sections.TrainSection`)."""
        raise NotImplementedError

    def published_spec(self, side: str, weight: float) -> dict[str, Any]:
        """This Λ's entry in a published route's ``spar_combination.json`` (``side``: ``query``/``passage``)."""
        raise NotImplementedError

    def published_module(self, side: str) -> tuple[nn.Module, Any]:
        """(module, tokenizer or None) a published route runs for ``side``."""
        raise NotImplementedError

    def shares_sides(self) -> bool:
        """Whether both sides' published modules hold the same weights (then they are saved once)."""
        return False

    def published_config(self) -> dict[str, Any]:
        """This Λ's entry under ``encoders`` in ``spar_model.json`` (``kind`` first)."""
        return self.describe()

    @classmethod
    def load_published(cls, query_dir: Path, document_dir: Path, entry: dict[str, Any],
                       device: str = "cpu") -> "LexicalModel":
        """The Λ of a published model (its two route folders and its ``spar_model.json`` entry)."""
        raise NotImplementedError

    # -- persistence -----------------------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        """The kind's settings (written to ``spar_lambda.json`` next to ``kind`` and ``dim``)."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim, **self.config_dict()}

    def save(self, directory: str | Path) -> None:
        raise NotImplementedError

    def write_config(self, directory: str | Path) -> None:
        """``spar_lambda.json``, written last by ``save``: the description and the size and SHA-256 of every file
        of the kind (so a Λ directory that travels without its manifest can still be checked)."""
        from spar.core.artifacts import file_checksums

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        own = sorted(str(p.relative_to(d)) for name in self.files if name != LAMBDA_CONFIG
                     for p in ((d / name).rglob("*") if name.endswith("/") else [d / name]) if p.is_file())
        config = {**self.describe(), CHECKSUMS: file_checksums(d, own)}
        (d / LAMBDA_CONFIG).write_text(json.dumps(config, indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "LexicalModel":
        raise NotImplementedError


def read_lambda_config(directory: str | Path) -> dict[str, Any]:
    """``spar_lambda.json`` of a Λ directory."""
    d = Path(directory)
    path = d / LAMBDA_CONFIG
    if path.exists():
        try:
            config = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        if not isinstance(config, dict):
            raise ArtifactError(f"{path}: expected a JSON object with the Λ's kind and dim, got "
                                f"{type(config).__name__}")
        if config.get("kind") not in KINDS:
            raise ArtifactError(f"{path}: unknown Λ kind {config.get('kind')!r} (known: {', '.join(KINDS)})")
        return config
    if not d.exists():
        raise ArtifactError(f"{d}: no such Λ directory")
    raise ArtifactError(f"{d}: missing file '{LAMBDA_CONFIG}' (not a Λ directory; run `spar train`)")


def check_lambda_files(directory: str | Path) -> None:
    """Refuse a Λ directory whose files are not as ``save`` wrote them, by the checksums in ``spar_lambda.json``
    (for a Λ that travels without its manifest); one without either cannot be checked and is refused too."""
    from spar.core.artifacts import changed_files

    d = Path(directory)
    recorded = read_lambda_config(d).get(CHECKSUMS)
    if not isinstance(recorded, dict):
        raise ArtifactError(f"{d}: no manifest.json and no checksums in {LAMBDA_CONFIG}, so its files cannot be "
                            "checked: copy the Λ directory whole (manifest.json included), or save it again")
    changed = changed_files(d, {CHECKSUMS: recorded}, content=True)
    if changed:
        name, why = changed[0].split(" (", 1)
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise ArtifactError(f"{d / name}: {why[:-1]} since the Λ was saved (by {d / LAMBDA_CONFIG}){more}; train "
                            "or copy it again")


def encode_in_batches(texts: Sequence[str], encode: Callable[[Sequence[str]], np.ndarray], dim: int,
                      batch_size: int) -> np.ndarray:
    """``encode`` over ``texts`` in slices of ``batch_size`` (bounds a term-based Λ's sparse matrices), written into
    one [n, dim] float32 array (no second copy: an encode shard of 100k passages at 3,072 dims is 1.2 GB)."""
    out = np.empty((len(texts), dim), dtype=np.float32)
    for i in range(0, len(texts), batch_size):
        out[i:i + batch_size] = encode(texts[i:i + batch_size])
    return out


def passage_text(passage: PassageLike) -> str:
    """A passage as the BM25 teacher indexes it: non-empty title and text joined by one space."""
    if isinstance(passage, str):
        return passage
    from spar.data.passages import indexed_text

    return indexed_text(passage)
