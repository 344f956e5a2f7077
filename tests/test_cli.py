"""CLI wiring: help for every stage, overrides reach the stage, errors are clean, import stays light."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines import cli


def test_top_level_help_lists_every_stage(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for stage in cli.STAGES + ["run", "search"]:
        assert stage in out


@pytest.mark.parametrize("stage", cli.STAGES)
def test_stage_help_documents_its_options(stage, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([stage, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"{stage}." in out and "[default:" in out and "data.corpus" in out
    # #47: a heading per section, lines wrapped (they ran to 442 characters)
    assert "\nexperiment:\n" in out and "\ndata:\n" in out
    assert max(len(line) for line in out.splitlines()) <= 120


def test_unknown_key_is_a_clean_error(capsys):
    assert cli.main(["sample", "sample.strategie=all"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'sample.strategie'" in err and "did you mean 'sample.strategy'" in err


def test_run_chains_stages_in_order(monkeypatch):
    called = []

    import subprocess as sp

    class Stage:  # a stage process that ends at once
        def __init__(self, cmd, **kwargs):
            called.append(cmd[3:])

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(sp, "Popen", Stage)
    assert cli.main(["run", "--from", "label", "--to", "encode", "label.k=30", "--force"]) == 0
    assert called == [[s, "--force", "label.k=30"] for s in ("label", "train", "encode")]


def test_run_stops_at_a_failing_stage(monkeypatch):
    called = []
    monkeypatch.setattr(cli, "_run_stage_process",
                        lambda stage, args, stats_file: called.append(stage) or (3 if stage == "train" else 0))
    for name in ("SPAR_RUN_COMMAND", "SPAR_OUTPUT_LOCK"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["run", "--to", "encode"]) == 3
    assert called == ["sample", "label", "train"]
    # The stages saw the run's command and shared its lock; the process keeps neither (a later in-process call
    # would record the wrong command, or act as if it held a lock it does not hold).
    assert "SPAR_RUN_COMMAND" not in os.environ and "SPAR_OUTPUT_LOCK" not in os.environ


def test_run_skips_complete_stages_in_subprocesses():
    """Real chaining: the embedded sample's first stage twice; the second run reports it up to date."""
    import tempfile

    out = tempfile.mkdtemp()
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "--to", "sample", f"experiment.output_dir={out}"]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    second = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "sample: done" in first and "skipped (up to date)" in second


def test_import_is_light():
    code = ("import sys, time; t=time.time(); import spar, pipelines.cli, spar.core.config; "
            "assert 'torch' not in sys.modules and 'jnius' not in sys.modules, sorted(sys.modules); "
            "print(time.time()-t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert float(out) < 2.0


def test_frontier_reports_the_time_it_ran(monkeypatch, tmp_path, capsys):
    """#22 item 20: `spar frontier` printed "done in 0.0s" after a 20 s run."""
    import time

    import pipelines.frontier

    def slow_frontier(cfg, *args, **kwargs):
        time.sleep(1.2)
        return {"points": 0}

    monkeypatch.setattr(pipelines.frontier, "run", slow_frontier)
    assert cli.main(["frontier", f"experiment.output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "frontier: done in 1." in out and "done in 0.0s" not in out


def test_overrides_may_follow_a_flag(monkeypatch):
    """#22 item 17: `spar encode CFG --force k=v` was rejected as "unrecognized arguments"."""
    seen = {}

    def fake_load(args):
        seen["overrides"] = list(args.overrides)
        raise SystemExit(0)

    monkeypatch.setattr(cli, "_load", fake_load)
    with pytest.raises(SystemExit):
        cli.main(["encode", "configs/default.yaml", "--force", "encode.batch_size=8", "tune.metric=R@100"])
    assert seen["overrides"][-2:] == ["encode.batch_size=8", "tune.metric=R@100"]
    with pytest.raises(SystemExit) as info:  # anything else left over is still an error
        cli.main(["encode", "configs/default.yaml", "--force", "--no-such-flag"])
    assert info.value.code == 2
