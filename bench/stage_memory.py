"""Peak memory of one spar stage on a real run, and where in the code it was reached.

Runs ``spar <stage> -c CONFIG [overrides]`` in this process with a sampler thread that reads ``/proc/self/status``
every ``--interval`` seconds: the high-water mark (``VmHWM``), anonymous (``RssAnon``) and file-backed (``RssFile``:
memory-mapped embeddings, Lucene files) resident memory, and, each time the resident size reaches a new high, the
main thread's Python stack (so the JSON says which call holds the memory). A JVM started in-process (Pyserini) counts
in the same process's RSS, as it does in a stage run from the command line.

    python -m bench.stage_memory tune -c configs/experiments/wiki-odqa.yaml --out bench/results/memory-tune-663k.json
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from pathlib import Path

from bench._common import command_line, machine, proc_status, write_result

GB = 1e9


def status() -> dict[str, int]:
    return {k: v for k, v in proc_status().items() if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile")}


class Sampler(threading.Thread):
    def __init__(self, interval: float, main_ident: int):
        super().__init__(daemon=True)
        self.interval, self.main_ident = interval, main_ident
        self.peak_rss = self.peak_anon = self.peak_file = 0
        self.peaks: list[dict] = []
        self.stop = threading.Event()
        self.started = time.perf_counter()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            s = status()
            self.peak_anon = max(self.peak_anon, s.get("RssAnon", 0))
            self.peak_file = max(self.peak_file, s.get("RssFile", 0))
            if s.get("VmRSS", 0) > self.peak_rss * 1.05:  # a new high (5% steps): where is the main thread?
                self.peak_rss = s["VmRSS"]
                frame = sys._current_frames().get(self.main_ident)
                stack = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)][-8:] \
                    if frame else []
                self.peaks.append({"seconds": round(time.perf_counter() - self.started, 1),
                                   "rss_gb": round(s["VmRSS"] / GB, 2), "anon_gb": round(s.get("RssAnon", 0) / GB, 2),
                                   "file_gb": round(s.get("RssFile", 0) / GB, 2), "stack": stack})


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage")
    ap.add_argument("-c", "--config", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--label", default=None, help="what the row is called (default: the stage)")
    ap.add_argument("--force", action="store_true", help="run the stage even when it is up to date")
    ap.add_argument("--out", required=True)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    from pipelines.cli import main as spar_main

    sampler = Sampler(args.interval, threading.get_ident())
    sampler.start()
    start = time.perf_counter()
    code = spar_main([args.stage, "-c", args.config, *(["--force"] if args.force else []), *args.overrides])
    seconds = time.perf_counter() - start
    sampler.stop.set()
    final = status()
    result = {"stage": args.stage, "label": args.label or args.stage, "exit": code, "seconds": round(seconds, 1),
              "peak_rss_gb": round(final["VmHWM"] / GB, 3), "peak_anon_gb": round(sampler.peak_anon / GB, 3),
              "peak_file_gb": round(sampler.peak_file / GB, 3), "limit_gb": 8.0,
              "spar": round(final["VmHWM"] / GB, 3), "peer": 8.0, "ratio": round(final["VmHWM"] / GB / 8.0, 3),
              "unit": "GB peak RSS (VmHWM) against the 8 GB target", "new_highs": sampler.peaks,
              "machine": machine(), "command": command_line(__file__, argv)}
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
