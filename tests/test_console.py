"""A newcomer's console: the embedded default writes its results under its output directory; -q is quiet and a
redirected bar writes plain lines. (`spar run`'s own console, no third-party chatter and one summary, is checked on
tests/test_kinds.py's projection run: one pipeline, not a second copy of it.)"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

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
