"""Sentence-transformers module that runs SPAR's two encoders on one input and combines their vectors.

A published SPAR model is a ``SentenceTransformer`` whose only top-level module is a
:class:`~sentence_transformers.base.modules.Router` with a ``query`` and a ``document`` route. Each route is one
:class:`SparCombination`: it tokenises the input for the base encoder and for Λ (each with its own tokenizer,
prefix and max length), runs both Hugging Face encoders, pools (``cls``/``mean``), optionally L2-normalises,
scales each vector by its weight and concatenates (``concat``) or adds (``sum``) them:

- query route:    ``[Q(q), μ·QΛ(q)]``  (weights ``1, μ``)
- document route: ``[P(p), PΛ(p)]``    (weights ``1, 1``)

so ``model.similarity`` with the dot product is exactly ``sim(q, p) + μ·simΛ(q, p)``.

On disk a combination is a folder with ``spar_combination.json`` and one plain Hugging Face model folder per
encoder (``base/``, ``lambda/``: ``config.json``, ``model.safetensors``, tokenizer files), so every encoder also
loads with ``transformers.AutoModel``.

A term-based Λ (``projection`` or ``static`` kind) is a :class:`LexicalBag` instead of a Hugging Face model: the
teacher's analyzer and BM25 statistics turn text into term weights (counts for queries, BM25 weights for passages)
and the vector is their weighted sum of term embeddings. Its folder holds ``lexical_bag.json``, ``vocab.txt`` and
``model.safetensors`` (``embeddings`` [V, dim], ``df`` [V]); a projection's random table is not stored but
regenerated from its seed, checked against the checksum ``lexical_bag.json`` records.

This file imports nothing from ``spar`` outside ``try`` blocks: :mod:`spar.publish.model_dir` copies it into every
published model directory as ``spar_modules.py`` (and the analyzer as ``spar_analysis.py``) so that
``SentenceTransformer(path, trust_remote_code=True)`` works where spar is not installed
(sentence-transformers >= 6 asks for ``trust_remote_code=True`` for every module class outside its own package).
With spar installed, :func:`load_sentence_transformer` builds the same model through the public ``Router.load``
API without that flag.

Example::

    >>> from spar.lexical.st_modules import load_sentence_transformer          # doctest: +SKIP
    >>> model = load_sentence_transformer("runs/scifact-sample/model")  # doctest: +SKIP
    >>> q = model.encode_query(["what causes scurvy"])                  # doctest: +SKIP
    >>> p = model.encode_document([("Scurvy", "Scurvy is caused by a lack of vitamin C.")])  # doctest: +SKIP
    >>> model.similarity(q, p)                                          # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import os
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

try:
    from typing import Self
except ImportError:  # Python < 3.11
    from typing_extensions import Self

from sentence_transformers.base.modules.input_module import InputModule

try:  # inside spar
    from spar.lexical.analysis import LuceneAnalyzer, bm25_weights, idf_weights
except ImportError:  # a published model loaded without spar: the copy shipped beside this file
    from .spar_analysis import LuceneAnalyzer, bm25_weights, idf_weights  # type: ignore[no-redef]
try:
    from spar.lexical.random_tables import check_table, sparse_value
except ImportError:
    from .spar_random_tables import check_table, sparse_value  # type: ignore[no-redef]

COMBINATION_CONFIG = "spar_combination.json"
LEXICAL_CONFIG = "lexical_bag.json"
#: The analyzer module shipped beside SHIPPED_MODULE_FILE in published models.
SHIPPED_ANALYSIS_FILE = "spar_analysis.py"
#: The projection's table generator shipped beside it (a term table regenerated from its seed).
SHIPPED_TABLES_FILE = "spar_random_tables.py"
#: The class reference written into published models (the module file is shipped beside them).
SHIPPED_MODULE_FILE = "spar_modules.py"
SHIPPED_CLASS_REF = "spar_modules.SparCombination"
VARIANTS = ("concat", "sum")
POOLINGS = ("cls", "mean")


def format_passage(passage: Any, sep: str, prefix: str = "") -> str:
    """``title [SEP] text`` with the tokenizer's separator, or the text alone (same rule as ``spar.model.encoders``)."""
    if isinstance(passage, str):
        return prefix + passage
    if isinstance(passage, dict):
        passage = (passage.get("title") or "", passage.get("text") or "")
    title, text = passage
    return f"{prefix}{title} {sep} {text}" if title else prefix + text


class LexicalBag(nn.Module):
    """A bag of term embeddings over the teacher's analyzer and BM25 statistics (a ``projection``/``static`` Λ).

    ``side="query"`` weights each term by its count in the text, ``side="passage"`` by its BM25 weight, so the dot
    product of a query and a passage vector is the Λ score ``Σ_t,t' c(t,q) w(t',p) E[t]·E[t']``.

    A projection's table is not stored: ``table`` records how to regenerate it from its seed and the checksum of
    the result (:mod:`spar.lexical.random_tables`, shipped as ``spar_random_tables.py``); a ``gaussian`` table is
    then regenerated dense, a ``sparse`` one kept as its (column, value) pairs per term. ``embeddings`` (a stored
    table, e.g. a learnt one, or a model published before tables were regenerated) is used as given.
    """

    def __init__(self, vocab: list[str], df: torch.Tensor, num_docs: int, avg_length: float, k1: float, b: float,
                 embeddings: torch.Tensor | None, side: str, analyzer: dict[str, Any] | None = None,
                 table: dict[str, Any] | None = None, source: str = LEXICAL_CONFIG):
        super().__init__()
        if side not in ("query", "passage"):
            raise ValueError(f"{source}: side must be 'query' or 'passage', got {side!r}")
        self.table = dict(table) if table else None
        cols = values = None
        if embeddings is None:
            if self.table is None:
                raise ValueError(f"{source}: neither term embeddings nor a table to regenerate")
            arrays = check_table(self.table, vocab, source)
            if len(arrays) == 1:
                embeddings = torch.from_numpy(arrays[0])
            else:
                cols = torch.from_numpy(arrays[0].astype("int64"))
                values = torch.from_numpy(arrays[1].astype("float32") * sparse_value(arrays[1].shape[1]))
        rows = len(vocab) if embeddings is None else embeddings.shape[0]
        if rows != len(vocab) or df.shape[0] != len(vocab):
            raise ValueError(f"{source}: {len(vocab)} terms but a table of {rows} rows, df {tuple(df.shape)}")
        self.vocab, self.index = list(vocab), {t: i for i, t in enumerate(vocab)}
        self.num_docs, self.avg_length, self.k1, self.b, self.side = int(num_docs), float(avg_length), k1, b, side
        self.analyzer_config = dict(analyzer or {})
        self.analyzer = LuceneAnalyzer(self.analyzer_config.get("stemmer", "porter"),
                                       self.analyzer_config.get("stopwords", True))
        self.register_buffer("df", df.to(torch.int64))
        self.embeddings: nn.Parameter | None
        if embeddings is not None:
            self.embeddings = nn.Parameter(embeddings.float(), requires_grad=False)
        else:
            self.register_parameter("embeddings", None)
        self.register_buffer("sparse_cols", cols, persistent=False)
        self.register_buffer("sparse_values", values, persistent=False)
        self.idf = idf_weights(df.numpy(), self.num_docs).astype("float32")

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1]) if self.embeddings is not None else int(self.table["dim"])  # type: ignore[index]

    def with_side(self, side: str) -> "LexicalBag":
        """This bag for ``side``, holding the very same term table, statistics and analyzer (the query and document
        routes of a model share one copy in memory: ``parameters()`` counts the table once)."""
        if side not in ("query", "passage"):
            raise ValueError(f"{LEXICAL_CONFIG}: side must be 'query' or 'passage', got {side!r}")
        if side == self.side:
            return self
        twin = copy.copy(self)  # the same tensors and Python objects in a second module with its own registries
        twin._parameters, twin._buffers, twin._modules = (self._parameters.copy(), self._buffers.copy(),
                                                          self._modules.copy())
        twin.side = side
        return twin

    def bags(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """``F.embedding_bag`` inputs of each text: term ids, offsets, weights (counts or BM25 weights)."""
        import numpy as np

        ids, offsets, weights = [], [], []
        for text in texts:
            terms = self.analyzer.analyze(text)
            counts: dict[int, int] = {}
            for term in terms:
                i = self.index.get(term)
                if i is not None:
                    counts[i] = counts.get(i, 0) + 1
            offsets.append(len(ids))
            term_ids = sorted(counts)
            tf = np.array([counts[i] for i in term_ids], dtype=np.float64)
            if self.side == "passage" and term_ids:
                tf = bm25_weights(tf, np.full(len(tf), len(terms)), self.idf[term_ids], self.avg_length, self.k1,
                                  self.b)
            ids.extend(term_ids)
            weights.extend(tf.tolist())
        return {"indices": torch.tensor(ids, dtype=torch.long), "offsets": torch.tensor(offsets, dtype=torch.long),
                "weights": torch.tensor(weights, dtype=torch.float32)}

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        if self.embeddings is not None:
            return torch.nn.functional.embedding_bag(indices, self.embeddings, offsets, mode="sum",
                                                     per_sample_weights=weights)
        # A sparse table: every (term, weight) of a bag adds weight·value at the term's columns.
        assert self.sparse_cols is not None and self.sparse_values is not None
        out = torch.zeros(offsets.numel(), self.dim, dtype=torch.float32, device=weights.device)
        if indices.numel():
            bag = torch.bucketize(torch.arange(indices.numel(), device=offsets.device), offsets, right=True) - 1
            cols = self.sparse_cols[indices]
            out.index_put_((bag.unsqueeze(1).expand_as(cols).reshape(-1), cols.reshape(-1)),
                           (weights.unsqueeze(1) * self.sparse_values[indices]).reshape(-1), accumulate=True)
        return out

    def save(self, path: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "vocab.txt"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(self.vocab) + "\n")
        tensors = {"df": self.df.cpu().contiguous()}
        if self.table is None:  # a stored table; a regenerated one is its spec in lexical_bag.json
            assert self.embeddings is not None
            tensors["embeddings"] = self.embeddings.detach().cpu().contiguous()
        save_file(tensors, os.path.join(path, "model.safetensors"))
        with open(os.path.join(path, LEXICAL_CONFIG), "w") as fh:
            json.dump({"side": self.side, "num_docs": self.num_docs, "avg_length": self.avg_length, "k1": self.k1,
                       "b": self.b, "analyzer": self.analyzer_config, "dim": self.dim,
                       **({"table": self.table} if self.table else {})}, fh, indent=2)

    @classmethod
    def load(cls, path: str, side: str | None = None) -> "LexicalBag":
        """The bag saved in ``path``; ``side`` overrides the saved one (both routes may share one folder)."""
        from safetensors.torch import load_file

        for name in (LEXICAL_CONFIG, "vocab.txt", "model.safetensors"):
            if not os.path.exists(os.path.join(path, name)):
                raise FileNotFoundError(f"{os.path.join(path, name)}: missing (the SPAR model directory is incomplete)")
        with open(os.path.join(path, LEXICAL_CONFIG)) as fh:
            config = json.load(fh)
        with open(os.path.join(path, "vocab.txt"), encoding="utf-8") as fh:
            vocab = fh.read().split("\n")[:-1]
        tensors = load_file(os.path.join(path, "model.safetensors"))
        table = config.get("table")
        if "embeddings" not in tensors and not table:
            raise ValueError(f"{os.path.join(path, 'model.safetensors')}: no 'embeddings' tensor and "
                             f"{LEXICAL_CONFIG} records no table to regenerate")
        return cls(vocab, tensors["df"], config["num_docs"], config["avg_length"], config["k1"], config["b"],
                   tensors.get("embeddings"), side or config["side"], config.get("analyzer"),
                   table=None if "embeddings" in tensors else table, source=os.path.join(path, LEXICAL_CONFIG))


def _check_encoder_spec(spec: dict[str, Any]) -> dict[str, Any]:
    required = ("name", "pooling", "normalize", "max_length")
    missing = [key for key in required if key not in spec]
    if missing:
        raise ValueError(f"{COMBINATION_CONFIG}: encoder entry {spec} lacks {missing}")
    if spec.get("type") == "lexical":
        return {"prefix": "", "weight": 1.0, "input": "query", **spec}
    if spec["pooling"] not in POOLINGS:
        raise ValueError(f"{COMBINATION_CONFIG}: unknown pooling {spec['pooling']!r} (expected one of {POOLINGS})")
    out = {"prefix": "", "weight": 1.0, "input": "query", **spec}
    if out["input"] not in ("query", "passage"):
        raise ValueError(f"{COMBINATION_CONFIG}: 'input' must be 'query' or 'passage', got {out['input']!r}")
    return out


class SparCombination(InputModule):
    """Runs several Hugging Face encoders on the same input and combines their pooled, weighted vectors.

    Args:
        encoders: one dict per encoder, in output order: ``name`` (sub-folder), ``pooling`` (``cls``/``mean``),
            ``normalize`` (bool), ``max_length`` (tokens), ``prefix`` (text prepended), ``weight`` (the vector is
            multiplied by it: μ for Λ on the query side), ``input`` (``query``: plain text; ``passage``:
            ``(title, text)`` pairs are formatted ``title [SEP] text`` with each encoder's own separator).
        variant: ``concat`` (vectors side by side) or ``sum`` (added; needs equal dimensions).
        models: the loaded ``transformers`` models by name (``load`` fills these).
        tokenizers: the matching tokenizers by name.
    """

    config_keys = ["variant", "encoders"]
    config_file_name = COMBINATION_CONFIG
    save_in_root = False

    def __init__(
        self,
        encoders: list[dict[str, Any]],
        variant: str = "concat",
        models: dict[str, nn.Module] | None = None,
        tokenizers: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"{COMBINATION_CONFIG}: unknown variant {variant!r} (expected one of {VARIANTS})")
        self.variant = variant
        self.encoders = [_check_encoder_spec(dict(spec)) for spec in encoders]
        names = [spec["name"] for spec in self.encoders]
        if len(set(names)) != len(names):
            raise ValueError(f"{COMBINATION_CONFIG}: duplicate encoder names {names}")
        models = models or {}
        tokenizers = tokenizers or {}
        absent = [n for n in names if n not in models or (n not in tokenizers and not self._lexical(n, encoders))]
        if absent:
            raise ValueError(f"SparCombination: no model/tokenizer given for {absent}")
        self.models = nn.ModuleDict({n: models[n] for n in names})
        self.tokenizers = {n: tokenizers.get(n) for n in names}
        if variant == "sum":
            dims = {n: self._hidden_size(n) for n in names}
            if len(set(dims.values())) > 1:
                raise ValueError(f"variant 'sum' needs encoders of equal dimension, got {dims}")

    @staticmethod
    def _lexical(name: str, encoders: list[dict[str, Any]]) -> bool:
        return any(spec["name"] == name and spec.get("type") == "lexical" for spec in encoders)

    # -- sentence-transformers interface -------------------------------------------------------------------
    @property
    def tokenizer(self):
        """The first encoder's tokenizer (what sentence-transformers shows as the model's tokenizer)."""
        return self.tokenizers[self.encoders[0]["name"]]

    @property
    def max_seq_length(self) -> int:
        return max(int(spec["max_length"]) for spec in self.encoders)

    def _hidden_size(self, name: str) -> int:
        model = self.models[name]
        return model.dim if isinstance(model, LexicalBag) else int(model.config.hidden_size)

    def get_embedding_dimension(self) -> int:
        dims = [self._hidden_size(spec["name"]) for spec in self.encoders]
        return sum(dims) if self.variant == "concat" else dims[0]

    def set_weight(self, name: str, weight: float) -> None:
        """Change one encoder's weight (e.g. μ of ``lambda`` on the query route) in place."""
        for spec in self.encoders:
            if spec["name"] == name:
                spec["weight"] = float(weight)
                return
        raise KeyError(f"no encoder named {name!r}; have {[s['name'] for s in self.encoders]}")

    def preprocess(
        self, inputs: Sequence[Any], prompt: str | None = None, **kwargs
    ) -> dict[str, torch.Tensor | Any]:
        """Tokenise every input once per encoder; features are keyed ``<encoder>.<tensor name>``."""
        features: dict[str, Any] = {}
        for spec in self.encoders:
            name, tokenizer = spec["name"], self.tokenizers[spec["name"]]
            prefix = (prompt or "") + spec["prefix"]
            if spec.get("type") == "lexical":
                texts = [prefix + format_passage(item, " ") if not isinstance(item, str) else prefix + item
                         for item in inputs]
                for key, value in self.models[name].bags(texts).items():
                    features[f"{name}.{key}"] = value
                continue
            assert tokenizer is not None, f"no tokenizer for encoder {name!r}"
            if spec["input"] == "passage":
                sep = tokenizer.sep_token or " "
                texts = [format_passage(item, sep, prefix) for item in inputs]
            else:
                texts = [prefix + (item if isinstance(item, str) else " ".join(item)) for item in inputs]
            batch = tokenizer(texts, padding=True, truncation=True, max_length=int(spec["max_length"]),
                              return_tensors="pt")
            for key in ("input_ids", "attention_mask", "token_type_ids"):
                if key in batch:
                    features[f"{name}.{key}"] = batch[key]
        return features

    def forward(self, features: dict[str, torch.Tensor | Any], **kwargs) -> dict[str, torch.Tensor | Any]:
        vectors = []
        for spec in self.encoders:
            name = spec["name"]
            if spec.get("type") == "lexical":
                bag = {key: features[f"{name}.{key}"] for key in ("indices", "offsets", "weights")}
                vec = self.models[name](**bag).float()
                weight = float(spec["weight"])
                vectors.append(vec if weight == 1.0 else vec * weight)
                continue
            inputs = {key: features[f"{name}.{key}"] for key in ("input_ids", "attention_mask", "token_type_ids")
                      if f"{name}.{key}" in features}
            hidden = self.models[name](**inputs).last_hidden_state
            mask = inputs["attention_mask"]
            if spec["pooling"] == "cls":
                vec = hidden[:, 0]
            else:
                m = mask.unsqueeze(-1).to(hidden.dtype)
                vec = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            vec = vec.float()
            if spec["normalize"]:
                vec = torch.nn.functional.normalize(vec, dim=-1)
            weight = float(spec["weight"])
            vectors.append(vec if weight == 1.0 else vec * weight)
        if self.variant == "concat":
            combined = torch.cat(vectors, dim=-1)
        else:
            combined = torch.stack(vectors, dim=0).sum(0)
        features["sentence_embedding"] = combined
        return features

    # -- persistence ----------------------------------------------------------------------------------------
    def get_config_dict(self) -> dict[str, Any]:
        """As saved by :meth:`save`: every encoder in the route's own folder (no shared ``path``)."""
        return {"variant": self.variant,
                "encoders": [{k: v for k, v in spec.items() if k != "path"} for spec in self.encoders]}

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        os.makedirs(output_path, exist_ok=True)
        for spec in self.encoders:
            target = os.path.join(output_path, spec["name"])
            if spec.get("type") == "lexical":
                self.models[spec["name"]].save(target)
                continue
            tokenizer = self.tokenizers[spec["name"]]
            assert tokenizer is not None, f"no tokenizer for encoder {spec['name']!r}"
            self.models[spec["name"]].save_pretrained(target, safe_serialization=True)
            tokenizer.save_pretrained(target)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs,
    ) -> Self:
        from transformers import AutoModel, AutoTokenizer

        hub = {"token": token, "cache_folder": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub)
        if not config:
            raise FileNotFoundError(f"{os.path.join(str(model_name_or_path), subfolder, COMBINATION_CONFIG)}: "
                                    "missing (not a SPAR model route)")
        model_kwargs = dict(kwargs.get("model_kwargs") or {})
        trust_remote_code = bool(kwargs.get("trust_remote_code", False))  # for custom encoder architectures
        models, tokenizers = {}, {}
        for spec in config["encoders"]:
            name, sub = spec["name"], _encoder_subfolder(subfolder, spec)
            if spec.get("type") == "lexical":
                local = cls.load_dir_path(model_name_or_path, subfolder=sub, **hub)
                shared = _claim_shared(spec, local)
                if shared:
                    models[name] = shared[0].with_side(spec.get("input"))
                    continue
                models[name] = LexicalBag.load(local, side=spec.get("input"))
                _offer_shared(spec, local, models[name], None)
                continue
            for required in ("config.json", "model.safetensors"):
                if cls.load_file_path(model_name_or_path, filename=required, subfolder=sub, **hub) is None:
                    raise FileNotFoundError(f"{os.path.join(str(model_name_or_path), sub, required)}: missing "
                                            "(the SPAR model directory is incomplete)")
            local = cls.load_dir_path(model_name_or_path, subfolder=sub, **hub)
            claimed = _claim_shared(spec, local)
            if claimed:
                models[name], tokenizers[name] = claimed
                continue
            models[name] = AutoModel.from_pretrained(local, use_safetensors=True, trust_remote_code=trust_remote_code,
                                                     **model_kwargs)
            tokenizers[name] = AutoTokenizer.from_pretrained(local, trust_remote_code=trust_remote_code)
            _offer_shared(spec, local, models[name], tokenizers[name])
        return cls(config["encoders"], config.get("variant", "concat"), models, tokenizers)


#: Encoders that both routes of a model name (one folder, ``"path"`` in each route's config), loaded by the first
#: route and not yet taken by the second: ``Router.load`` loads each route on its own, and without this the query and
#: document routes held two copies of the base (and of a term table) in memory. The second route takes the entry
#: (so a later load of the same directory gets its own copy); the module is held weakly, so a failed load leaves
#: nothing alive.
_SHARED: dict[str, tuple[Any, Any]] = {}


def _claim_shared(spec: dict[str, Any], local: str) -> tuple[nn.Module, Any] | None:
    if not spec.get("path"):
        return None
    entry = _SHARED.pop(os.path.realpath(local), None)
    if entry is None:
        return None
    module = entry[0]()
    return (module, entry[1]) if module is not None else None


def _offer_shared(spec: dict[str, Any], local: str, module: nn.Module, tokenizer: Any) -> None:
    if spec.get("path"):
        _SHARED[os.path.realpath(local)] = (weakref.ref(module), tokenizer)


def _encoder_subfolder(route: str, spec: dict[str, Any]) -> str:
    """Where an encoder of a route lives: ``<route>/<name>``, or the shared folder ``path`` (relative to the
    route's parent: the model directory) that both routes name when the encoder's sides hold the same weights."""
    if spec.get("path"):
        parent = route.rpartition("/")[0]
        return f"{parent}/{spec['path']}" if parent else spec["path"]
    return f"{route}/{spec['name']}" if route else spec["name"]


def load_sentence_transformer(path: str, mu: float | None = None, device: str | None = None, **kwargs):
    """Load a published SPAR model as a ``SentenceTransformer`` with spar's own module class (no
    ``trust_remote_code`` needed); ``mu`` overrides the query-side weight of Λ."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Router

    router = Router.load(str(path), module_classes={SHIPPED_CLASS_REF: SparCombination,
                                                   f"{__name__}.SparCombination": SparCombination})
    model = SentenceTransformer(modules=[router], device=device, similarity_fn_name="dot", **kwargs)
    if mu is not None:
        set_query_mu(model, mu)
    return model


def set_query_mu(model, mu: float, lambda_name: str = "lambda") -> None:
    """Set μ (the weight of Λ's query vector) of a loaded SPAR ``SentenceTransformer`` in place."""
    router = model[0]
    for module in router.sub_modules["query"]:
        if hasattr(module, "set_weight"):
            module.set_weight(lambda_name, mu)
            return
    raise ValueError("not a SPAR model: the query route has no SparCombination module")
