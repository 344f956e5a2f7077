"""Λ training throughput (passages/s, queries/s, seconds/step) on a run's real labels, per passage max length.

Runs the same batches (:class:`spar.train.training.LabelDataModule`), loss (:meth:`LambdaModule.compute_loss`) and
optimiser (:meth:`LambdaModule.configure_optimizers`' fused AdamW) as ``spar train``, without Lightning's loop or
validation, so the step cost alone is timed; also times one surrogate validation pass. Needs the outputs of
``spar run --to label`` for the config. Each length's row is printed as it is measured; the result (every row, the
machine, the command) is written to ``--output`` (default ``bench/results/train_throughput.json``) and printed.

    OMP_NUM_THREADS=2 python -m bench.train_throughput --config configs/default.yaml --lengths 64 128 256 \\
        --steps 5 --threads 2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from bench._common import REPO, command_line, machine, output_file, write_result
from spar.core.config import load_config
from spar.core.run_context import RunContext
from spar.train.training import LambdaModule, LabelDataModule, SurrogatePool, build_module, surrogate_mrr


def time_steps(module: LambdaModule, data: LabelDataModule, steps: int, warmup: int = 1) -> dict:
    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=module.cfg.learning_rate, fused=True)
    loader = iter(data.train_dataloader())

    class _Single:  # compute_loss asks the trainer for the world size
        world_size = 1

    module._trainer = _Single()  # noqa: SLF001 (bench only)
    passages = queries = 0
    seconds = 0.0
    for step in range(warmup + steps):
        start = time.perf_counter()
        batch = next(loader)
        loss = module.compute_loss(batch)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, module.cfg.gradient_clip or float("inf"))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            seconds += time.perf_counter() - start
            passages += int(batch["passage_rows"].shape[0])
            queries += int(batch["target"].shape[0])
    module._trainer = None  # noqa: SLF001
    return {"seconds_per_step": seconds / steps, "passages_per_s": passages / seconds,
            "queries_per_s": queries / seconds}


@torch.inference_mode()
def time_validation(module: LambdaModule, data: LabelDataModule) -> dict:
    module.eval()
    pool: SurrogatePool = data.pool
    start = time.perf_counter()
    loaders = data.val_dataloader()
    vecs = []
    for kind, loader in enumerate(loaders):
        forward = module.encoder.forward_queries if kind == 0 else module.encoder.forward_passages
        parts = [(b["index"], forward(b["inputs"])) for b in loader]
        out = torch.zeros((max(int(i.max()) for i, _ in parts) + 1, module.encoder.dim))
        for i, v in parts:
            out[i] = v
        vecs.append(out)
    mrr = surrogate_mrr(vecs[0], vecs[1], pool.positive_pool_index)
    return {"validation_seconds": time.perf_counter() - start, "valid_mrr": mrr,
            "dev_queries": len(pool.query_indices), "pool_passages": len(pool.pool_rows)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256], help="passage_max_length values")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-validation", action="store_true")
    parser.add_argument("--output", type=output_file, default=REPO / "bench" / "results" / "train_throughput.json",
                        help="the result JSON (its directory must exist)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    ldir = RunContext(cfg).artifact("labels")
    rows = []
    for length in args.lengths:
        train = cfg.train.model_copy(deep=True)
        train.encoder.passage_max_length = length
        module, data = build_module(train, RunContext(cfg).passages, ldir, cfg.experiment.seed, cfg.data.title_field)
        row = {"passage_max_length": length, "batch_size": train.batch_size,
               "hard_negatives": train.hard_negatives, "threads": torch.get_num_threads(),
               **time_steps(module, data, args.steps)}
        if not args.no_validation:
            row.update(time_validation(module, data))
        steps = train.max_steps if train.max_steps > 0 else None
        if steps:
            n_val = steps // train.val_check_interval + 1 if isinstance(train.val_check_interval, int) else 2
            row["projected_train_minutes"] = round((steps * row["seconds_per_step"]
                                                    + n_val * row.get("validation_seconds", 0)) / 60, 1)
        rows.append(row)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    result = {"benchmark": "train_throughput", "config": args.config, "rows": rows,
              "spar": {row["passage_max_length"]: round(row["passages_per_s"], 2) for row in rows},
              "peer": None, "ratio": None,
              "unit": "passages/s of spar's training step alone, per passage_max_length (no peer: the training "
                      "row's peer is bench.train_vs_st)",
              "machine": machine(torch.get_num_threads()), "command": command_line(__file__, argv)}
    return write_result(result, args.output)


if __name__ == "__main__":
    from bench._common import run_cli

    np.set_printoptions(precision=3)
    run_cli(main)
