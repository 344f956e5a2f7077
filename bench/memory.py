"""Memory while encoding and indexing a corpus: peak RSS of spar's encode and index stages, and how it scales.

Target: at most 8 GB peak RSS for 1M passages, flat in corpus size. Every measurement runs in a fresh
subprocess; its peak is ``VmHWM`` of ``/proc/self/status`` (the process's own high-water mark; ``ru_maxrss`` of
``getrusage(RUSAGE_SELF)`` is recorded too). A sampler thread also tracks the largest anonymous (``RssAnon``)
and file-backed (``RssFile``: memory-mapped files, e.g. embedding shards) resident sizes seen.

(a) **Encoding scaling.** The ``spar encode`` stage (:func:`pipelines.encode.run`, base encoder only: the bundled
    all-MiniLM-L6-v2 of the embedded config, mean pooling, normalised) over ``queries/passages.arrow`` of N
    passages: the sample corpus (``data/scifact-sample``, 600 abstracts) repeated to N, ids made unique. Encoding
    1M passages with a transformer on CPU is out of reach (tens of passages/s), so N is small, passages are cut to
    ``--encode-max-length`` tokens and the shard size is small (``--encode-shard-size``) so N spans several
    shards: memory is flat in N when the peak does not grow with the number of shards (the slope below).
(b) **1M passages, write + index.** ``spar encode`` writes N synthetic unit vectors for the base encoder and for
    Λ (384-d each) through its real path (the stage, :func:`spar.model.embeddings.encode_passages`, the shard writer and
    manifest; ``encode.shard_size`` as configured, 100,000 by default), with the model replaced by a stub that
    returns random vectors (so the write costs seconds, not days); then, in another fresh subprocess, the ``spar
    index`` stage (:func:`pipelines.index.run`) builds the SPAR ``concat`` index ``[P, PΛ]`` (768-d) from those
    shards and saves it. A flat index must itself hold N × 768 × 4 bytes; the JSON separates that from overhead.
    Run at each ``--index-passages`` (default 250k and 1M) to show how the peak scales.

(c) **Search** (``--search-queries Q``): after each index of (b), a fresh process opens it as a searcher does
    (:meth:`~spar.index.spar_index.SparIndex.load`, its own efSearch and exact re-ranking, whose float32 rows are
    read from the embeddings by ``pread``) and answers Q random queries one at a time, then in one batch.
    ``--index-type auto`` builds what ``index.type: auto`` serves at each size (a flat scan below
    ``index.auto_flat_below``, HNSW over sq4 codes above); synthetic vectors have no tuned μ, so nothing is folded
    (``index.fold=never``: a factor on Λ's half, the same bytes). ``bench/memory_curve.py`` draws the rows.

Everything is written under a temporary directory (``--workdir``, default under ``$TMPDIR`` or /tmp), removed
after each size. N is reduced (and the JSON says so) when the disk or the available memory cannot hold it.

    OMP_NUM_THREADS=1 python -m bench.memory                    # (a) 2k/4k/8k, (b) 250k and 1M flat
    OMP_NUM_THREADS=1 python -m bench.memory --index-type ivfpq --index-passages 1000000
    OMP_NUM_THREADS=2 python -m bench.memory --encode-passages --index-passages 400000 1000000 2000000 \
        --index-type auto --index-override index.hnsw_ef_construction=40 --search-queries 200 --threads 2
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench._common import REPO, command_line, directory_bytes, machine, proc_status, self_command, write_result

GB, MB = 1e9, 1e6
LIMIT_GB = 8.0
RESULT_PREFIX = "MEMORY-RESULT "
SAMPLE_CORPUS = REPO / "data" / "scifact-sample" / "corpus.jsonl"


# ----------------------------------------------------------------------------------------------------------------
# In the measured subprocess
# ----------------------------------------------------------------------------------------------------------------


class Probe:
    """Samples ``/proc/self/status`` every ``interval`` seconds; the largest RssAnon / RssFile seen."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.start_rss = proc_status().get("VmRSS", 0)
        self.max = {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        status = proc_status()
        for key in self.max:
            self.max[key] = max(self.max[key], status.get(key, 0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._sample()
        status = proc_status()
        return {
            "peak_rss_gb": round(status["VmHWM"] / GB, 3),
            "ru_maxrss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB, 3),
            "peak_anon_gb_sampled": round(self.max["RssAnon"] / GB, 3),
            "peak_file_backed_gb_sampled": round(self.max["RssFile"] / GB, 3),
            "rss_before_stage_gb": round(self.start_rss / GB, 3),
        }


def stub_encoder(dim: int, seed: int):
    """A :class:`~spar.model.encoders.BiEncoder` whose model returns random hidden states (mean-pooled, normalised).

    Everything around the model is spar's: tokenised shards (a stub tokenizer: one token per passage),
    length-sorted batches, collation, pooling, normalisation, the .npy shards, ids and manifest.
    """
    from types import SimpleNamespace

    import torch

    from spar.model.encoders import BiEncoder, EncoderSettings

    class RandomModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = SimpleNamespace(hidden_size=dim)
            self.generator = torch.Generator().manual_seed(seed)

        def forward(self, input_ids, attention_mask=None, token_type_ids=None):
            hidden = torch.randn(*input_ids.shape, dim, generator=self.generator)
            return SimpleNamespace(last_hidden_state=hidden)

    class OneTokenTokenizer:
        pad_token_id, sep_token, padding_side = 0, "[SEP]", "right"
        model_input_names = ["input_ids", "attention_mask"]

        def __call__(self, texts, **_):
            return {"input_ids": [[1]] * len(texts)}

    settings = EncoderSettings(pooling="mean", normalize=True, passage_max_length=8, shared_weights=True)
    return BiEncoder(RandomModel(), None, OneTokenTokenizer(), settings)


def child(kind: str, a: dict) -> dict:
    """One measurement (``kind``: encode, write or index) in this fresh process; returns its figures."""
    import torch

    torch.set_num_threads(a["threads"])
    from spar.core.config import load_config

    out_dir = Path(a["dir"])
    overrides = [f"experiment.output_dir={out_dir}", "data.question_sets={}", "encode.accelerator=cpu"]
    if kind == "encode":
        import pipelines.encode

        overrides += ["encode.encoders=[base]", f"encode.base.passage_max_length={a['max_length']}",
                      f"encode.shard_size={a['shard_size']}", f"encode.batch_size={a['batch_size']}"]
        run = pipelines.encode.run
    elif kind == "write":
        import pipelines.encode

        from spar.experiment.plan import EncoderPlan, Experiment

        seeds = {"base": 1, "lambda": 2}
        Experiment.encoder = lambda self, name: EncoderPlan(  # type: ignore[method-assign]
            name, functools.partial(stub_encoder, a["dim"], seeds[name]), f"synthetic-{name}", {}, [])
        overrides += ["encode.encoders=[base,lambda]", f"encode.shard_size={a['shard_size']}",
                      f"encode.batch_size={a['batch_size']}"]
        run = pipelines.encode.run
    elif kind == "index":
        import faiss

        import pipelines.index

        faiss.omp_set_num_threads(a["threads"])
        # synthetic vectors have no tuned μ to fold into an approximate index (a factor on Λ's half: the same bytes
        # and build), so the stage is told not to look for one
        overrides += [f"index.type={a['index_type']}", "index.fold=never", *a.get("index_overrides", [])]
        run = pipelines.index.run
    elif kind == "search":
        return search_child(a)
    else:
        raise ValueError(kind)
    cfg = load_config(None, overrides)
    probe = Probe()
    start = time.perf_counter()
    summary = run(cfg, force=True)
    seconds = time.perf_counter() - start
    figures = probe.stop()
    figures.update(seconds=round(seconds, 1), summary=summary)
    if kind in ("encode", "write"):
        from spar.core.artifacts import read_manifest

        stats = read_manifest(out_dir / "embeddings" / "base" / "passages")["stats"]
        figures.update(shards=stats["shards"], count=stats["count"], truncated=stats["truncated"],
                       items_per_second=stats["items_per_second"])
    return figures


def search_child(a: dict) -> dict:
    """Open the saved index as a searcher does (:meth:`SparIndex.load`, its own search settings: efSearch,
    exact re-ranking of ``refine·k`` candidates read by ``pread`` from the embeddings) and answer ``queries``
    random queries one at a time, then all of them in one batch; peak RSS and milliseconds per query."""
    import faiss
    import numpy as np

    from spar.index.spar_index import SparIndex

    faiss.omp_set_num_threads(a["threads"])
    probe = Probe()
    start = time.perf_counter()
    index = SparIndex.load(Path(a["dir"]) / "index")
    opened = time.perf_counter() - start
    rng = np.random.default_rng(7)
    base_q, lambda_q = (rng.standard_normal((a["queries"], a["dim"]), dtype=np.float32) for _ in range(2))
    one_at_a_time = []
    for i in range(a["queries"]):
        tick = time.perf_counter()
        index.search(base_q[i:i + 1], lambda_q[i:i + 1], k=20, mu=a["mu"])
        one_at_a_time.append(time.perf_counter() - tick)
    tick = time.perf_counter()
    index.search(base_q, lambda_q, k=20, mu=a["mu"])
    batched = time.perf_counter() - tick
    figures = probe.stop()
    figures.update(seconds=round(time.perf_counter() - start, 1), open_seconds=round(opened, 1),
                   queries=a["queries"], refine=index.refine, type=index.info.get("type"),
                   storage=index.storage, ms_per_query_one_at_a_time=round(1e3 * float(np.median(one_at_a_time)), 2),
                   ms_per_query_batched=round(1e3 * batched / a["queries"], 2))
    return figures


# ----------------------------------------------------------------------------------------------------------------
# In the parent
# ----------------------------------------------------------------------------------------------------------------


def write_passages(path: Path, n: int, source: Path | None, batch: int = 100_000) -> None:
    """``passages.arrow`` (schemas.PASSAGES) of ``n`` rows, streamed in record batches.

    ``source``: a corpus repeated to ``n`` passages (copy c > 0 of passage ``x`` gets id ``x#c``); ``None``:
    synthetic rows (id ``p<i>``, empty title and text: the stub encoder does not read them).
    """
    import pyarrow as pa

    from spar.core.schemas import PASSAGES

    base = None
    if source is not None:
        from spar.data.readers import read_corpus

        base = [(p.id, p.title, p.text) for p in read_corpus(source)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, PASSAGES) as writer:
        for lo in range(0, n, batch):
            rows = range(lo, min(n, lo + batch))
            if base is None:
                ids, titles, texts = [f"p{i}" for i in rows], [""] * len(rows), [""] * len(rows)
            else:
                picked = [(base[i % len(base)], i // len(base)) for i in rows]
                ids = [pid if copy == 0 else f"{pid}#{copy}" for (pid, _, _), copy in picked]
                titles = [title for (_, title, _), _ in picked]
                texts = [text for (_, _, text), _ in picked]
            writer.write_batch(pa.record_batch([pa.array(list(rows), pa.int64()), pa.array(ids, pa.string()),
                                                pa.array(titles, pa.string()), pa.array(texts, pa.string())],
                                               schema=PASSAGES))


def run_child(kind: str, a: dict, timeout: int, log_dir: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(a["threads"]), "MKL_NUM_THREADS": str(a["threads"]),
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [*self_command(__file__), "--child", kind, "--child-args", json.dumps(a)]
    print(f"[memory] {kind} N={a['n']:,} ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    (log_dir / f"{kind}-n{a['n']}.log").write_text(proc.stdout + proc.stderr)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{kind} N={a['n']} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    figures = json.loads(lines[-1][len(RESULT_PREFIX):])
    print(f"[memory] {kind} N={a['n']:,}: peak RSS {figures['peak_rss_gb']} GB, {figures['seconds']} s",
          file=sys.stderr, flush=True)
    return figures


def mem_available() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def fit_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys on xs."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


#: Bytes per dimension of each passage-vector storage (spar.index.storage); fast-scan codes as sq4.
STORAGE_BYTES_PER_DIM = {"float32": 4.0, "fp16": 2.0, "sq8": 1.0, "sq4": 0.5, "fs4": 0.5}


def index_own_bytes(n: int, dim: int, index_type: str, storage: str = "float32", hnsw_m: int = 32,
                    pq_m: int = 16) -> int:
    """Bytes the index structure must hold for ``n`` vectors of ``dim`` (codes, graph links, ids): an estimate for
    the disk and memory checks before a build (the rows record the built ``index.faiss``'s own size).

    ``auto`` is what ``index.type: auto`` builds at these sizes (``HnswIndex.auto``: HNSW over sq4 codes, M 16)."""
    codes = int(n * dim * STORAGE_BYTES_PER_DIM.get(storage, 4.0))
    if index_type == "flat":
        return codes
    if index_type == "hnsw":
        return codes + n * 2 * hnsw_m * 4  # level-0 links (2M per node); upper levels are ~1/M of that
    if index_type == "auto":
        return n * dim // 2 + n * 2 * 16 * 4  # sq4: half a byte per dimension; level-0 links of M 16
    return n * (pq_m + 8)  # IVF-PQ: codes + 64-bit ids


def summarize(args, argv, encode_rows: list, slope: float | None, index_rows: list, notes: list,
              spar_dim: int, storage: str) -> dict:
    """The result JSON of the rows measured so far (written after each size, so a stopped run keeps them)."""
    largest = max(index_rows, key=lambda r: r["passages"]) if index_rows else None
    peaks = {"encode_model_max_over_N": max(r["peak_rss_gb"] for r in encode_rows)} if encode_rows else {}
    if largest:
        peaks[f"write_{largest['passages']}"] = largest["write"]["peak_rss_gb"]
        peaks[f"index_{largest['passages']}"] = largest["index"]["peak_rss_gb"]
        if "search" in largest:
            peaks[f"search_{largest['passages']}"] = largest["search"]["peak_rss_gb"]
    spar = max(peaks.values())
    if len(index_rows) >= 2:
        lo, hi = index_rows[0], index_rows[-1]
        per_million = lambda key: round((hi[key[0]][key[1]] - lo[key[0]][key[1]])  # noqa: E731
                                        / ((hi["passages"] - lo["passages"]) / 1e6), 3)
        index_scaling = {
            "between": [lo["passages"], hi["passages"]],
            "index_peak_rss_gb_per_1m": per_million(("index", "peak_rss_gb")),
            "index_peak_anon_gb_per_1m": per_million(("index", "peak_anon_gb_sampled")),
            "index_peak_file_backed_gb_per_1m": per_million(("index", "peak_file_backed_gb_sampled")),
            "index_own_gb_per_1m": round(index_own_bytes(1_000_000, spar_dim, args.index_type, storage) / GB, 3),
            "write_peak_rss_gb_per_1m": per_million(("write", "peak_rss_gb")),
        }
    else:
        index_scaling = None
    result = {
        "spar": spar,
        "peer": LIMIT_GB,
        "ratio": round(spar / LIMIT_GB, 3),
        "unit": "GB peak RSS (VmHWM of the measuring process; GB = 1e9 bytes; lower is better)",
        "machine": machine(args.threads),
        "target": "<= 8 GB, flat in corpus size",
        "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} " + command_line(__file__, argv),
        "peer_name": "the target's 8 GB limit (no peer system)",
        "spar_is": "the largest measured peak of: encoding with the real model (a, any N), and the write and index "
                   "processes at the largest N of (b)",
        "peaks_gb": peaks,
        "encode": {
            "rows": encode_rows,
            "slope_mb_per_1k_passages": round(slope, 2) if slope is not None else None,
            "model": "all-MiniLM-L6-v2 (bundled; base encoder of the embedded config: mean pooling, normalised)",
            "stage": "pipelines.encode.run (spar encode), base encoder, passages only",
            "passages": f"{SAMPLE_CORPUS.relative_to(REPO)} (600 abstracts) repeated to N, as queries/passages.arrow",
            "max_length": args.encode_max_length, "shard_size": args.encode_shard_size,
            "batch_size": args.encode_batch_size, "threads": args.threads,
        },
        "index": {
            "rows": index_rows,
            "scaling": index_scaling,
            "vectors": f"synthetic unit vectors, base {args.dim}-d + Λ {args.dim}-d, written by pipelines.encode.run "
                       "(spar encode) with a stub model; indexed by pipelines.index.run (spar index), variant concat",
            "write_shard_size": args.write_shard_size, "type": args.index_type, "threads": args.threads,
            "overrides": args.index_override, "search_queries": args.search_queries,
        },
        "notes": notes + [
            "peak_rss_gb counts file-backed pages too. The index stage reads the embedding shards' rows with "
            "positional reads (ShardedVectors), not through their memory mapping, so the pages it passes over do "
            "not stay resident: file-backed RSS stays flat; the flat index itself (N x dim x 4 bytes) is the part "
            "that grows with N.",
            "peak_anon_gb_sampled and peak_file_backed_gb_sampled are maxima of a 20 ms sampler; peak_rss_gb "
            "(VmHWM) is exact.",
            "(a) encodes short passages (max_length above) with a small shard size: at max_length 256 and batch 64 "
            "the transformer's activations add a constant per batch, and a 100k-passage shard keeps its token ids "
            "and vectors (~0.15 GB of float32 at 384-d) in memory; (b)'s write rows measure that shard size.",
        ],
    }
    return result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encode-passages", type=int, nargs="*", default=[2000, 4000, 8000],
                    help="(a) corpus sizes encoded with the real model, each in a fresh process (none: skip (a))")
    ap.add_argument("--encode-max-length", type=int, default=32, help="(a) passage max length in tokens (cost)")
    ap.add_argument("--encode-shard-size", type=int, default=2000,
                    help="(a) encode.shard_size, small so that the sizes span several shards")
    ap.add_argument("--encode-batch-size", type=int, default=32, help="(a) encode.batch_size (the config's)")
    ap.add_argument("--index-passages", type=int, nargs="+", default=[250_000, 1_000_000],
                    help="(b) corpus sizes written (synthetic vectors) and indexed, each in fresh processes")
    ap.add_argument("--index-type", default="flat", choices=["flat", "hnsw", "ivfpq", "auto"],
                    help="(b) index.type (hnsw builds slowly on one thread at 1M; auto: what spar serves above "
                         "index.auto_flat_below passages, HNSW over sq4 codes with exact re-ranking)")
    ap.add_argument("--index-override", action="append", default=[], metavar="KEY=VALUE",
                    help="(b) more index settings for the index process, e.g. index.hnsw_ef_construction=40: the "
                         "graph's size is set by M, not by efConstruction, which only buys build time")
    ap.add_argument("--search-queries", type=int, default=0,
                    help="(b) after each index, a search process answers this many random queries (0: none)")
    ap.add_argument("--write-shard-size", type=int, default=100_000, help="(b) encode.shard_size (spar's default)")
    ap.add_argument("--write-batch-size", type=int, default=4096, help="(b) encode.batch_size of the stub model")
    ap.add_argument("--dim", type=int, default=384, help="(b) base and Λ dimension (MiniLM: 384)")
    ap.add_argument("--threads", type=int, default=1, help="torch / FAISS threads in the measured processes")
    ap.add_argument("--workdir", type=Path, default=None, help="parent of the temporary directory (default: $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--child-timeout", type=int, default=1800)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "memory.json")
    ap.add_argument("--child", choices=["encode", "write", "index", "search"], help=argparse.SUPPRESS)
    ap.add_argument("--child-args", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        print(RESULT_PREFIX + json.dumps(child(args.child, json.loads(args.child_args))), flush=True)
        return {}

    base_dir = args.workdir or Path(tempfile.gettempdir())
    base_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="spar-bench-memory-", dir=base_dir))
    logs = work / "logs"
    logs.mkdir()
    spar_dim = 2 * args.dim
    from spar.core.config import load_config

    storage = "sq4" if args.index_type == "auto" else load_config(None).index.storage  # the embedded config's
    notes: list[str] = []
    try:
        # (a) encoding scaling with the real model.
        encode_rows = []
        for n in args.encode_passages:
            d = work / f"encode-n{n}"
            write_passages(d / "queries" / "passages.arrow", n, SAMPLE_CORPUS)
            figures = run_child("encode", {"n": n, "dir": str(d), "threads": args.threads,
                                           "max_length": args.encode_max_length, "shard_size": args.encode_shard_size,
                                           "batch_size": args.encode_batch_size}, args.child_timeout, logs)
            figures.pop("summary", None)
            encode_rows.append({"passages": n, **figures})
            shutil.rmtree(d)
        slope = fit_slope([r["passages"] / 1000 for r in encode_rows],
                          [r["peak_rss_gb"] * GB / MB for r in encode_rows]) if encode_rows else None

        # (b) write synthetic vectors through the encode stage, then index them; at each size.
        index_rows = []
        for requested in args.index_passages:
            n = requested
            need_disk = n * (2 * args.dim * 4 + 40) + index_own_bytes(n, spar_dim, args.index_type, storage)
            free = shutil.disk_usage(work).free
            if need_disk > 0.9 * free:
                n = int(0.9 * free / (need_disk / n)) // 10_000 * 10_000
                notes.append(f"{requested:,} passages need ~{need_disk / GB:.1f} GB of disk, {free / GB:.1f} GB free "
                             f"under {work.parent}: reduced to {n:,}")
            need_mem = index_own_bytes(n, spar_dim, args.index_type, storage) + int(1.5 * GB)
            avail = mem_available()
            if need_mem > 0.8 * avail:
                per_passage = index_own_bytes(n, spar_dim, args.index_type, storage) / n
                n2 = int((0.8 * avail - 1.5 * GB) / per_passage) // 10_000 * 10_000
                notes.append(f"{n:,} passages need ~{need_mem / GB:.1f} GB of memory, {avail / GB:.1f} GB "
                             f"available: reduced to {n2:,}")
                n = n2
            if n <= 0:
                continue
            d = work / f"index-n{n}"
            write_passages(d / "queries" / "passages.arrow", n, None)
            common = {"n": n, "dir": str(d), "threads": args.threads, "dim": args.dim}
            write = run_child("write", {**common, "shard_size": args.write_shard_size,
                                        "batch_size": args.write_batch_size}, args.child_timeout, logs)
            write.pop("summary", None)
            emb_bytes = directory_bytes(d / "embeddings")
            index = run_child("index", {**common, "index_type": args.index_type,
                                        "index_overrides": args.index_override}, args.child_timeout, logs)
            index.pop("summary", None)
            search = None
            if args.search_queries:
                search = run_child("search", {**common, "queries": args.search_queries, "mu": 0.02},
                                   args.child_timeout, logs)
            index_file = d / "index" / "index.faiss"
            own = index_file.stat().st_size  # what FAISS holds in memory: codes (+ graph links)
            row = {
                "passages": n, "requested": requested, "index_type": args.index_type, "dim": spar_dim,
                "write": write, "index": index, **({"search": search} if search else {}),
                "index_manifest": {k: v for k, v in json.loads((d / "index" / "index.json").read_text()).items()
                                   if k in ("type", "storage", "options", "fold", "count", "dim")},
                "embeddings_bytes": emb_bytes,
                "index_faiss_bytes": index_file.stat().st_size,
                "index_dir_bytes": directory_bytes(d / "index"),
                "index_own_bytes": own,
                "index_own_definition": "the size of index.faiss: the codes (and graph links) FAISS holds in "
                                        "memory to search",
                "index_overhead_gb": round(index["peak_rss_gb"] - own / GB, 3),
                "index_anon_overhead_gb": round(index["peak_anon_gb_sampled"] - own / GB, 3),
            }
            index_rows.append(row)
            shutil.rmtree(d)
            partial = summarize(args, argv, encode_rows, slope, index_rows, notes, spar_dim, storage)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({**partial, "partial": "sizes still to come"}, indent=2) + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    result = summarize(args, argv, encode_rows, slope, index_rows, notes, spar_dim, storage)
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
