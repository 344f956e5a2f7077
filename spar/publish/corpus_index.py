"""Index any corpus with a published SPAR model: what ``spar index --model MODEL --corpus C --output DIR`` runs.

A published model (:mod:`spar.publish.model_dir`, a directory or a hub id) holds both encoders and μ; this module reads
a corpus (a BEIR directory, or a corpus file in any format :func:`spar.data.readers.read_corpus` reads), encodes it with
the model's base encoder and Λ, and builds one FAISS index of ``[P(p), PΛ(p)]``
(:class:`spar.index.spar_index.SparIndex`, every ``index`` option: type and passage storage), which ``spar search DIR
"query"`` then searches with the model's μ. No run directory is needed: the model is all it takes. Layout (one artifact
of kind ``corpus-index``)::

    DIR/
      index.faiss, ids.arrow, index.json   the index; index.json's ``model`` records the model (its fingerprint, and
                                           where it is: relative to DIR, or its hub id) and μ
      passages.arrow                       the corpus (schemas.PASSAGES): the titles and texts of hits
      manifest.json                        fingerprint (model, corpus, options), records read and skipped, sizes

The defaults are the model's own: the ``index`` section and seed it was published with (``spar_config.yaml``, so μ
meets the passage storage it was tuned against) and whether passages are encoded with their titles. Built in
``DIR.partial/`` and renamed into place (:class:`spar.core.artifacts.ArtifactWriter`: an existing ``DIR`` is replaced
only when it is an earlier corpus index); a killed run resumes where it stopped (``passages.arrow`` is kept, encoding
goes on at the first missing shard, :mod:`spar.model.embeddings`); the embeddings are deleted once the index holds them.

Example::

    >>> import tempfile, pathlib
    >>> from spar.model.encoders import BiEncoder
    >>> from spar.lexical.projection import ProjectionLambda
    >>> from spar.publish.model_dir import SparEncoder
    >>> from spar.publish.corpus_index import index_corpus
    >>> from spar.publish.search import SparSearcher
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> base = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True, shared_weights=True)
    >>> lam = ProjectionLambda.fit(["scurvy is a lack of vitamin C", "sparse retrieval with BM25"], dim=32)
    >>> _ = SparEncoder(base, lam, mu=0.5).save_pretrained(root / "model")
    >>> _ = (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "Scurvy", "text": "Lack of vitamin C."}\\n'
    ...                                        '{"_id": "d2", "title": "BM25", "text": "A ranking function."}\\n')
    >>> stats = index_corpus(root / "model", root / "corpus.jsonl", root / "index", show_progress=False)
    >>> stats["passages"]
    2
    >>> [h.id for h in SparSearcher.open(root / "index").search(["what causes scurvy"], k=1)[0]]
    ['d1']
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spar.core.artifacts import PASSAGES_FILE, ArtifactWriter, atomic_file, write_json_atomic
from spar.core.fingerprint import file_fingerprint, fingerprint_dict
from spar.core.config import EXHAUSTIVE_INDEX_TYPES, EncodeSection, IndexSection
from spar.core.errors import BadRecordError, ConfigError
from spar.data.readers import OnBad, ReadStats, input_file_problem
from spar.core.stage import Unit, run_unit, settings

KIND = "corpus-index"
#: Read statistics of passages.arrow, kept beside it while the index is built (a resumed run reports them too).
_READ_STATS = ".passages-read.json"
#: The corpus file of a BEIR directory.
BEIR_CORPUS = "corpus.jsonl"


def corpus_file(path: str | Path) -> Path:
    """The corpus file of ``path``: the file itself, or a BEIR directory's ``corpus.jsonl`` (or ``.jsonl.gz``)."""
    p = Path(path).expanduser()
    if p.is_dir():
        for name in (BEIR_CORPUS, BEIR_CORPUS + ".gz"):
            if (p / name).is_file():
                return p / name
        raise BadRecordError(str(p), None, f"a directory without {BEIR_CORPUS} (give a corpus file or a BEIR "
                             "directory)")
    problem = input_file_problem(p)
    if problem:
        raise BadRecordError(str(p), None, problem)
    return p


@dataclass
class ModelDefaults:
    """What a published model was made with, as defaults for indexing another corpus (from its
    ``spar_config.yaml``; spar's defaults where it has none)."""

    index: dict[str, Any]
    seed: int = 42
    title_field: bool = True

    @classmethod
    def read(cls, model_dir: Path) -> "ModelDefaults":
        import yaml

        path = model_dir / "spar_config.yaml"
        try:
            tree = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
        except (OSError, yaml.YAMLError):
            tree = {}
        tree = tree if isinstance(tree, dict) else {}
        index: dict[str, Any] = tree["index"] if isinstance(tree.get("index"), dict) else {}
        if index.get("type", "flat") in EXHAUSTIVE_INDEX_TYPES:
            index = {**index, "refine": 0}  # ignored by a flat index before spar refused the pair
        try:
            index = IndexSection.model_validate(index).model_dump()
        except ValueError:  # written by another spar version: its index options are not ours
            index = {}
        if not index:
            from spar.publish.model_dir import MODEL_CONFIG

            config = json.loads((model_dir / MODEL_CONFIG).read_text(encoding="utf-8"))
            storage = ((config.get("provenance") or {}).get("tuning") or {}).get("storage")
            index = {"storage": storage} if storage else {}
        experiment, data = tree.get("experiment") or {}, tree.get("data") or {}
        return cls(index, int(experiment.get("seed", 42)) if isinstance(experiment, dict) else 42,
                   bool(data.get("title_field", True)) if isinstance(data, dict) else True)


def index_options(defaults: ModelDefaults, overrides: dict[str, Any] | None = None) -> IndexSection:
    """The ``index`` section: the model's own, then ``overrides`` (``{"storage": "sq4", "type": "hnsw", ...}``)."""
    from pydantic import ValidationError

    options = {**defaults.index, **(overrides or {})}
    if options.get("type", "flat") in EXHAUSTIVE_INDEX_TYPES and "refine" not in (overrides or {}):
        options["refine"] = 0  # the model's exact re-ranking belongs to its approximate index, not to a flat one
    try:
        return IndexSection.model_validate(options)
    except ValidationError as exc:
        first = exc.errors()[0]
        if not first["loc"]:  # a check of the whole section, whose message names its options
            raise ConfigError(str(first["msg"]).removeprefix("Value error, ")) from None
        raise ConfigError(f"index.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def index_corpus(model: str | Path, corpus: str | Path, output: str | Path, *,
                 index: dict[str, Any] | IndexSection | None = None, encode: EncodeSection | None = None,
                 corpus_format: str = "auto", on_bad_record: OnBad = "fail", force: bool = False,
                 show_progress: bool = True) -> dict[str, Any]:
    """Encode ``corpus`` with the published ``model`` (a directory or hub id) and build its index in ``output``.

    ``index``: options over the model's own ``index`` section (a dict of overrides, or a whole section);
    ``encode``: batch size, devices, precision, shard size and dtype (the ``encode`` section; its models are
    ignored). Returns printable statistics; an up-to-date ``output`` is left alone (``{"skipped": True}``)."""
    from spar.publish.model_dir import check_model_dir, locate_model, published_fingerprint

    model_dir = locate_model(model)
    config = check_model_dir(model_dir)
    fingerprint = published_fingerprint(model_dir, config)
    defaults = ModelDefaults.read(model_dir)
    section = index if isinstance(index, IndexSection) else index_options(defaults, index)
    enc = encode or EncodeSection()
    source = corpus_file(corpus)
    out = Path(output)
    local = Path(model).expanduser().exists()
    where = os.path.relpath(model_dir.resolve(), out.resolve()) if local else str(model)
    record = {"fingerprint": fingerprint, "location": where, "hub": not local, "mu": config["mu"],
              "variant": config["variant"]}
    unit_config = {"model": fingerprint, "index": settings(section), "seed": defaults.seed,
                   "titles": defaults.title_field, "format": corpus_format,
                   "encode": {"shard_size": enc.shard_size, "dtype": enc.dtype, "precision": enc.precision,
                              "backend": enc.backend}}
    job = _Job(model_dir, config, source, section, enc, defaults, record, corpus_format, on_bad_record,
               show_progress)
    unit = Unit(out, kind=KIND, config=unit_config, inputs={"corpus": file_fingerprint(source)}, resumable=True,
                payload=job)
    try:
        return run_unit(unit, lambda w: _build(w, job), force,
                        on_skip=lambda manifest: {"passages": manifest["stats"].get("count"), "output": str(out)})
    except BadRecordError:
        # A refused corpus leaves no work directory behind (one that holds encoded shards is kept, to resume).
        partial = unit.writer().path
        if partial.is_dir() and {p.name for p in partial.iterdir()} <= {".fingerprint"}:
            shutil.rmtree(partial)
        raise


@dataclass
class _Job:
    model_dir: Path
    config: dict[str, Any]
    corpus: Path
    section: IndexSection
    encode: EncodeSection
    defaults: ModelDefaults
    record: dict[str, Any]
    corpus_format: str
    on_bad_record: OnBad
    show_progress: bool


def _write_passages(job: _Job, directory: Path) -> dict[str, Any]:
    """``passages.arrow`` of the corpus (kept across a resumed run, with its read statistics)."""
    from spar.data.readers import read_corpus
    from spar.data.sampling import write_passages

    path, stats_file = directory / PASSAGES_FILE, directory / _READ_STATS
    if path.exists() and stats_file.exists():
        return json.loads(stats_file.read_text(encoding="utf-8"))
    read_stats = ReadStats()
    with atomic_file(path) as tmp:
        count, _, _ = write_passages(read_corpus(job.corpus, job.corpus_format, job.on_bad_record, read_stats), tmp,
                                     None, job.on_bad_record, read_stats)
        if count == 0:
            skipped = f" ({read_stats.summary()})" if read_stats.total_skipped else ""
            raise BadRecordError(str(job.corpus), None, f"the corpus holds no passage{skipped}: nothing to index")
    stats = {"count": count, **read_stats.as_dict(), "summary": read_stats.summary()}
    write_json_atomic(stats_file, stats)
    return stats


def _encode(job: _Job, directory: Path, name: str) -> Path:
    """Encode ``passages.arrow`` with one of the model's encoders into ``embeddings/<name>/passages`` (resumable)."""
    from spar.model.embeddings import EncodeOptions, encode_passages
    from spar.model.engines import resolve_devices
    from spar.model.onnx_encoder import backend_name, with_backend
    from spar.publish.model_dir import load_published_encoder

    enc = job.encode
    model = load_published_encoder(job.model_dir, name, job.config)
    # encode.backend as in `spar encode`: ONNX Runtime on the CPU by default, torch on GPUs
    encoder = with_backend(model if name == "base" else model.batch_encoder(), enc.backend,
                           resolve_devices(enc.accelerator, enc.devices)[0])
    options = EncodeOptions(batch_size=enc.batch_size, accelerator=enc.accelerator, devices=enc.devices,
                            engine=enc.engine, precision=enc.precision, strategy=enc.strategy,
                            show_progress=job.show_progress, backend=backend_name(encoder))
    titles = job.defaults.title_field or bool(getattr(model, "term_based", False))
    out = directory / "embeddings" / name / "passages"
    encode_passages(encoder, directory / PASSAGES_FILE, out, encoder_name=name, shard_size=enc.shard_size,
                    dtype=enc.dtype, options=options, use_titles=titles,
                    weights_fingerprint=fingerprint_dict({"model": job.record["fingerprint"], "encoder": name}))
    return out


def _build(w: ArtifactWriter, job: _Job) -> dict[str, Any]:
    from spar.model.stored_vectors import load_embeddings
    from spar.index.files import index_file_bytes, index_schema
    from spar.index.spar_index import IndexOptions, SparIndex
    from spar.core.schemas import PASSAGES
    from spar.index.storage import describe

    from spar.index.approximate import fold_factor, resolve_index_section

    read = _write_passages(job, w.path)
    base_dir, lambda_dir = _encode(job, w.path, "base"), _encode(job, w.path, "lambda")
    base, lam = load_embeddings(base_dir), load_embeddings(lambda_dir)
    section = resolve_index_section(job.section, len(base))  # index.type auto: by this corpus's size
    options = IndexOptions.from_section(section, seed=job.defaults.seed)
    # An approximate index folds the model's μ into its passages (spar.index.approximate).
    fold = fold_factor(section.type, section.fold, float(job.config["mu"]))
    index = SparIndex.build(base, lam, variant=job.config["variant"], index_type=section.type, options=options,
                            fold=fold)
    index.info["model"] = job.record
    index.save(w.path)
    if not index.refine:  # the index holds the vectors now; exact re-ranking reads them from embeddings/
        shutil.rmtree(w.path / "embeddings")
        index.info.pop("embeddings", None)
        index.save(w.path)
    (w.path / _READ_STATS).unlink()
    size = index_file_bytes(w.path)
    tuned = ((job.config.get("provenance") or {}).get("tuning") or {}).get("storage")
    w.schema = index_schema(section.type, index.storage, {PASSAGES_FILE: PASSAGES.names,
                                                          **({"embeddings/": "float32 passage vectors read by exact "
                                                              "re-ranking"} if index.refine else {})},
                            "model (fingerprint, location, mu)")
    w.stats = {**index.info, "bytes": size, "bytes_per_passage": round(size / len(index), 1),
               "corpus": job.corpus.name, "read": {k: v for k, v in read.items() if k != "summary"}}
    stats = {"model": str(job.model_dir), "corpus": str(job.corpus), "passages": len(index),
             "records": read["summary"], "type": section.type,
             "storage": describe(index.storage, index.info["dim"], section.pq_m, section.pq_nbits),
             "size": f"{size / 2**20:,.1f} MiB ({size / len(index):,.0f} B/passage)",
             "mu": f"{job.config['mu']:g} (the model's" + (f", tuned against {tuned}" if tuned else "") + ")",
             "output": str(w.final), "search": f'spar search {w.final} "your query"'}
    note = storage_note(tuned, index)
    if note:
        stats["note"] = note
    return stats


def storage_note(tuned: str | None, index: Any) -> str | None:
    """What to say when ``index`` scores passages otherwise than the vectors the model's μ was tuned against
    (``tuned``, a storage; None: not recorded): an index that re-ranks exactly (``index.refine``) serves float32."""
    served = "float32" if index.refine else index.storage
    if not tuned or tuned == served:
        return None
    return f"μ was tuned against {tuned} passages; this index stores {index.storage} (index.storage overrides the " \
           "model's own)"
