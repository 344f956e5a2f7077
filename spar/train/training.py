"""Training the lexical model Λ on the sparse teacher's labels (SPAR §3, §4.1, §5.4), with Lightning.

Any trainable Λ kind (:mod:`spar.lexical`: the paper's ``transformer``, the learned ``static`` bag of term
embeddings) is trained by the same loop, through the Λ contract: :class:`LambdaModule` calls the Λ's
``forward_queries``/``forward_passages`` and its own ``training_loss`` (DPR's contrastive loss and its variants for
a transformer, distillation of the teacher's exact scores for a static Λ), and ranks the dev surrogate with the
same forwards. The data side (:mod:`spar.train.data`) draws seeded batches from the label shards and prepares
them with the Λ's own batch preparer.

- Optimiser: AdamW, linear warm-up then linear decay, gradient clipping, bf16-mixed precision on GPUs that support
  it; ``train.learning_rate`` defaults per kind (:func:`resolve_learning_rate`).
- Validation is the paper's surrogate: every dev query's teacher top-1 and first hard negative form a pool of at
  most 2N passages; every dev query is ranked against the whole pool; ``valid_mrr`` is the mean reciprocal rank of
  its positive. The best ``valid_mrr`` is checkpointed and exported with the Λ's ``save``.
- Monitoring: W&B through Lightning's ``WandbLogger`` (``train.wandb_mode``: offline by default, online when you
  have configured W&B, ``disabled`` -> CSV logs), under ``<experiment.output_dir>/wandb``: loss, learning rate,
  ``valid_mrr``, passages/s and queries/s, GPU memory; the run config is the resolved experiment config.
- Resume: a resumable ``lambda.partial/checkpoints/last.ckpt`` is written every ``train.checkpoint_every_n_steps``
  and after every validation; re-running the stage after a kill continues from it at the same global step, with
  the same remaining batches and the same random state, so the result is identical to an uninterrupted run's.

Scaling needs no code change: the same config runs on CPU, one GPU, several GPUs (Lightning picks DDP) and several
nodes. ``train.batch_size`` is per device, so the contrastive softmax of a step covers
``devices * num_nodes * batch_size * (1 + hard_negatives)`` passages::

    # CPU or one GPU (accelerator/devices 'auto')
    spar train -c configs/experiments/scifact.yaml

    # every GPU of one machine (DDP)
    spar train -c configs/experiments/wiki-vital.yaml train.devices=8

    # SLURM, 4 nodes x 8 GPUs: one task per GPU; Lightning reads the SLURM environment
    #   #SBATCH --nodes=4 --ntasks-per-node=8 --gpus-per-node=8
    srun spar train -c configs/experiments/wiki-vital.yaml train.devices=8 train.num_nodes=4

    # without SLURM: torchrun on every node (node_rank 0..3), same command line
    torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$NODE_RANK --master-addr=$HEAD --master-port=29500 \\
        -m pipelines.cli train -c configs/experiments/wiki-vital.yaml train.devices=8 train.num_nodes=4

Every rank reads the same memory-mapped inputs (put ``experiment.output_dir`` on a shared file system); rank 0
exports Λ and writes the manifest.

Example (the stage driver ``pipelines/train.py`` does this from a config)::

    >>> from spar.core.config import load_config
    >>> from spar.lexical.transformer import TransformerLambda
    >>> from spar.train.training import train_lambda
    >>> cfg = load_config(None, ["train.max_steps=20"])
    >>> lam = TransformerLambda.from_section(cfg.train)
    >>> # needs a run's sample and label outputs:
    >>> result = train_lambda(lam, cfg.train, "runs/x/queries/passages.arrow", "runs/x/labels",
    ...                       "runs/x/lambda.partial", seed=42)  # doctest: +SKIP
    >>> result.best_valid_mrr > result.initial_valid_mrr                      # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.callbacks import Checkpoint
import torch
import torch.nn.functional as F

from spar.core.artifacts import write_json_atomic
from spar.core.java import jvm_signal_handlers_kept
from spar.core.config import TrainSection
from spar.core.run_context import RunContext
from spar.core.tracking import wandb_mode
from spar.lexical.base import LexicalModel
from spar.train.data import LabelDataModule, LabelStore, SurrogatePool, surrogate_mrr
from spar.train.precision import lightning_device, precision_plugins

from spar.core.console import adopt_library_loggers  # noqa: E402

adopt_library_loggers()  # Lightning's own console handler printed everything twice
log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
BEST_CHECKPOINT = "best"
#: Written into the checkpoint directory once the best model is exported, before ``best.ckpt`` is removed.
EXPORTED = "exported.json"
WANDB_ID_FILE = "wandb_run_id"


# ----------------------------------------------------------------------------------------------------------------
# Lightning module
# ----------------------------------------------------------------------------------------------------------------


class LambdaModule(pl.LightningModule):
    """Trains any trainable Λ (:class:`~spar.lexical.base.LexicalModel`) through its contract: each step calls
    ``forward_queries``/``forward_passages`` and the Λ's own ``training_loss``; validation ranks the dev surrogate
    pool with the same forwards. Optimiser, schedule, DDP gathering, throughput and resume state live here.

    ``passages_per_batch`` is the static per-device passage count that gathered batches are padded to;
    ``positive_pool_index`` is each dev query's positive in the surrogate pool of ``pool_size`` passages.
    """

    def __init__(self, model: LexicalModel, train: dict[str, Any], passages_per_batch: int = 0,
                 positive_pool_index: Sequence[int] = (), pool_size: int = 0):
        super().__init__()
        # Plain dicts only, so checkpoints load with torch.load(weights_only=True); the pool index is not logged.
        self.save_hyperparameters(ignore=["model", "positive_pool_index"])
        self.cfg = TrainSection.model_validate(train)
        self.model = model
        self.passages_per_batch = passages_per_batch
        self.positive_pool_index = torch.as_tensor(np.asarray(positive_pool_index, dtype=np.int64))
        self.pool_size = pool_size
        self.initial_valid_mrr: float | None = None
        self.last_validated_step = -1
        self.resumed_at_step = 0
        self.train_seconds = 0.0
        self.passages_seen = 0
        self.queries_seen = 0
        self.losses: list[float] = []
        self._tick: float | None = None
        self._batch_sizes = (0, 0)
        self._val: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self._restored_rng: dict[str, Any] | None = None
        self._resuming = False

    # -- loss -------------------------------------------------------------------------------------------------
    def gather_passages(self, p: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Every device's passages (padded to a static size), with gradients flowing back to their owners.

        Only passages are gathered: each device scores its own queries against the global passage set, and the
        all-gather's backward sums every device's gradient into the passages' owner, so DDP's averaging gives the
        gradient of the mean loss over all queries (gathering queries too would repeat the same loss per device).
        """
        if self.trainer.world_size == 1 or not self.cfg.gather_negatives:
            return p, rows, 0
        size = self.passages_per_batch
        pad = size - p.shape[0]
        p = F.pad(p, (0, 0, 0, pad))
        rows = F.pad(rows, (0, pad), value=-1)
        all_p = self.all_gather(p, sync_grads=True).reshape(-1, p.shape[-1])
        all_rows = self.all_gather(rows).reshape(-1)
        return all_p, all_rows, self.global_rank * size

    def compute_loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The Λ's objective and its terms for one batch from :class:`~spar.train.data.TrainBatchDataset`."""
        q = self.model.forward_queries(batch["queries"])
        p = self.model.forward_passages(batch["passages"])
        return self.model.training_loss(q, p, batch, self)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        terms = self.compute_loss(batch)
        bs = int(batch["target"].shape[0])
        self.log("train/loss", terms["loss"], prog_bar=True, batch_size=bs)
        for name, value in terms.items():
            if name != "loss" and len(terms) > 2:
                self.log(f"train/{name}", value, batch_size=bs)
        self.losses.append(float(terms["loss"].detach()))
        self._batch_sizes = (bs, int(batch["passage_rows"].shape[0]))
        return terms["loss"]

    # -- throughput -------------------------------------------------------------------------------------------
    def on_train_start(self) -> None:
        self.resumed_at_step = int(self.global_step)
        self._tick = time.perf_counter()
        # Resuming: Lightning restores the step but replays a non-stateful loader from its first batch. Skip the
        # batches the checkpoint already trained on, here (the loader exists, its epoch iterator does not yet;
        # on_train_epoch_start is not called when restarting mid-epoch), so the data order is unchanged.
        if self._resuming:
            self._resuming = False
            sampler = self.trainer.datamodule.train_sampler if self.trainer.datamodule is not None else None
            if sampler is not None and len(sampler):
                sampler.skip_batches(int(self.global_step) % len(sampler))

    # -- resuming exactly ----------------------------------------------------------------------------------------

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # Random state as the interrupted run had it after its last step (dropout draws), restored only now: creating
        # the epoch's DataLoader iterator draws from the global generator, as it did in the uninterrupted run.
        if self._restored_rng is not None:
            torch.set_rng_state(self._restored_rng["torch"])
            if self._restored_rng.get("cuda") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(self._restored_rng["cuda"])
            self._restored_rng = None

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        now = time.perf_counter()
        if self._tick is None:
            self._tick = now
            return
        seconds, self._tick = now - self._tick, now
        world = self.trainer.world_size
        n_q, n_p = self._batch_sizes
        self.train_seconds += seconds
        self.passages_seen += n_p * world
        self.queries_seen += n_q * world
        metrics = {"throughput/passages_per_s": n_p * world / seconds,
                   "throughput/queries_per_s": n_q * world / seconds}
        if self.device.type == "cuda":
            metrics["gpu/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        self.log_dict(metrics, batch_size=n_q, rank_zero_only=True)

    # -- validation (surrogate MRR) ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val = {0: [], 1: []}

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        forward = self.model.forward_queries if dataloader_idx == 0 else self.model.forward_passages
        self._val[dataloader_idx].append((batch["index"], forward(batch["inputs"]).float()))

    def _collect(self, parts: list[tuple[torch.Tensor, torch.Tensor]], n: int) -> torch.Tensor:
        """Vectors of every rank's share, scattered back into input order."""
        index = torch.cat([i for i, _ in parts]).to(self.device)
        vecs = torch.cat([v for _, v in parts])
        if self.trainer.world_size > 1:
            index = self.all_gather(index).reshape(-1)
            vecs = self.all_gather(vecs).reshape(-1, vecs.shape[-1])
        out = torch.zeros((n, vecs.shape[-1]), device=vecs.device)
        out[index] = vecs
        return out

    def on_validation_epoch_end(self) -> None:
        if not self._val.get(0) or not self._val.get(1):
            return
        queries = self._collect(self._val[0], len(self.positive_pool_index))
        pool = self._collect(self._val[1], self.pool_size)
        mrr = surrogate_mrr(queries, pool, self.positive_pool_index.to(queries.device))
        if self.initial_valid_mrr is None and self.trainer.state.fn != "fit" and self.global_step == 0:
            # Before training: not a checkpoint candidate, so not a point of the valid_mrr curve (a static Λ,
            # initialised from the densified teacher, scores ~1.0 there, and its curve looked as if training only
            # made it worse: docs/user-guide.md).
            self.log("initial_valid_mrr", mrr)
            self.initial_valid_mrr = mrr
        else:
            self.log("valid_mrr", mrr, prog_bar=True)
        self.last_validated_step = int(self.global_step)
        self._val = {}
        if self._tick is not None:
            self._tick = time.perf_counter()  # validation time is not training throughput

    # -- optimiser --------------------------------------------------------------------------------------------
    def configure_optimizers(self):
        from transformers import get_linear_schedule_with_warmup

        decay, no_decay = [], []
        for name, param in self.named_parameters():
            if param.requires_grad:  # no weight decay on biases and LayerNorm weights (BERT practice)
                (no_decay if param.ndim < 2 or "norm" in name.lower() else decay).append(param)
        groups = [{"params": decay, "weight_decay": self.cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        # The fused kernel: 5.9-9.7x the per-tensor loop on CPU (bench/train_overheads.py), and supported on CUDA.
        fused = self.device.type in ("cpu", "cuda")
        optimizer = torch.optim.AdamW(groups, lr=resolve_learning_rate(self.cfg), fused=fused)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        scheduler = get_linear_schedule_with_warmup(optimizer, int(self.cfg.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # -- checkpoint extras ------------------------------------------------------------------------------------
    _EXTRA = ("initial_valid_mrr", "last_validated_step", "train_seconds", "passages_seen", "queries_seen")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["spar"] = {key: getattr(self, key) for key in self._EXTRA}
        checkpoint["spar_rng"] = {"torch": torch.get_rng_state(),
                                  "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        for key, value in checkpoint.get("spar", {}).items():
            if key in self._EXTRA:
                setattr(self, key, value)
        self._restored_rng = checkpoint.get("spar_rng")
        self._resuming = True


class LastCheckpoint(Checkpoint):
    """``last.ckpt`` (the full training state) after every validation and every ``every_n_steps`` steps.

    The periodic one is written when the next batch starts, i.e. after the validation of that step when there is
    one: a checkpoint never holds a validation step whose validation has not run, which a resumed run would skip
    (its best-model record, and so its export, would differ from an uninterrupted run's). A :class:`Checkpoint`, so
    Lightning runs it after the best-model callback listed before it. Checkpoints are written atomically
    (Lightning writes through an fsspec transaction).
    """

    def __init__(self, path: Path, every_n_steps: int):
        self.path, self.every_n_steps = Path(path), every_n_steps
        self._saved_at = -1

    def _save(self, trainer: pl.Trainer) -> None:
        if trainer.global_step != self._saved_at and not trainer.sanity_checking:
            trainer.save_checkpoint(str(self.path), weights_only=False)
            self._saved_at = trainer.global_step

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from lightning.pytorch.trainer.states import TrainerFn

        if trainer.state.fn == TrainerFn.FITTING:
            self._saved_at = -1  # this step's state now includes its validation
            self._save(trainer)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        step = trainer.global_step
        if self.every_n_steps and step and step % self.every_n_steps == 0:
            self._save(trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        between_batches(checkpoint)


def between_batches(checkpoint: dict[str, Any]) -> None:
    """Record a checkpoint written as a batch starts as the state after the previous step, which it is.

    Lightning has counted the starting batch as fetched ("ready") by then, and restores its total count as is (only
    the epoch's count is reset to the completed batches): a resumed run's batch index ran one ahead, so an integer
    ``val_check_interval`` validated one step early (at 39 instead of 40: another best model, another export, #37).
    The starting batch is redrawn on resume (its data order comes from the sampler, not from this state).
    """
    progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress")
    if not progress:
        return
    for part in ("total", "current"):
        counts = progress[part]
        if counts["ready"] == counts["completed"] + 1 and counts["started"] == counts["completed"]:
            counts["ready"] = counts["completed"]
            progress["is_last_batch"] = False


# ----------------------------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What :func:`train_lambda` reports (the stage manifest's stats)."""

    steps: int
    epochs: float
    seconds: float
    train_seconds: float
    passages_per_s: float
    queries_per_s: float
    initial_valid_mrr: float | None
    best_valid_mrr: float | None
    best_step: int | None
    resumed_from_step: int
    train_queries: int
    dev_queries: int
    pool_passages: int
    precision: str
    world_size: int
    logger_dir: str | None = None
    losses: list[float] = field(default_factory=list, repr=False)

    def stats(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("losses")
        return out


def resolve_precision(train: TrainSection) -> str:
    """``auto``: bf16-mixed on CUDA GPUs that support it, else full fp32 (CPU)."""
    if train.precision != "auto":
        return {"32": "32-true"}.get(train.precision, train.precision)
    if train.accelerator != "cpu" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"


#: ``train.checkpoint_every_n_steps: auto`` on the CPU and on a GPU: a GPU steps ~100x faster, and the resumable
#: checkpoint of a transformer Λ (weights and AdamW moments of both encoders, 543 MB) costs seconds to write
#: (bench/train_overheads.py): every 500 GPU steps keeps it a few percent of the time, and a kill loses < 1 minute.
CHECKPOINT_EVERY = {"cpu": 50, "gpu": 500}


def resolve_checkpoint_every(train: TrainSection) -> int:
    """``train.checkpoint_every_n_steps``, ``auto`` made concrete for the device it trains on
    (:data:`CHECKPOINT_EVERY`)."""
    if train.checkpoint_every_n_steps != "auto":
        return int(train.checkpoint_every_n_steps)
    on_gpu = train.accelerator != "cpu" and torch.cuda.is_available()
    return CHECKPOINT_EVERY["gpu" if on_gpu else "cpu"]


def is_primary_process() -> bool:
    """False in the extra processes of a multi-device run (Lightning/torchrun/SLURM ranks other than 0)."""
    for var in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        value = os.environ.get(var)
        if value not in (None, "", "0"):
            # SLURM_PROCID is set in plain batch shells too; it names a rank only with several tasks.
            if var == "SLURM_PROCID" and os.environ.get("SLURM_NTASKS", "1") == "1":
                continue
            return False
    return True


def _make_logger(train: TrainSection, work_dir: Path, logger_root: Path, run_name: str,
                 run_config: dict[str, Any] | None, group: str | None = None):
    """W&B (offline/online): the run that is open (the train stage's, :class:`spar.core.tracking.StageRun`), else
    its own, whose id is kept in ``work_dir`` so a resumed run continues the same W&B run; a CSV logger in
    ``work_dir/logs`` when W&B is disabled (``train.wandb_mode``, or ``WANDB_MODE=disabled``)."""
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    if wandb_mode(train.wandb_mode) == "disabled":
        return CSVLogger(str(work_dir), name="logs", version=""), str(work_dir / "logs")
    import wandb

    logger_dir = str(RunContext.at(logger_root).artifact("wandb"))
    if wandb.run is not None:  # the stage's run: its curves go beside its lineage and figures (one run per stage)
        return WandbLogger(experiment=wandb.run), logger_dir
    id_file = work_dir / WANDB_ID_FILE
    if id_file.exists():
        run_id = id_file.read_text().strip()
    else:
        import secrets
        import string

        run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
        id_file.write_text(run_id)
    logger_root.mkdir(parents=True, exist_ok=True)
    logger = WandbLogger(project=train.wandb_project, name=run_name, save_dir=str(logger_root), id=run_id, group=group,
                         offline=train.wandb_mode == "offline", mode=train.wandb_mode, config=run_config or {},
                         job_type="train")
    # Lightning always passes wandb.init an `anonymous` key, which wandb >= 0.19 answers with a deprecation warning.
    logger._wandb_init.pop("anonymous", None)
    return logger, logger_dir


def resolve_learning_rate(train: TrainSection) -> float:
    """``train.learning_rate``, or the kind's default (3e-5 for a transformer, DPR's; 1e-3 for a static Λ)."""
    if train.learning_rate is not None:
        return float(train.learning_rate)
    from spar.lexical import lambda_class

    default = lambda_class(train.kind).default_learning_rate
    if default is None:
        raise ValueError(f"a {train.kind} Λ is not trained with an optimiser")
    return float(default)


def build_module(model: LexicalModel, train: TrainSection, passages_path: str | Path, labels_dir: str | Path,
                 seed: int = 42, use_title: bool = True) -> tuple[LambdaModule, LabelDataModule]:
    """The LightningModule that trains ``model`` and the data module that feeds it its own prepared inputs."""
    probe = LabelStore(labels_dir)
    pool = SurrogatePool.from_labels(probe, "dev")
    module = LambdaModule(model, train.model_dump(mode="json"), 0, pool.positive_pool_index.tolist(),
                          len(pool.pool_rows))
    options = {"passage_max_length": train.passage_max_length, "passages_path": passages_path}
    preparer, gpu_preparer = model.batch_preparers(**options)
    data = LabelDataModule(passages_path, labels_dir, train, preparer, seed, use_title, gpu_preparer)
    module.passages_per_batch = train.batch_size * data.passages_per_query + train.random_negatives
    module.hparams["passages_per_batch"] = module.passages_per_batch
    return module, data


def train_lambda(model: LexicalModel, train: TrainSection, passages_path: str | Path, labels_dir: str | Path,
                 work_dir: str | Path, *, seed: int = 42, use_title: bool = True, run_name: str = "lambda",
                 logger_root: str | Path | None = None, run_config: dict[str, Any] | None = None,
                 export_dir: str | Path | None = None, enable_progress_bar: bool | None = None,
                 callbacks: Sequence[pl.Callback] = (), wandb_group: str | None = None) -> TrainResult:
    """Train Λ on ``labels_dir`` (label shards) over ``passages_path``, checkpointing into ``work_dir/checkpoints``.

    Resumes from ``work_dir/checkpoints/last.ckpt`` when it exists. Exports the best-``valid_mrr`` Λ with
    the Λ's own ``save`` into ``export_dir`` (default ``work_dir``), on rank 0. W&B files go under
    ``logger_root/wandb`` (default ``work_dir``); ``run_config`` is recorded as the W&B run config. Extra Lightning
    ``callbacks`` are added to the trainer.
    """
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint

    started = time.time()
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    export_dir = Path(export_dir) if export_dir is not None else work_dir
    ckpt_dir = work_dir / CHECKPOINT_DIR
    pl.seed_everything(seed, workers=True, verbose=False)

    module, data = build_module(model, train, passages_path, labels_dir, seed, use_title)
    precision = resolve_precision(train)
    # Mixed precision through spar's plugin: Lightning's own refuses to clip a fused optimizer's gradients.
    plugins = precision_plugins(precision, lightning_device(train.accelerator))
    logger, logger_dir = _make_logger(train, work_dir, Path(logger_root) if logger_root else work_dir, run_name,
                                      run_config, wandb_group)
    borrowed_run = getattr(logger, "_experiment", None) is not None  # the stage's open run, handed to the logger
    if not data.has_validation:
        log.warning("%s: no dev queries (split 'dev'): training without validation; the last step is exported",
                    labels_dir)
    val_every = train.val_check_interval
    best_ckpt = ModelCheckpoint(dirpath=str(ckpt_dir), filename=BEST_CHECKPOINT, monitor="valid_mrr", mode="max",
                                save_top_k=1, save_weights_only=True, enable_version_counter=False,
                                auto_insert_metric_name=False)
    # best.ckpt first, then last.ckpt (checkpoint callbacks run last, in this order): last.ckpt then records the
    # validation and the best model it just saw.
    all_callbacks = [*([best_ckpt] if data.has_validation else []),
                     LastCheckpoint(ckpt_dir / LAST_CHECKPOINT, resolve_checkpoint_every(train)),
                     LearningRateMonitor(logging_interval="step"), *callbacks]
    trainer = pl.Trainer(
        accelerator=train.accelerator, devices=train.devices, num_nodes=train.num_nodes, strategy=train.strategy,
        precision=None if plugins else precision, plugins=plugins, max_epochs=train.max_epochs,
        max_steps=train.max_steps,
        gradient_clip_val=train.gradient_clip or None, val_check_interval=val_every if data.has_validation else None,
        check_val_every_n_epoch=None if isinstance(val_every, int) else 1,
        limit_val_batches=None if data.has_validation else 0,
        log_every_n_steps=train.log_every_n_steps, logger=logger, callbacks=all_callbacks,
        default_root_dir=str(work_dir), use_distributed_sampler=False, num_sanity_val_steps=0,
        enable_model_summary=False, enable_progress_bar=enable_progress_bar,
    )

    resume = ckpt_dir / LAST_CHECKPOINT
    ckpt_path = str(resume) if resume.exists() else None
    if ckpt_path is None and data.has_validation:
        with jvm_signal_handlers_kept():  # valid_mrr before training, logged at step 0
            trainer.validate(module, datamodule=data, verbose=False)
    module.train()  # Hugging Face models load in eval mode; train with their dropout, as DPR does
    with warnings.catch_warnings():
        # LambdaModule makes a mid-epoch resume exact itself (skipped batches, restored random state).
        warnings.filterwarnings("ignore", message=".*your dataloader is not resumable.*")
        with jvm_signal_handlers_kept():  # Lightning resets an in-process JVM's fault handlers at teardown
            trainer.fit(module, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
    if trainer.interrupted:
        raise KeyboardInterrupt("training interrupted; re-run the stage to resume from the last checkpoint")

    if data.has_validation and module.last_validated_step != trainer.global_step:
        # The run did not end on a validation step: score the final weights too, so "best" covers them.
        with jvm_signal_handlers_kept():
            trainer.validate(module, datamodule=data, verbose=False)
        score = trainer.callback_metrics.get("valid_mrr")
        best_so_far = best_ckpt.best_model_score
        if score is not None and (best_so_far is None or float(score) > float(best_so_far)):
            best_ckpt.best_model_path = str(ckpt_dir / f"{BEST_CHECKPOINT}.ckpt")
            trainer.save_checkpoint(best_ckpt.best_model_path, weights_only=True)
            best_ckpt.best_model_score = torch.as_tensor(float(score))
    trainer.save_checkpoint(str(resume), weights_only=False)  # the full final state, to continue training later

    best_valid = float(best_ckpt.best_model_score) if best_ckpt.best_model_score is not None else None
    best_step: int | None = int(trainer.global_step)
    if trainer.is_global_zero:
        best_path = best_ckpt.best_model_path if data.has_validation else ""
        exported = ckpt_dir / EXPORTED
        if best_path and Path(best_path).exists():
            state = trainer.strategy.load_checkpoint(best_path, weights_only=True)
            best_step = int(state.get("global_step", 0))
            module.load_state_dict(state["state_dict"])
            module.model.save(export_dir)
            # The export is the best model now; last.ckpt stays for resuming. Recorded before best.ckpt goes, so a
            # run killed from here on and resumed keeps this export instead of exporting its last weights.
            write_json_atomic(exported, {"best_step": best_step, "best_valid_mrr": best_valid})
            Path(best_path).unlink()
        elif best_path and exported.exists():
            best_step = int(json.loads(exported.read_text())["best_step"])  # exported before the run was killed
        else:
            module.model.save(export_dir)
        if not train.keep_checkpoint:
            shutil.rmtree(ckpt_dir, ignore_errors=True)
        if wandb_mode(train.wandb_mode) != "disabled":
            import wandb

            if wandb.run is not None:
                wandb.run.summary.update({"best_valid_mrr": best_valid, "initial_valid_mrr": module.initial_valid_mrr,
                                          "best_step": best_step})
                if not borrowed_run:  # the stage's run stays open for its artifacts: the stage finishes it
                    wandb.finish()

    seconds = time.time() - started
    ts = module.train_seconds
    result = TrainResult(
        steps=int(trainer.global_step), epochs=round(trainer.global_step / max(1, data.batches_per_epoch), 3),
        seconds=round(seconds, 2),
        train_seconds=round(ts, 2),
        passages_per_s=round(module.passages_seen / ts, 2) if ts else 0.0,
        queries_per_s=round(module.queries_seen / ts, 2) if ts else 0.0,
        initial_valid_mrr=module.initial_valid_mrr, best_valid_mrr=best_valid, best_step=best_step,
        resumed_from_step=int(module.resumed_at_step),
        train_queries=len(data.train_indices), dev_queries=len(data.pool.query_indices),
        pool_passages=len(data.pool.pool_rows), precision=precision, world_size=trainer.world_size,
        logger_dir=logger_dir, losses=list(module.losses),
    )
    if trainer.is_global_zero:
        log.info(summarize(result))
    return result


def summarize(result: TrainResult) -> str:
    """A short human-readable summary of a training run."""
    init = "n/a" if result.initial_valid_mrr is None else f"{result.initial_valid_mrr:.4f}"
    best = "n/a" if result.best_valid_mrr is None else f"{result.best_valid_mrr:.4f}"
    return (f"Λ trained {result.steps} steps in {result.seconds:.0f}s on {result.world_size} device(s) "
            f"({result.precision}): {result.passages_per_s:.1f} passages/s, {result.queries_per_s:.1f} queries/s; "
            f"valid_mrr {init} -> {best} (best at step {result.best_step})")
