"""Kill stages with SIGKILL part-way, re-run them, and check the outputs equal an uninterrupted run's.

These run the real CLI in subprocesses (real Pyserini, real torch), on a slice of the embedded sample.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SPAR = [sys.executable, "-m", "pipelines.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


def _spar(out: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = SPAR + list(args) + [f"experiment.output_dir={out}"]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, check=check, timeout=900)


def _kill_when(out: Path, args: list[str], ready) -> None:
    """Start ``spar ARGS``, SIGKILL it as soon as ``ready()`` is true (fails if it finishes first)."""
    cmd = SPAR + args + [f"experiment.output_dir={out}"]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if ready():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return
        time.sleep(0.05)
    pytest.fail(f"{' '.join(args)} finished (rc={proc.returncode}) before it could be killed")


def _inode_and_mtime(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns


def _files(directory: Path, pattern: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob(pattern))}


LABEL_ARGS = ["sample.max_queries=1200", "label.shard_size=200", "label.batch_size=100"]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sampled")
    _spar(out, "sample", *LABEL_ARGS)
    return out


def test_label_killed_then_resumed_is_byte_identical(sampled: Path, tmp_path: Path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    for d in (reference, resumed):
        shutil.copytree(sampled, d)
    _spar(reference, "label", *LABEL_ARGS)

    partial = resumed / "labels.partial"
    _kill_when(resumed, ["label", *LABEL_ARGS], lambda: len(list(partial.glob("labels-*.arrow"))) >= 2)
    assert not (resumed / "labels").exists(), "a killed run must not leave a complete-looking output"
    done_before = _files(partial, "labels-*.arrow")
    total = len(_files(reference / "labels", "labels-*.arrow"))
    assert 2 <= len(done_before) < total
    identity = {name: _inode_and_mtime(partial / name) for name in done_before}

    log = _spar(resumed, "label", *LABEL_ARGS).stdout
    n = len(done_before)
    assert f"{total - n} written, {n} reused" in log, log
    # The finished shards were kept as they were (same file, never rewritten), not recomputed.
    assert {name: _inode_and_mtime(resumed / "labels" / name) for name in done_before} == identity
    assert _files(resumed / "labels", "labels-*.arrow") == _files(reference / "labels", "labels-*.arrow")
    assert not partial.exists()

    # A complete stage re-run does nothing.
    assert "skipped (up to date)" in _spar(resumed, "label", *LABEL_ARGS).stdout
