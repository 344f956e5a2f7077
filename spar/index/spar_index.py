"""One FAISS index of SPAR passage vectors, and the query side that turns μ into a search-time knob.

SPAR combines a base dense retriever (P, Q) with the lexical model Λ (PΛ, QΛ) in one index (Chen et al., §4.2):

- ``concat``: passages ``[P(p), PΛ(p)]``, queries ``[Q(q), μ·QΛ(q)]``: the inner product is exactly
  ``sim(q, p) + μ·simΛ(q, p)``.
- ``sum``: passages ``P(p) + PΛ(p)``, queries ``Q(q) + μ·QΛ(q)`` (equal dimensions; half the index size, and the
  cross terms make the score an approximation of the above).

μ only scales the query side, so changing it never re-indexes. Index types (all FAISS, inner product) are the
registered ones (:mod:`spar.index.types.registry`: ``flat``, ``hnsw``, ``ivf``, ``ivfpq``, ...), each asked what to
build, what it stores and how it is searched; each stores the passage vectors as ``options.storage`` says
(:mod:`spar.index.storage`: float32, float16, 8/6/4-bit scalar quantizers, PQ), trained on a seeded sample.
:func:`served_passage_vectors` gives the passage vectors as an index of that storage holds them (its decoded codes),
so μ is tuned against what is served.

A saved index is a directory: ``index.faiss``, ``ids.arrow`` (schemas.EMBEDDING_IDS) and ``index.json`` (variant,
type, both encoders' fingerprints and dimensions, count, search parameters). The index stores vectors, not μ: the
caller passes μ to :meth:`SparIndex.search` (from :func:`spar.evaluate.tuning.read_tuned` or a published model), which
refuses query vectors from other encoders or of another dimension.

The SPAR formula itself (``[Q, μ·QΛ]``, ``[P, PΛ]``) is :mod:`spar.index.combine`'s.

Example::

    >>> import numpy as np
    >>> from spar.index.spar_index import SparIndex
    >>> rng = np.random.default_rng(0)
    >>> P, PL = rng.standard_normal((100, 8), dtype=np.float32), rng.standard_normal((100, 4), dtype=np.float32)
    >>> Q, QL = rng.standard_normal((2, 8), dtype=np.float32), rng.standard_normal((2, 4), dtype=np.float32)
    >>> index = SparIndex.build(P, PL, ids=[f"d{i}" for i in range(100)], variant="concat", index_type="flat")
    >>> scores, ids = index.search(Q, QL, k=3, mu=0.5)
    >>> bool(np.allclose(scores[0, 0], (Q[0] @ P.T + 0.5 * QL[0] @ PL.T).max(), atol=1e-4))
    True
"""

from __future__ import annotations

import functools
import json
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from spar.core.config import IndexSection, Storage, Variant
from spar.core.errors import ArtifactError
from spar.core.executor import Executor, WorkerSpec
from spar.index.combine import check_pair, spar_passage_vectors, spar_query_vectors
from spar.core.schemas import IDS_FILE
from spar.index.files import INDEX_FILE, INDEX_MANIFEST, SEARCH_TIME
from spar.index.storage import FAST_SCAN, code_bytes, pq_bits_for
from spar.index.types.registry import registered_type, is_approximate, stored_storage

log = logging.getLogger(__name__)

#: Passages combined and added to FAISS per step (bounds the extra memory of building from memory-mapped shards).
ADD_BATCH = 65_536
#: Training sample of a scalar quantizer or flat PQ (IVF indexes size theirs by the number of lists).
TRAIN_SAMPLE = 65_536


def _faiss():
    import faiss

    return faiss


# ----------------------------------------------------------------------------------------------------------------
# Building FAISS indexes
# ----------------------------------------------------------------------------------------------------------------


class IndexOptions(IndexSection):
    """The ``index`` config section (one owner of every FAISS option and default) plus what the experiment adds:
    the seed that trains codecs (``experiment.seed``) and FAISS threads."""

    seed: int = 42
    threads: int | None = None
    #: A library call builds an exact float32 index unless told otherwise (the config section's default is the
    #: frontier's choice, a quantized one).
    storage: Storage = Field("float32", description="How passage vectors are stored (spar.index.storage).")

    @model_validator(mode="after")
    def _refine_needs_candidates(self) -> "IndexOptions":
        return self  # the index type travels beside the options (SparIndex.build's index_type), not in `type`

    @classmethod
    def from_section(cls, section: IndexSection, seed: int | None = None) -> "IndexOptions":
        """From :class:`spar.core.config.IndexSection` (``seed``: the experiment's, which seeds codec training)."""
        return cls(**section.model_dump(), **({"seed": seed} if seed is not None else {}))

    def faiss_options(self) -> dict[str, Any]:
        """The options that shape a FAISS index (not which vectors it holds: ``variant``, nor its ``type``)."""
        return self.model_dump(exclude={"variant", "type"})

    def served_storage(self, index_type: str) -> str:
        """The storage an index of ``index_type`` really holds (``ivfpq`` always stores PQ codes; ``auto``, a type
        not chosen yet: the configured one)."""
        return self.storage if index_type == "auto" else registered_type(index_type).served_storage(self.storage)

    def exact_scores(self, index_type: str) -> bool:
        """Whether the index re-ranks its candidates with exact float32 scores (``refine`` on an approximate type):
        then its scores are the exact scan's, and μ is tuned against float32 vectors."""
        return bool(self.refine) and is_approximate(index_type)

    def scored_codec(self, index_type: str) -> dict[str, Any]:
        """What the served scores come from: :meth:`codec`, or float32 for an index that re-ranks exactly."""
        return {"storage": "float32"} if self.exact_scores(index_type) else self.codec(index_type)

    def codec(self, index_type: str) -> dict[str, Any]:
        """What decides the stored passage vectors (float32: nothing but the storage): μ tuned against one
        codec is refused for another."""
        storage = self.served_storage(index_type)
        if storage == "float32":
            return {"storage": "float32"}
        return {"storage": storage, "type": index_type, "pq_m": self.pq_m, "pq_nbits": self.pq_nbits,
                "ivf_nlist": self.ivf_nlist, "train_size": self.train_size, "seed": self.seed}


def check_serves(info: dict[str, Any], section: IndexSection, seed: int, directory: str | Path) -> None:
    """Refuse an index (its ``index.json`` ``info``) that is not what the ``index`` config asks for: another variant,
    type, storage or codec. An override the stored index cannot honour (``spar evaluate index.storage=float32`` on a
    4-bit index) would otherwise be recorded in the results and the model card but not served."""
    options = IndexOptions.from_section(section, seed=seed)
    storage = stored_storage(info)
    have = {"variant": info.get("variant"), "type": info.get("type"), **info.get("codec", {"storage": storage})}
    wanted = {"variant": section.variant, "type": section.type, **options.codec(section.type)}
    main = ("variant", "type", "storage")
    differ = [key for key in main if have.get(key) != wanted[key]]
    if not differ and wanted["storage"] != "float32":  # then the codec's options (float32 vectors have none)
        differ = [key for key in wanted if key not in main and have.get(key) != wanted[key]]
    if differ:
        names = ", ".join(f"{'experiment' if key == 'seed' else 'index'}.{key}={wanted[key]} (the index has "
                          f"{have.get(key)})" for key in differ)
        raise ArtifactError(f"{directory}: not the index the config asks for: {names}; re-run `spar index` (and "
                            "`spar tune`) with these settings, or drop the override")


def _rows(matrices: Sequence[np.ndarray], variant: str | None, start: int, stop: int) -> np.ndarray:
    if variant is None:
        return np.ascontiguousarray(matrices[0][start:stop], dtype=np.float32)
    return spar_passage_vectors(matrices[0][start:stop], matrices[1][start:stop], variant)


def _batches(matrices: Sequence[np.ndarray], variant: str | None, n: int) -> Iterator[np.ndarray]:
    for start in range(0, n, ADD_BATCH):
        yield _rows(matrices, variant, start, min(n, start + ADD_BATCH))


def make_faiss_index(dim: int, n: int, index_type: str, options: IndexOptions):
    """An empty FAISS inner-product index of ``index_type`` (:func:`spar.index.types.registry.index_type`) storing
    ``options.storage``, sized for ``n`` vectors."""
    from spar.index.storage import check_storage

    kind = registered_type(index_type)
    kind.check_storage(check_storage(options.storage))
    storage = kind.served_storage(options.storage)
    if storage == "pq" and dim % options.pq_m:
        raise ArtifactError(f"index.pq_m={options.pq_m} must divide the vector dimension {dim}")
    return kind.make(dim, n, storage, options)


def trained_faiss_index(matrices: Sequence[np.ndarray], variant: str | None, index_type: str,
                        options: IndexOptions):
    """An empty index of ``index_type``, its codec trained on a seeded sample of the (combined) rows: the one
    training that both the index build and :func:`served_passage_vectors` use, so both code passages alike."""
    n = matrices[0].shape[0]
    if n == 0:
        raise ArtifactError("cannot build an index of 0 passages")
    dim = _rows(matrices, variant, 0, 1).shape[1]
    return train_faiss_index(make_faiss_index(dim, n, index_type, options), matrices, variant, options)


def train_faiss_index(index, matrices: Sequence[np.ndarray], variant: str | None, options: IndexOptions):
    """Train the codec of an empty ``index`` (one :func:`make_faiss_index` made, or another FAISS index of the
    rows' dimension) on a seeded sample of the (combined) rows, unless it needs no training; returns it."""
    n = matrices[0].shape[0]
    if not index.is_trained:
        nlist = getattr(index, "nlist", 0)
        default = max(256 * 64, 64 * nlist) if nlist else TRAIN_SAMPLE
        train_size = options.train_size or min(n, default)
        rng = np.random.default_rng(options.seed)
        sample = np.sort(rng.choice(n, size=min(n, train_size), replace=False))
        train = (np.ascontiguousarray(matrices[0][sample], dtype=np.float32) if variant is None
                 else spar_passage_vectors(matrices[0][sample], matrices[1][sample], variant))
        if options.storage in FAST_SCAN:
            # One small k-means per 1 or 2 dimensions: thousands of tiny OpenMP regions, where a second thread
            # only waits (SciFact, 3,456 dims, 4,096 points: 28 s on one thread; over 4.5 min on two, load 6).
            with faiss_threads(1):
                index.train(train)
        else:
            index.train(train)
    return index


def add_codes(index, n: int, code_batches: Iterator[np.ndarray]):
    """Append ``n`` passages' codes (``sa_encode`` output, in row order) to an empty trained index; returns it.

    A flat index (float32 or scalar-quantized codes) gets its code array sized once and filled in place: added batch
    by batch, FAISS grows it by doubling, and each growth holds the old and the new buffer at once (3M sq4 codes of
    768 dims: 0.48 GB over the codes' own 1.15 GB; sized once: 0.03). Other indexes take ``add_sa_codes``."""
    if not (adds_codes_in_place(index) and n):
        for codes in code_batches:
            index.add_sa_codes(codes)
        return index
    size = index.code_size
    index.codes.resize(n * size)
    filled, start = _faiss().rev_swig_ptr(index.codes.data(), n * size), 0
    for codes in code_batches:
        filled[start * size:(start + len(codes)) * size] = codes.ravel()
        start += len(codes)
    if start != n:
        raise ValueError(f"add_codes: {start} passages' codes given for {n}")
    index.ntotal = n
    return index


def add_passages(index, matrices: Sequence[np.ndarray], variant: str | None):
    """Add ``matrices[0]`` (``variant=None``) or the SPAR combination of two matrices to a trained index, in
    batches; returns the index (a flat index's codes through :func:`add_codes`)."""
    n = matrices[0].shape[0]
    if adds_codes_in_place(index):
        return add_codes(index, n, (index.sa_encode(chunk) for chunk in _batches(matrices, variant, n)))
    for chunk in _batches(matrices, variant, n):
        index.add(chunk)
    return index


def adds_codes_in_place(index) -> bool:
    """Whether :func:`add_codes` fills this index's code array in place (an empty flat index)."""
    faiss = _faiss()
    return isinstance(index, (faiss.IndexFlatIP, faiss.IndexScalarQuantizer)) and index.ntotal == 0


def build_faiss_index(matrices: Sequence[np.ndarray], variant: str | None, index_type: str,
                      options: IndexOptions | None = None, executor: Executor | None = None,
                      shards: Sequence[tuple[Sequence[Path], int]] | None = None):
    """Fill a FAISS index with ``matrices[0]`` (``variant=None``) or the SPAR combination of two matrices.

    With a Ray ``executor`` and ``shards`` (each matrix's ``.npy`` shard files and dimension, on shared storage)
    the add phase is spread: workers code :data:`ADD_BATCH` passages each (:class:`CodeWorker`) and this process
    appends the codes in order, which gives the index ``index.add`` would have built, byte for byte. HNSW graphs and
    fast-scan codes are always added here (FAISS adds neither from codes).
    """
    faiss = _faiss()
    options = options or IndexOptions()
    if options.threads:
        faiss.omp_set_num_threads(options.threads)
    index = trained_faiss_index(matrices, variant, index_type, options)
    n = matrices[0].shape[0]
    if executor is not None and executor.kind != "local" and shards is not None and adds_codes(index_type, options):
        spec = WorkerSpec(f"index:add:{id(index)}",
                          functools.partial(CodeWorker, faiss.serialize_index(index), shards, variant),
                          needs={"embeddings": Path(shards[0][0][0]).parent})
        bounds = [(start, min(n, start + ADD_BATCH)) for start in range(0, n, ADD_BATCH)]
        return add_codes(index, n, (codes for _, codes in executor.map(spec, bounds, ordered=True)))
    return add_passages(index, matrices, variant)


def adds_codes(index_type: str, options: IndexOptions) -> bool:
    """Whether FAISS can add this index's passages from codes made elsewhere (``add_sa_codes``): flat and IVF
    indexes of every storage but fast-scan (HNSW builds a graph; fast-scan packs codes in blocks)."""
    return registered_type(index_type).adds_codes(options.served_storage(index_type))


class CodeWorker:
    """The index's add phase on a worker: the trained empty index (serialized) codes the passages of a row range,
    read from the embeddings' memory-mapped shards (shared storage) and combined as the index combines them."""

    def __init__(self, index_bytes: np.ndarray, shards: Sequence[tuple[Sequence[Path], int]], variant: str | None):
        from spar.model.stored_vectors import ShardedVectors

        self.index = _faiss().deserialize_index(index_bytes)
        self.matrices = [ShardedVectors([np.load(p, mmap_mode="r", allow_pickle=False) for p in parts], dim)
                         for parts, dim in shards]
        self.variant = variant

    def __call__(self, bounds: tuple[int, int]) -> np.ndarray:
        return self.index.sa_encode(_rows(self.matrices, self.variant, *bounds))


@contextmanager
def faiss_threads(threads: int) -> Iterator[None]:
    """FAISS's OpenMP threads set to ``threads`` inside the block, restored after it. On a loaded machine one
    thread can be many times faster: OpenMP threads wait for each other at every parallel region (training a
    fast-scan codec runs thousands of them)."""
    faiss = _faiss()
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def build_spar_index(base_p: np.ndarray, lambda_p: np.ndarray | None, variant: Variant = "concat",
                     index_type: str = "flat", executor: Executor | None = None,
                     shards: Sequence[tuple[Sequence[Path], int]] | None = None, **opts: Any):
    """A FAISS index of SPAR passage vectors (``lambda_p=None``: of ``base_p`` alone, e.g. the base index).

    ``opts`` are :class:`IndexOptions` fields (``hnsw_m``, ``hnsw_ef_search``, ``ivf_nlist``, ``pq_m``,
    ``nprobe``, ...). Inputs may be memory-mapped; they are combined and added in batches (on ``executor``'s
    workers, given the inputs' ``shards``: see :func:`build_faiss_index`).
    """
    if lambda_p is None:
        return build_faiss_index([base_p], None, index_type, IndexOptions(**opts), executor, shards)
    check_pair(np.asarray(base_p[:1]), np.asarray(lambda_p[:1]), variant, "passage vectors")
    if base_p.shape[0] != lambda_p.shape[0]:
        raise ArtifactError(f"passage vectors: base has {base_p.shape[0]} rows but Λ has {lambda_p.shape[0]}")
    return build_faiss_index([base_p, lambda_p], variant, index_type, IndexOptions(**opts), executor, shards)


# ----------------------------------------------------------------------------------------------------------------
# The saved index
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class SparIndex:
    """A FAISS index of SPAR passage vectors with its ids and description (see the module docstring)."""

    index: Any
    ids: list[str]
    info: dict[str, Any] = field(default_factory=dict)

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def build(cls, base_p, lambda_p, ids: Sequence[str] | None = None, variant: Variant = "concat",
              index_type: str = "flat", options: IndexOptions | None = None,
              executor: Executor | None = None, fold: float = 1.0, **opts: Any) -> "SparIndex":
        """Build from two matrices or two :class:`~spar.model.stored_vectors.Embeddings` (ids and fingerprints
        checked; the add phase of the latter runs on ``executor``'s workers when it is Ray's). ``fold`` (μ₀): the
        index holds ``[P, μ₀·PΛ]`` and :meth:`search` scales the query side by ``μ/μ₀``
        (:mod:`spar.index.approximate`)."""
        from spar.index.approximate import FoldedRows

        options = options or IndexOptions(**opts)
        if fold != 1.0 and variant != "concat":
            raise ArtifactError("μ is folded into [P, μ·PΛ] (variant 'concat') only; use index.fold=never with 'sum'")
        if options.refine and variant != "concat":
            raise ArtifactError("index.refine re-scores [Q, μ·QΛ]·[P, PΛ] (variant 'concat') only; use index.refine=0 "
                                "with 'sum'")
        base_fp = lambda_fp = None
        shards = None
        embeddings: dict[str, str] = {}
        if hasattr(base_p, "model_fingerprint"):
            base_emb, lambda_emb = base_p, lambda_p
            if base_emb.ids != lambda_emb.ids:
                raise ArtifactError(
                    f"{base_emb.directory} and {lambda_emb.directory} hold different passages (ids differ); "
                    "re-encode both from the same corpus"
                )
            ids = base_emb.ids if ids is None else ids
            base_fp, lambda_fp = base_emb.model_fingerprint, lambda_emb.model_fingerprint
            shards = [(base_emb.part_files, base_emb.dim), (lambda_emb.part_files, lambda_emb.dim)]
            embeddings = {"base": str(base_emb.directory), "lambda": str(lambda_emb.directory)}
            # Memory-mapped views across shards: vectors are combined and added in batches, never all loaded.
            base_p, lambda_p = base_emb.sharded, lambda_emb.sharded
        n = base_p.shape[0]
        ids = [str(i) for i in range(n)] if ids is None else list(ids)
        if len(ids) != n:
            raise ArtifactError(f"{len(ids)} ids for {n} passage vectors")
        if fold != 1.0:  # the scaled Λ rows are made while adding: Ray workers code the stored rows
            lambda_p, shards = FoldedRows(lambda_p, fold), None
        index = build_spar_index(base_p, lambda_p, variant, index_type, executor, shards, **options.faiss_options())
        storage = options.served_storage(index_type)
        info = {
            "variant": variant, "type": index_type, "count": n, "dim": int(index.d),
            "storage": storage, "codec": options.codec(index_type),
            "code_bytes": code_bytes(storage, int(index.d), options.pq_m, pq_bits_for(n, options.pq_nbits)),
            "base_dim": int(base_p.shape[1]), "lambda_dim": int(lambda_p.shape[1]),
            "base_fingerprint": base_fp, "lambda_fingerprint": lambda_fp,
            "options": {k: v for k, v in options.faiss_options().items() if k not in ("threads", "fold")},
        }
        if fold != 1.0:
            info["fold"] = float(fold)
        if embeddings:  # where exact re-ranking reads the float32 vectors (saved relative to the index)
            info["embeddings"] = embeddings
        return cls(index, ids, info)

    def save(self, directory: str | Path) -> None:
        from spar.core.schemas import EMBEDDING_IDS, write_table

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        from spar.core.artifacts import atomic_file

        with atomic_file(d / INDEX_FILE) as tmp:
            _faiss().write_index(self.index, str(tmp))
        write_table(d / IDS_FILE, pa.table({"row": pa.array(range(len(self.ids)), pa.int64()),
                                            "id": pa.array(self.ids, pa.string())}, schema=EMBEDDING_IDS))
        info = dict(self.info)
        if "embeddings" in info:  # relative: the run directory may move
            info["embeddings"] = {k: os.path.relpath(Path(v).resolve(), d.resolve())
                                  for k, v in info["embeddings"].items()}
        (d / INDEX_MANIFEST).write_text(json.dumps(info, indent=2) + "\n")
        self.directory = d

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = False) -> "SparIndex":
        """Open a saved index (``mmap=True`` memory-maps ``index.faiss`` instead of reading it)."""
        from spar.core.schemas import read_table

        d = Path(directory)
        for name in (INDEX_FILE, IDS_FILE, INDEX_MANIFEST):
            if not (d / name).exists():
                raise ArtifactError(f"{d}: missing file '{name}' (build it with `spar index`)")
        faiss = _faiss()
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mmap else 0
        index = faiss.read_index(str(d / INDEX_FILE), flags)
        info = json.loads((d / INDEX_MANIFEST).read_text())
        ids = read_table(d / IDS_FILE).column("id").to_pylist()
        if index.ntotal != len(ids) or index.ntotal != info.get("count"):
            raise ArtifactError(f"{d}: {INDEX_FILE} holds {index.ntotal} vectors, {IDS_FILE} {len(ids)} ids, "
                                f"{INDEX_MANIFEST} says {info.get('count')}")
        self = cls(index, ids, info)
        self.directory = d
        self.set_search_params(**{k: v for k, v in info.get("options", {}).items() if k in SEARCH_TIME})
        return self

    def set_search_params(self, **values: Any) -> None:
        """Apply search-time settings (:data:`spar.index.files.SEARCH_TIME`: ``refine``, and those its index type
        reads, e.g. ``hnsw_ef_search``, ``nprobe``); None leaves one as it is."""
        if values.get("refine") is not None:
            self.info.setdefault("options", {})["refine"] = int(values["refine"])
        self.kind.set_search_params(self.index, {k: v for k, v in values.items() if v is not None})

    # -- properties ------------------------------------------------------------------------------------------
    @property
    def variant(self) -> str:
        return self.info["variant"]

    @property
    def kind(self):
        """Its index type (:class:`spar.index.types.registry.IndexType`)."""
        return registered_type(self.info.get("type", "flat"))

    @property
    def storage(self) -> str:
        """How the passage vectors are stored (:mod:`spar.index.storage`)."""
        return stored_storage(self.info)

    def __len__(self) -> int:
        return len(self.ids)

    # -- search ----------------------------------------------------------------------------------------------
    def check_query_side(self, base_q, lambda_q) -> tuple[np.ndarray, np.ndarray]:
        """Matrices of the query side, after checking encoders (for Embeddings) and dimensions."""
        pairs = []
        for role, q, fp_key, dim_key in (("base", base_q, "base_fingerprint", "base_dim"),
                                         ("Λ", lambda_q, "lambda_fingerprint", "lambda_dim")):
            if hasattr(q, "model_fingerprint"):
                expected = self.info.get(fp_key)
                if expected and q.model_fingerprint != expected:
                    raise ArtifactError(
                        f"{role} query vectors in {q.directory} come from encoder {q.model_fingerprint}, but the "
                        f"index was built with {role} encoder {expected}; encode queries with the same encoder"
                    )
                q = q.vectors
            q = np.atleast_2d(np.asarray(q, dtype=np.float32))
            if q.shape[1] != self.info[dim_key]:
                raise ArtifactError(
                    f"{role} query vectors have dimension {q.shape[1]}, but the index was built with {role} "
                    f"passage vectors of dimension {self.info[dim_key]}"
                )
            pairs.append(q)
        return pairs[0], pairs[1]

    def search(self, base_q, lambda_q, k: int, mu: float) -> tuple[np.ndarray, list[list[str | None]]]:
        """Top-``k`` passages for each query: ``sim + μ·simΛ`` (concat); μ comes from the caller (tuned by ``tune``).

        ``base_q``/``lambda_q``: matrices [n, dim] or :class:`~spar.model.stored_vectors.Embeddings` (whose encoder
        fingerprints must match the index's). Returns scores [n, k] and ids (``None`` where fewer than k exist).
        """
        base_q, lambda_q = self.check_query_side(base_q, lambda_q)
        qvecs = self.query_vectors(base_q, lambda_q, mu)
        refine = self.refine
        if not refine:
            return self.search_vectors(qvecs, k)
        from spar.index.approximate import refine_top_k

        _, rows = self.index.search(np.ascontiguousarray(qvecs, dtype=np.float32), k * refine)
        scores, rows = refine_top_k(self.passage_rows(), base_q, lambda_q, mu, rows, k)
        return scores, [[self.ids[j] if j >= 0 else None for j in row] for row in rows]

    def query_vectors(self, base_q, lambda_q, mu: float) -> np.ndarray:
        """The query vectors this index is searched with for ``μ``: ``[Q, μ·QΛ]``, or for an index holding
        ``[P, μ₀·PΛ]`` (folded) ``[Q, (μ/μ₀)·QΛ]``: the same scores."""
        base_q, lambda_q = self.check_query_side(base_q, lambda_q)
        fold = float(self.info.get("fold", 1.0))
        return spar_query_vectors(base_q, lambda_q, mu / fold, self.variant)

    @property
    def refine(self) -> int:
        """Candidates re-ranked exactly per hit wanted (``index.refine``; 0 for a flat scan, which is exact)."""
        refine = int(self.info.get("options", {}).get("refine", 0) or 0)
        return refine if self.kind.approximate else 0

    def passage_rows(self):
        """The float32 passage vectors exact re-ranking reads, from the embeddings the index was built from."""
        if getattr(self, "_passage_rows", None) is None:
            from spar.index.approximate import PassageRows

            self._passage_rows = PassageRows.beside_index(self.info, getattr(self, "directory", None) or Path("."))
        return self._passage_rows

    def search_vectors(self, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, list[list[str | None]]]:
        """Search with ready-made query vectors (``[Q, μ·QΛ]`` for concat)."""
        qvecs = np.ascontiguousarray(np.atleast_2d(qvecs), dtype=np.float32)
        if qvecs.shape[1] != self.index.d:
            raise ArtifactError(f"query vectors have dimension {qvecs.shape[1]}, the index {self.index.d}")
        scores, labels = self.index.search(qvecs, k)
        ids = [[self.ids[j] if j >= 0 else None for j in row] for row in labels]
        return scores, ids
