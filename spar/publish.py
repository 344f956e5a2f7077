"""Publish SPAR: one self-contained model directory holding the base and Λ encoders, μ and the variant.

The directory is at once

- a **sentence-transformers** model: a ``Router`` with a ``query`` and a ``document`` route, each one
  :class:`spar.st_modules.SparCombination`, so ``model.encode_query(q)`` is ``[Q(q), μ·QΛ(q)]`` and
  ``model.encode_document(p)`` is ``[P(p), PΛ(p)]`` (``concat``; ``sum`` adds them) and the dot product is
  ``sim(q, p) + μ·simΛ(q, p)``;
- four plain **Hugging Face** models (``query/base``, ``query/lambda``, ``document/base``, ``document/lambda``: each
  ``config.json``, ``model.safetensors`` and tokenizer files) for ``transformers.AutoModel``;
- a **spar** model (``spar_model.json``: μ, variant, pooling/normalisation/prefixes/lengths of each encoder, where
  the index and passages of the run are) for :class:`SparEncoder` and ``spar search`` (:mod:`spar.search`);
- a model card (``README.md``) with Hugging Face metadata.

Layout::

    model/
      README.md                            model card (YAML front matter + training/tuning/evaluation facts)
      spar_model.json                      spar's description of the model (read by SparEncoder)
      spar_config.yaml                     the resolved experiment config that produced it
      modules.json, router_config.json,    sentence-transformers model (Router over the two routes)
      config_sentence_transformers.json
      spar_modules.py                      copy of spar/st_modules.py (for trust_remote_code loading without spar)
      query/spar_combination.json          query route: weights 1 and μ
      query/base/, query/lambda/           HF encoders (AutoModel)
      document/spar_combination.json       document route: weights 1 and 1
      document/base/, document/lambda/

Loading (skipped in the doctest run: it needs a published run under ``runs/``)::

    >>> from spar.publish import SparEncoder                                   # doctest: +SKIP
    >>> enc = SparEncoder.from_pretrained("runs/scifact-sample/model")        # doctest: +SKIP
    >>> q = enc.encode_queries(["what causes scurvy"])                         # doctest: +SKIP
    >>> p = enc.encode_passages([("Scurvy", "Scurvy is caused by a lack of vitamin C.")])  # doctest: +SKIP
    >>> scores = q @ p.T                                                       # doctest: +SKIP

    >>> from sentence_transformers import SentenceTransformer                  # doctest: +SKIP
    >>> model = SentenceTransformer("runs/scifact-sample/model", trust_remote_code=True)  # doctest: +SKIP
    >>> model.similarity(model.encode_query(["scurvy"]), model.encode_document(["Scurvy is ..."]))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from spar.errors import ArtifactError, SparError
from spar.index import spar_passage_vectors, spar_query_vectors
from spar.model_card import ModelCardFacts, render_model_card

MODEL_CONFIG = "spar_model.json"
MODEL_FORMAT = "spar-model"
MODEL_FORMAT_VERSION = 1
ROUTES = {"query": "query", "document": "document"}
ENCODER_NAMES = ("base", "lambda")
#: Files every encoder folder must hold (what ``AutoModel``/``AutoTokenizer`` read).
ENCODER_FILES = ("config.json", "model.safetensors", "tokenizer_config.json")
#: Files of a term-based Λ's folder (a :class:`spar.st_modules.LexicalBag`).
LEXICAL_FILES = ("lexical_bag.json", "vocab.txt", "model.safetensors")
#: Licences of the models spar bundles, for the model card.


# ---------------------------------------------------------------------------------------------------------------
# SparEncoder
# ---------------------------------------------------------------------------------------------------------------


def _is_lexical(encoder) -> bool:
    """A term-based Λ (``projection``/``static``), as opposed to a Hugging Face bi-encoder."""
    return getattr(encoder, "kind", None) in ("projection", "static")


def _encoder_spec(name: str, settings, side: str, weight: float) -> dict[str, Any]:
    if settings is None:  # a term-based Λ: no tokenizer, pooling or prefixes
        return {"name": name, "type": "lexical", "input": "query" if side == "query" else "passage",
                "pooling": "sum", "normalize": False, "prefix": "", "max_length": 0, "weight": float(weight)}
    query = side == "query"
    return {
        "name": name,
        "input": "query" if query else "passage",
        "pooling": settings.pooling,
        "normalize": bool(settings.normalize),
        "prefix": settings.query_prefix if query else settings.passage_prefix,
        "max_length": int(settings.query_max_length if query else settings.passage_max_length),
        "weight": float(weight),
    }


class SparEncoder:
    """SPAR's combined encoder: the base retriever and Λ, joined as ``[Q, μ·QΛ]`` / ``[P, PΛ]`` (or summed).

    Args:
        base: the base dense retriever (a :class:`spar.encoders.BiEncoder`).
        lambda_: the lexical model Λ (a :class:`spar.encoders.BiEncoder`).
        mu: the weight of Λ's query vector (tuned on the dev split by ``spar tune``).
        variant: ``concat`` or ``sum``.
        metadata: anything to keep in ``spar_model.json`` (provenance, index location, tuning).

    Example::

        >>> from spar.encoders import BiEncoder
        >>> from spar.publish import SparEncoder
        >>> base = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
        >>> lam = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="cls", normalize=False)
        >>> enc = SparEncoder(base, lam, mu=0.5, variant="concat")
        >>> enc.encode_queries(["what causes scurvy"]).shape
        (1, 768)
    """

    def __init__(self, base, lambda_, mu: float, variant: str = "concat", metadata: dict[str, Any] | None = None):
        if variant not in ("concat", "sum"):
            raise SparError(f"unknown SPAR variant {variant!r} (expected 'concat' or 'sum')")
        if variant == "sum" and base.dim != lambda_.dim:
            raise SparError(f"variant 'sum' needs equal dimensions, base has {base.dim} and Λ {lambda_.dim}")
        self.base = base
        self.lambda_ = lambda_
        self.mu = float(mu)
        self.variant = variant
        self.metadata = dict(metadata or {})

    # -- encoding ---------------------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.base.dim + self.lambda_.dim if self.variant == "concat" else self.base.dim

    def encode_queries(self, texts: Iterable[str], batch_size: int = 64, mu: float | None = None) -> np.ndarray:
        """SPAR query vectors ``[Q(q), μ·QΛ(q)]`` [n, dim] float32 (``mu`` overrides ``self.mu`` for this call)."""
        texts = list(texts)
        return spar_query_vectors(self.base.encode_query(texts, batch_size),
                                  self.lambda_.encode_query(texts, batch_size),
                                  self.mu if mu is None else mu, self.variant)

    def encode_passages(self, passages: Iterable, batch_size: int = 64) -> np.ndarray:
        """SPAR passage vectors ``[P(p), PΛ(p)]``; passages are ``(title, text)`` tuples or strings."""
        passages = list(passages)
        return spar_passage_vectors(self.base.encode_passage(passages, batch_size),
                                    self.lambda_.encode_passage(passages, batch_size), self.variant)

    @staticmethod
    def similarity(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Inner products [n_q, n_p]: ``sim + μ·simΛ`` for SPAR vectors."""
        return q @ p.T

    # -- persistence ------------------------------------------------------------------------------------------
    @property
    def _lambda_settings(self):
        return None if _is_lexical(self.lambda_) else self.lambda_.settings

    def _lambda_bag(self, route: str):
        """Λ as the published :class:`~spar.st_modules.LexicalBag` of a route (counts for queries, BM25 for
        documents); a projection's random matrix becomes its term embeddings."""
        import torch

        from spar.st_modules import LexicalBag

        lam = self.lambda_
        table = lam.dense_matrix() if lam.kind == "projection" else lam.embedding.weight.detach().cpu().numpy()
        w = lam.weights
        return LexicalBag(w.vocab, torch.from_numpy(w.df), w.num_docs, w.avg_length, w.k1, w.b,
                          torch.from_numpy(np.ascontiguousarray(table, dtype=np.float32)),
                          "query" if route == "query" else "passage", w.analyzer.config())

    def _routes(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "query": [_encoder_spec("base", self.base.settings, "query", 1.0),
                      _encoder_spec("lambda", self._lambda_settings, "query", self.mu)],
            "document": [_encoder_spec("base", self.base.settings, "passage", 1.0),
                         _encoder_spec("lambda", self._lambda_settings, "passage", 1.0)],
        }

    def save_pretrained(self, directory: str | Path, model_card: str | None = None) -> Path:
        """Write the model directory (see the module docstring); ``model_card`` becomes ``README.md``."""
        import sentence_transformers
        import torch
        import transformers

        from spar import __version__
        from spar import st_modules

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        encoders = {"base": self.base, "lambda": self.lambda_}
        for route, specs in self._routes().items():
            route_dir = d / ROUTES[route]
            route_dir.mkdir(exist_ok=True)
            for spec in specs:
                enc = encoders[spec["name"]]
                if spec.get("type") == "lexical":
                    self._lambda_bag(route).save(str(route_dir / spec["name"]))
                    continue
                model = enc.query_model if route == "query" else enc.passage_model
                model.save_pretrained(route_dir / spec["name"], safe_serialization=True)
                enc.tokenizer.save_pretrained(route_dir / spec["name"])
            _write_json(route_dir / st_modules.COMBINATION_CONFIG, {"variant": self.variant, "encoders": specs})
        # sentence-transformers: one Router over the two routes, each a SparCombination.
        _write_json(d / "modules.json", [{"idx": 0, "name": "0", "path": "",
                                          "type": "sentence_transformers.base.modules.router.Router"}])
        _write_json(d / "router_config.json", {
            "types": {ROUTES[r]: st_modules.SHIPPED_CLASS_REF for r in ROUTES},
            "structure": {r: [ROUTES[r]] for r in ROUTES},
            "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}},
        })
        _write_json(d / "config_sentence_transformers.json", {
            "__version__": {"sentence_transformers": sentence_transformers.__version__,
                            "transformers": transformers.__version__, "pytorch": torch.__version__},
            "model_type": "SentenceTransformer",
            "prompts": {"query": "", "document": ""},
            "default_prompt_name": None,
            "similarity_fn_name": "dot",
        })
        shutil.copyfile(st_modules.__file__, d / st_modules.SHIPPED_MODULE_FILE)
        from spar.lexical import analysis

        shutil.copyfile(analysis.__file__, d / st_modules.SHIPPED_ANALYSIS_FILE)
        _write_json(d / MODEL_CONFIG, {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            "spar_version": __version__,
            "variant": self.variant,
            "mu": self.mu,
            "similarity": "dot",
            "dims": {"base": self.base.dim, "lambda": self.lambda_.dim, "combined": self.dim},
            "routes": ROUTES,
            "encoders": {name: enc.describe() if _is_lexical(enc) else asdict(enc.settings)
                         for name, enc in encoders.items()},
            **{k: v for k, v in self.metadata.items() if k not in ("variant", "mu")},
        })
        if model_card is not None:
            (d / "README.md").write_text(model_card, encoding="utf-8")
        return d

    @classmethod
    def from_pretrained(cls, path: str | Path, mu: float | None = None, device: str = "cpu") -> "SparEncoder":
        """Load a model directory written by :meth:`save_pretrained` (``mu`` overrides the tuned μ)."""
        d = Path(path)
        config = check_model_dir(d)
        encoders = {name: load_published_encoder(d, name, config, device) for name in ENCODER_NAMES}
        metadata = {k: v for k, v in config.items() if k not in ("variant", "mu", "encoders", "dims", "routes")}
        return cls(encoders["base"], encoders["lambda"], config["mu"] if mu is None else mu, config["variant"],
                   metadata)

    def to_sentence_transformer(self, device: str | None = None):
        """The same model as a ``SentenceTransformer`` (built in memory; μ is this encoder's μ)."""
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules import Router

        from spar.st_modules import SparCombination

        encoders = {"base": self.base, "lambda": self.lambda_}
        routes = {}
        for route, specs in self._routes().items():
            models = {s["name"]: (encoders[s["name"]].query_model if route == "query"
                                  else encoders[s["name"]].passage_model) for s in specs}
            tokenizers = {s["name"]: encoders[s["name"]].tokenizer for s in specs}
            routes[route] = SparCombination(specs, self.variant, models, tokenizers)
        router = Router.for_query_document([routes["query"]], [routes["document"]])
        return SentenceTransformer(modules=[router], device=device or str(self.base.device),
                                   similarity_fn_name="dot")


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")


def load_published_encoder(path: str | Path, name: str, config: dict[str, Any] | None = None, device: str = "cpu"):
    """One encoder of a published model directory, ``base`` or ``lambda``: a :class:`~spar.encoders.BiEncoder`,
    or a :class:`~spar.lexical.static.StaticLambda` for a term-based Λ (e.g. to reuse a published Λ with
    ``encode.lambda``)."""
    from transformers import AutoModel, AutoTokenizer

    from spar.encoders import BiEncoder, EncoderSettings

    d = Path(path)
    config = config or check_model_dir(d)
    q_dir, p_dir = d / ROUTES["query"] / name, d / ROUTES["document"] / name
    if config["encoders"][name].get("kind") in ("projection", "static"):
        return _load_lexical(q_dir, p_dir)
    settings = EncoderSettings(**config["encoders"][name])
    tokenizer = AutoTokenizer.from_pretrained(str(q_dir))
    q_model = AutoModel.from_pretrained(str(q_dir), use_safetensors=True)
    # A shared-weights encoder is stored twice (once per route); load it once.
    p_model = None if settings.shared_weights else AutoModel.from_pretrained(str(p_dir), use_safetensors=True)
    return BiEncoder(q_model, p_model, tokenizer, settings).to(device).eval()


def _load_lexical(query_dir: Path, document_dir: Path):
    """A published term-based Λ as a :class:`~spar.lexical.static.StaticLambda` (a bag of term embeddings: a
    projection's random matrix was published as its embeddings, so the vectors are the same)."""
    from spar.lexical.static import StaticLambda
    from spar.lexical.terms import BM25Weights
    from spar.st_modules import LexicalBag

    bag = LexicalBag.load(str(query_dir))
    if LexicalBag.load(str(document_dir)).embeddings.shape != bag.embeddings.shape:
        raise ArtifactError(f"{query_dir} and {document_dir} hold term embeddings of different shapes")
    weights = BM25Weights(bag.vocab, bag.df.numpy(), bag.num_docs, bag.avg_length, bag.k1, bag.b, bag.analyzer)
    return StaticLambda(weights, bag.embeddings.detach(), init={"from": "published model"}).eval()


def required_files(config: dict[str, Any] | None = None) -> list[str]:
    """Every file a model directory must hold (relative paths)."""
    files = [MODEL_CONFIG, "modules.json", "router_config.json", "config_sentence_transformers.json"]
    for route in ROUTES.values():
        files.append(f"{route}/spar_combination.json")
        for name in ENCODER_NAMES:
            lexical = ((config or {}).get("encoders", {}).get(name) or {}).get("kind") in ("projection", "static")
            files.extend(f"{route}/{name}/{f}" for f in (LEXICAL_FILES if lexical else ENCODER_FILES))
    return files


def check_model_dir(path: str | Path) -> dict[str, Any]:
    """Read ``spar_model.json`` and check that every required file exists; errors name the missing file."""
    d = Path(path)
    if not d.is_dir():
        raise ArtifactError(f"{d}: no such model directory")
    if not (d / MODEL_CONFIG).exists():
        raise ArtifactError(f"{d}: missing file '{MODEL_CONFIG}' (not a SPAR model directory; run `spar publish`)")
    try:
        config = json.loads((d / MODEL_CONFIG).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{d / MODEL_CONFIG}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if config.get("format") != MODEL_FORMAT:
        raise ArtifactError(f"{d / MODEL_CONFIG}: not a SPAR model description (format={config.get('format')!r})")
    if config.get("format_version", 0) > MODEL_FORMAT_VERSION:
        raise ArtifactError(f"{d / MODEL_CONFIG}: written by a newer spar (format_version "
                            f"{config['format_version']} > {MODEL_FORMAT_VERSION}); upgrade spar")
    for rel in required_files(config):
        if not (d / rel).exists():
            raise ArtifactError(f"{d}: missing file '{rel}' (the model directory is incomplete; re-run `spar publish`)")
    from spar.models import missing_tokenizer

    for route in ROUTES.values():
        for name in ENCODER_NAMES:
            if missing_tokenizer(d / route / name):
                raise ArtifactError(f"{missing_tokenizer(d / route / name)} (the model directory is incomplete; "
                                    "re-run `spar publish`)")
    return config


def is_model_dir(path: str | Path) -> bool:
    return (Path(path) / MODEL_CONFIG).exists()


# ---------------------------------------------------------------------------------------------------------------
# Hub upload
# ---------------------------------------------------------------------------------------------------------------

#: Build-time and bookkeeping files (dot files, temporaries) that are not part of the published model.
UPLOAD_IGNORE = [".*", "**/.*", "*.tmp-*", "**/*.tmp-*"]


def push_to_hub(model_dir: str | Path, repo_id: str, private: bool = True, token: str | None = None,
                commit_message: str = "Upload SPAR model", endpoint: str | None = None) -> str:
    """Create (or reuse) ``repo_id`` on the hub and upload the model directory; returns the commit URL.

    The token comes from ``token``, ``HF_TOKEN`` or ``hf auth login``; the endpoint from ``endpoint`` or
    ``HF_ENDPOINT``. Fails with a :class:`SparError` that says what to do when there is no token, the hub is
    unreachable, offline mode is on, or the hub refuses the request.
    """
    import httpx
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    d = Path(model_dir)
    check_model_dir(d)
    token = token or get_token()
    if not token:
        raise SparError(f"cannot push {d} to the hub as {repo_id!r}: no Hugging Face token "
                        "(set HF_TOKEN or run `hf auth login`)")
    api = HfApi(endpoint=endpoint, token=token)
    where = api.endpoint
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(folder_path=str(d), repo_id=repo_id, repo_type="model",
                                 commit_message=commit_message, ignore_patterns=UPLOAD_IGNORE)
    except OfflineModeIsEnabled:
        raise SparError(f"cannot push to {repo_id!r}: HF_HUB_OFFLINE is set; unset it to upload") from None
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        hint = " (the token is invalid or lacks write access)" if status in (401, 403) else ""
        raise SparError(f"the hub at {where} refused the upload to {repo_id!r}: HTTP {status}{hint}: "
                        f"{str(exc).splitlines()[0]}") from None
    except (httpx.TransportError, OSError) as exc:
        raise SparError(f"cannot reach the hub at {where} to push {repo_id!r}: {exc}. "
                        "Check the network (or HF_ENDPOINT) and retry.") from None
    return str(getattr(info, "commit_url", info))


# ---------------------------------------------------------------------------------------------------------------
# Publishing a run
# ---------------------------------------------------------------------------------------------------------------


def publish_model(encoder: SparEncoder, directory: str | Path, facts: ModelCardFacts | None = None,
                  config_yaml: str | None = None, index_dir: str | Path | None = None,
                  passages: str | Path | None = None, copy_index: bool = False) -> Path:
    """Write the model directory with its card; record (or copy, with ``copy_index``) the run's index."""
    d = Path(directory)
    index_meta: dict[str, Any] | None = None
    if index_dir is not None:
        index_meta = {"index_dir": str(Path(index_dir).resolve()),
                      "passages": str(Path(passages).resolve()) if passages else None}
    encoder.metadata["index"] = index_meta
    encoder.metadata["published"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    encoder.save_pretrained(d, render_model_card(facts) if facts else None)
    if config_yaml:
        (d / "spar_config.yaml").write_text(config_yaml, encoding="utf-8")
    if copy_index and index_dir is not None:
        shutil.copytree(index_dir, d / "index", dirs_exist_ok=True)
        if passages:
            shutil.copyfile(passages, d / "index" / "passages.arrow")
        config = json.loads((d / MODEL_CONFIG).read_text())
        config["index"] = {"index_dir": "index", "passages": "index/passages.arrow" if passages else None}
        _write_json(d / MODEL_CONFIG, config)
    return d
