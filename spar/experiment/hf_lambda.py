"""Λ from other tools: a Hugging Face dual encoder (a query and a context encoder) as a transformer Λ.

The paper released its Λ as two BERT checkpoints (``facebook/spar-wiki-bm25-lexmodel-query-encoder`` and
``-context-encoder``: CLS pooling, raw dot products, as DPR); Tevatron and DPR train pairs of the same shape. Named by
``encode.lambda`` (``path``: the query encoder, ``passage_path``: the context encoder; directories or hub ids), the
pair is converted once into a spar Λ directory, ``<output_dir>/lambda-imported/`` (safetensors, the pooling and max
lengths recorded, a manifest naming both sources and the fingerprint of their files), and from then on is a Λ like
any other: its fingerprint, card, publish and search are those of a transformer Λ. Pointing ``encode.lambda`` at
another pair (or changing a file of it) converts again and re-runs encode and every stage after it.

Weights: ``pytorch_model.bin`` (what those checkpoints ship) is read by transformers with ``torch.load(...,
weights_only=True)``: tensors only, never pickled code; ``model.safetensors`` is preferred where present. A DPR
checkpoint (``DPRQuestionEncoder`` / ``DPRContextEncoder``) is unwrapped to its BERT model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spar.core.errors import ArtifactError

#: Where the converted pair is written, under the experiment's output directory.
IMPORTED_DIR = "lambda-imported"


def is_hf_model_dir(d: Path) -> bool:
    """A plain Hugging Face model directory (``config.json`` and weights), not a spar Λ or model."""
    return (d / "config.json").is_file() and any((d / name).is_file() for name in (
        "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json"))


def _bert_of(model: Any) -> Any:
    """A DPR question/context encoder's inner BERT model; any other model as it is."""
    for outer in ("question_encoder", "ctx_encoder"):
        inner = getattr(model, outer, None)
        if inner is not None and hasattr(inner, "bert_model"):
            return inner.bert_model
    return model


def _load_side(directory: Path, what: str):
    from transformers import AutoModel

    try:
        return _bert_of(AutoModel.from_pretrained(str(directory)))  # .bin: torch.load(weights_only=True)
    except Exception as exc:  # a broken checkpoint: one line naming it
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(f"{directory}: encode.lambda {what} cannot be loaded as a Hugging Face model "
                            f"({first[:200]})") from None


def import_dual_encoder(query_dir: Path, passage_dir: Path | None, fields: dict[str, Any],
                        output_dir: str | Path) -> Path:
    """Convert the pair into ``<output_dir>/lambda-imported/`` unless it is there already for these files and
    settings; returns that directory (a spar Λ directory of kind ``transformer``)."""
    from spar.core.artifacts import ArtifactWriter, is_complete, stage_fingerprint
    from spar.core.fingerprint import files_fingerprint
    from spar.lexical.transformer import TransformerLambda
    from spar.model.encoders import BiEncoder, EncoderSettings

    settings = EncoderSettings(pooling=fields.get("pooling") or "cls", normalize=bool(fields.get("normalize")),
                               query_max_length=int(fields.get("query_max_length") or 64),
                               passage_max_length=int(fields.get("passage_max_length") or 256),
                               shared_weights=passage_dir is None)
    config = {"query_encoder": fields.get("path"), "passage_encoder": fields.get("passage_path"),
              "settings": {k: v for k, v in vars(settings).items()}}
    inputs = {"query_encoder": files_fingerprint(query_dir),
              **({"passage_encoder": files_fingerprint(passage_dir)} if passage_dir is not None else {})}
    out = Path(output_dir) / IMPORTED_DIR
    if is_complete(out, stage_fingerprint("lambda", config, inputs)):
        return out
    from transformers import AutoTokenizer

    query = _load_side(query_dir, "path (the query encoder)")
    passage = _load_side(passage_dir, "passage_path (the context encoder)") if passage_dir is not None else None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(query_dir))
    except Exception as exc:
        raise ArtifactError(f"{query_dir}: encode.lambda has no tokenizer beside the query encoder ({exc})") from None
    with ArtifactWriter(out, kind="lambda", config=config, inputs=inputs) as w:
        TransformerLambda(BiEncoder(query, passage, tokenizer, settings).eval()).save(w.path)
        w.stats = {"kind": TransformerLambda.kind, "dim": int(query.config.hidden_size), "imported_from": config}
    return out
