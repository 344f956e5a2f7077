"""``static`` Λ: a learned bag of term embeddings, distilled from the sparse teacher (minutes on a CPU).

Every term of the teacher's vocabulary has an embedding row ``E[t]`` [dim]. A query is the sum of its terms' rows
(times their counts), a passage the sum weighted by the teacher's BM25 weights, so BM25's saturation and length
normalisation stay in the model and only the term geometry is learnt::

    Λ(q) = Σ_t c(t, q) E[t]        Λ(p) = Σ_t w_BM25(t, p) E[t]

``E`` starts as the ``projection`` Λ's random matrix (so an untrained static Λ *is* the projection) and is trained
with Lightning on the label shards: for each training query, the objective compares Λ's scores with the teacher's
exact BM25 scores over every passage of the batch — its labelled top-K, the other queries' passages and
``train.lexical.random_negatives`` passages drawn from the whole corpus (:meth:`StaticLambda.training_loss`).
Teacher scores of pairs the labels do not hold are computed exactly from the sparse term matrices.

At inference a static Λ is two sparse-dense products: it encodes thousands of passages per second on one core.

Example::

    >>> from spar.lexical.projection import ProjectionLambda
    >>> from spar.lexical.static import StaticLambda
    >>> corpus = ["salient phrases in dense retrieval", "sparse retrieval with BM25", "vitamin C and scurvy"]
    >>> start = ProjectionLambda.fit(corpus, dim=64, seed=0)
    >>> lam = StaticLambda.from_projection(start)          # untrained: the same vectors as the projection
    >>> bool(abs(lam.encode_passage(corpus) - start.encode_passage(corpus)).max() < 1e-5)
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from spar.core.errors import ArtifactError
from spar.lexical.bag import STATISTICS_FILES, TermLambda, require_bm25
from spar.lexical.base import PassageLike, TrainingContext, encode_in_batches, read_lambda_config
from spar.lexical.terms import BM25Weights

EMBEDDINGS_FILE = "term_embeddings.safetensors"


def sparse_bags(matrix: sp.csr_matrix) -> dict[str, torch.Tensor]:
    """A CSR matrix as ``F.embedding_bag`` inputs: term ids, bag offsets and per-term weights."""
    matrix = matrix.tocsr()
    return {"indices": torch.from_numpy(matrix.indices.astype(np.int64)),
            "offsets": torch.from_numpy(matrix.indptr[:-1].astype(np.int64)),
            "weights": torch.from_numpy(matrix.data.astype(np.float32))}


class StaticBatchPreparer:
    """Model inputs of a static Λ: term bags of queries (analysed now) and passages (rows of the corpus's BM25
    matrix, computed once), and the teacher's exact score of every (query, batch passage) pair."""

    def __init__(self, weights: BM25Weights, corpus: sp.csr_matrix):
        self.weights, self.corpus = weights, corpus.tocsr()

    def queries(self, texts: Sequence[str]) -> dict[str, Any]:
        counts = self.weights.query_matrix(list(texts))
        return {**sparse_bags(counts), "_counts": counts}

    def passages(self, passages: Sequence[tuple[str, str]], rows: np.ndarray) -> dict[str, Any]:
        rows = np.asarray(rows, dtype=np.int64)
        return {**sparse_bags(self.corpus[rows]), "_rows": rows}

    def finish(self, batch: dict[str, Any]) -> None:
        """Add ``teacher_matrix`` [queries, batch passages]: exact BM25 (sparse dot products)."""
        counts, rows = batch["queries"].pop("_counts"), batch["passages"].pop("_rows")
        batch["teacher_matrix"] = torch.from_numpy((counts @ self.corpus[rows].T).toarray().astype(np.float32))


class StaticLambda(TermLambda):
    """A bag of term embeddings over the teacher's vocabulary and BM25 weights (see the module docstring).

    Args:
        weights: the corpus's BM25 statistics (vocabulary, analyzer, df, average length, k1, b).
        embeddings: initial term embeddings [V, dim] (e.g. the projection's random matrix).
        objective: ``kl`` (listwise KL between the teacher's and Λ's softmax over the batch's passages) or
            ``mse`` (squared error between Λ's and the teacher's scores).
        temperature: both score lists are divided by it before the softmax (``kl``).
        init: a description of the initialisation, kept in ``spar_lambda.json``.
    """

    kind = "static"
    default_learning_rate = 1e-3
    files = {"spar_lambda.json": "kind, dim, objective, initialisation, teacher statistics",
             "term_embeddings.safetensors": "float32 [V, dim] term embeddings", **STATISTICS_FILES}

    def __init__(self, weights: BM25Weights, embeddings: torch.Tensor | np.ndarray, objective: str = "kl",
                 temperature: float = 1.0, init: dict[str, Any] | None = None):
        super().__init__()
        embeddings = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
        if embeddings.ndim != 2 or embeddings.shape[0] != weights.vocab_size:
            raise ArtifactError(f"term embeddings of shape {tuple(embeddings.shape)} do not fit a vocabulary of "
                                f"{weights.vocab_size} terms")
        if objective not in ("kl", "mse"):
            raise ValueError(f"unknown static Λ objective {objective!r}; use 'kl' or 'mse'")
        self.weights = weights
        self.embedding = nn.Embedding.from_pretrained(embeddings.clone(), freeze=False)
        self.objective, self.temperature = objective, float(temperature)
        self.init = dict(init or {})

    @classmethod
    def build(cls, train, passages_arrow, *, teacher: str, k1: float, b: float, fields,
              seed: int) -> "StaticLambda":
        """Initialised from the projection :meth:`ProjectionLambda.build` fits."""
        from spar.lexical.projection import ProjectionLambda

        require_bm25(train.kind, teacher)
        projection = ProjectionLambda.build(train, passages_arrow, teacher=teacher, k1=k1, b=b, fields=fields,
                                            seed=seed)
        return cls.from_projection(projection, objective=train.lexical.objective,
                                   temperature=train.lexical.temperature)

    @classmethod
    def from_projection(cls, projection, **options: Any) -> "StaticLambda":
        """Start from a :class:`~spar.lexical.projection.ProjectionLambda`: its statistics and random matrix."""
        init = {"from": "projection", "projection": projection.projection, "seed": projection.seed}
        if projection.projection == "sparse":
            init["nonzeros"] = projection.nonzeros
        return cls(projection.weights, projection.dense_matrix(), init=init, **options)

    @property
    def dim(self) -> int:
        return int(self.embedding.weight.shape[1])

    # -- vectors ---------------------------------------------------------------------------------------------
    def _embed_terms(self, matrix: sp.csr_matrix) -> np.ndarray:
        table = self.embedding.weight.detach().cpu().numpy()
        return np.ascontiguousarray(matrix @ table, dtype=np.float32)

    def term_table(self) -> np.ndarray:
        return self.embedding.weight.detach().cpu().numpy()

    def term_vectors(self, weights, matrix) -> np.ndarray | None:
        return np.asarray(matrix @ self.term_table(), dtype=np.float32) if weights is self.weights else None

    def card_facts(self, train) -> dict[str, Any]:
        t = train
        return self._card_facts(train, {"kind": self.kind, "loss": t.lexical.objective, "batch size": t.batch_size,
                                      "hard negatives": t.hard_negatives, "learning rate": t.learning_rate or "1e-3"})

    def encode_query(self, texts: Iterable[str], batch_size: int = 4096) -> np.ndarray:
        return encode_in_batches(list(texts), lambda t: self._embed_terms(self.weights.query_matrix(t)), self.dim,
                                 batch_size)

    def encode_passage(self, passages: Iterable[PassageLike], batch_size: int = 4096) -> np.ndarray:
        return encode_in_batches([self.weights.passage_text(p) for p in passages],
                                 lambda t: self._embed_terms(self.weights.passage_matrix(t)), self.dim, batch_size)

    def with_statistics(self, passages: Iterable[PassageLike]) -> "StaticLambda":
        """Refit the BM25 statistics on ``texts``. Learnt rows stay with their terms; the target corpus's new terms
        get their initial rows (the projection's, from the seed in ``init``: an untrained term is a projected one),
        or zero rows when the initialisation is unknown (e.g. a Λ read from a published model)."""
        from spar.lexical.projection import random_matrix

        weights = self.weights.refit(passages)
        learnt = self.embedding.weight.detach().cpu().numpy()
        new_terms = weights.vocab_size - learnt.shape[0]
        if self.init.get("from") == "projection" and new_terms:
            rows = random_matrix(weights.vocab, self.dim, self.init["projection"], int(self.init["seed"]),
                                 self.init.get("nonzeros"))
            rows = rows[learnt.shape[0]:]
            rows = rows.toarray() if isinstance(rows, sp.csr_matrix) else rows
        else:
            rows = np.zeros((new_terms, self.dim), dtype=np.float32)
        table = np.concatenate([learnt, np.asarray(rows, dtype=np.float32)])
        return StaticLambda(weights, table, self.objective, self.temperature, self.init).eval()

    # -- training --------------------------------------------------------------------------------------------
    def batch_preparer(self, passages_path: str | Path | None = None, corpus: sp.csr_matrix | None = None,
                       **_: Any) -> StaticBatchPreparer:
        """Passages are looked up by row in the corpus's BM25 matrix (``corpus``, or computed once from the
        passages table ``passages_path`` read through the statistics' fields: ~12 bytes per (passage, term) pair)."""
        if corpus is None:
            if passages_path is None:
                raise ValueError("a static Λ's batch preparer needs the corpus (passages table or BM25 matrix)")
            from spar.data.passages import corpus_texts

            corpus = self.weights.passage_matrix(list(corpus_texts(passages_path, self.weights.fields)))
        return StaticBatchPreparer(self.weights, corpus)

    def _bag(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.embedding_bag(batch["indices"], self.embedding.weight, batch["offsets"], mode="sum",
                               per_sample_weights=batch["weights"])

    def forward_queries(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._bag(batch)

    def forward_passages(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._bag(batch)

    def training_loss(self, q: torch.Tensor, p: torch.Tensor, batch: dict[str, Any],
                      context: TrainingContext) -> dict[str, torch.Tensor]:
        """Distil the teacher's scores over every passage of the batch (labelled, in-batch and random)."""
        student = (q @ p.T).float()
        teacher = batch["teacher_matrix"].to(student.device)
        if self.objective == "mse":
            loss = F.mse_loss(student, teacher)
            return {"mse": loss, "loss": loss}
        t = self.temperature
        loss = F.kl_div(F.log_softmax(student / t, dim=-1), F.log_softmax(teacher / t, dim=-1), log_target=True,
                        reduction="batchmean")
        return {"kl": loss, "loss": loss}

    # -- persistence -----------------------------------------------------------------------------------------
    def config_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "temperature": self.temperature, "init": self.init,
                "teacher": self.weights.describe()}

    def save(self, directory: str | Path) -> None:
        from safetensors.torch import save_file

        self.weights.save(directory)
        save_file({"embeddings": self.embedding.weight.detach().cpu().contiguous()},
                  str(Path(directory) / EMBEDDINGS_FILE))
        self.write_config(directory)

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "StaticLambda":
        from safetensors.torch import load_file

        d = Path(directory)
        config = read_lambda_config(d)
        if not (d / EMBEDDINGS_FILE).exists():
            raise ArtifactError(f"{d}: missing file '{EMBEDDINGS_FILE}' (the static Λ is damaged; re-run `spar train`)")
        embeddings = load_file(str(d / EMBEDDINGS_FILE))["embeddings"]
        if embeddings.shape[1] != int(config["dim"]):
            raise ArtifactError(f"{d / EMBEDDINGS_FILE}: dimension {embeddings.shape[1]}, but {d / 'spar_lambda.json'} "
                                f"says {config['dim']}")
        model = cls(BM25Weights.load(d), embeddings, config.get("objective", "kl"), config.get("temperature", 1.0),
                    config.get("init"))
        return model.to(device).eval()
