"""`spar run` on the embedded sample for each term-based Λ kind: projection through publish, then static in the same
output directory (corpus, labels and base embeddings reused), then `spar search` on the published model. Run as the
user runs it: the CLI in a subprocess, each stage in its own process, from another directory. The projection run's
console is also a newcomer's first console (#15): spar's own lines and one summary, no third-party chatter (W&B
offline, as by default); `-v` brings the libraries' logs back. (What every consumer says once Λ is retrained or
re-encoded, #22 items 3-4, is checked on one small run in tests/test_lineage.py, not on a third pipeline here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


#: Lines third-party libraries printed on a first run before spar quieted them (issue #15).
NOISE = ("litlogger", "GPU available", "TPU available", "Weave", "anonymous", "_pytree", "LeafSpec",
         "MemorySegmentIndexInput", "SLF4J", "Loading weights", "Writing model shards", "wandb: ",
         "Loading `train_dataloader`", "You can sync this run")


def _spar(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: none of the test's own quieting (W&B's or transformers' variables)."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_SILENT", "WANDB_MODE", "TRANSFORMERS_VERBOSITY")}
    env.update(HF_HUB_OFFLINE="1", OPENAI_API_KEY="unused", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
    return done


@pytest.mark.slow  # two `spar run`s of the embedded default through publish and search: ~14 min on 2 busy cores
def test_spar_run_for_projection_then_static_through_publish_and_search(tmp_path: Path):
    from spar.core.artifacts import read_manifest
    from spar.lexical import load_lambda
    from spar.publish.model_dir import SparEncoder

    common = [f"experiment.output_dir={tmp_path}", f"experiment.results_dir={tmp_path / 'results'}",
              "experiment.name=kinds", "sample.max_queries=1500", "encode.base.passage_max_length=64",
              "train.lexical.dim=64", "evaluate.shuffled=false", "train.wandb_mode=disabled",
              "experiment.wandb_mode=disabled"]
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
            assert load_lambda(tmp_path / "lambda").kind == "projection"
            verbose = _spar("train", "--force", "-v", *common, f"train.kind={kind}", *extra)
            assert "GPU available" in verbose.stdout + verbose.stderr  # Lightning's own lines are back with -v
            summary = _spar("run", *common, f"train.kind={kind}", *extra).stdout
        else:
            summary = _first_console(tmp_path, common)
        assert "spar run; experiment kinds" in summary  # the summary names the experiment, not the dataset
        assert f"test); Λ {kind}; μ = " in summary
        lam = load_lambda(tmp_path / "lambda")
        assert lam.kind == kind and lam.dim == 64
        assert read_manifest(tmp_path / "lambda")["stats"]["lambda"]["kind"] == kind
        emb = read_manifest(tmp_path / "embeddings" / "lambda" / "passages")["stats"]
        assert emb["dim"] == 64 and emb["kind"] == kind and emb["count"] == 600
        report = json.loads((tmp_path / "results" / "kinds.json").read_text())
        results[kind] = report
        assert set(report["systems"]) >= {"bm25", "base", "lambda", "spar", "hybrid"}
        assert report["systems"]["spar"]["nDCG@10"] > 0.5
        model = SparEncoder.from_pretrained(tmp_path / "model")
        queries = ["vitamin C deficiency and scurvy"]
        assert np.allclose(model.lambda_.encode_query(queries), lam.encode_query(queries), atol=1e-6)
    # The static run reused the projection run's corpus, labels and base embeddings (same manifests) ...
    assert read_manifest(tmp_path / "embeddings" / "base" / "passages")["stats"]["encoded_this_run"] == 600
    # ... and its Λ was trained: its Λ-alone figures differ from the projection's.
    assert results["static"]["systems"]["lambda"] != results["projection"]["systems"]["lambda"]
    hits = _spar("search", str(tmp_path / "model"), "vitamin C deficiency and scurvy", "-k", "3").stdout
    assert "  1. " in hits and "  3. " in hits, hits



def _first_console(out: Path, common: list[str]) -> str:
    """The projection run from another directory, W&B offline: its console holds spar's lines and one summary."""
    cwd = out / "elsewhere"
    cwd.mkdir()
    done = _spar("run", "--config", str(REPO / "configs" / "default.yaml"), *common, "train.kind=projection",
                 "train.wandb_mode=offline", "experiment.wandb_mode=offline", cwd=cwd)
    console = done.stdout + done.stderr
    found = [noise for noise in NOISE if noise in console]
    assert not found, (found, console[-4000:])
    assert not [line for line in console.splitlines() if line.strip() == "|"]  # no table wrapped at the width
    for stage in ("sample", "label", "train", "encode", "tune", "index", "evaluate", "publish"):
        assert f"{stage}: done in" in console, stage
    assert "spar run" in console and "total" in console  # the summary
    assert f"W&B runs (offline): {out / 'wandb'}" in console and "wandb sync" in console
    assert list((out / "wandb").glob("offline-run-*"))  # in the one W&B directory
    assert not list(cwd.glob("hs_err_pid*.log"))
    return done.stdout
