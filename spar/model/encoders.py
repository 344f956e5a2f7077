"""The encoder contract shared by Λ, the base retriever and the published model.

:class:`BiEncoder` holds a query encoder and a passage encoder (separate weights, as DPR, or shared), a pooling
(``cls`` or ``mean``), optional L2 normalisation and text prefixes. Its small contract:

- ``encode_query(texts)`` / ``encode_passage(passages)`` -> ``np.ndarray`` [n, dim] (float32)
- ``similarity(q, p)`` -> dot products (cosine when normalised)
- ``loss(q, p, ...)`` -> the DPR contrastive loss (see :mod:`spar.model.losses`)
- ``save(dir)`` / ``BiEncoder.load(dir)``: Hugging Face model folders (safetensors) + ``spar_encoder.json``

Passages are ``title [SEP] text`` (the tokenizer's own separator token), or the text alone without a title.

Example::

    >>> from spar.model.encoders import BiEncoder
    >>> enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    >>> q = enc.encode_query(["what causes scurvy"])
    >>> p = enc.encode_passage([("Scurvy", "Scurvy is caused by a lack of vitamin C.")])
    >>> float(enc.similarity(q, p)[0, 0]) > 0.5
    True
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from spar.core.errors import ArtifactError
from spar.model.resolve import ModelNotFoundError, missing_tokenizer, resolve_model

ENCODER_CONFIG = "spar_encoder.json"
QUERY_DIR, PASSAGE_DIR = "query_encoder", "passage_encoder"
#: Files every published encoder folder must hold (what ``AutoModel``/``AutoTokenizer`` read).
PUBLISHED_FILES = ("config.json", "model.safetensors", "tokenizer_config.json")

PassageLike = tuple[str, str] | str


@dataclass
class EncoderSettings:
    pooling: str = "cls"
    normalize: bool = False
    query_prefix: str = ""
    passage_prefix: str = ""
    query_max_length: int = 64
    passage_max_length: int = 256
    shared_weights: bool = False


def format_passage(passage: PassageLike, sep: str, prefix: str = "") -> str:
    """``title [SEP] text`` with the tokenizer's separator, or the text alone when there is no title."""
    if isinstance(passage, str):
        return prefix + passage
    title, text = passage
    return f"{prefix}{title} {sep} {text}" if title else prefix + text


def tokenize_queries(tokenizer, settings: EncoderSettings, texts: Sequence[str],
                     pad_to_multiple_of: int | None = None) -> dict[str, torch.Tensor]:
    """Tokenise queries as :meth:`BiEncoder.tokenize_queries` does (usable in DataLoader workers without the model)."""
    return tokenizer([settings.query_prefix + t for t in texts], padding=True, truncation=True,
                     max_length=settings.query_max_length, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")


def tokenize_passages(tokenizer, settings: EncoderSettings, passages: Sequence[PassageLike],
                      pad_to_multiple_of: int | None = None) -> dict[str, torch.Tensor]:
    """Tokenise ``(title, text)`` passages (or strings) as ``title [SEP] text``, like
    :meth:`BiEncoder.tokenize_passages`."""
    sep = tokenizer.sep_token or " "
    texts = [format_passage(p, sep, settings.passage_prefix) for p in passages]
    return tokenizer(texts, padding=True, truncation=True, max_length=settings.passage_max_length,
                     pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    raise ValueError(f"unknown pooling {pooling!r}")


@contextlib.contextmanager
def _loading(name: str):
    """transformers' load errors (no weights, no safetensors, hub unreachable) as one line naming the model."""
    try:
        yield
    except (OSError, ValueError) as exc:
        if isinstance(exc, ModelNotFoundError):
            raise
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelNotFoundError(f"cannot load model {name!r}: {reason}") from None


class BiEncoder(nn.Module):
    """Query and passage encoders with pooling and optional normalisation (see the module docstring)."""

    def __init__(self, query_model: nn.Module, passage_model: nn.Module | None, tokenizer, settings: EncoderSettings):
        super().__init__()
        self.query_model = query_model
        self.passage_model = query_model if (settings.shared_weights or passage_model is None) else passage_model
        self.tokenizer = tokenizer
        self.settings = settings

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls,
        model: str,
        passage_model: str | None = None,
        pooling: str = "cls",
        normalize: bool = False,
        query_prefix: str = "",
        passage_prefix: str = "",
        query_max_length: int = 64,
        passage_max_length: int = 256,
        shared_weights: bool = False,
        trust_remote_code: bool = False,
    ) -> "BiEncoder":
        """Initialise both encoders from a hub id, a local path or a bundled name (e.g. ``all-MiniLM-L6-v2``)."""
        from transformers import AutoModel, AutoTokenizer

        settings = EncoderSettings(pooling, normalize, query_prefix, passage_prefix, query_max_length,
                                   passage_max_length, shared_weights)
        q_src = resolve_model(model)
        with _loading(model):
            tokenizer = AutoTokenizer.from_pretrained(str(q_src), trust_remote_code=trust_remote_code)
            # Safetensors only (never pickled weights), for hub ids too.
            q_model = AutoModel.from_pretrained(str(q_src), trust_remote_code=trust_remote_code, use_safetensors=True)
        p_model = None
        if not shared_weights:
            p_src = resolve_model(passage_model) if passage_model else q_src
            with _loading(passage_model or model):
                p_model = AutoModel.from_pretrained(str(p_src), trust_remote_code=trust_remote_code,
                                                    use_safetensors=True)
        return cls(q_model, p_model, tokenizer, settings)

    @classmethod
    def from_section(cls, section) -> "BiEncoder":
        """Build from an :class:`~spar.core.config.EncoderSection` (or ``LambdaEncoderSection``)."""
        return cls.from_pretrained(
            section.model, getattr(section, "passage_model", None), section.pooling, section.normalize,
            section.query_prefix, section.passage_prefix, section.query_max_length, section.passage_max_length,
            getattr(section, "shared_weights", False), section.trust_remote_code,
        )

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "BiEncoder":
        """Load what :meth:`save` wrote (safetensors weights only)."""
        from transformers import AutoModel, AutoTokenizer

        d = Path(directory)
        cfg_path = d / ENCODER_CONFIG
        if not cfg_path.exists():
            raise ArtifactError(f"{d}: missing file '{ENCODER_CONFIG}' (not a spar encoder directory)")
        settings = EncoderSettings(**json.loads(cfg_path.read_text()))
        for sub in [QUERY_DIR] + ([] if settings.shared_weights else [PASSAGE_DIR]):
            if not (d / sub / "model.safetensors").exists():
                raise ArtifactError(f"{d}: missing file '{sub}/model.safetensors'")
            if missing_tokenizer(d / sub):
                raise ArtifactError(f"{missing_tokenizer(d / sub)}: the encoder directory is incomplete")
        tokenizer = AutoTokenizer.from_pretrained(str(d / QUERY_DIR))
        q_model = AutoModel.from_pretrained(str(d / QUERY_DIR), use_safetensors=True)
        p_model = (None if settings.shared_weights
                   else AutoModel.from_pretrained(str(d / PASSAGE_DIR), use_safetensors=True))
        return cls(q_model, p_model, tokenizer, settings).to(device).eval()

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.query_model.save_pretrained(d / QUERY_DIR, safe_serialization=True)
        self.tokenizer.save_pretrained(d / QUERY_DIR)
        if not self.settings.shared_weights:
            self.passage_model.save_pretrained(d / PASSAGE_DIR, safe_serialization=True)
            self.tokenizer.save_pretrained(d / PASSAGE_DIR)
        (d / ENCODER_CONFIG).write_text(json.dumps(asdict(self.settings), indent=2) + "\n")

    # -- a route of a published model (spar.publish.model_dir) --------------------------------------------------------
    def published_spec(self, side: str, weight: float) -> dict[str, Any]:
        """This encoder's entry in a published route's ``spar_combination.json`` (``side``: query/passage)."""
        s, query = self.settings, side == "query"
        return {"input": "query" if query else "passage", "pooling": s.pooling, "normalize": bool(s.normalize),
                "prefix": s.query_prefix if query else s.passage_prefix,
                "max_length": int(s.query_max_length if query else s.passage_max_length), "weight": float(weight)}

    def published_module(self, side: str) -> tuple[nn.Module, Any]:
        return (self.query_model if side == "query" else self.passage_model), self.tokenizer

    def shares_sides(self) -> bool:
        """Whether the query and passage encoders hold the same weights (one object, or equal tensors)."""
        if self.query_model is self.passage_model:
            return True
        q, p = self.query_model.state_dict(), self.passage_model.state_dict()
        return q.keys() == p.keys() and all(q[k].shape == p[k].shape and torch.equal(q[k], p[k]) for k in q)

    def published_config(self) -> dict[str, Any]:
        return asdict(self.settings)

    @classmethod
    def load_published(cls, query_dir: Path, document_dir: Path, entry: dict[str, Any],
                       device: str = "cpu") -> "BiEncoder":
        """The encoder of a published model's two route folders (one folder when both sides share it)."""
        from transformers import AutoModel, AutoTokenizer

        settings = EncoderSettings(**{k: v for k, v in entry.items() if k != "kind"})
        tokenizer = AutoTokenizer.from_pretrained(str(query_dir))
        q_model = AutoModel.from_pretrained(str(query_dir), use_safetensors=True)
        shared = settings.shared_weights or Path(document_dir) == Path(query_dir)
        p_model = None if shared else AutoModel.from_pretrained(str(document_dir), use_safetensors=True)
        return cls(q_model, p_model, tokenizer, settings).to(device).eval()

    # -- tokenisation -----------------------------------------------------------------------------------------
    @property
    def sep(self) -> str:
        return self.tokenizer.sep_token or " "

    def tokenize_queries(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return tokenize_queries(self.tokenizer, self.settings, texts)

    def tokenize_passages(self, passages: Sequence[PassageLike]) -> dict[str, torch.Tensor]:
        return tokenize_passages(self.tokenizer, self.settings, passages)

    # -- forward ----------------------------------------------------------------------------------------------
    def _hidden(self, model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The transformer's last hidden state (another backend runs it elsewhere: :mod:`spar.model.onnx_encoder`)."""
        return model(**inputs).last_hidden_state

    def _embed(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        hidden = self._hidden(model, inputs)
        vec = pool(hidden, inputs["attention_mask"], self.settings.pooling)
        if self.settings.normalize:
            vec = torch.nn.functional.normalize(vec.float(), dim=-1)
        return vec

    def forward_queries(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._embed(self.query_model, batch)

    def forward_passages(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._embed(self.passage_model, batch)

    @property
    def dim(self) -> int:
        return int(self.query_model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.query_model.parameters()).device

    @torch.inference_mode()
    def _encode(self, items: list, tokenize, forward, batch_size: int) -> np.ndarray:
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.eval()
        # Length-sorted batches waste less padding; results are put back in input order.
        lengths = [len(x if isinstance(x, str) else x[0] + x[1]) for x in items]
        order = np.argsort(lengths)[::-1]
        out = np.empty((len(items), self.dim), dtype=np.float32)
        for start in range(0, len(items), batch_size):
            idx = order[start:start + batch_size]
            batch = {k: v.to(self.device) for k, v in tokenize([items[i] for i in idx]).items()}
            out[idx] = forward(batch).float().cpu().numpy()
        return out

    def encode_query(self, texts: Iterable[str], batch_size: int = 64) -> np.ndarray:
        return self._encode(list(texts), self.tokenize_queries, self.forward_queries, batch_size)

    def encode_passage(self, passages: Iterable[PassageLike], batch_size: int = 64) -> np.ndarray:
        return self._encode(list(passages), self.tokenize_passages, self.forward_passages, batch_size)

    @staticmethod
    def similarity(q: np.ndarray | torch.Tensor, p: np.ndarray | torch.Tensor):
        """Dot products [n_q, n_p] (cosine similarity for normalised encoders)."""
        return q @ p.T

    def loss(self, q: torch.Tensor, p: torch.Tensor, positive_index: torch.Tensor | None = None,
             temperature: float = 1.0) -> torch.Tensor:
        """DPR contrastive loss: cross-entropy of each query over all passages, its positive at ``positive_index``."""
        from spar.model.losses import contrastive_loss

        return contrastive_loss(q, p, positive_index, temperature)
