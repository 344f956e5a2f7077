"""What the transformer Λ's training pays besides its forward and backward passes: the optimizer step (fused AdamW,
what ``spar train`` uses, against torch's ``foreach`` and per-tensor loop implementations) and the resumable
checkpoint (``train.checkpoint_every_n_steps``: the weights and AdamW's two moments of both encoders).

The real module: :func:`spar.lexical.build_lambda` (``train.kind=transformer``) and
:func:`spar.train.training.build_module` on a run's labels, its own parameter groups and gradients from one real
training batch. Optimizer implementations are timed alternately in one process (ratios against the fused kernel);
a checkpoint is the ``torch.save`` of what Lightning's ``last.ckpt`` holds for it (state dict + optimizer state),
written where the run's checkpoints go, timed against the training steps between two checkpoints — at this
machine's measured step time, and at the step rate one H100 measured (11.6 steps/s, batch 128, bf16: #36).

    python -m bench.train_overheads -c configs/experiments/scifact.yaml --out bench/results/train_overheads-cpu.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench._common import command_line, machine, write_result

#: Steps per second of ``spar train train.kind=transformer train.batch_size=128`` on one H100 (bf16-mixed; #36).
GPU_STEPS_PER_S = 11.6


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds of each optimizer implementation")
    ap.add_argument("--checkpoints", type=int, default=3, help="checkpoints written and timed")
    ap.add_argument("--every", type=int, default=50, help="train.checkpoint_every_n_steps to cost (default 50)")
    ap.add_argument("--batch-size", type=int, default=8, help="the real batch the gradients come from (CPU-sized)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    import torch

    from spar.core.config import load_config
    from spar.core.run_context import RunContext
    from spar.lexical import build_lambda
    from spar.train.training import build_module

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, ["train.kind=transformer", f"train.batch_size={args.batch_size}",
                                    *args.overrides])
    context = RunContext(cfg)
    model = build_lambda(cfg.train, context.passages, seed=cfg.experiment.seed)
    module, data = build_module(model, cfg.train, context.passages, context.artifact("labels"), cfg.experiment.seed,
                                cfg.data.title_field)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))

    class _Single:  # compute_loss asks the trainer for the world size
        world_size = 1

    module._trainer = _Single()  # noqa: SLF001 (bench only)
    module.train()
    step_seconds = []
    for i in range(3):  # one real step's forward + backward (the first one warms up)
        start = time.perf_counter()
        module.zero_grad(set_to_none=True)
        module.compute_loss(batch)["loss"].backward()
        if i:
            step_seconds.append(time.perf_counter() - start)
    params = [p for p in module.parameters() if p.requires_grad]
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]

    kinds = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}
    optimizers = {}
    for name, options in kinds.items():
        copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
        for copy, grad in zip(copies, grads):
            copy.grad = grad.clone()
        optimizers[name] = torch.optim.AdamW(copies, lr=cfg.train.learning_rate or 2e-5, **options)
        optimizers[name].step()  # allocates the moments
    timings: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(args.rounds):
        for name, optimizer in optimizers.items():
            start = time.perf_counter()
            optimizer.step()
            timings[name].append(time.perf_counter() - start)
    step = {name: statistics.median(values) for name, values in timings.items()}

    # The resumable checkpoint: the module's weights and the fused optimizer's state, as Lightning saves them.
    state = {"state_dict": module.state_dict(), "optimizer_states": [optimizers["fused"].state_dict()]}
    where = Path(cfg.output_dir)
    where.mkdir(parents=True, exist_ok=True)
    save_seconds, size = [], 0
    with tempfile.TemporaryDirectory(dir=where, prefix="bench-ckpt-") as tmp:
        path = Path(tmp) / "last.ckpt"
        for _ in range(args.checkpoints):
            start = time.perf_counter()
            torch.save(state, path)
            with open(path, "rb+") as fh:  # what reaches the disk, as a crash-safe checkpoint needs
                os.fsync(fh.fileno())
            save_seconds.append(time.perf_counter() - start)
            size = path.stat().st_size
    save = statistics.median(save_seconds)
    cpu_step = statistics.median(step_seconds) + step["fused"]
    gpu_interval = args.every / GPU_STEPS_PER_S
    result = {
        "parameters": sum(p.numel() for p in params),
        "optimizer_step_ms": {name: round(1e3 * value, 2) for name, value in step.items()},
        "optimizer_step_ratio_to_fused": {name: round(value / step["fused"], 2) for name, value in step.items()},
        "training_step_s_cpu": round(cpu_step, 3), "batch_size": args.batch_size,
        "checkpoint": {"bytes": size, "seconds": round(save, 3), "every_n_steps": args.every,
                       "share_of_cpu_training": round(save / (save + args.every * cpu_step), 4),
                       "gpu_steps_per_s": GPU_STEPS_PER_S,
                       "share_at_gpu_step_rate": round(save / (save + gpu_interval), 4)},
        "spar": step["fused"], "peer": step["for-loop"], "ratio": round(step["for-loop"] / step["fused"], 2),
        "unit": "optimizer step seconds (peer: the per-tensor loop; ratio = loop / fused)",
        "threads": torch.get_num_threads(), "machine": machine(torch.get_num_threads()),
        "command": command_line(__file__, argv),
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
