"""Passage encoding throughput: spar's encode path vs ``SentenceTransformer.encode`` on the same SciFact passages.

Both encode the same strings (``title [SEP] text``) with the same model (bundled all-MiniLM-L6-v2: mean pooling,
L2-normalised), batch size, max length, device, thread count and precision. spar's number is the whole
:func:`spar.model.embeddings.encode_passages` call (tokenisation, length-sorted batches, writing the .npy shard and
ids); runs alternate between the systems and the best of ``--repeats`` is reported (the machine is shared). The
Lightning predict loop on one device is measured too (``lightning_predict``), which is why ``encode.engine=auto``
uses the plain loop on one device.

``--backends onnx onnx-int8`` adds spar's ONNX Runtime backends (``encode.backend``, :mod:`spar.model.onnx_encoder`):
the same ``encode_passages`` call with another backend, alternating with the torch path in each repeat, with each
backend's throughput ratio to the torch path and its vectors' distance to torch's (max abs difference, cosine).
The export is done once before timing (its cold-cache cost is reported as ``export_seconds``). The CPU time of
this process is compared too (``cpu_seconds_vs_torch``: what each backend costs in CPU-seconds, which other jobs
on a shared machine disturb less than wall time). ``--peer torch`` makes spar's torch path the peer (``spar`` is
then the first backend) and skips SentenceTransformer.

    python -m bench.encode_throughput                      # CPU, 2 threads, 400 passages
    python -m bench.encode_throughput --peer torch --backends onnx onnx-int8 --passages 300 \
        --out bench/results/encode_backends.json           # ONNX Runtime vs the torch path
    python -m bench.encode_throughput --device cuda --passages 20000 --batch-size 256
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def default_corpus() -> Path:
    shared = REPO.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"
    return shared if shared.exists() else REPO / "data" / "scifact-sample" / "corpus.jsonl"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=default_corpus())
    ap.add_argument("--passages", type=int, default=400)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="the bundled MiniLM, a path or a hub id")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (CPU)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--precision", default="32", choices=["32", "bf16-mixed", "16-mixed"],
                    help="spar's autocast; SentenceTransformer runs fp32, so 32 is the like-for-like setting")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-lightning", action="store_true")
    ap.add_argument("--backends", nargs="*", default=[], choices=["onnx", "onnx-int8"],
                    help="spar's ONNX Runtime backends to measure against its torch path (CPU)")
    ap.add_argument("--peer", default="sentence-transformers", choices=["sentence-transformers", "torch"],
                    help="'torch': spar's torch path is the peer and the first --backends entry is 'spar'")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "encode_throughput.json")
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from spar.model.embeddings import EncodeOptions, encode_passages
    from spar.model.stored_vectors import load_embeddings
    from spar.model.engines import format_items
    from spar.model.encoders import BiEncoder
    from spar.model.resolve import resolve_model
    from spar.model.onnx_encoder import with_backend
    from spar.data.readers import read_corpus

    if args.peer == "torch" and not args.backends:
        ap.error("--peer torch needs --backends")
    torch.set_num_threads(args.threads)
    passages = list(itertools.islice(read_corpus(args.corpus), args.passages))
    encoder = BiEncoder.from_pretrained(args.model, pooling="mean", normalize=True,
                                        passage_max_length=args.max_length)
    texts = format_items(encoder, [(p.title, p.text) for p in passages], "passage")
    peer = None
    if args.peer == "sentence-transformers":
        peer = SentenceTransformer(str(resolve_model(args.model)), device=args.device)
        peer.max_seq_length = args.max_length
    export_seconds = {}
    backends = {}
    cpu_seconds: dict[str, list[float]] = {"torch": [], **{b: [] for b in args.backends}}
    for backend in args.backends:  # exported (or read from the cache) before any timing
        start = time.perf_counter()
        backends[backend] = with_backend(encoder, backend, args.device)
        export_seconds[backend] = round(time.perf_counter() - start, 2)

    def run_spar(engine: str, backend: str = "torch") -> tuple[float, object]:
        opts = EncodeOptions(batch_size=args.batch_size, accelerator=args.device, devices=1, engine=engine,
                             precision=args.precision, show_progress=False)
        enc = backends.get(backend, encoder)
        with tempfile.TemporaryDirectory() as tmp:
            if args.device == "cuda":
                torch.cuda.synchronize()
            start, cpu_start = time.perf_counter(), time.process_time()
            stats = encode_passages(enc, passages, Path(tmp) / "p", options=opts, force=True)
            seconds = time.perf_counter() - start
            if engine == "loop":
                cpu_seconds[backend].append(time.process_time() - cpu_start)
            vectors = np.array(load_embeddings(Path(tmp) / "p").vectors)
        return seconds, (stats, vectors)

    def run_peer() -> tuple[float, object]:
        if args.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        vectors = peer.encode(texts, batch_size=args.batch_size, convert_to_numpy=True, normalize_embeddings=True,
                              show_progress_bar=False)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, vectors

    # Warm-up (allocator, kernels, tokenizer caches, ONNX Runtime sessions) on a few passages for all.
    for enc in [encoder, *backends.values()]:
        encode_passages(enc, passages[:16], Path(tempfile.mkdtemp()) / "w", force=True,
                        options=EncodeOptions(batch_size=args.batch_size, accelerator=args.device, devices=1,
                                              show_progress=False))
    if peer is not None:
        peer.encode(texts[:16], batch_size=args.batch_size, show_progress_bar=False)

    times: dict[str, list[float]] = {"spar": [], "peer": [], "lightning": [], **{b: [] for b in backends}}
    spar_out = peer_vectors = None
    backend_vectors: dict[str, np.ndarray] = {}
    for _ in range(args.repeats):
        seconds, spar_out = run_spar("loop")
        times["spar"].append(seconds)
        for backend in backends:
            seconds, (_, backend_vectors[backend]) = run_spar("loop", backend)
            times[backend].append(seconds)
        if peer is not None:
            seconds, peer_vectors = run_peer()
            times["peer"].append(seconds)
        if not args.skip_lightning:
            times["lightning"].append(run_spar("lightning")[0])

    n = len(passages)
    stats, spar_vectors = spar_out
    best = {k: n / min(v) for k, v in times.items() if v}
    median = {k: n / statistics.median(v) for k, v in times.items() if v}
    common = {
        "unit": "passages/s (best of repeats; higher is better)",
        "machine": machine(args.threads, args.device),
        "command": command_line(__file__, argv),
        "passages": n, "corpus": str(args.corpus), "device": args.device, "threads": args.threads,
        "batch_size": args.batch_size, "max_length": args.max_length, "precision": args.precision,
        "truncated": stats["truncated"],
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items() if v},
    }
    if peer is not None:
        result = {
            "spar": round(best["spar"], 2), "peer": round(best["peer"], 2),
            "ratio": round(best["spar"] / best["peer"], 3), **common,
            "peer_name": f"sentence-transformers {__import__('sentence_transformers').__version__} "
                         "SentenceTransformer.encode",
            "median_ratio": round(median["spar"] / median["peer"], 3),
            "max_abs_diff_vs_peer": float(np.abs(spar_vectors - peer_vectors).max()),
        }
    else:
        first = args.backends[0]
        result = {
            "spar": round(best[first], 2), "peer": round(best["spar"], 2),
            "ratio": round(best[first] / best["spar"], 3), **common,
            "spar_name": f"spar encode_passages, encode.backend={first}",
            "peer_name": "spar encode_passages, encode.backend=torch (the same call, the same batches)",
            "median_ratio": round(median[first] / median["spar"], 3),
        }
    if backends:
        import onnxruntime

        result["onnxruntime"] = onnxruntime.__version__
        result["backends"] = {}
        for backend, vectors in backend_vectors.items():
            cosine = (vectors * spar_vectors).sum(1) / (np.linalg.norm(vectors, axis=1)
                                                         * np.linalg.norm(spar_vectors, axis=1))
            result["backends"][backend] = {
                "passages_per_s": round(best[backend], 2), "vs_torch": round(best[backend] / best["spar"], 3),
                "median_vs_torch": round(median[backend] / median["spar"], 3),
                # CPU seconds of this process (all its threads): less sensitive to other jobs on a shared machine
                "cpu_seconds_vs_torch": round(min(cpu_seconds["torch"])
                                              / min(cpu_seconds[backend]), 3),
                "max_abs_diff_vs_torch": float(np.abs(vectors - spar_vectors).max()),
                "cosine_vs_torch": {"mean": round(float(cosine.mean()), 6), "min": round(float(cosine.min()), 6)},
                "export_seconds": export_seconds[backend],
            }
    if times["lightning"]:
        result["lightning_predict"] = round(best["lightning"], 2)
        result["lightning_vs_loop"] = round(best["lightning"] / best["spar"], 3)
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
