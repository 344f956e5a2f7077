"""A newcomer's console: `spar run` prints spar's own lines and one summary, no third-party chatter; `-v` brings the
libraries' logs back; the embedded default writes its results under its output directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Lines third-party libraries printed on a first run before spar quieted them (issue #15).
NOISE = ("litlogger", "GPU available", "TPU available", "Weave", "anonymous", "_pytree", "LeafSpec",
         "MemorySegmentIndexInput", "SLF4J", "Loading weights", "Writing model shards", "wandb: ",
         "Loading `train_dataloader`", "You can sync this run")


def _spar(*args: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_SILENT", "WANDB_MODE", "TRANSFORMERS_VERBOSITY")}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.slow  # a whole `spar run` in a subprocess: ~1.5 min
def test_spar_run_prints_no_library_chatter_and_one_summary(tmp_path: Path):
    out = tmp_path / "run"
    train = ["train.kind=static", "train.lexical.dim=32", "train.max_steps=2", "train.val_check_interval=1",
             "train.batch_size=8", "train.wandb_mode=offline", "sample.max_queries=400"]
    config = str(REPO / "configs" / "default.yaml")
    console = _spar("run", "--to", "train", config, f"experiment.output_dir={out}", *train, cwd=tmp_path)
    found = [noise for noise in NOISE if noise in console]
    assert not found, (found, console[-4000:])
    assert not [line for line in console.splitlines() if line.strip() == "|"]  # no table wrapped at the width
    for stage in ("sample", "label", "train"):
        assert f"{stage}: done in" in console
    assert "spar run" in console and "total" in console  # the summary
    assert f"W&B runs (offline): {out / 'wandb'}" in console and "wandb sync" in console
    assert list((out / "wandb").glob("offline-run-*"))  # the train run, in the one W&B directory
    assert not list(tmp_path.glob("hs_err_pid*.log"))

    verbose = _spar("train", "-c", config, "-v", "--force", f"experiment.output_dir={out}", *train, cwd=tmp_path)
    assert "GPU available" in verbose  # Lightning's own log lines are back with -v


def test_results_of_the_embedded_default_go_under_its_output_dir(tmp_path):
    from spar.core.config import load_config

    cfg = load_config(None, [f"experiment.output_dir={tmp_path}"])
    assert cfg.results_dir == tmp_path / "results"
    committed = load_config(REPO / "configs" / "experiments" / "scifact.yaml")
    assert committed.results_dir == REPO / "results"  # the committed tables, from any directory


def test_quiet_is_quiet_and_a_redirected_bar_writes_plain_lines(tmp_path):
    """#47 item 4: under -q spar's own bars and warnings still printed; with stderr redirected to a file its bars
    wrote carriage-return chunks into the log."""
    import subprocess
    import sys

    def sample(*flags: str) -> subprocess.CompletedProcess:
        out = tmp_path / f"run{len(flags)}"
        return subprocess.run([sys.executable, "-m", "pipelines.cli", "sample", *flags, f"experiment.output_dir={out}"],
                              cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)

    quiet = sample("-q")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", (quiet.stdout, quiet.stderr)
    normal = sample()
    assert normal.returncode == 0 and "sample: done" in normal.stdout
    assert "\r" not in normal.stderr
    assert "reading corpus: 600 passages in" in normal.stderr
    assert "sampling sentences: 600/600 passages in" in normal.stderr


def test_plain_progress_prints_a_line_every_interval_and_one_at_the_end(monkeypatch, capsys):
    from spar.core import console

    monkeypatch.setattr(console, "PLAIN_PROGRESS_EVERY", 0.0)
    bar = console.PlainProgress(total=4, desc="labelling", unit=" q")
    bar.update(2)
    bar.update(2)
    bar.close()
    bar.close()  # once
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == ["labelling: 2/4 q", "labelling: 4/4 q", "labelling: 4/4 q in 0 s"]
    assert list(console.PlainProgress(["a", "b"], desc="reading")) == ["a", "b"]
    assert capsys.readouterr().err.splitlines()[-1].startswith("reading: 2 it in ")
