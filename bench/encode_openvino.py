"""OpenVINO against torch and ONNX Runtime for a CPU encoder: passages/s, one query's latency, the vectors.

Issue #36 asks for OpenVINO as an encoding backend if it beats torch (bf16 where the CPU has it) in a fair,
alternated measurement and its dependencies fit. OpenVINO runs spar's own ONNX export
(:mod:`spar.model.onnx_encoder`: the same file ONNX Runtime runs, from the cache), so nothing else is installed:
the ``openvino`` wheel (its runtime reads ONNX; no ``optimum``, which pins ``transformers < 5``). Every backend is a
:class:`~spar.model.encoders.BiEncoder` whose transformer forward pass runs elsewhere — tokenisation, length-sorted
batches, pooling and normalisation stay spar's — so the rows differ only in what runs the transformer:

- ``torch`` fp32 (spar's default), and torch bf16 autocast where the CPU has native bf16 (``encode.precision=auto``);
- ``onnx``: ONNX Runtime fp32 (``encode.backend=onnx``);
- ``openvino``: OpenVINO fp32 (``INFERENCE_PRECISION_HINT=f32``), and ``openvino-bf16`` where the CPU has native
  bf16 (OpenVINO's own default there).

Throughput: ``--passages`` SciFact abstracts in batches of ``--batch-size``, each backend once per repeat,
alternated; best and median. Latency: ``--single`` queries one at a time, alternated question by question. Vectors:
cosine and max abs difference to torch fp32 over the timed passages. The CPU's model and bf16 flags are recorded.

    pip install openvino        # not a dependency of spar: only this bench uses it
    python -m bench.encode_openvino --threads 2 --out bench/results/encode_openvino-amd.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench._common import REPO, command_line, cpu_model, machine, write_result

SCIFACT = REPO.parent / "shared" / "datasets" / "scifact"


def openvino_encoder(onnx_encoder, precision: str, threads: int):
    """``onnx_encoder`` (an :class:`~spar.model.onnx_encoder.OnnxBiEncoder`) with its forward pass compiled by
    OpenVINO from the same ONNX file, at ``precision`` (``f32`` or ``bf16``)."""
    import openvino as ov
    import torch

    from spar.model.onnx_encoder import OnnxBiEncoder

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(onnx_encoder.files["query"].path)), "CPU",
                                  {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads,
                                   "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()

    class OpenVinoBiEncoder(OnnxBiEncoder):
        def _hidden(self, model, inputs):
            feed = {k: v.to("cpu", torch.int64).numpy() for k, v in inputs.items()}
            return torch.from_numpy(request.infer(feed)[0].copy())

    return OpenVinoBiEncoder(onnx_encoder, onnx_encoder.files, "onnx")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--corpus", type=Path, default=SCIFACT / "corpus.jsonl")
    ap.add_argument("--queries", type=Path, default=SCIFACT / "queries.jsonl")
    ap.add_argument("--passages", type=int, default=512, help="passages timed per run")
    ap.add_argument("--single", type=int, default=200, help="queries timed one at a time")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import numpy as np
    import openvino
    import torch

    torch.set_num_threads(args.threads)  # before the ONNX Runtime session opens: it takes torch's count
    from spar.data.readers import read_corpus, read_queries
    from spar.model.encoders import BiEncoder
    from spar.model.engines import cpu_bf16_support
    from spar.model.onnx_encoder import OnnxBiEncoder

    native = cpu_bf16_support()
    torch_encoder = BiEncoder.from_pretrained(args.model, pooling="mean", normalize=True)
    onnx = OnnxBiEncoder.from_encoder(torch_encoder)
    backends = {"torch": torch_encoder, "onnx": onnx, "openvino": openvino_encoder(onnx, "f32", args.threads)}
    autocast = {name: False for name in backends}
    if native:
        backends["torch-bf16"], autocast["torch-bf16"] = torch_encoder, True
        backends["openvino-bf16"], autocast["openvino-bf16"] = openvino_encoder(onnx, "bf16", args.threads), False
    passages = [(p.title, p.text) for p in read_corpus(args.corpus)][:args.passages]
    queries = [q.text for q in read_queries(args.queries)][:args.single]

    def encode(name: str, items, query: bool = False):
        call = backends[name].encode_query if query else backends[name].encode_passage
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast[name]):
            return call(items, args.batch_size)

    for name in backends:  # warm: sessions open, kernels compile
        encode(name, passages[:args.batch_size])
        encode(name, queries[:1], query=True)
    seconds: dict[str, list[float]] = {name: [] for name in backends}
    vectors = {}
    for _ in range(args.repeats):
        for name in backends:
            start = time.perf_counter()
            vectors[name] = encode(name, passages)
            seconds[name].append(time.perf_counter() - start)
    latency: dict[str, list[float]] = {name: [] for name in backends}
    for text in queries:  # one query at a time, alternated
        for name in backends:
            start = time.perf_counter()
            encode(name, [text], query=True)
            latency[name].append(1000 * (time.perf_counter() - start))

    reference = vectors["torch"]
    rows = {}
    for name in backends:
        v = vectors[name]
        cosine = (v * reference).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(reference, axis=1)
        rows[name] = {"passages_per_s_best": round(len(passages) / min(seconds[name]), 1),
                      "passages_per_s_median": round(len(passages) / statistics.median(seconds[name]), 1),
                      "query_ms_median": round(statistics.median(latency[name]), 2),
                      "query_ms_mean": round(statistics.fmean(latency[name]), 2),
                      "cosine_vs_torch_min": round(float(cosine.min()), 6),
                      "max_abs_diff_vs_torch": float(np.abs(v - reference).max())}
    best_other = max((n for n in backends if n.startswith("torch") or n == "onnx"),
                     key=lambda n: rows[n]["passages_per_s_best"])
    best_openvino = max((n for n in backends if n.startswith("openvino")), key=lambda n: rows[n]["passages_per_s_best"])
    result = {
        "benchmark": "OpenVINO (spar's ONNX export) against torch and ONNX Runtime for MiniLM on the CPU (issue #36)",
        "spar": rows[best_openvino]["passages_per_s_best"], "peer": rows[best_other]["passages_per_s_best"],
        "ratio": round(rows[best_openvino]["passages_per_s_best"] / rows[best_other]["passages_per_s_best"], 3),
        "spar_name": best_openvino, "peer_name": f"{best_other} (the fastest non-OpenVINO backend)",
        "unit": "passages/s (best of alternated repeats)", "rows": rows,
        "query_latency_ratio_openvino_vs_onnx": round(rows["openvino"]["query_ms_median"]
                                                      / rows["onnx"]["query_ms_median"], 3),
        "cpu": cpu_model(), "cpu_bf16": native, "openvino": openvino.__version__, "passages": len(passages),
        "queries_single": len(queries), "threads": args.threads, "batch_size": args.batch_size,
        "repeats": args.repeats, "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        "machine": machine(args.threads), "command": command_line(__file__, argv),
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
