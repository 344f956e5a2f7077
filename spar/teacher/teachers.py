"""Sparse teachers (SPAR §4.1): a Lucene BM25 index or a learned-sparse impact index of the corpus, via Pyserini.

Both teachers answer ``search(queries, k)`` with ``{query_id: [(passage_id, score), ...]}`` ranked best first:

- :class:`BM25Searcher` wraps Pyserini's ``LuceneSearcher`` (``set_bm25(k1, b)``, ``batch_search``) over an index
  built by :func:`build_bm25_index` from ``passages.arrow``: a JsonCollection of ``{"id", "contents"}`` with
  contents = the ``fields`` joined by a space (title + " " + text by default, Pyserini's BEIR "flat" setting), split
  into several files because Anserini reads one file per thread. Neither raw JSON nor contents are stored: labelling
  only needs ids and scores, and hits are materialised faster without stored documents (~509 vs ~300 q/s measured
  with k=100 on 2 cores).
- :class:`ImpactTeacher` (uniCOIL-style): passages and queries are encoded by a learned-sparse model
  (:class:`SparseEncoder`; SPLADE ``weight(t) = max_i log(1 + relu(logit_i(t)))`` over the sequence, or uniCOIL
  ``relu(w·h_i)`` per token, max-pooled for passages and summed for queries as in Pyserini), weights are quantised
  to ``int(round(w * quantization))`` and indexed by
  Anserini as an impact index (JsonVectorCollection, ``-impact -pretokenized``). Query scores are then exactly the
  dot product of the integer query and document weights.

Pyserini is imported only through :func:`spar.core.java.pyserini_module` (the JVM must be started with Java 21 first).
:class:`LuceneBM25` and :class:`LuceneImpact` are the two as registered teachers (:mod:`spar.teacher.registry`).

Example (skipped in the doctest run: it needs a sampled run's ``passages.arrow`` and starts the JVM)::

    >>> from pathlib import Path
    >>> from spar.teacher.teachers import build_bm25_index, BM25Searcher
    >>> index = build_bm25_index(Path("runs/x/queries/passages.arrow"), Path("/tmp/bm25"), threads=2)  # doctest: +SKIP
    >>> BM25Searcher(index).search([("q1", "salient phrase retrieval")], k=3)                           # doctest: +SKIP
    {'q1': [('4983', 7.31), ('1201', 6.9), ('77', 6.52)]}
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence

from spar.core.errors import ArtifactError, ConfigError
from spar.core.java import pyserini_module, start_jvm
from spar.data.passages import PassagesTable, passage_contents
from spar.teacher.registry import Searcher, SparseTeacher

log = logging.getLogger(__name__)

PASSAGE_FIELDS = ("title", "text")
#: Anserini reads one collection file per indexing thread; this many files per thread balances the load.
FILES_PER_THREAD = 2


# ----------------------------------------------------------------------------------------------------------------
# Collections and indexing
# ----------------------------------------------------------------------------------------------------------------


def _check_fields(fields: Sequence[str]) -> list[str]:
    fields = list(fields)
    unknown = [f for f in fields if f not in PASSAGE_FIELDS]
    if not fields or unknown:
        raise ConfigError(f"label.fields={fields}: each field must be one of {list(PASSAGE_FIELDS)}")
    return fields


class _SplitWriter:
    """Writes JSON lines round-robin in contiguous blocks over ``n`` files (one Anserini thread reads each)."""

    def __init__(self, directory: Path, n_files: int, total: int):
        self.handles = [(directory / f"part-{i:03d}.jsonl").open("w", encoding="utf-8") for i in range(n_files)]
        self.block = max(1, math.ceil(total / n_files))
        self.written = 0

    def write(self, record: dict[str, Any]) -> None:
        handle = self.handles[min(self.written // self.block, len(self.handles) - 1)]
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.written += 1

    def close(self) -> None:
        for handle in self.handles:
            handle.close()


def run_index_collection(collection: str, input_dir: Path, index_dir: Path, threads: int,
                         extra: Sequence[str] = (), heap: str = "4g") -> None:
    """Run Anserini's ``IndexCollection`` in this process (the JVM is already up for searching anyway)."""
    start_jvm(heap)
    pyserini_module("pyserini.index.lucene", heap)  # loads Pyserini's Java bindings the sanctioned way
    from jnius import autoclass

    args = ["-collection", collection, "-input", str(input_dir), "-index", str(index_dir),
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads), "-optimize", "-quiet", *extra]
    log.info("IndexCollection %s", " ".join(args))
    autoclass("io.anserini.index.IndexCollection").main(args)


#: Below this much free space, a Lucene index that cannot be read was cut short by a full disk.
LOW_DISK_BYTES = 64 << 20


def index_document_count(index_dir: Path) -> int:
    from jnius import autoclass

    start_jvm()
    reader_utils = autoclass("io.anserini.index.IndexReaderUtils")
    reader = reader_utils.getReader(str(index_dir))
    try:
        return int(reader.numDocs())
    finally:
        reader.close()


def _verify_index(index_dir: Path, expected: int) -> None:
    try:
        found = index_document_count(index_dir)
    except Exception as exc:  # jnius.JavaException: Anserini logs its IOException and returns without an index
        import errno
        import shutil

        if shutil.disk_usage(index_dir).free < LOW_DISK_BYTES:
            raise OSError(errno.ENOSPC, "No space left on device", str(index_dir)) from None
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"{index_dir}: Anserini wrote no readable index ({first}; see its log above)") from None
    if found != expected:
        raise ArtifactError(f"{index_dir}: Anserini indexed {found:,} of {expected:,} passages (see its log above)")


def _build_lucene_index(passages_arrow: Path, index_dir: Path, collection: str,
                        documents: Callable[[dict[str, list]], Iterable[dict[str, Any]]], threads: int,
                        extra: Sequence[str] = (), heap: str = "4g", batch_rows: int = 4096) -> Path:
    """Write ``documents(batch)`` of every passage batch as a JSON collection split over Anserini's threads, run
    ``IndexCollection`` on it (``collection`` type, ``extra`` flags) into ``index_dir`` and verify the count."""
    passages_arrow, index_dir = Path(passages_arrow), Path(index_dir)
    passages = PassagesTable(passages_arrow)
    total = len(passages)
    index_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=index_dir.parent, prefix=f".{index_dir.name}-collection-") as tmp:
        writer = _SplitWriter(Path(tmp), max(1, min(threads * FILES_PER_THREAD, total)), total)
        try:
            for batch in passages.iter_columns(batch_rows=batch_rows):
                for record in documents(batch):
                    writer.write(record)
        finally:
            writer.close()
        run_index_collection(collection, Path(tmp), index_dir, threads, extra=extra, heap=heap)
    _verify_index(index_dir, total)
    return index_dir


def build_bm25_index(passages_arrow: Path, index_dir: Path, threads: int = 2,
                     fields: Sequence[str] = ("title", "text"), heap: str = "4g") -> Path:
    """Build a Lucene BM25 index of ``passages.arrow`` in ``index_dir`` (created; must not hold another index).

    Documents are ``{"id": passage id, "contents": fields joined by " "}``; the index stores neither raw JSON nor
    contents (ids only), is merged into one segment (``-optimize``) and is verified to hold every passage.
    """
    fields = _check_fields(fields)

    def documents(batch: dict[str, list]) -> Iterator[dict[str, Any]]:
        for pid, contents in zip(batch["id"], passage_contents(fields, batch)):
            yield {"id": pid, "contents": contents}

    return _build_lucene_index(passages_arrow, index_dir, "JsonCollection", documents, threads, heap=heap)


# ----------------------------------------------------------------------------------------------------------------
# BM25
# ----------------------------------------------------------------------------------------------------------------

Hits = dict[str, list[tuple[str, float]]]


class BM25Searcher:
    """Pyserini ``LuceneSearcher`` with BM25(k1, b); ``search`` runs one multi-threaded ``batch_search``."""

    def __init__(self, index_dir: str | Path, k1: float = 0.9, b: float = 0.4, threads: int = 2, heap: str = "4g"):
        lucene = pyserini_module("pyserini.search.lucene", heap)
        if not any(Path(index_dir).glob("segments_*")):
            raise ArtifactError(f"{index_dir}: not a Lucene index (run `spar label` to build the teacher index)")
        self.index_dir = Path(index_dir)
        self.searcher = lucene.LuceneSearcher(str(index_dir))
        self.searcher.set_bm25(float(k1), float(b))
        self.threads = threads
        self.num_docs = int(self.searcher.num_docs)

    def search(self, queries: Sequence[tuple[str, str]], k: int) -> Hits:
        """Top-``k`` hits of each (query id, text); query ids must be unique within the call."""
        if not queries:
            return {}
        qids = [qid for qid, _ in queries]
        results = self.searcher.batch_search([text for _, text in queries], qids, int(k), self.threads)
        return {qid: [(hit.docid, hit.score) for hit in results[qid]] for qid in qids}


# ----------------------------------------------------------------------------------------------------------------
# Learned sparse (impact) teacher
# ----------------------------------------------------------------------------------------------------------------


class SparseEncoder:
    """Learned-sparse term weights from a SPLADE (any ``*ForMaskedLM``) or uniCOIL checkpoint.

    ``kind="auto"`` picks uniCOIL when the name or config says so, else SPLADE on the masked-LM head. SPLADE never
    makes special tokens ([CLS], [SEP], [PAD], ...) terms; uniCOIL keeps [SEP], as Pyserini does.

    Example::

        >>> enc = SparseEncoder("splade-tiny")
        >>> weights = enc.encode_quantized(["dense retrieval"], 100)[0]
        >>> weights["retrieval"] > 100 and weights["dense"] > 100 and all(isinstance(w, int) for w in weights.values())
        True
    """

    def __init__(self, model: str = "splade-tiny", kind: Literal["auto", "splade", "unicoil"] = "auto",
                 device: str = "cpu", trust_remote_code: bool = False):
        import torch  # noqa: F401
        from transformers import AutoConfig, AutoTokenizer

        from spar.model.resolve import resolve_model

        path = resolve_model(model)
        self.name = model
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        architectures = [a.lower() for a in (getattr(config, "architectures", None) or [])]
        if kind == "auto":
            unicoil = "unicoil" in str(model).lower() or any("unicoil" in a for a in architectures)
            kind = "unicoil" if unicoil else "splade"
        self.kind = kind
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if kind == "splade":
            from transformers import AutoModelForMaskedLM

            self.model, info = AutoModelForMaskedLM.from_pretrained(
                path, output_loading_info=True, trust_remote_code=trust_remote_code)
            missing = [k for k in info.get("missing_keys", []) if "cls." in k or "lm_head" in k or "predictions" in k]
            if missing:
                raise ConfigError(f"label.impact_model={model!r} has no masked-LM head ({missing[0]} missing): "
                                  "not a SPLADE model (set label.impact_model_type=unicoil for uniCOIL)")
        else:
            self.model = _unicoil_model(path)
        self.model.to(device).eval()
        self.device = device
        vocab = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        self.vocab = vocab
        self.special_ids = set(self.tokenizer.all_special_ids)

    def _batch_weights(self, texts: Sequence[str], max_length: int):
        """[batch, vocab] SPLADE weights, or a list of {token_id: weight} for uniCOIL."""
        import torch

        inputs = self.tokenizer(list(texts), max_length=max_length, truncation=True, padding=True,
                                return_tensors="pt").to(self.device)
        with torch.inference_mode():
            if self.kind == "splade":
                logits = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
                # log(1 + relu(x)) is monotone, so max over tokens commutes with it: one pass over the logits.
                padding = inputs["attention_mask"].unsqueeze(-1) == 0
                best = logits.masked_fill_(padding, float("-inf")).max(dim=1).values
                return torch.log1p(torch.relu(best))
            token_weights = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
            return inputs["input_ids"], token_weights.squeeze(-1) * inputs["attention_mask"]

    def encode(self, texts: Sequence[str], max_length: int = 256, batch_size: int = 32,
               role: Literal["passage", "query"] = "passage") -> list[dict[str, float]]:
        """{term: weight > 0} for each text.

        uniCOIL follows Pyserini's UniCoilDocumentEncoder / UniCoilQueryEncoder exactly: every token but [CLS] and
        padding is a term ([SEP] included); a passage keeps a repeated token's largest weight, a query sums them.
        """
        import torch

        vocab, special = self.vocab, self.special_ids
        cls_id = self.tokenizer.cls_token_id
        # Keep the [batch, length, vocab] logits under ~256 MB.
        micro = (max(1, min(batch_size, (1 << 26) // max(1, max_length * len(vocab)))) if self.kind == "splade"
                 else batch_size)
        # Batch texts of similar length together (less padding); results go back to the input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[dict[str, float]] = [{} for _ in texts]
        for start in range(0, len(order), micro):
            positions = order[start:start + micro]
            chunk = [texts[i] for i in positions]
            if self.kind == "splade":
                weights = self._batch_weights(chunk, max_length)
                rows, ids = torch.nonzero(weights > 0, as_tuple=True)
                values = weights[rows, ids].tolist()
                for r, i, w in zip(rows.tolist(), ids.tolist(), values):
                    if i not in special:
                        out[positions[r]][vocab[i]] = w
            else:
                input_ids, weights = self._batch_weights(chunk, max_length)
                for position, ids, row in zip(positions, input_ids.tolist(), weights.tolist()):
                    terms = out[position]
                    for i, w in zip(ids, row):
                        if i == cls_id or w <= 0:  # padding has weight 0 (masked)
                            continue
                        term = vocab[i]
                        if role == "query":
                            terms[term] = terms.get(term, 0.0) + w
                        elif w > terms.get(term, 0.0):
                            terms[term] = w
        return out

    def encode_quantized(self, texts: Sequence[str], quantization: int, max_length: int = 256,
                         batch_size: int = 32, role: Literal["passage", "query"] = "passage") -> list[dict[str, int]]:
        """Integer impacts ``int(round(w * quantization))``; terms that round to 0 are dropped."""
        return [quantize(v, quantization) for v in self.encode(texts, max_length, batch_size, role)]


def quantize(weights: dict[str, float], quantization: int) -> dict[str, int]:
    out = {}
    for term, w in weights.items():
        q = int(round(w * quantization))
        if q > 0:
            out[term] = q
    return out


def _unicoil_model(path):
    """uniCOIL (Lin & Ma, 2021): BERT + a linear token-weight head ``tok_proj``, as in Pyserini's UniCoilEncoder."""
    import torch
    from transformers import BertConfig, BertModel, PreTrainedModel

    class UniCoilEncoder(PreTrainedModel):
        config_class = BertConfig
        base_model_prefix = "coil_encoder"

        def __init__(self, config: BertConfig):
            super().__init__(config)
            self.bert = BertModel(config)
            self.tok_proj = torch.nn.Linear(config.hidden_size, 1)
            self.post_init()

        def forward(self, input_ids, attention_mask=None):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return torch.relu(self.tok_proj(hidden))

    model, info = UniCoilEncoder.from_pretrained(path, output_loading_info=True)
    if any(k.startswith("tok_proj") for k in info.get("missing_keys", [])):
        raise ConfigError(f"{path}: no 'tok_proj' weights: not a uniCOIL checkpoint")
    return model


def build_impact_index(passages_arrow: Path, index_dir: Path, encoder: SparseEncoder, quantization: int = 100,
                       threads: int = 2, fields: Sequence[str] = ("title", "text"), max_length: int = 256,
                       batch_size: int = 32, heap: str = "4g", progress: bool = True) -> Path:
    """Encode every passage with ``encoder`` and build an Anserini impact index (``-impact -pretokenized``)."""
    from spar.core.console import progress_bar

    fields = _check_fields(fields)
    bar = progress_bar(total=len(PassagesTable(passages_arrow)), desc=f"encoding passages ({encoder.name})",
                       unit=" passages", enabled=progress)

    def documents(batch: dict[str, list]) -> Iterator[dict[str, Any]]:
        texts = passage_contents(fields, batch)
        for pid, vector in zip(batch["id"], encoder.encode_quantized(texts, quantization, max_length, batch_size)):
            yield {"id": pid, "contents": "", "vector": vector}
        bar.update(len(texts))

    try:
        return _build_lucene_index(passages_arrow, index_dir, "JsonVectorCollection", documents, threads,
                                   extra=["-impact", "-pretokenized"], heap=heap, batch_rows=max(batch_size, 256))
    finally:
        bar.close()


class ImpactTeacher:
    """Searches an impact index with queries encoded by the same :class:`SparseEncoder` (integer weights).

    Pyserini 1.6's ``LuceneImpactSearcher`` takes query *text* and encodes it itself, one query at a time, with its
    own encoder, and drops query terms whose idf is <= ``min_idf`` (0 by default, so terms in every document). A
    pre-encoded query is a ``Map<String, Integer>`` handed to the wrapped Java ``SimpleImpactSearcher``
    (``search(Map, k)`` / ``batch_search(List<Map>, qids, k, threads)``), which is what ``LuceneImpactSearcher``
    calls internally. We call it directly with batch-encoded weights, so every score is exactly
    ``sum_t q(t) * d(t)`` over the integer weights.
    """

    def __init__(self, index_dir: str | Path, encoder: SparseEncoder, quantization: int = 100, threads: int = 2,
                 max_length: int = 64, batch_size: int = 32, heap: str = "4g"):
        impact = pyserini_module("pyserini.search.lucene._impact_searcher", heap)
        if not any(Path(index_dir).glob("segments_*")):
            raise ArtifactError(f"{index_dir}: not a Lucene index (run `spar label` to build the teacher index)")
        self.searcher = impact.JSimpleImpactSearcher(str(index_dir))
        self._JArrayList, self._JHashMap, self._JInt = impact.JArrayList, impact.JHashMap, impact.JInt
        self.encoder, self.quantization = encoder, quantization
        self.threads, self.max_length, self.batch_size = threads, max_length, batch_size
        self.num_docs = int(self.searcher.get_total_num_docs())

    def encode_queries(self, texts: Sequence[str]) -> list[dict[str, int]]:
        return self.encoder.encode_quantized(list(texts), self.quantization, self.max_length, self.batch_size,
                                             role="query")

    def search(self, queries: Sequence[tuple[str, str]], k: int) -> Hits:
        if not queries:
            return {}
        qids = [qid for qid, _ in queries]
        jqueries, jqids = self._JArrayList(), self._JArrayList()
        for qid, vector in zip(qids, self.encode_queries([text for _, text in queries])):
            if not vector:  # no term survived quantisation: nothing can match
                continue
            jquery = self._JHashMap()
            for term, weight in vector.items():
                jquery.put(term, self._JInt(weight))
            jqueries.add(jquery)
            jqids.add(qid)
        results = self.searcher.batch_search(jqueries, jqids, int(k), int(self.threads)) if jqids.size() else {}
        hits: Hits = {}
        for qid in qids:
            found = results.get(qid)
            hits[qid] = [(hit.docid, hit.score) for hit in found] if found is not None else []
        return hits


# ----------------------------------------------------------------------------------------------------------------
# The registered teachers (spar.teacher.registry)
# ----------------------------------------------------------------------------------------------------------------


def impact_encoder(section) -> SparseEncoder:
    """The impact teacher's encoder as the ``label`` section configures it (``impact_device: auto``: cuda if any)."""
    device = section.impact_device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return SparseEncoder(section.impact_model, section.impact_model_type, device=device)


class LuceneBM25(SparseTeacher):
    """``label.teacher: bm25`` on Pyserini: a Lucene index of ``label.fields`` searched with BM25(k1, b)."""

    name, engine = "bm25", "lucene"
    bm25_index = True
    term_weighting = "bm25"

    def index_settings(self) -> dict[str, Any]:
        return {"teacher": self.name, "fields": list(self.section.fields)}

    def label_settings(self) -> dict[str, Any]:
        from spar.core.stage import settings

        # runtime-only options (threads, heap, parts, device) never change the labels; nor do the impact options
        return {k: v for k, v in settings(self.section).items() if not k.startswith("impact_")}

    def describe(self) -> str:
        s = self.section
        return f"Pyserini Lucene BM25, k1={s.k1}, b={s.b}, fields {'+'.join(s.fields)}"

    def start(self) -> None:
        start_jvm(self.section.java_heap)

    def build_index(self, passages_arrow: Path, index_dir: Path) -> dict[str, Any]:
        s = self.section
        build_bm25_index(passages_arrow, index_dir, s.threads, s.fields, heap=s.java_heap)
        return {"teacher": self.name}

    def open(self, index_dir, passages_arrow=None, threads=None, progress=False) -> Searcher:
        s = self.section
        return BM25Searcher(index_dir, s.k1, s.b, threads or s.threads, heap=s.java_heap)


class LuceneImpact(SparseTeacher):
    """``label.teacher: impact``: passages and queries as learned-sparse term weights of ``label.impact_model``
    (:class:`SparseEncoder`), an Anserini impact index searched with integer dot products (:class:`ImpactTeacher`)."""

    name, engine = "impact", "lucene"

    def index_settings(self) -> dict[str, Any]:
        from spar.model.resolve import model_fingerprint

        s = self.section
        return {"teacher": self.name, "fields": list(s.fields), "model": model_fingerprint(s.impact_model),
                "model_type": s.impact_model_type, "quantization": s.impact_quantization,
                "max_length": s.impact_max_length}

    def label_settings(self) -> dict[str, Any]:
        from spar.core.stage import settings
        from spar.model.resolve import model_fingerprint

        config = {k: v for k, v in settings(self.section).items() if k not in ("k1", "b")}
        config["impact_model"] = model_fingerprint(self.section.impact_model)
        return config

    def models(self) -> dict[str, str]:
        return {"label.impact_model": self.section.impact_model}

    def describe(self) -> str:
        return f"impact index of {self.section.impact_model}"

    def start(self) -> None:
        start_jvm(self.section.java_heap)

    def build_index(self, passages_arrow: Path, index_dir: Path) -> dict[str, Any]:
        s = self.section
        build_impact_index(passages_arrow, index_dir, impact_encoder(s), s.impact_quantization, s.threads, s.fields,
                           s.impact_max_length, s.impact_batch_size, heap=s.java_heap)
        return {"teacher": self.name}

    def open(self, index_dir, passages_arrow=None, threads=None, progress=False) -> ImpactTeacher:
        s = self.section
        return ImpactTeacher(index_dir, impact_encoder(s), s.impact_quantization, threads or s.threads,
                             s.impact_query_max_length, s.impact_batch_size, heap=s.java_heap)
