"""Train a transformer Λ on a lent GPU from this machine's labels, and bring back its vectors (not its weights).

A learned Λ of a few hundred dimensions is the serving frontier's missing point at Wikipedia scale (issue #46): the
projection needs thousands of dimensions to keep BM25's ranking, a Λ learned on the corpus's own sampled sentences
(SPAR §4.1) has MiniLM's 384. Training it takes minutes on a GPU and days on two CPU cores, and the GPU machine
shares nothing with this one but small transfers (≤ 64 MiB a call each way). So:

    # here: the labels (every column, xz), every dev/test question and the base model at fp16 (restored to fp32
    # there) into .gpu/lam/; the passages travel as `bench/remote_encode.py pack` packed them (.gpu/corpus)
    python -m bench.remote_lambda pack -c configs/experiments/wiki-odqa.yaml --out .gpu/lam
    # there: rebuild queries/passages.arrow from the packed shards, train with spar's own trainer
    # (spar.train.training.train_lambda, the train stage's call), then encode every question (one job file) and
    # every passage shard (sq8, the shards remote_encode writes) for bench/gpu_session.sh to ship
    python -m bench.remote_lambda train -c configs/experiments/wiki-odqa.yaml --pack /tmp/spar-gpu/pack \\
        --inputs .gpu/lam --work /tmp/spar-gpu/lam --jobs /tmp/spar-gpu/jobs --out /tmp/spar-gpu/enc \\
        train.max_epochs=1 train.batch_size=128
    # here: the shards and questions into a run directory the benches read (embeddings/lambda/<split>/)
    python -m bench.remote_lambda unpack -c configs/experiments/wiki-odqa.yaml --from .gpu/back \\
        --questions .gpu/jobs/lambda.questions.npz --card .gpu/lam-logs/spar_lambda.json --run runs/wiki-odqa-learned

The weights stay on the lent machine (the transfer back carries vectors and logs); the vectors come back at 8 bits
per dimension (remote_encode's per-dimension quantizer, its error recorded).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bench.remote_encode import (PLAN, _dequantize, _quantize, encode_shards, finished_back_shards,
                                 read_back_shard)

#: What the trainer is given on top of the config's train section: a transformer Λ from the carried base model.
TRAIN_OVERRIDES = ("train.kind=transformer", "train.wandb_mode=disabled")


def _experiment(config: str, overrides: list[str]):
    from spar.core.config import load_config
    from spar.experiment.plan import Experiment

    return Experiment.of(load_config(config, overrides))


def pack(args) -> None:
    """Labels, questions and the base model at fp16 into ``--out`` (each a file or folder of its own)."""
    import torch
    from safetensors.torch import load_file, save_file

    from spar.model.resolve import resolve_model

    experiment = _experiment(args.config, args.overrides)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    labels = experiment.run.artifact("labels")
    with tarfile.open(out / "labels.tar.xz", "w:xz", preset=6) as tar:
        for path in sorted(labels.glob("labels-*.arrow")) + [labels / "manifest.json"]:
            tar.add(path, arcname=f"labels/{path.name}")
    with lzma.open(out / "questions.jsonl.xz", "wt", preset=6) as fh:
        counts = {}
        for split in experiment.question_splits:
            pairs = split.pairs()
            counts[split.key] = len(pairs)
            for qid, text in pairs:
                fh.write(json.dumps([split.key, qid, text], ensure_ascii=False) + "\n")
    model = Path(resolve_model(experiment.encode.base.model))
    target = out / "model-fp16"
    shutil.copytree(model, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors", "README.md",
                                                                                     "onnx", "openvino"))
    weights = load_file(model / "model.safetensors")
    save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()},
              target / "model.safetensors")
    sizes = {p.name: round(p.stat().st_size / 2**20, 1) for p in out.iterdir() if p.is_file()}
    print(json.dumps({"questions": counts, "mib": sizes, "model": str(model)}))


def _read_shard(path: Path) -> list:
    with lzma.open(path, "rt") as fh:
        return [json.loads(line) for line in fh]


def rebuild_passages(pack_dir: Path, path: Path, watch: float) -> int:
    """``passages.arrow`` (row, id, title, text) from the packed shards, in their order: the table the labels'
    rows index (remote_encode packs the split's shards in row order). Waits up to ``watch`` s for shards still on
    their way."""
    import pyarrow as pa

    from spar.core.schemas import PASSAGES

    plan = json.loads((pack_dir / PLAN).read_text())
    deadline = time.time() + watch
    shards = [pack_dir / f"shard-{index:05d}.jsonl.xz" for index in range(plan["shards"])]
    for shard in shards:
        while not shard.exists():
            if time.time() > deadline:
                raise SystemExit(f"{shard}: not here after {watch:.0f} s")
            time.sleep(1)
    tmp = path.with_suffix(".tmp")
    row, writer = 0, None
    with ProcessPoolExecutor(min(8, os.cpu_count() or 1)) as pool:  # xz and JSON: a minute on one core
        for items in pool.map(_read_shard, shards):
            batch = pa.record_batch({"row": pa.array(range(row, row + len(items)), pa.int64()),
                                     "id": pa.array([i[0] for i in items], pa.string()),
                                     "title": pa.array([i[1] for i in items], pa.string()),
                                     "text": pa.array([i[2] for i in items], pa.string())}, schema=PASSAGES)
            if writer is None:
                writer = pa.ipc.new_file(str(tmp), batch.schema)
            writer.write_batch(batch)
            row += len(items)
    if writer is not None:
        writer.close()
    tmp.rename(path)
    return row


def restore_model(fp16_dir: Path, target: Path) -> Path:
    """The carried fp16 weights back at fp32 (the trainer starts from the base model's float32 weights rounded once
    to fp16: within 5e-4 relative)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(fp16_dir, target, dirs_exist_ok=True)
    weights = load_file(fp16_dir / "model.safetensors")
    save_file({k: v.to(torch.float32) if v.is_floating_point() else v for k, v in weights.items()},
              target / "model.safetensors")
    return target


def train(args) -> None:
    import torch

    from spar.lexical import load_lambda
    from spar.lexical.transformer import TransformerLambda
    from spar.model.encode_workers import EncodeOptions, ShardEncoder
    from spar.train.training import summarize, train_lambda

    work, inputs, pack_dir, jobs = Path(args.work), Path(args.inputs), Path(args.pack), Path(args.jobs)
    work.mkdir(parents=True, exist_ok=True)
    jobs.mkdir(parents=True, exist_ok=True)
    log = {"started": time.strftime("%FT%T")}
    model = restore_model(inputs / "model-fp16", work / "model")
    with tarfile.open(inputs / "labels.tar.xz") as tar:
        tar.extractall(work, filter="data")
    passages = work / "passages.arrow"
    if not passages.exists():
        log["passages"] = rebuild_passages(pack_dir, passages, args.watch)
    overrides = [*TRAIN_OVERRIDES, f"train.encoder.model={model}", *args.overrides]
    experiment = _experiment(args.config, overrides)
    section = experiment.train
    if (work / "lambda" / "spar_lambda.json").exists():  # trained by an earlier call that stopped after it
        log.update(json.loads((jobs / "lambda.train.json").read_text()), reused=True)
    else:
        started = time.time()
        result = train_lambda(TransformerLambda.from_section(section), section, passages, work / "labels",
                              work / "lambda", seed=experiment.seed, use_title=experiment.data.title_field,
                              run_name="lambda-663k", logger_root=work)
        log.update(summary=summarize(result), steps=result.steps, epochs=result.epochs,
                   seconds=round(time.time() - started), passages_per_s=result.passages_per_s,
                   valid_mrr=[result.initial_valid_mrr, result.best_valid_mrr], best_step=result.best_step,
                   train=section.model_dump(mode="json"), overrides=overrides, torch=torch.__version__,
                   gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
        (jobs / "lambda.train.json").write_text(json.dumps(log, indent=1))
    lam = load_lambda(work / "lambda", device="cuda" if torch.cuda.is_available() else "cpu")
    # The questions first (one small job file, shipped before the passages), at 8 bits per dimension per split.
    started, arrays = time.time(), {}
    with lzma.open(inputs / "questions.jsonl.xz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    for key in dict.fromkeys(r[0] for r in rows):
        texts = [r[2] for r in rows if r[0] == key][:args.max_questions]
        with torch.inference_mode():
            vectors = lam.encode_query(texts, batch_size=1024)
        codes, lo, scale = _quantize(np.asarray(vectors, dtype=np.float32))
        arrays[f"{key}.codes"], arrays[f"{key}.range"] = codes, np.stack([lo, scale])
        arrays[f"{key}.ids"] = np.array([r[1] for r in rows if r[0] == key][:args.max_questions])
    np.savez(jobs / "lambda.questions.npz", **arrays)
    log["questions_seconds"] = round(time.time() - started, 1)
    (jobs / "lambda.train.json").write_text(json.dumps(log, indent=1))
    (jobs / "lambda.done").touch()
    options = EncodeOptions(batch_size=args.batch_size, accelerator="auto", devices=1, precision=args.precision,
                            show_progress=False)
    encode_shards(ShardEncoder(options, lam.encoder), Path(args.encode_pack or pack_dir), Path(args.out), "sq8",
                  args.watch, limit=args.max_shards)


def _stored(directory: Path, ids: list[str], vectors: list[np.ndarray], side: str, fingerprint: str,
            record: dict) -> None:
    """One split in the stored format :func:`spar.model.stored_vectors.load_embeddings` reads: ``ids.arrow``,
    ``part-NNNNN.npy`` (float32, decoded), a manifest naming the transport (bench-made: no stage fingerprint)."""
    import pyarrow as pa

    from spar.core.artifacts import write_json_atomic
    from spar.core.schemas import IDS_FILE
    from spar.model.stored_vectors import KIND, PART_PATTERN

    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table({"row": pa.array(range(len(ids)), pa.int64()), "id": pa.array(ids, pa.string())})
    with pa.ipc.new_file(str(directory / IDS_FILE), table.schema) as writer:
        writer.write_table(table)
    for index, part in enumerate(vectors):
        np.save(directory / PART_PATTERN.format(index), part.astype(np.float32, copy=False))
    dim = int(vectors[0].shape[1])
    stats = {"encoder": "lambda", "side": side, "model_fingerprint": fingerprint, "kind": "transformer", "dim": dim,
             "count": len(ids), "dtype": "float32", "shards": len(vectors), "precision": "32", **record}
    write_json_atomic(directory / "manifest.json", {
        "kind": KIND, "schema_version": 1, "fingerprint": fingerprint, "config": {"encoder": "lambda", "side": side},
        "files": [IDS_FILE, *(PART_PATTERN.format(i) for i in range(len(vectors)))], "stats": stats,
        "made_by": "bench/remote_lambda.py unpack (vectors encoded on a lent GPU, brought back at sq8)"})


def unpack(args) -> None:
    """The shards and questions brought back as a run ``--run`` the benches and the library's tuning read:
    ``embeddings/lambda/<split>/`` in the stored format, beside links to the source run's base embeddings,
    passages and teacher index; ``embeddings/lambda/transport.json`` records the quantizer's error and the
    training log. Its Λ is identified by the trained weights' checksums (``spar_lambda.json``, brought back)."""
    import hashlib

    import pyarrow as pa

    from spar.model.stored_vectors import load_embeddings

    experiment = _experiment(args.config, args.overrides)
    source, run = experiment.run.output_dir.resolve(), Path(args.run)
    target = run / "embeddings" / "lambda"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("embeddings/base", "queries", "teacher_index"):
        if not (run / name).exists():
            (run / name).symlink_to(source / name)
    card = json.loads(Path(args.card).read_text())
    fingerprint = hashlib.sha256(json.dumps(card["checksums"], sort_keys=True).encode()).hexdigest()[:16]
    record: dict = {"shards": {}, "questions": {}}
    ids: list[str] = []
    parts: list[np.ndarray] = []
    errors = []
    for back in finished_back_shards(getattr(args, "from")):
        index, stats, vectors, _ = read_back_shard(back)
        if index != len(parts):
            raise SystemExit(f"{back}: shard {index} where shard {len(parts)} was expected")
        parts.append(vectors)
        ids += pa.ipc.open_file(str(back / f"ids-{index:05d}.arrow")).read_all().column("id").to_pylist()
        record["shards"][str(index)] = {k: stats.get(k) for k in ("count", "seconds", "gpu", "torch",
                                                                   "sq8_max_abs_error", "sq8_mean_abs_error")}
        errors.append(stats["sq8_max_abs_error"])
    base = experiment.run.artifact("embeddings") / "base" / "passages"
    if ids != load_embeddings(base).ids:
        raise SystemExit(f"{getattr(args, 'from')}: the passages are not the base's, in its order ({base})")
    transport = {"transport": "sq8", "sq8_max_abs_error": max(errors)}
    _stored(target / "passages", ids, parts, "passage", fingerprint, transport)
    questions = np.load(args.questions)
    for key in sorted({name.rsplit(".", 1)[0] for name in questions.files}):
        lo, scale = questions[f"{key}.range"]
        vectors = _dequantize(questions[f"{key}.codes"], lo, scale)
        _stored(target / f"queries-{key}", questions[f"{key}.ids"].tolist(), [vectors], "query", fingerprint,
                {"transport": "sq8"})
        record["questions"][key] = len(vectors)
    record["card"] = card
    if args.log:
        record["training"] = json.loads(Path(args.log).read_text())
    (target / "transport.json").write_text(json.dumps(record, indent=1))
    print(json.dumps({"passages": len(ids), "shards": len(parts), "questions": record["questions"],
                      "fingerprint": fingerprint}))


def tune(args) -> None:
    """μ for the brought-back Λ, chosen as ``spar tune`` chooses it (:func:`spar.evaluate.tuning.choose_mu`, the one
    place μ is chosen: the same dev pool, the same own-μ sets, grid, candidates and served codes), written as the
    run's ``tune/tune.json``. α is the source run's: the hybrid (base + α·BM25) does not involve Λ."""
    from spar.core.artifacts import write_json_atomic
    from spar.core.config import load_config
    from spar.evaluate.tuning import TUNE_FILE, choose_mu, read_tuned
    from spar.experiment.inputs import ExperimentInputs, resolved_index
    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import IndexOptions

    source = read_tuned(_experiment(args.config, args.overrides).run.output_dir)
    cfg = resolved_index(load_config(args.config, [*args.overrides,
                                                   f"experiment.output_dir={Path(args.run).resolve()}"]))
    inputs = ExperimentInputs(cfg)
    experiment = inputs.experiment
    base_p, lambda_p = inputs.passage_vectors("base"), inputs.passage_vectors("lambda")
    options = IndexOptions.from_section(cfg.index, seed=cfg.experiment.seed)
    variant = cfg.index.variant
    served_base, served_lambda = served_passage_vectors(base_p, lambda_p, variant, cfg.index.type, options)
    payload = json.loads(json.dumps(source.payload))
    splits = {None: experiment.dev_pool(), **{name: experiment.dev_split(name) for name in experiment.own_mu()}}
    for name, dev in splits.items():
        started = time.time()
        judge = inputs.answer_judge(dev, cfg.tune.metric)
        tuned = choose_mu(cfg, inputs.query_vectors("base", dev), inputs.query_vectors("lambda", dev), served_base,
                          served_lambda, dev, inputs.doc_ids, variant,
                          confirm_with=(base_p, lambda_p, cfg.index.type, options), judge=judge)
        search = tuned.search
        fields = {"mu": search.best, "grid": search.grid, "scores": search.scores_by_name(),
                  "extensions": search.extensions, "at_edge": search.at_edge, "variants": {variant: tuned.to_json()}}
        target = payload if name is None else payload["sets"][name]
        target.update(fields)
        target.setdefault("dev_scores", {})["spar"] = round(search.best_score, 6)
        print(f"{dev.name or name}: {len(dev.ids)} dev questions, μ {search.best:g} ({cfg.tune.metric} "
              f"{search.best_score:.4f}) in {time.time() - started:.0f} s", flush=True)
    payload["made_by"] = ("bench/remote_lambda.py tune: μ for the Λ brought back; α and the hybrid's dev scores are "
                          f"the source run's ({source.path})")
    out = Path(args.run) / "tune"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / TUNE_FILE, payload)
    write_json_atomic(out / "manifest.json", {"kind": "tune", "schema_version": 1, "fingerprint": "bench-made",
                                              "files": [TUNE_FILE], "made_by": payload["made_by"]})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("-c", "--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("overrides", nargs="*")
    t = sub.add_parser("train")
    t.add_argument("-c", "--config", required=True)
    t.add_argument("--pack", required=True, help="the packed passages (bench/remote_encode.py pack), as they arrive")
    t.add_argument("--inputs", required=True, help="what `pack` wrote")
    t.add_argument("--work", required=True)
    t.add_argument("--jobs", required=True, help="where the questions' job file goes (bench/gpu_session.sh ships it)")
    t.add_argument("--out", required=True, help="the encoded shards (OUT/back/NNNNN/, as remote_encode writes them)")
    t.add_argument("--batch-size", type=int, default=512)
    t.add_argument("--precision", default="32", help="the passages' encoding precision (the base's: fp32)")
    t.add_argument("--watch", type=float, default=900)
    t.add_argument("--max-shards", type=int, default=None, help="encode only the first N shards (a smoke test)")
    t.add_argument("--max-questions", type=int, default=None, help="the first N of each split (a smoke test)")
    t.add_argument("--encode-pack", help="encode these packed shards instead of --pack's (a smoke test)")
    t.add_argument("overrides", nargs="*")
    u = sub.add_parser("unpack")
    u.add_argument("-c", "--config", required=True)
    u.add_argument("--from", required=True, help="the shards brought back (one folder each)")
    u.add_argument("--questions", required=True)
    u.add_argument("--log", help="lambda.train.json, recorded beside the vectors")
    u.add_argument("--card", required=True, help="the trained Λ's spar_lambda.json (its weights' checksums)")
    u.add_argument("--run", required=True)
    u.add_argument("overrides", nargs="*")
    n = sub.add_parser("tune", help="μ for the brought-back Λ, as `spar tune` chooses it")
    n.add_argument("-c", "--config", required=True)
    n.add_argument("--run", required=True, help="the run `unpack` made")
    n.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    {"pack": pack, "train": train, "unpack": unpack, "tune": tune}[args.command](args)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
