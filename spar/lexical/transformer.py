"""``transformer`` Λ: the paper's lexical model, a DPR bi-encoder trained on the teacher's labels (for GPUs).

Wraps a :class:`~spar.model.encoders.BiEncoder` (separate query and passage encoders, CLS pooling, raw dot products) in
the Λ contract. Its objective (:meth:`TransformerLambda.training_loss`) is DPR's contrastive loss over every passage
of the (gathered) batch, optionally with a listwise KL to the teacher's scores (``contrastive+kl``, ``kl``) or
margin-MSE, as configured by ``train.loss``.

Example::

    >>> from spar.lexical.transformer import TransformerLambda
    >>> lam = TransformerLambda.from_pretrained("all-MiniLM-L6-v2")
    >>> lam.dim, lam.encode_query(["what causes scurvy"]).shape
    (384, (1, 384))
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from spar.model.encoders import PUBLISHED_FILES, BiEncoder, EncoderSettings, tokenize_passages, tokenize_queries
from spar.lexical.base import LexicalModel, PassageLike, TrainingContext, read_lambda_config
from spar.core.errors import ConfigError
from spar.model.losses import contrastive_loss, in_batch_keep_mask, listwise_kl_loss, margin_mse_loss


@dataclass
class ContrastiveObjective:
    """How a transformer Λ is trained (the ``train`` options it reads)."""

    loss: str = "contrastive"
    temperature: float = 1.0
    teacher_temperature: float = 1.0
    kl_weight: float = 1.0
    mask_teacher_positives: bool = True
    kl_target: str = "labelled"

    @classmethod
    def from_section(cls, train) -> "ContrastiveObjective":
        return cls(train.loss, train.temperature, train.teacher_temperature, train.kl_weight,
                   train.mask_teacher_positives, train.kl_target)

    @property
    def batch_kl(self) -> bool:
        """The KL term is over every passage of the batch, scored by the exact teacher (``train.kl_target``)."""
        return self.loss in ("contrastive+kl", "kl") and self.kl_target == "batch"


@dataclass
class TokenizingPreparer:
    """Tokenises queries and ``title [SEP] text`` passages as the encoder does (picklable for DataLoader workers)."""

    tokenizer: Any
    settings: EncoderSettings
    pad_to_multiple_of: int | None = None

    def queries(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return dict(tokenize_queries(self.tokenizer, self.settings, list(texts), self.pad_to_multiple_of))

    def passages(self, passages: Sequence[tuple[str, str]], rows: np.ndarray) -> dict[str, torch.Tensor]:
        return dict(tokenize_passages(self.tokenizer, self.settings, list(passages), self.pad_to_multiple_of))


@dataclass
class TeacherScoringPreparer(TokenizingPreparer):
    """Tokenises as :class:`TokenizingPreparer` and adds ``teacher_matrix`` [queries, batch passages]: the exact BM25
    teacher's score of every pair (the corpus's BM25 matrix, computed once), for ``train.kl_target=batch``."""

    weights: Any = None
    corpus: Any = None

    def queries(self, texts: Sequence[str]) -> dict[str, Any]:
        return {**super().queries(texts), "_counts": self.weights.query_matrix(list(texts))}

    def passages(self, passages: Sequence[tuple[str, str]], rows: np.ndarray) -> dict[str, Any]:
        return {**super().passages(passages, rows), "_rows": np.asarray(rows, dtype=np.int64)}

    def finish(self, batch: dict[str, Any]) -> None:
        counts, rows = batch["queries"].pop("_counts"), batch["passages"].pop("_rows")
        batch["teacher_matrix"] = torch.from_numpy((counts @ self.corpus[rows].T).toarray().astype(np.float32))


class TransformerLambda(LexicalModel):
    """A DPR bi-encoder as Λ (see the module docstring)."""

    kind = "transformer"
    default_learning_rate = 3e-5  # DPR's
    published_files = PUBLISHED_FILES
    files = {"query_encoder/": "Hugging Face model (safetensors)", "passage_encoder/": "idem, unless shared",
             "spar_encoder.json": "pooling, normalisation, prefixes, max lengths",
             "spar_lambda.json": "kind, dim, encoder settings, objective"}

    def __init__(self, encoder: BiEncoder, objective: ContrastiveObjective | None = None):
        super().__init__()
        self.encoder = encoder
        self.objective = objective or ContrastiveObjective()
        #: The BM25 teacher's statistics, for ``train.kl_target=batch`` (set by :meth:`build`; not saved).
        self.teacher_weights: Any = None

    @classmethod
    def from_pretrained(cls, model: str, objective: ContrastiveObjective | None = None, **settings: Any):
        """Initialise from a hub id, a local path or a bundled name (CLS pooling, no normalisation by default)."""
        return cls(BiEncoder.from_pretrained(model, **settings), objective)

    @classmethod
    def build(cls, train, passages_arrow, *, teacher: str, k1: float, b: float, fields,
              seed: int) -> "TransformerLambda":
        """From ``train.encoder`` (any teacher: it learns from the labels alone; ``train.kl_target=batch`` also
        fits the BM25 teacher's statistics on the corpus, to score every pair of a batch exactly)."""
        lam = cls.from_section(train)
        if lam.objective.batch_kl:
            if teacher != "bm25":
                raise ConfigError(f"train.kl_target=batch scores the batch with the BM25 teacher, which spar "
                                  f"computes for label.teacher=bm25 only (not {teacher!r}); use train.kl_target="
                                  "labelled")
            from spar.lexical.bag import TermLambda

            lam.teacher_weights = TermLambda.fit_weights(passages_arrow, k1, b, fields)
        return lam

    @classmethod
    def from_section(cls, train) -> "TransformerLambda":
        """From ``train`` (its ``encoder`` section and loss options)."""
        lam = cls(BiEncoder.from_section(train.encoder), ContrastiveObjective.from_section(train))
        for name, param in lam.encoder.named_parameters():
            if ".pooler." in f".{name}":
                # Λ pools token states itself; the model's own pooler never reaches the loss (and DDP would stop
                # on parameters without gradients).
                param.requires_grad_(False)
        return lam

    @property
    def dim(self) -> int:
        return self.encoder.dim

    @property
    def settings(self) -> EncoderSettings:
        return self.encoder.settings

    def encode_query(self, texts: Iterable[str], batch_size: int = 64) -> np.ndarray:
        return self.encoder.encode_query(texts, batch_size)

    def encode_passage(self, passages: Iterable[PassageLike], batch_size: int = 64) -> np.ndarray:
        return self.encoder.encode_passage(passages, batch_size)

    # -- training --------------------------------------------------------------------------------------------
    def batch_preparer(self, passage_max_length: int | None = None, pad_to_multiple_of: int | None = None,
                       **_: Any) -> TokenizingPreparer:
        settings = self.encoder.settings
        if passage_max_length is not None:
            settings = replace(settings, passage_max_length=passage_max_length)
        return TokenizingPreparer(self.encoder.tokenizer, settings, pad_to_multiple_of)

    def batch_preparers(self, **options: Any) -> tuple[TokenizingPreparer, TokenizingPreparer]:
        """Accelerator batches are padded to multiples of 8 (tensor cores). With ``kl_target=batch`` both also score
        every (query, batch passage) pair with the exact teacher (the corpus's BM25 matrix, computed once)."""
        cpu, accelerator = self.batch_preparer(**options), self.batch_preparer(**options, pad_to_multiple_of=8)
        if not self.objective.batch_kl:
            return cpu, accelerator
        if self.teacher_weights is None or options.get("passages_path") is None:
            raise ValueError("train.kl_target=batch needs the teacher's statistics (TransformerLambda.build) and "
                             "the passages table")
        from spar.data.passages import corpus_texts

        weights = self.teacher_weights
        corpus = weights.passage_matrix(list(corpus_texts(options["passages_path"], weights.fields))).tocsr()
        return tuple(TeacherScoringPreparer(p.tokenizer, p.settings, p.pad_to_multiple_of, weights, corpus)
                     for p in (cpu, accelerator))  # type: ignore[return-value]

    def forward_queries(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.encoder.forward_queries(batch)

    def forward_passages(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.encoder.forward_passages(batch)

    def training_loss(self, q: torch.Tensor, p: torch.Tensor, batch: dict[str, Any],
                      context: TrainingContext) -> dict[str, torch.Tensor]:
        """The configured loss and its terms. Scores and softmaxes in fp32 even under bf16 autocast: raw dot
        products are large and close together."""
        with torch.autocast(device_type=q.device.type, enabled=False):
            return self._loss_terms(q.float(), p.float(), batch, context)

    def _loss_terms(self, q: torch.Tensor, p: torch.Tensor, batch: dict[str, Any],
                    context: TrainingContext) -> dict[str, torch.Tensor]:
        objective = self.objective
        terms: dict[str, torch.Tensor] = {}
        if objective.loss in ("contrastive", "contrastive+kl"):
            all_p, all_rows, offset = context.gather_passages(p, batch["passage_rows"])
            target = batch["target"] + offset
            masked = batch["positive_rows"] if objective.mask_teacher_positives else None
            keep = in_batch_keep_mask(all_rows, target, masked)
            terms["contrastive"] = contrastive_loss(q, all_p, target, objective.temperature, mask=keep)
        if objective.batch_kl:  # every (query, batch passage) pair, scored by the exact teacher: no extra passages
            teacher = batch["teacher_matrix"].to(q.device)
            terms["kl"] = listwise_kl_loss(q @ p.T, teacher, None, objective.teacher_temperature, objective.temperature)
        elif objective.loss in ("contrastive+kl", "kl", "margin_mse"):
            cand = batch["candidates"]
            valid = cand >= 0
            student = (q[:, None, :] * p[cand.clamp_min(0)]).sum(-1)
            if objective.loss == "margin_mse":
                terms["margin_mse"] = margin_mse_loss(student, batch["teacher_scores"], valid)
            else:
                terms["kl"] = listwise_kl_loss(student, batch["teacher_scores"], valid, objective.teacher_temperature,
                                               objective.temperature)
        weight = {"kl": objective.kl_weight if objective.loss == "contrastive+kl" else 1.0}
        terms["loss"] = sum(weight.get(k, 1.0) * v for k, v in terms.items())
        return terms

    # -- encoding and publishing ------------------------------------------------------------------------------
    def batch_encoder(self) -> BiEncoder:
        return self.encoder

    def card_facts(self, train) -> dict[str, Any]:
        t, lam = train, train.encoder
        return {"train_details": {"kind": self.kind, "loss": t.loss, "batch size": t.batch_size,
                                  "hard negatives": t.hard_negatives, "learning rate": t.learning_rate or "3e-5"},
                "lambda_init": lam.model, "lambda_pooling": lam.pooling, "lambda_normalize": lam.normalize}

    def published_spec(self, side: str, weight: float) -> dict[str, Any]:
        return self.encoder.published_spec(side, weight)

    def published_module(self, side: str) -> tuple[torch.nn.Module, Any]:
        return self.encoder.published_module(side)

    def shares_sides(self) -> bool:
        return self.encoder.shares_sides()

    def published_config(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.encoder.published_config()}

    @classmethod
    def load_published(cls, query_dir: Path, document_dir: Path, entry: dict[str, Any],
                       device: str = "cpu") -> "TransformerLambda":
        return cls(BiEncoder.load_published(query_dir, document_dir, entry, device))

    # -- persistence -----------------------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        return {"encoder": asdict(self.encoder.settings), "objective": asdict(self.objective)}

    def save(self, directory: str | Path) -> None:
        self.encoder.save(directory)
        self.write_config(directory)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "TransformerLambda":
        objective = ContrastiveObjective(**read_lambda_config(directory).get("objective", {}))
        return cls(BiEncoder.load(directory, device=device), objective).eval()
