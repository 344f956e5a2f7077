"""Λ training throughput: ``spar train`` (Lightning, the transformer Λ) against sentence-transformers' trainer.

The same run's labels feed both: each step takes ``--batch-size`` training queries with their teacher positive and
one hard negative (spar: ``train.hard_negatives=1``; sentence-transformers: ``(anchor, positive, negative)`` rows
with ``MultipleNegativesRankingLoss``, the in-batch contrastive loss DPR and spar train with), the same base model,
maximum length, learning rate, warm-up, gradient clipping and precision. Throughput is passages per second over the
steps after ``--warmup`` (each trainer timed by its own step callbacks, the GPU synchronised), so model loading,
validation and data set preparation are left out of both. spar trains two encoders (query and passage: the
paper's DPR Λ), sentence-transformers one shared model: the same arithmetic per text.

    python -m bench.train_vs_st -c configs/experiments/scifact.yaml --steps 60 --batch-size 128 \\
        --model PATH_OR_ID --out bench/results/train_vs_st.json

Needs the run's sample and label outputs (``spar run CONFIG --to label``) and the ``datasets`` package
(sentence-transformers' trainer reads a ``datasets.Dataset``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def spar_throughput(cfg, steps: int, warmup: int) -> dict:
    import lightning.pytorch as pl

    from spar.core.run_context import RunContext
    from spar.lexical.transformer import TransformerLambda
    from spar.train.training import train_lambda

    marks: list[float] = []

    class StepClock(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step in (warmup, steps):
                _sync()
                marks.append(time.perf_counter())

    train = cfg.train
    with tempfile.TemporaryDirectory() as work:
        result = train_lambda(TransformerLambda.from_section(train), train, RunContext(cfg).passages,
                              RunContext(cfg).artifact("labels"), Path(work) / "lambda.partial",
                              seed=cfg.experiment.seed, enable_progress_bar=False, callbacks=[StepClock()])
    seconds = marks[1] - marks[0]
    passages = (steps - warmup) * train.batch_size * (1 + train.hard_negatives)
    return {"passages_per_s": round(passages / seconds, 1), "seconds": round(seconds, 3),
            "precision": result.precision, "steps": result.steps}


def st_throughput(cfg, model: str, steps: int, warmup: int) -> dict:
    import numpy as np
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, losses
    from sentence_transformers.training_args import SentenceTransformerTrainingArguments
    from transformers import TrainerCallback

    from spar.core.run_context import RunContext
    from spar.data.passages import PassagesTable
    from spar.train.data import LabelStore

    train = cfg.train
    labels = LabelStore(RunContext(cfg).artifact("labels"))
    rows = labels.split_indices("train")[: (steps + 1) * train.batch_size]
    table = labels.table
    passages = PassagesTable(RunContext(cfg).passages)
    pos = [int(table.column("positive_rows")[int(i)].as_py()[0]) for i in rows]
    neg = [int((table.column("negative_rows")[int(i)].as_py() or [0])[0]) for i in rows]

    def text(row: int) -> str:
        title, body = passages.get([row])[0]
        return f"{title} [SEP] {body}" if title else body

    data = Dataset.from_dict({"anchor": labels.queries(rows), "positive": [text(r) for r in pos],
                              "negative": [text(r) for r in neg]})
    st = SentenceTransformer(model)
    st.max_seq_length = train.encoder.passage_max_length
    marks: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (warmup, steps):
                _sync()
                marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = SentenceTransformerTrainingArguments(
            output_dir=out, per_device_train_batch_size=train.batch_size, max_steps=steps,
            learning_rate=3e-5, warmup_ratio=train.warmup_ratio, max_grad_norm=train.gradient_clip or 1.0,
            bf16=_bf16(train), report_to=[], save_strategy="no", logging_strategy="no",
            dataloader_num_workers=0, seed=cfg.experiment.seed, disable_tqdm=True)
        trainer = SentenceTransformerTrainer(model=st, args=args, train_dataset=data,
                                             loss=losses.MultipleNegativesRankingLoss(st), callbacks=[StepClock()])
        trainer.train()
    seconds = marks[1] - marks[0]
    passages_per_step = 2 * train.batch_size  # a positive and a negative per anchor
    return {"passages_per_s": round((steps - warmup) * passages_per_step / seconds, 1),
            "seconds": round(seconds, 3), "bf16": _bf16(train), "rows": int(np.size(rows))}


def _bf16(train) -> bool:
    from spar.train.training import resolve_precision

    return resolve_precision(train) == "bf16-mixed"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="the base model both train from (path or id)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "train_vs_st.json")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    from spar.core.config import load_config
    from spar.model.resolve import resolve_model

    model = str(resolve_model(args.model))
    never = 10 * args.steps  # no validation or periodic checkpoint inside the timed steps
    cfg = load_config(args.config, [
        *args.overrides, "train.kind=transformer", f"train.encoder.model={model}",
        f"train.batch_size={args.batch_size}", "train.hard_negatives=1", f"train.max_steps={args.steps}",
        f"train.val_check_interval={never}", "train.wandb_mode=disabled", "train.keep_checkpoint=false",
        f"train.checkpoint_every_n_steps={never}"])
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    spar = spar_throughput(cfg, args.steps, args.warmup)
    peer = st_throughput(cfg, model, args.steps, args.warmup)
    import sentence_transformers

    result = {
        "spar": spar["passages_per_s"], "peer": peer["passages_per_s"],
        "ratio": round(spar["passages_per_s"] / peer["passages_per_s"], 3),
        "unit": "training passages/s after the warm-up steps (higher is better)",
        "spar_name": "spar train (Lightning, transformer Λ, fused AdamW, contrastive loss)",
        "peer_name": f"sentence-transformers {sentence_transformers.__version__} SentenceTransformerTrainer + "
                     "MultipleNegativesRankingLoss",
        "details": {"spar": spar, "peer": peer}, "batch_size": args.batch_size, "steps": args.steps,
        "warmup": args.warmup, "max_length": cfg.train.encoder.passage_max_length,
        "machine": machine(torch.get_num_threads(), device), "command": command_line(__file__, argv),
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
