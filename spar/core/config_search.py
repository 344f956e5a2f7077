"""The sections of the stages that search with the SPAR vectors and ship them: ``tune``, ``index``, ``evaluate``,
``publish`` (:mod:`spar.core.config` assembles them with the others; every section is importable from there).

The names they choose from (:data:`~spar.core.config_sections.Variant`, ``Storage``, ``INDEX_TYPES``) are written once,
in :mod:`spar.core.config_sections`.

Example::

    >>> from spar.core.config_search import IndexSection
    >>> IndexSection(type="flat", storage="fs4").storage
    'fs4'
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from spar.core.config_fields import ADDED_LATER, PATH, RUNTIME
from spar.core.config_sections import EXHAUSTIVE_INDEX_TYPES, INDEX_TYPES, Section, Storage, Variant


class TuneSection(Section):
    metric: Literal["nDCG@10", "MRR@10", "R@100", "R@20", "Acc@5", "Acc@20", "Acc@100"] = Field(
        "nDCG@10", description="Selection metric: nDCG@10 (BEIR), MRR@10 (MS MARCO), R@100, or Acc@k (open-domain "
        "QA: a question counts when an answer is in its top k passages; needs answers)."
    )
    sets: list[str] | None = Field(
        None, json_schema_extra=ADDED_LATER,
        description="Question sets (data.question_sets) whose dev splits are pooled to tune the experiment's μ "
        "and α (default: every set with dev questions that does not tune its own).")
    grid: list[float] | None = Field(None, description="Explicit mu grid (default: 0.1..1.0 and reciprocals).")
    candidates: int | None = Field(
        None, ge=10, description="Top-k of each model whose union is re-scored for every mu (and depth of the "
        "hybrid's two lists); default 10 x the metric's cutoff, at least 100 (nDCG@10: 100, R@100: 1000)."
    )
    max_extensions: int = Field(4, ge=0, description="How many times the grid may be extended by x10 at an edge.")
    hybrid_alphas: list[float] | None = Field(None, description="Explicit alpha grid for base + alpha*BM25.")
    hybrid_normalize: bool = Field(
        False, description="Hybrid: centre each list's scores on their mid-range and divide by the range before "
        "base + alpha*BM25 (Pyserini's --normalization); default: raw scores, as Pyserini's default."
    )
    @field_validator("grid", "hybrid_alphas")
    @classmethod
    def _positive_finite_weights(cls, value: list[float] | None) -> list[float] | None:
        # nan or inf went through to a 60-line matplotlib traceback after the whole μ sweep (or a μ of nan in
        # tune.json); 0 and negatives to a ValueError at the sweep's end.
        if value is None:
            return value
        if not value:
            raise ValueError("an empty grid: give at least one weight, or leave it out (null) for the default grid")
        bad = [v for v in value if not math.isfinite(v) or v <= 0]
        if bad:
            raise ValueError(f"every weight must be a finite number above 0, not {bad[0]:g}")
        return value

    tune_both_variants: bool = Field(
        True, description="Also tune mu of the other variant (concat/sum) so evaluate reports both (sum needs "
        "equal dimensions)."
    )
    confirm: bool = Field(True, description="Confirm the chosen mu with one real search of the combined index.")


class IndexSection(Section):
    variant: Variant = Field(
        "concat", description="The SPAR combination, of the index and of the μ tuned for it: 'concat': [P, PΛ] "
        "(score = sim + mu*simΛ exactly); 'sum': P + PΛ (equal dims). (Before spar 0.2 also tune.variant.)"
    )
    type: str = Field(
        "flat", description="FAISS index type: flat (exhaustive), hnsw (graph), ivf (inverted lists), ivfpq (IVF + "
        "PQ), or another registered in spar/index/types/; or auto: a flat scan below index.auto_flat_below "
        "passages, above it the approximate index chosen by measurement (spar.index.types.hnsw.HnswIndex.auto: its "
        "storage, and the graph, search and exact re-ranking settings left at their defaults: an hnsw_ef_search or "
        "refine you give is kept)."
    )
    auto_flat_below: int = Field(
        300_000, ge=0, json_schema_extra=ADDED_LATER,
        description="index.type=auto: corpora smaller than this are served by a flat scan.")
    storage: Storage = Field(
        "sq4", description="How passage vectors [P, PΛ] are stored: float32, float16, 8/6/4-bit scalar "
        "quantizers, fast-scan PQ with a 4-bit code per 1 (fs4) or 2 (fs2) dimensions, or PQ (pq_m codes of pq_nbits "
        "bits). Queries stay float32; μ is tuned against the stored vectors. Default: the embedded default's "
        "frontier choice (the cheapest point within one seed sd of the best on dev)."
    )
    hnsw_m: int = Field(32, ge=4, description="HNSW graph neighbours per node (M).")
    hnsw_ef_construction: int = Field(200, ge=1, description="HNSW build-time candidate list size.")
    hnsw_ef_search: int = Field(
        256, json_schema_extra=RUNTIME, ge=1, description="HNSW search-time candidate list size (efSearch).")
    ivf_nlist: int | None = Field(None, description="IVF lists (default ~4*sqrt(N)).")
    pq_m: int = Field(16, ge=1, description="PQ sub-quantisers (must divide the dimension).")
    pq_nbits: int = Field(8, ge=1, le=16, description="Bits per PQ code.")
    nprobe: int = Field(32, json_schema_extra=RUNTIME, ge=1, description="IVF lists visited per query.")
    train_size: int | None = Field(None, ge=1, description="IVF-PQ training sample (default max(16384, 64*nlist)).")
    fold: Literal["auto", "never"] = Field(
        "auto", json_schema_extra=ADDED_LATER, description="'auto': an approximate index (hnsw, ivf, ivfpq) holds "
        "[P, mu0*PΛ] with mu0 the tuned μ (tune/tune.json), so its lists and links follow the score that ranks, and "
        "is searched with [Q, (mu/mu0)*QΛ] (the same scores for every μ); a flat index is never folded. 'never': "
        "[P, PΛ] for every type (spar.index.approximate).")
    refine: int = Field(
        0, ge=0, json_schema_extra=RUNTIME, description="Approximate indexes: re-rank the top refine*k of the index "
        "with exact float32 scores read from the passage embeddings on disk (0: off). The served scores are then "
        "the exact scan's, and μ is tuned against float32 vectors. A search-time setting: no re-indexing.")

    @field_validator("type")
    @classmethod
    def _registered_type(cls, value: str) -> str:
        # A str checked against the registered names, not a Literal: a type registered from outside spar (a plug-in,
        # a test: spar.index.types.registry.register) is accepted from then on.
        if value != "auto" and value not in INDEX_TYPES:
            raise ValueError(f"index.type={value!r}: use one of {', '.join(INDEX_TYPES)}, or auto")
        return value

    @model_validator(mode="after")
    def _refine_needs_candidates(self) -> "IndexSection":
        # A flat index ignored it: `spar index index.refine=4` said "updated: refine 0 -> 4" and served sq4 scores.
        if self.type in EXHAUSTIVE_INDEX_TYPES and self.refine:
            approximate = [t for t in INDEX_TYPES if t not in EXHAUSTIVE_INDEX_TYPES]
            raise ValueError(f"index.refine={self.refine} re-ranks the candidates of an approximate index "
                             f"({', '.join(approximate)}, or auto above index.auto_flat_below); a {self.type} index "
                             "scans every passage and serves its storage's scores: use index.storage=float32 for exact "
                             "scores, or leave index.refine at 0")
        return self


class EvaluateSection(Section):
    k: int = Field(100, ge=10, description="Depth of every run file.")
    metrics: list[str] = Field(["nDCG@10", "MRR@10", "R@20", "R@100"], description="ir_measures names.")
    rbo_p: float = Field(0.9, gt=0, lt=1)
    shuffled: bool = Field(True, description="Also evaluate token-shuffled queries.")
    accuracy_at: list[int] = Field([20, 100], description="k of Acc@k when answers are given.")
    published: str | None = Field(None, json_schema_extra={**PATH, **ADDED_LATER}, description="Published figures "
                                  "shown beside the results, never mixed in (spar.evaluate.published: JSON).")
    exact_spar: bool = Field(False, json_schema_extra=ADDED_LATER, description="Also rank SPAR by an exact scan "
                             "of the stored float32 [P, PΛ] vectors beside the index (system spar_exact): what an "
                             "approximate or quantized index costs, on the test questions. One more streamed pass "
                             "over the passage vectors per chunk of questions.")
    wandb_mode: Literal["offline", "online", "disabled"] = Field("offline", json_schema_extra=RUNTIME)


class PublishSection(Section):
    output: str | None = Field(None, json_schema_extra=PATH,
                               description="Model directory (default: <output_dir>/model).")
    push_to_hub: str | None = Field(
        None, json_schema_extra=RUNTIME, description="Upload to this hub repo id (needs network and a token).")
    private: bool = Field(True, json_schema_extra=RUNTIME, description="Create the hub repo as private.")
    license: str = Field("apache-2.0", description="Licence of the published model (model card metadata).")
    base_license: str | None = Field(
        None, description="Licence of the base retriever (default: known for bundled models, e.g. apache-2.0)."
    )
    data_license: str | None = Field(
        None, description="Licence of the training corpus, stated in the model card (e.g. 'CC BY-NC 2.0' for SciFact)."
    )
    dataset: str | None = Field(None, description="Hub id of the training corpus for the card (e.g. 'BeIR/scifact').")
    language: list[str] = Field(["en"], json_schema_extra=ADDED_LATER,
                                description="ISO 639-1 codes of the card's `language` metadata (the corpus's).")
    copy_index: bool = Field(
        False, description="Copy the FAISS index and passages.arrow into the model dir (else their paths are "
        "recorded); an index that re-ranks exactly (index.refine) takes the float32 passage embeddings it reads along."
    )
