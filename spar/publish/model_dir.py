"""Publish SPAR: one self-contained model directory holding the base and Λ encoders, μ and the variant.

The directory is at once

- a **sentence-transformers** model: a ``Router`` with a ``query`` and a ``document`` route, each one
  :class:`spar.lexical.st_modules.SparCombination`, so ``model.encode_query(q)`` is ``[Q(q), μ·QΛ(q)]`` and
  ``model.encode_document(p)`` is ``[P(p), PΛ(p)]`` (``concat``; ``sum`` adds them) and the dot product is
  ``sim(q, p) + μ·simΛ(q, p)``;
- plain **Hugging Face** models (each ``config.json``, ``model.safetensors`` and tokenizer files) for
  ``transformers.AutoModel``, and a term-based Λ's term bag;
- a **spar** model (``spar_model.json``: μ, variant, each encoder's settings and Λ's kind, an index copied into it)
  for :class:`SparEncoder`, ``spar index --model`` (:mod:`spar.publish.corpus_index`) and ``spar search``
  (:mod:`spar.publish.search`). It records no absolute path: copy it, download it, or push it anywhere;
- a model card (``README.md``) with Hugging Face metadata.

Each weight is stored once: an encoder whose query and document sides hold the same weights (the base; a
term-based Λ) lives in ``<name>/`` and both routes point to it (``"path"`` in ``spar_combination.json``); one with
two sets of weights (a DPR Λ) in ``query/<name>/`` and ``document/<name>/``. Layout::

    model/
      README.md                            model card (YAML front matter + training/tuning/evaluation facts)
      spar_model.json                      spar's description of the model (read by SparEncoder)
      spar_config.yaml                     the resolved experiment config that produced it
      modules.json, router_config.json,    sentence-transformers model (Router over the two routes)
      config_sentence_transformers.json
      spar_modules.py, spar_analysis.py    copies of spar/lexical/st_modules.py and the analyzer (trust_remote_code
      loading) spar_random_tables.py                and of the projection's table generator (its table is not stored)
      base/                                the base encoder (AutoModel), shared by both routes
      lambda/ or query/lambda/ + document/lambda/
      query/spar_combination.json          query route: weights 1 and μ
      document/spar_combination.json       document route: weights 1 and 1

Loading (skipped in the doctest run: it needs a published run under ``runs/``)::

    >>> from spar.publish.model_dir import SparEncoder                                   # doctest: +SKIP
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
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterable, get_args

import numpy as np

from spar.core.artifacts import PASSAGES_FILE
from spar.core.errors import ArtifactError, SparError
from spar.core.run_context import RunContext
from spar.core.config import Variant
from spar.index.combine import spar_passage_vectors, spar_query_vectors
from spar.publish.card import ModelCardFacts, render_model_card

MODEL_CONFIG = "spar_model.json"
MODEL_FORMAT = "spar-model"
#: 2: ``spar_model.json`` records every file's checksum (a model without ``manifest.json`` is still checked).
MODEL_FORMAT_VERSION = 2
#: ``spar_model.json``'s record of each file's size and SHA-256 (format 2 on).
CHECKSUMS = "checksums"
#: Keys of ``spar_model.json`` that the writing spar sets: a loaded model's metadata never carries them over.
OWN_KEYS = ("format", "format_version", "spar_version", CHECKSUMS, "variant", "mu", "similarity", "dims", "routes",
            "encoders")
ROUTES = {"query": "query", "document": "document"}
#: The side of the input each route encodes.
SIDES = {"query": "query", "document": "passage"}
ENCODER_NAMES = ("base", "lambda")


# ---------------------------------------------------------------------------------------------------------------
# SparEncoder
# ---------------------------------------------------------------------------------------------------------------


class SparEncoder:
    """SPAR's combined encoder: the base retriever and Λ, joined as ``[Q, μ·QΛ]`` / ``[P, PΛ]`` (or summed).

    Args:
        base: the base dense retriever (a :class:`spar.model.encoders.BiEncoder`).
        lambda_: the lexical model Λ (a :class:`spar.lexical.base.LexicalModel` of any kind; a bare
            :class:`~spar.model.encoders.BiEncoder` is taken as a transformer Λ).
        mu: the weight of Λ's query vector (tuned on the dev split by ``spar tune``).
        variant: ``concat`` or ``sum``.
        metadata: anything to keep in ``spar_model.json`` (provenance, index location, tuning).

    Example::

        >>> from spar.model.encoders import BiEncoder
        >>> from spar.lexical.projection import ProjectionLambda
        >>> from spar.publish.model_dir import SparEncoder
        >>> base = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True, shared_weights=True)
        >>> lam = ProjectionLambda.fit(["scurvy is a lack of vitamin C", "sparse retrieval"], dim=64)
        >>> enc = SparEncoder(base, lam, mu=0.5, variant="concat")
        >>> enc.encode_queries(["what causes scurvy"]).shape
        (1, 448)
    """

    def __init__(self, base, lambda_, mu: float, variant: Variant = "concat",
                 metadata: dict[str, Any] | None = None):
        from spar.model.encoders import BiEncoder
        from spar.lexical.transformer import TransformerLambda

        if variant not in get_args(Variant):
            raise SparError(f"unknown SPAR variant {variant!r} (expected 'concat' or 'sum')")
        if variant == "sum" and base.dim != lambda_.dim:
            raise SparError(f"variant 'sum' needs equal dimensions, base has {base.dim} and Λ {lambda_.dim}")
        self.base = base
        self.lambda_ = TransformerLambda(lambda_) if isinstance(lambda_, BiEncoder) else lambda_
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
    def _encoders(self) -> dict[str, Any]:
        """The two encoders by name; both offer ``published_spec``/``published_module``/``shares_sides``."""
        return {"base": self.base, "lambda": self.lambda_}

    def _routes(self) -> dict[str, list[dict[str, Any]]]:
        weights = {"query": {"base": 1.0, "lambda": self.mu}, "document": {"base": 1.0, "lambda": 1.0}}
        return {route: [{"name": name, **enc.published_spec(SIDES[route], weights[route][name])}
                        for name, enc in self._encoders().items()] for route in ROUTES}

    def save_pretrained(self, directory: str | Path, model_card: str | None = None) -> Path:
        """Write the model directory (see the module docstring); ``model_card`` becomes ``README.md``. An encoder
        whose two sides hold the same weights is written once, in ``<name>/``, and both routes point to it."""
        import sentence_transformers
        import torch
        import transformers

        from spar import __version__
        from spar.lexical import st_modules

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        encoders = self._encoders()
        shared = {name for name, enc in encoders.items() if enc.shares_sides()}
        for route, specs in self._routes().items():
            route_dir = d / ROUTES[route]
            route_dir.mkdir(exist_ok=True)
            for spec in specs:
                name = spec["name"]
                if name in shared:
                    spec["path"] = name  # relative to the model directory
                    if route != "query":
                        continue  # written with the query route
                target = d / name if name in shared else route_dir / name
                module, tokenizer = encoders[name].published_module(SIDES[route])
                _save_module(module, tokenizer, target)
            _write_json(route_dir / st_modules.COMBINATION_CONFIG, {"variant": self.variant, "encoders": specs})
        # sentence-transformers: one Router over the two routes, each a SparCombination.
        _write_json(d / "modules.json", [{"idx": 0, "name": "0", "path": "",
                                          "type": "sentence_transformers.base.modules.router.Router"}])
        _write_json(d / "router_config.json", {
            "types": {ROUTES[r]: st_modules.SHIPPED_CLASS_REF for r in ROUTES},
            "structure": {r: [ROUTES[r]] for r in ROUTES},
            # No default route (#47): `model.encode(text)` without a task raised nothing and returned the passage
            # side's vector for a question. Now it is sentence-transformers' own refusal, naming the `task`;
            # encode_query / encode_document (or task=) pick the side.
            "parameters": {"default_route": None, "allow_empty_key": False, "route_mappings": {}},
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
        from spar.lexical import analysis, random_tables

        shutil.copyfile(analysis.__file__, d / st_modules.SHIPPED_ANALYSIS_FILE)
        shutil.copyfile(random_tables.__file__, d / st_modules.SHIPPED_TABLES_FILE)
        written = ["modules.json", "router_config.json", "config_sentence_transformers.json",
                   st_modules.SHIPPED_MODULE_FILE, st_modules.SHIPPED_ANALYSIS_FILE, st_modules.SHIPPED_TABLES_FILE,
                   *(ROUTES[route] for route in ROUTES), *shared]
        readable_by_all(*(d / name for name in written if (d / name).exists()))
        from spar.core.artifacts import file_checksums

        files = sorted(p.relative_to(d).as_posix() for name in written for p in
                       ([d / name, *(d / name).rglob("*")] if (d / name).is_dir() else [d / name]) if p.is_file())
        _write_json(d / MODEL_CONFIG, {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            # Each file's size and SHA-256, so a model that travels without its manifest.json is still checked
            # (check_model_files): a damaged weight file would load and give other vectors (#48).
            CHECKSUMS: file_checksums(d, files),
            "spar_version": __version__,
            "variant": self.variant,
            "mu": self.mu,
            "similarity": "dot",
            "dims": {"base": self.base.dim, "lambda": self.lambda_.dim, "combined": self.dim},
            "routes": ROUTES,
            "encoders": {name: enc.published_config() for name, enc in encoders.items()},
            **{k: v for k, v in self.metadata.items() if k not in OWN_KEYS},
        })
        if model_card is not None:
            (d / "README.md").write_text(model_card, encoding="utf-8")
        readable_by_all(*(d / name for name in (MODEL_CONFIG, "README.md") if (d / name).exists()))
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

        from spar.lexical.st_modules import SparCombination

        encoders = self._encoders()
        sharing = {name for name, enc in encoders.items() if enc.shares_sides()}
        shared: dict[str, tuple[Any, Any]] = {}
        routes = {}
        for route, specs in self._routes().items():
            modules = {}
            for spec in specs:
                name, side = spec["name"], SIDES[route]
                if name in shared:  # one module for both routes: one copy in memory
                    module, tokenizer = shared[name]
                    modules[name] = (module.with_side(side) if hasattr(module, "with_side") else module, tokenizer)
                    continue
                modules[name] = encoders[name].published_module(side)
                if name in sharing:
                    shared[name] = modules[name]
            routes[route] = SparCombination(specs, self.variant, {n: m for n, (m, _) in modules.items()},
                                            {n: t for n, (_, t) in modules.items() if t is not None})
        router = Router.for_query_document([routes["query"]], [routes["document"]], default_route=None,
                                           allow_empty_key=False)  # no side without a task (save_pretrained)
        return SentenceTransformer(modules=[router], device=device or str(self.base.device),
                                   similarity_fn_name="dot")


def _save_module(module, tokenizer, target: Path) -> None:
    """One encoder folder of a route: a Hugging Face model and its tokenizer, or a term bag."""
    if tokenizer is None:
        module.save(str(target))
        return
    module.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)


def readable_by_all(*roots: Path) -> None:
    """The files spar wrote (``roots``: files, or directories taken whole) readable as a plain file would be (0644
    under the usual umask): transformers writes ``model.safetensors`` 0600 (through a temporary file), so a model
    copied to a shared disk or served by another user was unreadable there (#47)."""
    umask = os.umask(0)
    os.umask(umask)
    for root in roots:
        for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
            if path.is_file() and not path.is_symlink():
                path.chmod(0o666 & ~umask)


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")


def encoder_dirs(path: str | Path, name: str) -> tuple[Path, Path]:
    """The folders holding encoder ``name`` for the query and the document route (one folder when shared)."""
    from spar.lexical.st_modules import COMBINATION_CONFIG

    d = Path(path)
    dirs = []
    for route in ROUTES.values():
        specs = json.loads((d / route / COMBINATION_CONFIG).read_text(encoding="utf-8"))["encoders"]
        spec = next((s for s in specs if s["name"] == name), None)
        if spec is None:
            raise ArtifactError(f"{d / route / COMBINATION_CONFIG}: no encoder named {name!r}")
        dirs.append(d / spec["path"] if spec.get("path") else d / route / name)
    return dirs[0], dirs[1]


def load_published_encoder(path: str | Path, name: str, config: dict[str, Any] | None = None, device: str = "cpu"):
    """One encoder of a published model directory: ``base`` (a :class:`~spar.model.encoders.BiEncoder`) or ``lambda``
    (a :class:`~spar.lexical.base.LexicalModel` of its kind, e.g. to reuse a published Λ with ``encode.lambda``)."""
    from spar.model.encoders import BiEncoder
    from spar.lexical import lambda_class

    d = Path(path)
    config = config or check_model_dir(d)
    q_dir, p_dir = encoder_dirs(d, name)
    entry = config["encoders"][name]
    if name == "base":
        return BiEncoder.load_published(q_dir, p_dir, entry, device)
    return lambda_class(entry["kind"]).load_published(q_dir, p_dir, entry, device)


def required_files(path: str | Path, config: dict[str, Any]) -> list[str]:
    """Every file a model directory must hold (relative paths)."""
    from spar.model.encoders import PUBLISHED_FILES
    from spar.lexical import lambda_class

    d = Path(path)
    files = [MODEL_CONFIG, "modules.json", "router_config.json", "config_sentence_transformers.json"]
    files.extend(f"{route}/spar_combination.json" for route in ROUTES.values())
    if any(not (d / f).exists() for f in files):
        return files
    for name in ENCODER_NAMES:
        entry = config.get("encoders", {}).get(name) or {}
        names = PUBLISHED_FILES if name == "base" else lambda_class(entry.get("kind", "")).published_files
        for folder in dict.fromkeys(encoder_dirs(d, name)):
            files.extend(f"{folder.relative_to(d).as_posix()}/{f}" for f in names)
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
    if "kind" not in (config.get("encoders", {}).get("lambda") or {}):
        raise ArtifactError(f"{d / MODEL_CONFIG}: the Λ entry names no kind (written by an older spar; re-run "
                            "`spar publish`)")
    for rel in required_files(d, config):
        if not (d / rel).exists():
            raise ArtifactError(f"{d}: missing file '{rel}' (the model directory is incomplete; re-run `spar publish`)")
    from spar.model.resolve import check_weight_files, missing_tokenizer

    check_weight_files(d)
    for name in ENCODER_NAMES:
        for folder in encoder_dirs(d, name):
            if missing_tokenizer(folder):
                raise ArtifactError(f"{missing_tokenizer(folder)} (the model directory is incomplete; "
                                    "re-run `spar publish`)")
    check_model_files(d)
    return config


def check_model_files(path: str | Path) -> None:
    """Every file a model directory's ``manifest.json`` records (written by ``spar publish``; it travels with the
    model to and from the hub), but its card ``README.md``, has its recorded size and SHA-256: a weight file damaged
    in transfer or on disk (same size, other bytes) would load and give other vectors. A directory without
    ``manifest.json`` (:meth:`SparEncoder.save_pretrained` alone, a copy without it) is checked by the checksums
    ``spar_model.json`` records (format 2), or refused without them; one published before either is not checked.

    Costs one read of every file at load, hashed once per process and file version (0.28 s of a 0.63 s load for a
    275 MB model: MiniLM base and a transformer Λ, warm page cache)."""
    from spar.core.artifacts import MANIFEST, changed_files, read_manifest

    d = Path(path)
    if (d / MANIFEST).is_file():
        recorded, by = read_manifest(d).get("checksums") or {}, MANIFEST
    else:  # travelling without its manifest: spar_model.json's own record (format 2 on)
        config = json.loads((d / MODEL_CONFIG).read_text(encoding="utf-8"))
        recorded, by = config.get(CHECKSUMS), MODEL_CONFIG
        if not isinstance(recorded, dict):
            if config.get("format_version", 0) < 2:
                return  # published before checksums: nothing to check it by (loaded as it always was)
            raise ArtifactError(f"{d}: no manifest.json and no checksums in {MODEL_CONFIG}, so its files cannot be "
                                "checked: copy the model directory whole, or publish it again")
    # The model card is documentation (often edited on the hub): the vectors do not depend on it.
    changed = changed_files(d, {"checksums": {k: v for k, v in recorded.items() if k != "README.md"}}, content=True)
    if changed:
        name, why = changed[0].split(" (", 1)
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise ArtifactError(f"{d / name}: {why[:-1]} since `spar publish` wrote it (its {by} records another "
                            f"size or SHA-256){more}: the model directory is damaged; publish or download it again")


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
    """Write the model directory with its card; with ``copy_index``, copy the run's index (and passages) into it.

    The model records no path outside itself: an index copied in is recorded relative to the model (``index/``);
    without one it records none (:func:`spar.publish.search.resolve_index_location` finds the run's index beside a model
    published into its run, and ``spar index --model`` indexes any corpus with it)."""
    d = Path(directory)
    encoder.metadata["index"] = None
    encoder.metadata["published"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    encoder.save_pretrained(d, render_model_card(facts) if facts else None)
    if config_yaml:
        (d / "spar_config.yaml").write_text(config_yaml, encoding="utf-8")
    if copy_index and index_dir is not None:
        shutil.copytree(index_dir, d / "index", dirs_exist_ok=True)
        _copy_reranking_vectors(Path(index_dir), d / "index")
        if passages:
            shutil.copyfile(passages, d / "index" / PASSAGES_FILE)
        config = json.loads((d / MODEL_CONFIG).read_text())
        config["index"] = {"index_dir": "index", "passages": "index/passages.arrow" if passages else None}
        _write_json(d / MODEL_CONFIG, config)
        readable_by_all(d / "index")
    return d


def _copy_reranking_vectors(source: Path, copy: Path) -> None:
    """An index that re-ranks exactly (``index.refine``) reads the float32 passage embeddings it was built from, by
    a path relative to it (``../embeddings/...`` in a run): a copied index takes them along, into
    ``index/embeddings/``, so the model directory searches alone (the copy pointed outside the model: `spar search`
    refused it at once)."""
    from spar.index.files import index_info, record_embeddings

    info = index_info(copy, required=False)
    where = info.get("embeddings") or {}
    if not where or not int((info.get("options") or {}).get("refine") or 0):
        return
    moved = {}
    for name, relative in where.items():
        target = Path("embeddings") / name / "passages"
        shutil.copytree(source / relative, copy / target, dirs_exist_ok=True)
        moved[name] = target.as_posix()
    record_embeddings(copy, moved)


def portable_path(value: Any, base: str | Path) -> Any:
    """An absolute path as a path relative to ``base`` (a published model records no absolute path: it would name
    directories of the machine that made it, and be uploaded with it); anything else unchanged."""
    if isinstance(value, str) and value and os.path.isabs(value):
        return os.path.relpath(value, base)
    return value


# ---------------------------------------------------------------------------------------------------------------
# Opening a model by path or hub id; what identifies it
# ---------------------------------------------------------------------------------------------------------------


def locate_model(spec: str | Path) -> Path:
    """The local directory of a published model: ``spec`` is its directory or a hub id (downloaded to the Hugging
    Face cache). One-line errors for a path that is not there and a directory that is not a SPAR model."""
    from spar.model.resolve import HUB_ID

    d = Path(spec).expanduser()
    if not d.exists() and HUB_ID.match(str(spec)) and not str(spec).startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download

            d = Path(snapshot_download(str(spec)))
        except Exception as exc:  # offline, unknown repo, no token: one line, naming the id
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ArtifactError(f"{spec}: not a local directory, and downloading it from the Hugging Face Hub failed "
                                f"({first[:160]})") from None
    if not d.exists():
        raise ArtifactError(f"{d}: no such model directory (give a directory written by `spar publish`, or a hub id)")
    if not d.is_dir():
        raise ArtifactError(f"{d}: a file, not a model directory (give the directory written by `spar publish`)")
    if not is_model_dir(d):
        run_model = RunContext.at(d).artifact("model")
        hint = (f"; did you mean {run_model}, the model published in this run?" if is_model_dir(run_model)
                else " (give a directory written by `spar publish`)")
        raise ArtifactError(f"{d}: not a published SPAR model: no {MODEL_CONFIG}{hint}")
    return d


def published_fingerprint(path: str | Path, config: dict[str, Any] | None = None) -> str:
    """What identifies a published model's vectors: the content of each encoder's files, their settings, the
    variant and dimensions (not μ, which only scales the query side at search time). An index built with the
    model records it; searching it with another model is refused."""
    from spar.core.fingerprint import fingerprint_dict
    from spar.core.fingerprint import directory_fingerprint

    d = Path(path)
    config = config or check_model_dir(d)
    files = {name: [directory_fingerprint(folder) for folder in dict.fromkeys(encoder_dirs(d, name))]
             for name in ENCODER_NAMES}
    return fingerprint_dict({"variant": config["variant"], "dims": config["dims"], "encoders": config["encoders"],
                             "files": files})
