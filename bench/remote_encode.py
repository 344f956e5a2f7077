"""Encode a run's passages on another machine (a lent GPU) and bring the shards back into the run, resumably.

The encode stage is resumable shard by shard: a finished shard is three files in ``embeddings/<encoder>/passages
.partial/`` (``part-NNNNN.npy``, ``ids-NNNNN.arrow``, ``part-NNNNN.json``) whose bytes depend only on the shard's
own passages. A cluster writes them there through shared storage (``executor.kind=ray``). This script does the same
across machines that share nothing but small file transfers (this project's lent GPU: ≤ 64 MiB each way per call):

    # here: the shards' passages, exactly as the stage would read them from queries/passages.arrow
    python -m bench.remote_encode pack -c configs/experiments/wiki-odqa.yaml --out .gpu/corpus
    # there: encode each packed shard with spar's own shard worker (spar.model.encode_workers.ShardEncoder) as it
    # arrives, and write each shard's vectors for the way back
    python -m bench.remote_encode encode --pack .gpu/corpus --model .gpu/model --out /tmp/enc --watch 900
    # here: the shards into the run's .partial/ (stamped with the stage's fingerprint); `spar encode` then finds
    # them finished and writes the manifest
    python -m bench.remote_encode unpack -c configs/experiments/wiki-odqa.yaml --from back/ --into-run

``--transport sq8`` (the default) brings each vector back at 8 bits per dimension (a per-dimension uniform
quantizer over the shard's own min and max: 384 B per MiniLM passage instead of 1,536) — what the transfer limit
allows at Wikipedia scale; ``float32`` brings them back exactly. ``unpack`` decodes to the stage's float32 shards
and records the transport and the error it measured (``transport.json`` in the embeddings directory). The shards'
statistics (seconds, device) are the remote machine's.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import time
from pathlib import Path

import numpy as np

PLAN = "plan.json"


def _base_unit(config: str, overrides: list[str]):
    """The encode stage's unit of the base passages (the first it plans), with its shards and fingerprint."""
    from pipelines import encode
    from spar.core.config import load_config

    cfg = load_config(config, [*overrides, "encode.encoders=[base]"])
    unit = next(iter(encode.plan(cfg)))
    if unit.config["encoder"] != "base" or unit.config["side"] != "passage":
        raise SystemExit(f"unexpected first unit {unit.output}")
    return cfg, unit


def pack(args) -> None:
    cfg, unit = _base_unit(args.config, args.overrides)
    shards = unit.payload.shards
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = []
    for index, items in enumerate(shards):
        path = out / f"shard-{index:05d}.jsonl.xz"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            with lzma.open(tmp, "wt", preset=6) as fh:
                for pid, (title, text) in items:
                    fh.write(json.dumps([pid, title, text], ensure_ascii=False) + "\n")
            tmp.rename(path)
        sizes.append(path.stat().st_size)
        print(f"shard {index}: {len(items)} passages, {sizes[-1] / 2**20:.1f} MiB", flush=True)
    section = cfg.encode.base.model_dump(mode="json")
    plan = {"fingerprint": unit.writer().fingerprint, "output": str(unit.output), "shard_size": unit.config[
        "shard_size"], "dtype": unit.config["dtype"], "shards": len(sizes), "encoder": section,
        "precision": unit.config.get("precision", "32")}
    (out / PLAN).write_text(json.dumps(plan, indent=1))
    print(json.dumps({"shards": len(sizes), "mib": round(sum(sizes) / 2**20, 1), "fingerprint": plan["fingerprint"]}))


def skip(args) -> None:
    """The pack's plan with ``skip``: the shards the run's ``.partial/`` holds finished already (same fingerprint),
    which the remote encoder then leaves out — nothing is encoded or carried twice."""
    _, unit = _base_unit(args.config, args.overrides)
    plan = json.loads((Path(args.pack) / PLAN).read_text())
    partial = unit.writer().path
    stamp = partial / ".fingerprint"
    finished: list[int] = []
    if stamp.exists() and stamp.read_text() == plan["fingerprint"]:
        finished = sorted(int(p.stem.split("-")[1]) for p in partial.glob("part-*.json"))
    plan["skip"] = finished
    out = Path(args.into)
    out.mkdir(parents=True, exist_ok=True)
    (out / PLAN).write_text(json.dumps(plan, indent=1))
    print(json.dumps({"shards": plan["shards"], "skip": finished}))


def _quantize(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = vectors.min(0), vectors.max(0)
    scale = np.where(hi > lo, (hi - lo) / 255.0, 1.0).astype(np.float32)
    codes = np.clip(np.rint((vectors - lo) / scale), 0, 255).astype(np.uint8)
    return codes, lo.astype(np.float32), scale


def _dequantize(codes: np.ndarray, lo: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return (codes.astype(np.float32) * scale + lo).astype(np.float32)


def encode(args) -> None:
    from spar.core.config_sections import EncoderSection
    from spar.model.encode_workers import EncodeOptions, ShardEncoder
    from spar.model.encoders import BiEncoder

    pack_dir = Path(args.pack)
    plan = json.loads((pack_dir / PLAN).read_text())
    section = EncoderSection.model_validate({**plan["encoder"], "model": str(Path(args.model).resolve())})
    encoder = BiEncoder.from_section(section)
    options = EncodeOptions(batch_size=args.batch_size, accelerator="auto", devices=1, precision=plan["precision"],
                            show_progress=False)
    encode_shards(ShardEncoder(options, encoder), pack_dir, Path(args.out), args.transport, args.watch)


def encode_shards(worker, pack_dir: Path, out: Path, transport: str, watch: float, limit: int | None = None) -> None:
    """Encode each packed shard with ``worker`` (a :class:`~spar.model.encode_workers.ShardEncoder`) as it arrives,
    and write it for the way back: ``out/back/NNNNN/`` (ids, sidecar, the vectors at ``transport``, ``DONE``)."""
    import torch

    from spar.model.encode_workers import EncodeTask

    plan = json.loads((pack_dir / PLAN).read_text())
    (out / "shards").mkdir(parents=True, exist_ok=True)
    (out / "back").mkdir(parents=True, exist_ok=True)
    deadline = time.time() + watch
    done: set[int] = set()
    log = (out / "encode.log").open("a")
    todo = set(range(plan["shards"])) - set(plan.get("skip", []))  # skip: finished on the machine that packed
    if limit is not None:
        todo = set(sorted(todo)[:limit])
    while len(done) < len(todo):
        ready = [i for i in sorted(todo) if i not in done and (pack_dir / f"shard-{i:05d}.jsonl.xz").exists()]
        if not ready:
            if time.time() > deadline:
                raise SystemExit(f"waited {watch}s; shards {sorted(todo - done)} missing")
            time.sleep(1)
            continue
        index = ready[0]
        with lzma.open(pack_dir / f"shard-{index:05d}.jsonl.xz", "rt") as fh:
            items = [(pid, (title, text)) for pid, title, text in map(json.loads, fh)]
        stats = worker(EncodeTask(out / "shards", index, "passage", plan["dtype"], index * plan["shard_size"], items))
        vectors = np.load(out / "shards" / f"part-{index:05d}.npy")
        back = out / "back" / f"{index:05d}"
        back.mkdir(exist_ok=True)
        for name in (f"ids-{index:05d}.arrow", f"part-{index:05d}.json"):
            shutil.copy(out / "shards" / name, back / name)
        if transport == "sq8":
            codes, lo, scale = _quantize(vectors)
            half = (len(codes) + 1) // 2  # two files: each under the transfer's 16 MiB per file
            np.save(back / "codes-a.npy", codes[:half])
            np.save(back / "codes-b.npy", codes[half:])
            np.save(back / "range.npy", np.stack([lo, scale]))
            err = np.abs(_dequantize(codes, lo, scale) - vectors)
            stats["sq8_max_abs_error"], stats["sq8_mean_abs_error"] = float(err.max()), float(err.mean())
        else:
            shutil.copy(out / "shards" / f"part-{index:05d}.npy", back / f"part-{index:05d}.npy")
        (back / "DONE").write_text(json.dumps({**stats, "torch": torch.__version__,
                                               "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available()
                                               else None}))
        print(json.dumps(stats), file=log, flush=True)
        done.add(index)


def _same_passages(shards, pack_dir: Path, fingerprint: str) -> None:
    """Refuse unless the packed shards (made under ``fingerprint``) hold exactly the passages the split's shards
    hold now: the split's identity changes when its passages are read from the sampled table instead of the corpus
    files (``queries/passages.arrow``), its vectors do not (a shard's bytes depend only on its own passages)."""
    plan = json.loads((pack_dir / PLAN).read_text())
    if plan["fingerprint"] != fingerprint:
        raise SystemExit(f"{pack_dir / PLAN}: packed under {plan['fingerprint']}, the shards under {fingerprint}")
    shards = list(shards)
    if len(shards) != plan["shards"]:
        raise SystemExit(f"{pack_dir}: {plan['shards']} shards packed, the split has {len(shards)} now")
    for index, items in enumerate(shards):
        with lzma.open(pack_dir / f"shard-{index:05d}.jsonl.xz", "rt") as fh:
            packed = [(pid, (title, text)) for pid, title, text in map(json.loads, fh)]
        if packed != [(pid, tuple(passage)) for pid, passage in items]:
            raise SystemExit(f"{pack_dir}/shard-{index:05d}.jsonl.xz: not the passages of shard {index} any more")


def finished_back_shards(directory: str | Path) -> list[Path]:
    """The shard folders brought back (``NNNNN/`` with its ``DONE``), in shard order."""
    return sorted(p for p in Path(directory).glob("*") if (p / "DONE").exists())


def read_back_shard(back: Path) -> tuple[int, dict, np.ndarray, str]:
    """One shard folder as :func:`encode_shards` wrote it: its index, statistics, float32 vectors (decoded from sq8
    codes, or as sent) and transport; refuses a count other than the shard's."""
    index = int(back.name)
    stats = json.loads((back / "DONE").read_text())
    if (back / "codes-a.npy").exists():
        codes = np.concatenate([np.load(back / "codes-a.npy"), np.load(back / "codes-b.npy")])
        lo, scale = np.load(back / "range.npy")
        vectors, transport = _dequantize(codes, lo, scale), "sq8"
    else:
        vectors, transport = np.load(back / f"part-{index:05d}.npy"), "float32"
    if len(vectors) != stats["count"]:
        raise SystemExit(f"{back}: {len(vectors)} vectors, the shard has {stats['count']}")
    return index, stats, vectors, transport


def unpack(args) -> None:
    from spar.core.artifacts import read_manifest

    cfg, unit = _base_unit(args.config, args.overrides)
    writer = unit.writer()
    partial = writer.path
    partial.mkdir(parents=True, exist_ok=True)
    stamp = partial / ".fingerprint"
    record_path = partial.parent / "transport.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"shards": {}}
    if stamp.exists() and stamp.read_text() != writer.fingerprint:
        if not args.pack:
            raise SystemExit(f"{partial}: its .fingerprint is another config's; remove it first")
        _same_passages(unit.payload.shards, Path(args.pack), stamp.read_text())
        record.setdefault("restamped", []).append({"from": stamp.read_text(), "to": writer.fingerprint})
        print(f"{partial}: the passages are now read from {unit.config.get('source', 'elsewhere')}; the same ids, "
              f"titles and texts in the same shards: its shards are this split's ({stamp.read_text()} -> "
              f"{writer.fingerprint})", flush=True)
    stamp.write_text(writer.fingerprint)
    for back in finished_back_shards(getattr(args, "from")):
        index, stats, vectors, transport = read_back_shard(back)
        np.save(partial / f"part-{index:05d}.npy", vectors.astype(unit.config["dtype"], copy=False))
        shutil.copy(back / f"ids-{index:05d}.arrow", partial / f"ids-{index:05d}.arrow")
        shutil.copy(back / f"part-{index:05d}.json", partial / f"part-{index:05d}.json")  # last: marks it complete
        record["shards"][str(index)] = {"transport": transport, **{k: stats.get(k) for k in (
            "count", "seconds", "device", "gpu", "torch", "sq8_max_abs_error", "sq8_mean_abs_error")}}
        print(f"shard {index}: {len(vectors)} vectors ({transport})", flush=True)
    record_path.write_text(json.dumps(record, indent=1))
    if (unit.output / "manifest.json").exists():
        print("note: the split is complete already:", read_manifest(unit.output)["fingerprint"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("-c", "--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("overrides", nargs="*")
    e = sub.add_parser("encode")
    e.add_argument("--pack", required=True)
    e.add_argument("--model", required=True, help="the base model's directory on this machine")
    e.add_argument("--out", required=True)
    e.add_argument("--batch-size", type=int, default=512)
    e.add_argument("--transport", choices=["sq8", "float32"], default="sq8")
    e.add_argument("--watch", type=float, default=0, help="seconds to wait for shards still on their way")
    k = sub.add_parser("skip", help="write the pack's plan with the shards the run finished already")
    k.add_argument("-c", "--config", required=True)
    k.add_argument("--pack", required=True)
    k.add_argument("--into", required=True)
    k.add_argument("overrides", nargs="*")
    u = sub.add_parser("unpack")
    u.add_argument("-c", "--config", required=True)
    u.add_argument("--from", required=True, help="the directory of the shards brought back (one folder each)")
    u.add_argument("--pack", help="the packed passages the shards were made from: when the split now reads the same "
                   "passages from elsewhere (the sampled table), its shards are checked against them and kept")
    u.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    {"pack": pack, "skip": skip, "encode": encode, "unpack": unpack}[args.command](args)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
