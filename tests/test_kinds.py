"""`spar run` on the embedded sample, end to end, as the user runs it: the CLI in a subprocess, each stage in its own
process. One projection run through publish (module fixture, started from another directory with W&B offline: a
newcomer's first console, #15) serves two claims, so the slow suite runs it once:

- each term-based Λ kind: the projection run, then static in the same output directory (corpus, labels and base
  embeddings reused), then `spar search` on the published model;
- a Λ from elsewhere (`encode.lambda`, spar/experiment/lambda_source.py): a second experiment that uses the projection
  run's directory as its Λ (sample, label and train skipped) through publish, then points at that experiment's
  published model (only Λ re-encoded, the same vectors). Its resolution and one-line errors are
  tests/test_lambda_source.py's.

(What every consumer says once Λ is retrained or re-encoded, #22 items 3-4, is checked on one small run in
tests/test_lineage.py, not on a third pipeline here.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


#: Lines third-party libraries printed on a first run before spar quieted them (issue #15).
NOISE = ("litlogger", "GPU available", "TPU available", "Weave", "anonymous", "_pytree", "LeafSpec",
         "MemorySegmentIndexInput", "SLF4J", "Loading weights", "Writing model shards", "wandb: ",
         "Loading `train_dataloader`", "You can sync this run")
#: The settings of every run here (small and quiet).
SMALL = ["sample.max_queries=1500", "encode.base.passage_max_length=64", "train.lexical.dim=64",
         "evaluate.shuffled=false", "train.wandb_mode=disabled", "experiment.wandb_mode=disabled"]


def _spar(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: none of the test's own quieting (W&B's or transformers' variables)."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_SILENT", "WANDB_MODE", "TRANSFORMERS_VERBOSITY")}
    env.update(HF_HUB_OFFLINE="1", OPENAI_API_KEY="unused", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
    return done


def _kinds_settings(out: Path) -> list[str]:
    return [f"experiment.output_dir={out}", f"experiment.results_dir={out / 'results'}", "experiment.name=kinds",
            *SMALL]


@dataclass(frozen=True)
class ProjectionRun:
    out: Path      #: its output directory (the kinds test trains static here afterwards)
    cwd: Path      #: the directory it was started from
    console: str   #: stdout and stderr
    summary: str   #: stdout
    as_found: Path  #: a copy of ``out`` made as the run ended, before any test changed it


@pytest.fixture(scope="module")
def projection_run(tmp_path_factory) -> ProjectionRun:
    """The projection run from another directory, W&B offline, as a newcomer starts it."""
    out = tmp_path_factory.mktemp("kinds")
    cwd = out / "elsewhere"
    cwd.mkdir()
    done = _spar("run", "--config", str(REPO / "configs" / "default.yaml"), *_kinds_settings(out),
                 "train.kind=projection", "train.wandb_mode=offline", "experiment.wandb_mode=offline", cwd=cwd)
    as_found = shutil.copytree(out, tmp_path_factory.mktemp("kinds-as-found"), symlinks=True, dirs_exist_ok=True)
    return ProjectionRun(out, cwd, done.stdout + done.stderr, done.stdout, as_found)


@pytest.mark.slow  # the fixture's projection run, then static in its directory through publish, and search
def test_spar_run_for_projection_then_static_through_publish_and_search(projection_run: ProjectionRun):
    from spar.core.artifacts import read_manifest
    from spar.lexical import load_lambda
    from spar.publish.model_dir import SparEncoder

    out = projection_run.out
    common = _kinds_settings(out)
    results = {}
    for kind, extra in (("projection", []), ("static", ["train.max_steps=6", "train.batch_size=16",
                                                        "train.val_check_interval=3", "train.random_negatives=32"])):
        if kind == "static":
            # #22 item 18: another kind in the same output directory silently replaced the earlier Λ, index and
            # model; now refused without --force, naming what is there.
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"}
            refused = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", *common, f"train.kind={kind}",
                                      *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
            assert refused.returncode == 2, refused.stderr[-2000:]
            assert "holds a projection Λ (64 dims); train.kind=static would replace it" in refused.stderr
            assert load_lambda(out / "lambda").kind == "projection"
            verbose = _spar("train", "--force", "-v", *common, f"train.kind={kind}", *extra)
            assert "GPU available" in verbose.stdout + verbose.stderr  # Lightning's own lines are back with -v
            summary = _spar("run", *common, f"train.kind={kind}", *extra).stdout
        else:
            _check_first_console(projection_run)
            summary = projection_run.summary
        assert "spar run; experiment kinds" in summary  # the summary names the experiment, not the dataset
        assert f"test); Λ {kind}; μ = " in summary
        lam = load_lambda(out / "lambda")
        assert lam.kind == kind and lam.dim == 64
        assert read_manifest(out / "lambda")["stats"]["lambda"]["kind"] == kind
        emb = read_manifest(out / "embeddings" / "lambda" / "passages")["stats"]
        assert emb["dim"] == 64 and emb["kind"] == kind and emb["count"] == 600
        report = json.loads((out / "results" / "kinds.json").read_text())
        results[kind] = report
        assert set(report["systems"]) >= {"bm25", "base", "lambda", "spar", "hybrid"}
        assert report["systems"]["spar"]["nDCG@10"] > 0.5
        model = SparEncoder.from_pretrained(out / "model")
        queries = ["vitamin C deficiency and scurvy"]
        assert np.allclose(model.lambda_.encode_query(queries), lam.encode_query(queries), atol=1e-6)
    # The static run reused the projection run's corpus, labels and base embeddings (same manifests) ...
    assert read_manifest(out / "embeddings" / "base" / "passages")["stats"]["encoded_this_run"] == 600
    # ... and its Λ was trained: its Λ-alone figures differ from the projection's.
    assert results["static"]["systems"]["lambda"] != results["projection"]["systems"]["lambda"]
    hits = _spar("search", str(out / "model"), "vitamin C deficiency and scurvy", "-k", "3").stdout
    assert "  1. " in hits and "  3. " in hits, hits


def _check_first_console(run: ProjectionRun) -> None:
    """The projection run's console holds spar's lines and one summary."""
    found = [noise for noise in NOISE if noise in run.console]
    assert not found, (found, run.console[-4000:])
    assert not [line for line in run.console.splitlines() if line.strip() == "|"]  # no table wrapped at the width
    for stage in ("sample", "label", "train", "encode", "tune", "index", "evaluate", "publish"):
        assert f"{stage}: done in" in run.console, stage
    assert "spar run" in run.console and "total" in run.console  # the summary
    assert f"W&B runs (offline): {run.out / 'wandb'}" in run.console and "wandb sync" in run.console
    assert list((run.out / "wandb").glob("offline-run-*"))  # in the one W&B directory
    assert not list(run.cwd.glob("hs_err_pid*.log"))


@pytest.mark.slow  # two `spar run`s of the embedded default from encode through publish (and the fixture's run)
def test_spar_run_uses_a_lambda_from_another_run_then_from_a_published_model(projection_run: ProjectionRun,
                                                                              tmp_path: Path):
    """Run 1 (the projection run, as it ended) fitted Λ; run 2 uses run 1's directory (sample/label/train skipped)
    through publish; run 3 points the same experiment at run 2's published model: only Λ is re-encoded, and its
    vectors are the same as run 1's Λ gives."""
    from spar.core.artifacts import read_manifest
    from spar.model.stored_vectors import load_embeddings
    from spar.lexical import load_lambda

    first, second = projection_run.as_found, tmp_path / "second"
    assert (first / "lambda" / "README.md").exists() and (first / "lambda" / "manifest.json").exists()
    common = [f"experiment.output_dir={second}", f"experiment.results_dir={second / 'results'}", *SMALL]
    out = _spar("run", *common, f"encode.lambda.path={first}", "encode.lambda.kind=projection",
                "encode.lambda.dim=64").stdout
    assert "Λ comes from encode.lambda" in out
    assert not any((second / name).exists() for name in ("queries", "labels", "lambda"))  # skipped, not run
    report = json.loads((second / "results" / "scifact-sample.json").read_text())
    assert report["systems"]["spar"]["nDCG@10"] > report["systems"]["base"]["nDCG@10"]

    # The Λ vectors come from run 1's Λ, on this experiment's corpus.
    run1 = load_lambda(first / "lambda")
    stored = load_embeddings(second / "embeddings" / "lambda" / "passages")
    corpus = {pid: (title, text) for pid, title, text in _corpus(first)}
    assert np.allclose(stored.vectors[:5], run1.encode_passage([corpus[i] for i in stored.ids[:5]]), atol=1e-5)

    base_before = read_manifest(second / "embeddings" / "base" / "passages")["fingerprint"]
    lambda_before = read_manifest(second / "embeddings" / "lambda" / "passages")["fingerprint"]
    _spar("run", *common, f"encode.lambda={second / 'model'}", "experiment.name=from-published")
    assert read_manifest(second / "embeddings" / "base" / "passages")["fingerprint"] == base_before
    after = read_manifest(second / "embeddings" / "lambda" / "passages")
    assert after["fingerprint"] != lambda_before and after["inputs"]["lambda_source"]["origin"] == "published"
    republished = load_embeddings(second / "embeddings" / "lambda" / "passages")
    assert np.allclose(republished.vectors, stored.vectors, atol=1e-5)
    card = (second / "model" / "README.md").read_text()
    assert "trained in another experiment" in card


def _corpus(run: Path):
    from spar.data.passages import PassagesTable

    table = PassagesTable.open(run / "queries" / "passages.arrow")
    for ids, titles, texts in table.iter_slices(1000):
        yield from zip(ids, titles, texts)
