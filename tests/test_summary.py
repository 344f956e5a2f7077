"""`spar run`'s final summary (#30 item 5): both times of each stage, labelled; what every stage dropped or skipped,
named with its count; the index the results were measured on (type, storage, bytes per passage); headings that
wrap between phrases, never inside one, at 80 columns. The run's artifacts are written here by hand (their
manifests' statistics are what the stages record, see pipelines/*.py), so each expected line follows from them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from spar.core.artifacts import ArtifactWriter
from spar.core.config import load_config

STAGES = {  # what `spar run` hands the summary: the stage's own time and its process's wall time
    "sample": {"seconds": 9.5, "stage_seconds": 1.8},
    "label": {"seconds": 80.2, "stage_seconds": 71.9},
    "train": {"seconds": 30.0, "stage_seconds": 21.0},
    "encode": {"seconds": 44.4, "stage_seconds": 36.0},
    "tune": {"skipped": True, "seconds": 7.0, "stage_seconds": 0.2},
    "index": {"seconds": 25.0, "stage_seconds": 20.0},
    "evaluate": {"seconds": 60.0, "stage_seconds": 55.0},
    "publish": {"seconds": 12.0, "stage_seconds": 4.0},
}


def _artifact(path: Path, kind: str, stats: dict) -> None:
    with ArtifactWriter(path, kind=kind, config={}, inputs={}) as w:
        w.stats = stats


@pytest.fixture()
def finished_run(tmp_path):
    cfg = load_config(None, [f"experiment.output_dir={tmp_path / 'run'}", "experiment.name=demo"])
    out = cfg.output_dir
    _artifact(out / "queries", "queries", {"read": {"read": 599, "skipped": {"malformed JSON": 1}},
                                           "sampling": {"fragments_dropped": 172}})
    _artifact(out / "labels", "labels", {"queries": 5258, "labelled": 5256, "dropped": 2, "dropped_dev": 1})
    _artifact(out / "embeddings" / "base" / "passages", "embeddings", {"truncated": 3, "max_length": 256,
                                                                         "precision": "32", "backend": "torch"})
    _artifact(out / "embeddings" / "lambda" / "passages", "embeddings", {"truncated": 0, "max_length": None,
                                                                           "precision": "32"})
    _artifact(out / "index", "index", {"type": "flat", "storage": "sq4", "code_bytes": 2880,
                                       "bytes_per_passage": 2904.3})
    cfg.results_dir.mkdir(parents=True)
    (cfg.results_dir / "demo.json").write_text(json.dumps({
        "dataset": "scifact-sample", "mu": 0.3, "alpha": 0.5,
        "systems": {"bm25": {"nDCG@10": 0.8506}, "spar": {"nDCG@10": 0.8829}},
        "rbo": {"spar": 0.629}, "shuffled": {"spar": {"nDCG@10": 0.8905, "delta": 0.0077}},
        "skipped_records": {"data.qrels_test": {"unknown passage": 1}},
        "skipped_systems": {"spar_sum": "needs Λ of the base's dimension"}}))
    return cfg


def _render(cfg, width: int) -> str:
    from rich.console import Console

    from pipelines.summary import print_run_summary

    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    print_run_summary(cfg, STAGES, None, console=console)
    return console.file.getvalue()


def _row(text: str, stage: str) -> str:
    return next(line for line in text.splitlines() if line.strip("│┃ ").startswith(stage + " "))


def test_summary_names_every_stages_drops_both_times_and_the_index(finished_run):
    text = _render(finished_run, 250)
    sample, label, encode, evaluate = (_row(text, s) for s in ("sample", "label", "encode", "evaluate"))
    assert "1 corpus records skipped (malformed JSON); 172 sentences dropped (< 4 words)" in sample
    assert "2 queries dropped (too few teacher hits, 1 dev)" in label
    assert "3 passages truncated at 256 tokens (base)" in encode and "(lambda)" not in encode
    assert "1 unknown passage (data.qrels_test); not run: spar_sum" in evaluate
    # Both times, each under its own heading: the stage's own (as on its "done in" line) and with start-up.
    header = next(line for line in text.splitlines() if "with start-up" in line)
    assert header.index("time") < header.index("with start-up") < header.index("dropped / skipped")
    assert "71.9 s" in label and "80.2 s" in label and "1.8 s" in sample and "9.5 s" in sample
    total = _row(text, "total")
    assert "209.9 s" in total and "268.1 s" in total  # sums of the two columns
    assert "up to date" in _row(text, "tune") and "none" not in _row(text, "tune")
    # The result table says which index it was measured on.
    assert "index flat, sq4: 2,880 B/passage (2,904 B/passage on disk)" in text
    assert "μ = 0.3, α = 0.5" in text and "0.8829" in text


def test_summary_headings_never_wrap_inside_a_phrase_at_80_columns(finished_run):
    text = _render(finished_run, 80)
    lines = text.split("\nwhere\n")[0].splitlines()  # headings and tables (paths below are never broken)
    assert max(len(line) for line in lines) <= 80
    for phrase in ("results (scifact-sample test)", "Λ projection", "μ = 0.3, α = 0.5",
                   "index flat, sq4: 2,880 B/passage (2,904 B/passage on disk)", "experiment demo",
                   "time: each stage's own, and with its process's start-up",
                   "vectors base fp32 (torch), Λ fp32 (sparse)"):  # which precision ran (#48)
        assert any(phrase in line for line in lines), phrase  # whole, on one line


def test_wrap_phrases_breaks_only_between_phrases():
    from pipelines.summary import wrap_phrases

    assert wrap_phrases(["aaa bbb", "cc", "ddd eee fff"], 12) == ["aaa bbb; cc", "ddd eee fff"]
    assert wrap_phrases(["a phrase longer than the width", "b"], 10) == ["a phrase longer than the width", "b"]


def test_stage_process_times_are_kept_apart(tmp_path):
    """`spar run` keeps the stage's own time (its line) beside the wall time of its process (the table)."""
    from pipelines.cli import _read_stats

    stats_file = tmp_path / "label.json"
    stats_file.write_text(json.dumps({"seconds": 71.9, "dropped (too few hits)": "2 (0 dev)"}))
    assert _read_stats(stats_file, 80.2) == {"seconds": 80.2, "stage_seconds": 71.9,
                                             "dropped (too few hits)": "2 (0 dev)"}
