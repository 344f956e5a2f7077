"""Training data for Λ: memory-mapped labels and passages, seeded resumable batches, the validation surrogate.

- :class:`LabelStore` / :class:`PassagesTable` memory-map the label shards (:data:`spar.core.schemas.LABELS`) and
  ``queries/passages.arrow``.
- :class:`ContrastiveBatchSampler` draws, each epoch, every training query's positive and hard negatives (seeded by
  ``(seed, epoch)``), optionally grouping passages of similar length, and splits global batches across DDP ranks;
  its ``state_dict`` (epoch, batches served) makes a resumed run replay exactly the batches an uninterrupted run
  would see.
- :class:`TrainBatchDataset` turns a batch plan into model inputs through the Λ's own
  :class:`~spar.lexical.base.BatchPreparer` (tokenisation for a transformer, term bags for a static Λ), so the same
  data path feeds every trainable kind.
- :class:`SurrogatePool` and :func:`surrogate_mrr`: the paper's validation surrogate (dev queries ranked against
  the pool of every dev query's teacher top-1 and first hard negative).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import lightning.pytorch as pl
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch.utils.data import DataLoader, Sampler

from spar.core.config import TrainSection
from spar.core.errors import ArtifactError, ConfigError
from spar.data.passages import PassagesTable
from spar.core.schemas import LABELS, read_shards

from spar.core.console import adopt_library_loggers  # noqa: E402

adopt_library_loggers()  # Lightning's own console handler printed everything twice
log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------------
# Validation metric
# ----------------------------------------------------------------------------------------------------------------


def surrogate_mrr(query_vecs: np.ndarray | torch.Tensor, pool_vecs: np.ndarray | torch.Tensor,
                  positive_pool_index: np.ndarray | torch.Tensor, chunk_size: int = 1024) -> float:
    """Mean reciprocal rank of each query's positive among all pool passages, by dot product (SPAR's surrogate).

    ``query_vecs`` [n, d], ``pool_vecs`` [m, d], ``positive_pool_index`` [n] (row of each query's positive in the
    pool). Ties count against the query (rank = 1 + passages scoring >= the positive, other than itself), so a
    collapsed model that scores everything equally gets no credit.

    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> pool = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> surrogate_mrr(q, pool, np.array([0, 1]))   # query 0: rank 1; query 1: ties with passage 2 -> rank 2
    0.75
    """
    q = torch.as_tensor(np.asarray(query_vecs) if not torch.is_tensor(query_vecs) else query_vecs).float()
    p = torch.as_tensor(np.asarray(pool_vecs) if not torch.is_tensor(pool_vecs) else pool_vecs).float().to(q.device)
    pos = torch.as_tensor(np.asarray(positive_pool_index) if not torch.is_tensor(positive_pool_index)
                          else positive_pool_index).long().to(q.device)
    if q.shape[0] == 0:
        raise ValueError("surrogate_mrr: no queries")
    if q.shape[0] != pos.shape[0]:
        raise ValueError(f"surrogate_mrr: {q.shape[0]} queries but {pos.shape[0]} positive indices")
    total = 0.0
    for start in range(0, q.shape[0], chunk_size):
        scores = q[start:start + chunk_size] @ p.T
        idx = pos[start:start + chunk_size]
        positive = scores.gather(1, idx[:, None])
        ranks = (scores >= positive).sum(1)  # includes the positive itself
        total += float((1.0 / ranks.double()).sum())
    return total / q.shape[0]


# ----------------------------------------------------------------------------------------------------------------
# Memory-mapped labels and passages
# ----------------------------------------------------------------------------------------------------------------


class ListColumn:
    """A ``list<number>`` column of a memory-mapped Arrow table, read as zero-copy numpy per record batch.

    ``lengths(idx)`` and ``take(idx, slot)`` are vectorised lookups of many records at once.
    """

    def __init__(self, column: pa.ChunkedArray):
        chunks = [c for c in column.chunks if len(c)]
        self.starts = np.cumsum([0] + [len(c) for c in chunks])
        self.offsets = [c.offsets.to_numpy(zero_copy_only=False) for c in chunks]
        self.values = [c.values.to_numpy(zero_copy_only=False) for c in chunks]

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _locate(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        chunk = np.searchsorted(self.starts, idx, side="right") - 1
        return chunk, idx - self.starts[chunk]

    def lengths(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        out = np.empty(len(idx), dtype=np.int64)
        chunk, local = self._locate(idx)
        for c in np.unique(chunk):
            sel = chunk == c
            off = self.offsets[c]
            out[sel] = off[local[sel] + 1] - off[local[sel]]
        return out

    def take(self, idx: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """Element ``slot[i]`` of record ``idx[i]`` (callers keep slots within the record's length)."""
        idx = np.asarray(idx, dtype=np.int64)
        slot = np.asarray(slot, dtype=np.int64)
        chunk, local = self._locate(idx)
        out = None
        for c in np.unique(chunk):
            sel = chunk == c
            vals = self.values[c][self.offsets[c][local[sel]] + slot[sel]]
            if out is None:
                out = np.empty(len(idx), dtype=vals.dtype)
            out[sel] = vals
        return out if out is not None else np.empty(0, dtype=np.int64)


class LabelStore:
    """The label shards (memory-mapped) with vectorised access to each query's labelled rows and teacher scores."""

    def __init__(self, labels_dir: str | Path):
        self.labels_dir = Path(labels_dir)
        self.table = read_shards(self.labels_dir, "labels")
        missing = [f.name for f in LABELS if f.name not in self.table.column_names]
        if missing:
            raise ArtifactError(f"{self.labels_dir}: label shards lack columns {missing} "
                                "(schema spar.core.schemas.LABELS)")
        self.positive_rows = ListColumn(self.table.column("positive_rows"))
        self.positive_scores = ListColumn(self.table.column("positive_scores"))
        self.negative_rows = ListColumn(self.table.column("negative_rows"))
        self.negative_scores = ListColumn(self.table.column("negative_scores"))

    def __len__(self) -> int:
        return self.table.num_rows

    def split_indices(self, split: str) -> np.ndarray:
        mask = pc.equal(self.table.column("split"), split)
        return np.flatnonzero(mask.to_numpy(zero_copy_only=False)).astype(np.int64)

    def queries(self, idx: Sequence[int]) -> list[str]:
        return self.table.column("query").take(pa.array(np.asarray(idx, dtype=np.int64))).to_pylist()


# ----------------------------------------------------------------------------------------------------------------
# Sampling and batches
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainItem:
    """One query of a training step: its label record, sampled positive slot and hard-negative slots."""

    label_index: int
    positive_slot: int
    negative_slots: tuple[int, ...]


class ContrastiveBatchSampler(Sampler[list[TrainItem]]):
    """Seeded per-epoch batches of :class:`TrainItem`, split across DDP ranks.

    Each epoch (``set_epoch``, called by Lightning) reshuffles the training queries and redraws every query's
    positive (uniform over its ``n_p``) and ``hard_negatives`` (without replacement from its ``n_n``). With
    ``passage_lengths`` the global batches are formed from chunks of ``group_chunk`` batches sorted by the drawn
    passages' length, then shuffled, so each step pads little. Rank ``r`` of ``W`` takes slice ``r`` of every
    global batch; ``skip_batches`` resumes mid-epoch after a checkpoint (same data order as an uninterrupted run).
    """

    def __init__(self, labels: LabelStore, query_indices: np.ndarray, batch_size: int, hard_negatives: int,
                 seed: int, world_size: int = 1, rank: int = 0, passage_lengths: np.ndarray | None = None,
                 group_chunk: int = 64, require_negatives: bool = False):
        self.labels = labels
        self.batch_size = batch_size
        self.hard_negatives = hard_negatives
        self.seed = seed
        self.world_size = world_size
        self.rank = rank
        self.passage_lengths = passage_lengths
        self.group_chunk = group_chunk
        self.epoch = 0
        self.skip = 0
        query_indices = np.asarray(query_indices, dtype=np.int64)
        n_pos = labels.positive_rows.lengths(query_indices)
        n_neg = labels.negative_rows.lengths(query_indices)
        usable = n_pos > 0
        if require_negatives:
            usable &= n_neg > 0
        self.query_indices, self.n_pos, self.n_neg = query_indices[usable], n_pos[usable], n_neg[usable]
        self.dropped = int((~usable).sum())
        if len(self.query_indices) < batch_size * world_size:
            raise ConfigError(f"{labels.labels_dir}: {len(self.query_indices)} usable training queries, fewer than one "
                              f"global batch (train.batch_size={batch_size} x {world_size} devices)")

    def __len__(self) -> int:
        return len(self.query_indices) // (self.batch_size * self.world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip_batches(self, count: int) -> None:
        """Skip the first ``count`` batches of the next epoch iterated (resuming mid-epoch)."""
        self.skip = count

    def _negative_slots(self, rng: np.random.Generator) -> np.ndarray:
        """[n, k] distinct slots below each query's n_n (-1 where it has fewer), drawn in chunks to bound memory."""
        n, k = len(self.query_indices), self.hard_negatives
        slots = np.full((n, k), -1, dtype=np.int64)
        width = int(self.n_neg.max()) if n else 0
        if not k or not width:
            return slots
        for start in range(0, n, 1 << 20):
            n_neg = self.n_neg[start:start + (1 << 20)]
            keys = rng.random((len(n_neg), width))
            keys[np.arange(width)[None, :] >= n_neg[:, None]] = 2.0  # absent negatives sort last
            picked = np.argsort(keys, axis=1)[:, :k]
            if picked.shape[1] < k:
                picked = np.pad(picked, ((0, 0), (0, k - picked.shape[1])), constant_values=-1)
            slots[start:start + len(n_neg)] = np.where(np.arange(k)[None, :] < n_neg[:, None], picked, -1)
        return slots

    def draw(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """An epoch's plan: ``order`` [n_batches, global_batch] (positions in ``query_indices``), the positive slot
        and the negative slots of every query."""
        rng = np.random.default_rng([self.seed, epoch])
        n = len(self.query_indices)
        order = rng.permutation(n)
        pos_slot = (rng.random(n) * self.n_pos).astype(np.int64)
        neg_slots = self._negative_slots(rng)
        global_batch = self.batch_size * self.world_size
        n_batches = n // global_batch
        order = order[: n_batches * global_batch]
        if self.passage_lengths is not None:
            qi = self.query_indices[order]
            length = self.passage_lengths[self.labels.positive_rows.take(qi, pos_slot[order])].astype(np.int64)
            if self.hard_negatives:
                first = neg_slots[order, 0]
                has = first >= 0
                neg_len = self.passage_lengths[self.labels.negative_rows.take(qi[has], first[has])]
                length[has] = np.maximum(length[has], neg_len)
            chunk = global_batch * self.group_chunk
            for start in range(0, len(order), chunk):
                part = slice(start, start + chunk)
                order[part] = order[part][np.argsort(-length[part], kind="stable")]
            order = order.reshape(n_batches, global_batch)[rng.permutation(n_batches)]
        return order.reshape(n_batches, global_batch), pos_slot, neg_slots

    def __iter__(self) -> Iterator[list[TrainItem]]:
        skip, self.skip = self.skip, 0
        order, pos_slot, neg_slots = self.draw(self.epoch)
        for batch in order[skip:]:
            mine = batch[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
            yield [TrainItem(int(self.query_indices[i]), int(pos_slot[i]),
                             tuple(int(s) for s in neg_slots[i] if s >= 0))
                   for i in mine]


class TrainBatchDataset(torch.utils.data.Dataset):
    """Turns a list of :class:`TrainItem` into one tokenised training batch (runs in DataLoader workers).

    Passages are deduplicated within the batch. Keys: ``queries``/``passages`` (tokenised), ``target`` (each
    query's positive, an index into the batch's passages), ``passage_rows`` (corpus rows of those passages),
    ``positive_rows`` ([B, n_p] every teacher positive of each query, -1 padded; to mask false negatives),
    ``candidates`` ([B, m] indices into the batch's passages, -1 padded: the positive, the hard negatives, then the
    query's other labelled passages for KL) and ``teacher_scores`` ([B, m]).
    """

    def __init__(self, labels_dir: str | Path, passages_path: str | Path, use_title: bool, preparer,
                 kl_passages: int = 0, random_negatives: int = 0, seed: int = 42):
        self.labels_dir, self.passages_path, self.use_title = Path(labels_dir), Path(passages_path), use_title
        self.preparer = preparer
        self.kl_passages = kl_passages
        self.random_negatives, self.seed = random_negatives, seed
        self._labels: LabelStore | None = None
        self._passages: PassagesTable | None = None

    # Memory maps are opened lazily in each worker process and never pickled.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_labels": None, "_passages": None}

    @property
    def labels(self) -> LabelStore:
        if self._labels is None:
            self._labels = LabelStore(self.labels_dir)
        return self._labels

    @property
    def passages(self) -> PassagesTable:
        if self._passages is None:
            self._passages = PassagesTable(self.passages_path, self.use_title)
        return self._passages

    def __len__(self) -> int:  # batches come from the batch sampler; the length is never used for indexing
        return len(self.labels)

    def __getitem__(self, item: TrainItem) -> dict[str, Any]:
        return self.__getitems__([item])

    @staticmethod
    def _all_slots(idx: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record, slot) pairs enumerating every element of each record, record by record."""
        rep = np.repeat(idx, counts)
        slots = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        return rep, slots

    def __getitems__(self, items: list[TrainItem]) -> dict[str, Any]:
        labels = self.labels
        b = len(items)
        idx = np.array([it.label_index for it in items], dtype=np.int64)
        n_pos = labels.positive_rows.lengths(idx)
        pos_slot = np.array([it.positive_slot for it in items], dtype=np.int64)
        cand_rows = [[int(r)] for r in labels.positive_rows.take(idx, pos_slot)]
        cand_scores = [[float(s)] for s in labels.positive_scores.take(idx, pos_slot)]
        for i, it in enumerate(items):
            if it.negative_slots:
                rec, ns = np.full(len(it.negative_slots), idx[i]), np.array(it.negative_slots)
                cand_rows[i] += labels.negative_rows.take(rec, ns).tolist()
                cand_scores[i] += labels.negative_scores.take(rec, ns).astype(float).tolist()
        # All teacher positives of each query: to mask them as in-batch negatives, and for KL.
        rec, slots = self._all_slots(idx, n_pos)
        all_pos_rows = labels.positive_rows.take(rec, slots)
        positive_rows = torch.full((b, max(1, int(n_pos.max()))), -1, dtype=torch.long)
        positive_rows[torch.from_numpy(np.repeat(np.arange(b), n_pos)), torch.from_numpy(slots)] = \
            torch.from_numpy(all_pos_rows.astype(np.int64))
        if self.kl_passages:
            # The rest of the query's labelled list (positives then negatives, teacher order), up to kl_passages.
            n_neg = labels.negative_rows.lengths(idx)
            all_pos_scores = labels.positive_scores.take(rec, slots)
            nrec, nslots = self._all_slots(idx, n_neg)
            all_neg_rows = labels.negative_rows.take(nrec, nslots)
            all_neg_scores = labels.negative_scores.take(nrec, nslots)
            p_start, n_start = np.cumsum(n_pos) - n_pos, np.cumsum(n_neg) - n_neg
            for i, it in enumerate(items):
                used_neg = set(it.negative_slots)
                extra = [(all_pos_rows[p_start[i] + s], all_pos_scores[p_start[i] + s])
                         for s in range(n_pos[i]) if s != it.positive_slot]
                extra += [(all_neg_rows[n_start[i] + s], all_neg_scores[n_start[i] + s])
                          for s in range(n_neg[i]) if s not in used_neg]
                for row, score in extra[: max(0, self.kl_passages - len(cand_rows[i]))]:
                    cand_rows[i].append(int(row))
                    cand_scores[i].append(float(score))
        flat = np.array([r for rows in cand_rows for r in rows], dtype=np.int64)
        if self.random_negatives:
            # Passages drawn from the whole corpus (seeded by the batch, so a resumed run draws the same ones).
            rng = np.random.default_rng([self.seed, *idx[:4].tolist(), b])
            extra = rng.choice(len(self.passages), size=min(self.random_negatives, len(self.passages)), replace=False)
            flat_all = np.concatenate([flat, extra.astype(np.int64)])
        else:
            flat_all = flat
        unique_rows = np.unique(flat_all)
        inverse = np.searchsorted(unique_rows, flat)
        width = max(len(r) for r in cand_rows)
        candidates = torch.full((b, width), -1, dtype=torch.long)
        teacher = torch.zeros((b, width), dtype=torch.float32)
        start = 0
        for i, rows in enumerate(cand_rows):
            candidates[i, :len(rows)] = torch.from_numpy(inverse[start:start + len(rows)].astype(np.int64))
            teacher[i, :len(rows)] = torch.tensor(cand_scores[i], dtype=torch.float32)
            start += len(rows)
        batch = {  # plain dicts of tensors (not BatchEncoding): pinned and moved to the device like any batch
            "queries": dict(self.preparer.queries(labels.queries(idx))),
            "passages": dict(self.preparer.passages(self.passages.get(unique_rows), unique_rows)),
            "target": candidates[:, 0].clone(),
            "passage_rows": torch.from_numpy(unique_rows.astype(np.int64)),
            "positive_rows": positive_rows,
            "candidates": candidates,
            "teacher_scores": teacher,
        }
        if hasattr(self.preparer, "finish"):
            self.preparer.finish(batch)  # kind-specific extras, e.g. exact teacher scores of every pair
        return batch


class EncodeDataset(torch.utils.data.Dataset):
    """Validation inputs: dev queries (``kind='query'``, by label index) or pool passages (``'passage'``, by row).

    ``__getitems__`` returns a tokenised batch plus ``index`` (each item's position in ``keys``).
    """

    def __init__(self, kind: str, keys: np.ndarray, labels_dir: str | Path, passages_path: str | Path,
                 use_title: bool, preparer):
        self.kind, self.keys = kind, np.asarray(keys, dtype=np.int64)
        self.labels_dir, self.passages_path, self.use_title = Path(labels_dir), Path(passages_path), use_title
        self.preparer = preparer
        self._store: LabelStore | PassagesTable | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])

    def __getitems__(self, positions: list[int]) -> dict[str, Any]:
        keys = self.keys[np.asarray(positions, dtype=np.int64)]
        if self._store is None:
            self._store = (LabelStore(self.labels_dir) if self.kind == "query"
                           else PassagesTable(self.passages_path, self.use_title))
        if self.kind == "query":
            tokens = self.preparer.queries(self._store.queries(keys))
        else:
            tokens = self.preparer.passages(self._store.get(keys), keys)
        tokens = {k: v for k, v in tokens.items() if not k.startswith("_")}
        return {"inputs": dict(tokens), "index": torch.as_tensor(np.asarray(positions, dtype=np.int64))}


class ShardSampler(Sampler[list[int]]):
    """Length-sorted batches of one rank's share of an evaluation set; every rank gets the same number of items
    (the tail wraps around, duplicates are harmless because results are scattered back by index)."""

    def __init__(self, lengths: np.ndarray, batch_size: int, world_size: int = 1, rank: int = 0):
        n = len(lengths)
        per_rank = math.ceil(n / world_size)
        padded = np.arange(per_rank * world_size) % max(n, 1)
        mine = padded[rank::world_size]
        self.order = mine[np.argsort(-lengths[mine], kind="stable")]
        self.batch_size = batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.order) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.order), self.batch_size):
            yield self.order[start:start + self.batch_size].tolist()


def _identity(batch: Any) -> Any:
    return batch


@dataclass
class SurrogatePool:
    """The validation surrogate: dev label indices, pool passage rows, each query's positive in the pool."""

    query_indices: np.ndarray
    pool_rows: np.ndarray
    positive_pool_index: np.ndarray
    skipped: int = 0

    @classmethod
    def from_labels(cls, labels: LabelStore, split: str = "dev") -> "SurrogatePool":
        dev = labels.split_indices(split)
        n_pos = labels.positive_rows.lengths(dev)
        skipped = int((n_pos == 0).sum())
        dev = dev[n_pos > 0]
        positives = labels.positive_rows.take(dev, np.zeros(len(dev), dtype=np.int64))
        n_neg = labels.negative_rows.lengths(dev)
        has_neg = n_neg > 0
        negatives = labels.negative_rows.take(dev[has_neg], np.zeros(int(has_neg.sum()), dtype=np.int64))
        pool_rows = np.unique(np.concatenate([positives, negatives]).astype(np.int64))
        return cls(dev, pool_rows, np.searchsorted(pool_rows, positives), skipped)


# ----------------------------------------------------------------------------------------------------------------
# Lightning data module
# ----------------------------------------------------------------------------------------------------------------


class LabelDataModule(pl.LightningDataModule):
    """Training batches from the teacher's labels, and the dev surrogate for validation (see the module docstring)."""

    def __init__(self, passages_path: str | Path, labels_dir: str | Path, train: TrainSection, preparer,
                 seed: int = 42, use_title: bool = True, gpu_preparer=None):
        super().__init__()
        self.passages_path, self.labels_dir = Path(passages_path), Path(labels_dir)
        # gpu_preparer: the same preparation padded for tensor cores (tokens to a multiple of 8), used on GPUs.
        self.cfg, self.preparer, self.gpu_preparer = train, preparer, gpu_preparer or preparer
        self.seed, self.use_title = seed, use_title
        self.labels = LabelStore(self.labels_dir)
        self.passages = PassagesTable(self.passages_path, use_title)
        self.train_indices = self.labels.split_indices("train")
        if len(self.train_indices) == 0:
            raise ArtifactError(f"{self.labels_dir}: no labelled queries with split 'train'")
        self.pool = SurrogatePool.from_labels(self.labels, "dev")
        self._passage_lengths = self.passages.char_lengths() if train.group_by_length else None
        self.train_sampler: ContrastiveBatchSampler | None = None

    @property
    def has_validation(self) -> bool:
        return len(self.pool.query_indices) > 0

    @property
    def uses_kl(self) -> bool:
        return self.cfg.loss in ("contrastive+kl", "kl")

    @property
    def passages_per_query(self) -> int:
        """Upper bound of the passages one query brings to a batch (the static size for gathering)."""
        if self.uses_kl:
            return max(1 + self.cfg.hard_negatives, self.kl_passages)
        return 1 + self.cfg.hard_negatives

    @property
    def kl_passages(self) -> int:
        if not self.uses_kl or self.cfg.kl_target == "batch":  # batch: the KL list is the batch's own passages
            return 0
        longest = int(self.labels.positive_rows.lengths(self.train_indices).max()
                      + self.labels.negative_rows.lengths(self.train_indices).max())
        return min(self.cfg.kl_max_passages or longest, longest)

    @property
    def batches_per_epoch(self) -> int:
        return len(self.train_sampler) if self.train_sampler is not None else 0

    def _on_gpu(self) -> bool:
        from lightning.pytorch.accelerators import CUDAAccelerator

        return self.trainer is not None and isinstance(self.trainer.accelerator, CUDAAccelerator)

    def num_workers(self) -> int:
        """``auto``: tokenise in the main process on CPU (the model step dominates), in 4 workers on GPU."""
        if self.cfg.num_workers != "auto":
            return int(self.cfg.num_workers)
        return min(4, max(0, (os.cpu_count() or 1) - 1)) if self._on_gpu() else 0

    def _world(self) -> tuple[int, int]:
        if self.trainer is None:
            return 1, 0
        return self.trainer.world_size, self.trainer.global_rank

    def _loader(self, dataset, batch_sampler) -> DataLoader:
        workers = self.num_workers()
        if workers:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        return DataLoader(dataset, batch_sampler=batch_sampler, collate_fn=_identity, num_workers=workers,
                          persistent_workers=workers > 0, pin_memory=self._on_gpu(),
                          prefetch_factor=4 if workers else None)

    def train_dataloader(self) -> DataLoader:
        world, rank = self._world()
        self.train_sampler = ContrastiveBatchSampler(
            self.labels, self.train_indices, self.cfg.batch_size, self.cfg.hard_negatives, self.seed, world, rank,
            self._passage_lengths, require_negatives=self.cfg.loss == "margin_mse")
        if self.train_sampler.dropped:
            log.warning("%d training queries without positives (or negatives) were left out",
                        self.train_sampler.dropped)
        if self.trainer is not None and self.trainer.global_step:
            # Resuming: continue the interrupted epoch where the checkpoint left it.
            self.train_sampler.skip_batches(self.trainer.global_step % len(self.train_sampler))
        dataset = TrainBatchDataset(self.labels_dir, self.passages_path, self.use_title,
                                    self.gpu_preparer if self._on_gpu() else self.preparer, self.kl_passages,
                                    self.cfg.random_negatives, self.seed)
        return self._loader(dataset, self.train_sampler)

    def val_dataloader(self) -> list[DataLoader]:
        world, rank = self._world()
        q_len = pc.utf8_length(self.labels.table.column("query").take(
            pa.array(self.pool.query_indices))).to_numpy()
        p_len = (self._passage_lengths if self._passage_lengths is not None
                 else self.passages.char_lengths())[self.pool.pool_rows]
        bs = self.cfg.eval_batch_size
        queries = EncodeDataset("query", self.pool.query_indices, self.labels_dir, self.passages_path,
                                self.use_title, self.preparer)
        pool = EncodeDataset("passage", self.pool.pool_rows, self.labels_dir, self.passages_path,
                             self.use_title, self.preparer)
        return [self._loader(queries, ShardSampler(q_len, bs, world, rank)),
                self._loader(pool, ShardSampler(p_len, bs, world, rank))]


