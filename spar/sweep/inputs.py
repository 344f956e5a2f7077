"""What every frontier point shares: the run's base vectors, dev/test questions, BM25 runs and term matrices.

:class:`FrontierInputs` reads them once per frontier from the run's own artifacts (through
:class:`spar.experiment.inputs.ExperimentInputs`, as tune and evaluate do), with the base-only indexes and the
references (base, BM25, the hybrid: :func:`references`) that do not depend on Λ.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from spar.core.artifacts import is_complete
from spar.core.errors import ArtifactError
from spar.core.run_context import RunContext
from spar.index.types.registry import exhaustive_type
from spar.sweep.timing import time_beside_peers

#: The figures a point reports on test (and the references).
METRICS = ("nDCG@10", "R@100")


def top_run(q: np.ndarray, p: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], k: int):
    """The exact top ``k`` of ``q`` against ``p`` (:func:`spar.evaluate.exact.dense_search`) as a ranked run."""
    from spar.evaluate.exact import dense_search

    return dense_search(np.ascontiguousarray(q, dtype=np.float32), np.ascontiguousarray(p, dtype=np.float32),
                        query_ids, doc_ids, k)


class FrontierInputs:
    """The run's shared inputs: base vectors, dev/test queries, the teacher's runs and sparse term matrices."""

    def __init__(self, cfg):
        from spar.model.stored_vectors import load_embeddings
        from spar.experiment.inputs import ExperimentInputs
        from spar.experiment.plan import split_queries
        from spar.data.passages import corpus_texts
        from spar.lexical.terms import BM25Weights

        self.cfg = cfg
        base_dir = RunContext(cfg).embeddings("base")
        if not is_complete(base_dir):
            raise ArtifactError(f"{base_dir}: base passage embeddings are missing (run `spar encode "
                                "encode.encoders=[base]` first)")
        self.passages_arrow = RunContext(cfg).passages
        base = load_embeddings(base_dir)
        self.doc_ids, self.base_p = base.ids, np.asarray(base.vectors, dtype=np.float32)
        self.experiment = ExperimentInputs(cfg)
        self.dev, self.test = split_queries(cfg, "dev"), split_queries(cfg, "test")
        self.base_q = {s.split: self._base_queries(s) for s in (self.dev, self.test)}
        self.bm25 = {s.split: self.experiment.bm25_search(s, 100) for s in (self.dev, self.test)}
        label = cfg.label
        texts = list(corpus_texts(self.passages_arrow, label.fields))
        if len(texts) != len(self.doc_ids):
            raise ArtifactError(f"{self.passages_arrow} holds {len(texts)} passages, the base embeddings "
                                f"{len(self.doc_ids)}: re-run `spar encode`")
        self.weights = BM25Weights.fit(texts, k1=label.k1, b=label.b, fields=label.fields)
        self.passage_terms = self.weights.passage_matrix(texts)
        self.query_terms = {s.split: self.weights.query_matrix(list(s.texts.values())) for s in (self.dev, self.test)}

    @property
    def resolved(self):
        """The experiment resolved once (:class:`spar.experiment.plan.Experiment`): its Λs, encoders, index options."""
        return self.experiment.experiment

    def _base_queries(self, queries) -> np.ndarray:
        from spar.model.stored_vectors import load_embeddings

        d = self.experiment.query_dir("base", queries.split)
        if is_complete(d):
            stored = load_embeddings(d)
            position = {q: i for i, q in enumerate(stored.ids)}
            if all(q in position for q in queries.ids):
                return np.asarray(stored.vectors[[position[q] for q in queries.ids]], dtype=np.float32)
        return self.experiment.encoder("base").encode_query(list(queries.texts.values()))

    def index_options(self, storage: str):
        """The options the ``index`` stage builds an index of the run's config with
        (:attr:`spar.experiment.plan.Experiment.index_options`: the ``index`` section, seeded by the experiment),
        storing ``storage``, and without exact re-ranking (``refine`` 0: the frontier scores what an index finds)."""
        return self.resolved.index_options.model_copy(update={"storage": storage, "refine": 0})

    def base_index(self, index_type: str) -> Any:
        """The base-only float32 FAISS index of ``index_type`` (built once): a latency peer."""
        from spar.index.spar_index import build_spar_index

        cache = self.__dict__.setdefault("_base_indexes", {})
        if index_type not in cache:
            cache[index_type] = build_spar_index(self.base_p, None, index_type=index_type,
                                                 **self.index_options("float32").faiss_options())
        return cache[index_type]

    @cached_property
    def reference_figures(self) -> dict[str, dict[str, float]]:
        """:func:`references` of this run (computed once)."""
        return references(self)

    @property
    def hybrid_alpha(self) -> float:
        return self.reference_figures["hybrid"]["alpha"]

    def reference_latency(self, index_types: Sequence[str]) -> dict[str, dict[str, float]]:
        """Latency of the hybrid and of the base-only indexes of ``index_types`` (and of the exhaustive type), timed
        side by side once per frontier (none of them depends on Λ): ``{"hybrid": {...}, "base_flat": {...}, ...}``."""
        cache = self.__dict__.setdefault("_reference_latency", {})
        missing = [t for t in index_types if f"base_{t}" not in cache]
        if missing or "hybrid" not in cache:
            cache.update(time_beside_peers(self, list(dict.fromkeys([exhaustive_type().name, *index_types]))))
        return cache

    def latency(self, spar_indexes: Mapping[str, Any], spar_q: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Single-query and batched latency of SPAR indexes (FAISS indexes by type, with their query vectors), each
        timed side by side with the base-only index of its type and with the hybrid: every ratio divides timings of
        one moment."""
        from spar.evaluate.latency import ratios

        timings = time_beside_peers(self, list(spar_indexes), {t: (index, spar_q[t])
                                                               for t, index in spar_indexes.items()})
        return {t: {**timings[f"spar_{t}"], "vs_base": ratios(timings, f"spar_{t}", f"base_{t}"),
                    "vs_hybrid": ratios(timings, f"spar_{t}", "hybrid"), "base": timings[f"base_{t}"],
                    "hybrid": timings["hybrid"]} for t in spar_indexes}

    def lambda_vectors(self, model) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Λ's passage and dev/test query vectors (term-based kinds reuse the shared sparse matrices)."""
        passages = model.term_vectors(self.weights, self.passage_terms)
        if passages is not None:
            return passages, {s: model.term_vectors(self.weights, m) for s, m in self.query_terms.items()}
        from spar.data.passages import PassagesTable

        store = PassagesTable(self.passages_arrow, self.cfg.data.title_field or model.term_based)
        passages = store.get(np.arange(len(store)))
        return model.encode_passage(passages), {s.split: model.encode_query(list(s.texts.values()))
                                                for s in (self.dev, self.test)}


def references(inputs: FrontierInputs, metric: str = "nDCG@10") -> dict[str, dict[str, float]]:
    """Base, BM25 and the base + α·BM25 hybrid (α tuned on dev) on test: the frontier's horizontal lines."""
    from spar.evaluate.metrics import evaluate_run
    from spar.evaluate.candidates import hybrid_candidates, hybrid_fuse, tune_weight

    cfg = inputs.cfg
    base_dev = top_run(inputs.base_q["dev"], inputs.base_p, inputs.dev.ids, inputs.doc_ids, 100)
    alpha = tune_weight(hybrid_candidates(base_dev, inputs.bm25["dev"], cfg.tune.hybrid_normalize), inputs.dev.qrels,
                        metric).best
    base = top_run(inputs.base_q["test"], inputs.base_p, inputs.test.ids, inputs.doc_ids, 100)
    hybrid = {q: hybrid_fuse(base[q], inputs.bm25["test"].get(q, []), alpha, cfg.tune.hybrid_normalize, 100)
              for q in inputs.test.ids}
    qrels = inputs.test.qrels
    return {"base": {**evaluate_run(qrels, base, METRICS), "bytes_per_passage": 4 * inputs.base_p.shape[1]},
            "bm25": evaluate_run(qrels, inputs.bm25["test"], METRICS),
            "hybrid": {**evaluate_run(qrels, hybrid, METRICS), "alpha": alpha}}
