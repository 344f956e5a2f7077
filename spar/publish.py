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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from spar.errors import ArtifactError, SparError
from spar.index import spar_passage_vectors, spar_query_vectors

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
KNOWN_LICENSES = {"all-minilm-l6-v2": "apache-2.0", "sentence-transformers/all-minilm-l6-v2": "apache-2.0"}
KNOWN_HUB_IDS = {"all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2"}


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
# Model card
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ModelCardFacts:
    """What the model card says; :func:`render_model_card` turns it into ``README.md``."""

    name: str
    base_model: str
    base_pooling: str
    base_normalize: bool
    lambda_init: str
    lambda_pooling: str
    lambda_normalize: bool
    variant: str
    mu: float
    dim: int
    license: str = "apache-2.0"
    lambda_kind: str = "transformer"
    base_license: str | None = None
    data_license: str | None = None
    dataset: str | None = None
    teacher: str = "bm25"
    teacher_details: str = ""
    training_queries: int | None = None
    dev_queries: int | None = None
    sampling: str = ""
    k: int | None = None
    n_positives: int | None = None
    n_negatives: int | None = None
    train_details: dict[str, Any] = field(default_factory=dict)
    #: Set when Λ was trained elsewhere (``encode.lambda``): :meth:`spar.lambda_source.LambdaSource.describe`.
    lambda_source: dict[str, Any] | None = None
    tune_metric: str | None = None
    tune_grid: list[float] | None = None
    tune_scores: dict[str, float] | None = None
    tune_split: str | None = None
    tune_confirmed: float | None = None
    evaluation_markdown: str | None = None
    command: str | None = None
    config_yaml: str | None = None
    repo_id: str | None = None


def _hub_id(model: str) -> str:
    return KNOWN_HUB_IDS.get(model.strip().lower(), model)


def _yaml_front_matter(f: ModelCardFacts) -> str:
    import yaml

    meta: dict[str, Any] = {
        "library_name": "sentence-transformers",
        "pipeline_tag": "sentence-similarity",
        "license": f.license,
        "tags": ["sentence-transformers", "sentence-similarity", "feature-extraction", "dense-retrieval", "spar",
                 "lexical-matching", f"teacher-{f.teacher}"],
    }
    base_ids = list(dict.fromkeys([_hub_id(f.base_model)] + ([_hub_id(f.lambda_init)]
                                                             if f.lambda_kind == "transformer" else [])))
    if all(not Path(b).exists() for b in base_ids):  # local paths are not hub ids: leave them out of metadata
        meta["base_model"] = base_ids[0] if len(base_ids) == 1 else base_ids
    if f.dataset:
        meta["datasets"] = [f.dataset]
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"


def _demote_headings(markdown: str, levels: int = 2) -> str:
    """Push markdown headings down so an embedded report nests under the card's own sections."""
    return "\n".join("#" * levels + line if line.startswith("#") else line for line in markdown.splitlines())


def render_model_card(f: ModelCardFacts) -> str:
    """A Hugging Face model card (YAML metadata + markdown) stating how the model was built and how to use it."""
    repo = f.repo_id or "path/to/model"
    lines = [_yaml_front_matter(f), f"# SPAR: {f.name}", ""]
    lines += [
        "A **SPAR** retriever (Chen et al., *Salient Phrase Aware Dense Retrieval: Can a Dense Retriever Imitate a "
        "Sparse One?*, Findings of EMNLP 2022): a base dense retriever combined with a dense *lexical model* Λ "
        f"trained to imitate the sparse teacher ({f.teacher}). "
        + ("Queries are encoded as `[Q(q), μ·QΛ(q)]` and passages as `[P(p), PΛ(p)]`, so one inner-product search "
           "scores exactly `sim(q, p) + μ·simΛ(q, p)`." if f.variant == "concat" else
           "Queries are encoded as `Q(q) + μ·QΛ(q)` and passages as `P(p) + PΛ(p)` (the 'sum' variant: half the "
           "index size; its inner product approximates `sim + μ·simΛ` up to cross terms).")
        + f" μ = **{f.mu:g}**, dimension {f.dim}.",
        "",
        "## Usage",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{repo}", trust_remote_code=True)  # spar_modules.py: the combination module',
        'q = model.encode_query(["what causes scurvy"])',
        '# (title, text) pairs are encoded "title [SEP] text", as in training; plain strings work too',
        'p = model.encode_document([("Scurvy", "Scurvy is caused by a lack of vitamin C.")])',
        "scores = model.similarity(q, p)  # dot product = sim + mu * sim_lambda",
        "```",
        "",
        "With spar installed (no `trust_remote_code`; passages as `(title, text)` pairs are encoded "
        "`title [SEP] text`, exactly as in training):",
        "",
        "```python",
        "from spar.publish import SparEncoder",
        "",
        f'enc = SparEncoder.from_pretrained("{repo}")          # or mu=... to override the tuned mu',
        'q = enc.encode_queries(["what causes scurvy"])',
        'p = enc.encode_passages([("Scurvy", "Scurvy is caused by a lack of vitamin C.")])',
        "```",
        "",
        "Each encoder is also a plain Hugging Face model: `AutoModel.from_pretrained(path, subfolder=\"query/lambda\")` "
        "(folders `query/base`, `query/lambda`, `document/base`, `document/lambda`).",
        "",
        "## Components",
        "",
        "| part | model | pooling | normalised | licence |",
        "|---|---|---|---|---|",
        f"| base retriever | {_hub_id(f.base_model)} | {f.base_pooling} | {f.base_normalize} | "
        f"{f.base_license or 'see its model card'} |",
        f"| lexical model Λ (initialised from) | {_hub_id(f.lambda_init)} | {f.lambda_pooling} | {f.lambda_normalize} | "
        f"{KNOWN_LICENSES.get(f.lambda_init.strip().lower(), 'see its model card')} |",
        f"| training data | {f.dataset or 'see the config below'} | | | "
        f"{f.data_license or 'not stated (set publish.data_license)'} |",
        "",
        f"This model is released under `{f.license}`; the training data's licence above also applies to "
        "what was learnt from it.",
        "",
        "## Training Λ",
        "",
    ]
    if f.lambda_source and f.lambda_source.get("origin") != "run":
        src = f.lambda_source
        statistics = ("its training corpus's BM25 statistics (carried)" if src.get("statistics") == "carried" else
                      f"BM25 statistics refitted on `{src.get('statistics_from')}` (target)")
        lines.append(f"- Λ was trained in another experiment and reused here unchanged (SPAR: one Λ, any corpus and "
                     f"base): `{src.get('spec')}` ({src.get('origin')}, {src.get('kind')}, dim {src.get('dim')}, "
                     f"fingerprint `{src.get('fingerprint')}`), with {statistics}. The README.md in that directory "
                     "describes its teacher and training data.")
        f = replace(f, training_queries=None, k=None, train_details={})
    else:
        lines.append(f"- Teacher: {f.teacher}{(' — ' + f.teacher_details) if f.teacher_details else ''}.")
    if f.training_queries is not None:
        dev = f" (+ {f.dev_queries:,} dev queries for validation)" if f.dev_queries else ""
        lines.append(f"- Training queries: {f.training_queries:,} sentences sampled from the corpus{dev}"
                     + (f"; sampling: {f.sampling}." if f.sampling else "."))
    if f.k is not None:
        lines.append(f"- Labels: the teacher's top K={f.k} hits per query; the top n_p={f.n_positives} are positives, "
                     f"n_n={f.n_negatives} hard negatives from the bottom of the window.")
    if f.train_details:
        lines.append("- Training: " + ", ".join(f"{k}={v}" for k, v in f.train_details.items()) + ".")
    lines += ["", "## Choosing μ", ""]
    if f.tune_metric:
        lines.append(f"μ = {f.mu:g} maximises {f.tune_metric} on the {f.tune_split or 'dev'} split over the grid "
                     f"{f.tune_grid}" + (f" (confirmed by a real search of the combined index: "
                                          f"{f.tune_confirmed:.4f})." if f.tune_confirmed is not None else "."))
        if f.tune_scores:
            lines += ["", "| μ | " + f.tune_metric + " |", "|---|---|"]
            lines += [f"| **{mu}** | **{score:.4f}** |" if float(mu) == f.mu else f"| {mu} | {score:.4f} |"
                      for mu, score in f.tune_scores.items()]
    else:
        lines.append(f"μ = {f.mu:g} (no tuning record found).")
    lines += ["", "## Evaluation", ""]
    lines.append(_demote_headings(f.evaluation_markdown.strip()) if f.evaluation_markdown else
                 "No evaluation results were found when this model was published (run `spar evaluate`).")
    if f.command or f.config_yaml:
        lines += ["", "## Reproduce", ""]
        if f.command:
            lines += ["This model was made by:", "", "```bash", f.command, "```", ""]
        if f.config_yaml:
            lines += ["The resolved configuration ships with the model; `spar run spar_config.yaml` re-runs every "
                      "stage with exactly these settings (data paths may need adjusting):", ""]
            lines += ["<details><summary>Resolved configuration (spar_config.yaml)</summary>", "", "```yaml",
                      f.config_yaml.rstrip(), "```", "", "</details>"]
    lines += ["", "## Citation", "", "```bibtex",
              "@inproceedings{chen-etal-2022-salient,",
              "  title = {Salient Phrase Aware Dense Retrieval: Can a Dense Retriever Imitate a Sparse One?},",
              "  author = {Chen, Xilun and Lakhotia, Kushal and O{\\u{g}}uz, Barlas and Gupta, Anchit and Lewis, "
              "Patrick and Peshterliev, Stan and Mehdad, Yashar and Gupta, Sonal and Yih, Wen-tau},",
              "  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2022},",
              "  year = {2022}", "}", "```", ""]
    return "\n".join(lines)


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


def _stat(stats: dict[str, Any], *names: str) -> Any:
    """First stat whose key matches one of ``names`` (manifests of other stages may name them slightly apart)."""
    for name in names:
        if name in stats:
            return stats[name]
    for key, value in stats.items():
        if isinstance(value, dict):
            found = _stat(value, *names)
            if found is not None:
                return found
    return None


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    return None


def gather_card_facts(cfg, encoder: SparEncoder, tune: dict[str, Any], manifests: dict[str, dict[str, Any]],
                      results_md: str | None, command: str | None,
                      lambda_source: dict[str, Any] | None = None) -> ModelCardFacts:
    """Collect the model card's facts from the config, the tuning record and the input manifests."""
    from spar.config import dump_config

    base, lam = cfg.encode.base, cfg.train.encoder
    kind = getattr(encoder.lambda_, "kind", "transformer")  # the published Λ's, not the config's (a BiEncoder: transformer)
    queries_stats = manifests.get("queries", {}).get("stats", {})
    train_stats = manifests.get("lambda", {}).get("stats", {})
    label = cfg.label
    teacher = (f"Pyserini Lucene BM25, k1={label.k1}, b={label.b}, fields {'+'.join(label.fields)}"
               if label.teacher == "bm25" else f"impact index of {label.impact_model}")
    if cfg.data.qrels_dev:
        split = f"dev qrels `{Path(cfg.data.qrels_dev).name}`"
    elif cfg.data.dev_holdout_fraction:
        split = f"a seeded {cfg.data.dev_holdout_fraction:.0%} hold-out of the test queries (removed from reporting)"
    else:
        split = None
    sampling = cfg.sample.strategy + (f" (base {cfg.sample.exponential_base})" if cfg.sample.strategy == "wiki" else "")
    train_details = {"kind": kind, "loss": cfg.train.loss if kind == "transformer" else cfg.train.lexical.objective,
                     "batch size": cfg.train.batch_size, "hard negatives": cfg.train.hard_negatives,
                     "learning rate": cfg.train.learning_rate or ("1e-3" if kind == "static" else "3e-5")}
    if kind == "projection":
        train_details = {"kind": kind, "training": "none (the teacher's BM25 weights times a seeded random matrix)"}
    for key, label_ in (("steps", "steps"), ("best_valid_mrr", "best validation MRR"),
                        ("valid_mrr", "best validation MRR")):
        value = _stat(train_stats, key)
        if value is not None and label_ not in train_details:
            train_details[label_] = round(value, 4) if isinstance(value, float) else value
    scores = tune.get("scores")
    return ModelCardFacts(
        name=cfg.experiment.name,
        base_model=base.model, base_pooling=base.pooling, base_normalize=base.normalize,
        lambda_init=f"{kind} Λ of {lambda_source.get('spec')}" if lambda_source and lambda_source.get("origin") != "run"
        else lam.model if kind == "transformer" else
        f"{kind} Λ: the teacher's terms, {cfg.train.lexical.projection} projection (dim {encoder.lambda_.dim})",
        lambda_pooling=lam.pooling if kind == "transformer" else "term bag (query counts, passage BM25 weights)",
        lambda_normalize=lam.normalize if kind == "transformer" else False, lambda_kind=kind,
        variant=encoder.variant, mu=encoder.mu, dim=encoder.dim,
        license=cfg.publish.license,
        base_license=cfg.publish.base_license or KNOWN_LICENSES.get(base.model.strip().lower()),
        data_license=cfg.publish.data_license, dataset=cfg.publish.dataset,
        teacher=label.teacher, teacher_details=teacher,
        training_queries=_count(_stat(queries_stats, "train_queries", "queries_train", "train")),
        dev_queries=_count(_stat(queries_stats, "dev_queries", "queries_dev", "dev")),
        sampling=sampling, k=label.k, n_positives=label.n_positives, n_negatives=label.n_negatives,
        train_details=train_details, lambda_source=lambda_source,
        tune_metric=tune.get("metric"), tune_grid=tune.get("grid"),
        tune_scores={str(k): float(v) for k, v in scores.items()} if isinstance(scores, dict) else None,
        tune_split=split, tune_confirmed=tune.get("confirmed"),
        evaluation_markdown=results_md, command=command, config_yaml=dump_config(cfg),
        repo_id=cfg.publish.push_to_hub,
    )


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
