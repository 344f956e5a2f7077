"""Every stage runs for each term-based Λ kind on the embedded sample: projection, then static from the same run
(base embeddings reused), through publish and search."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from spar.config import load_config


def _run(cfg, stages) -> dict:
    import importlib

    return {stage: importlib.import_module(f"pipelines.{stage}").run(cfg) for stage in stages}


def test_every_stage_runs_for_projection_and_static(tmp_path: Path):
    from spar.artifacts import read_manifest
    from spar.lexical import load_lambda
    from spar.publish import SparEncoder
    from spar.search import SparSearcher

    common = [f"experiment.output_dir={tmp_path}", f"experiment.results_dir={tmp_path / 'results'}",
              "experiment.name=kinds", "sample.max_queries=1500", "encode.base.passage_max_length=64",
              "train.lexical.dim=64", "evaluate.shuffled=false", "train.wandb_mode=disabled",
              "evaluate.wandb_mode=disabled"]
    stages = ["sample", "label", "train", "encode", "tune", "index", "evaluate", "publish"]
    results = {}
    for kind, extra in (("projection", []), ("static", ["train.max_steps=6", "train.batch_size=16",
                                                        "train.val_check_interval=3", "train.random_negatives=32"])):
        cfg = load_config(None, common + [f"train.kind={kind}"] + extra)
        out = _run(cfg, stages)
        if kind == "static":  # the corpus, labels and base embeddings of the projection's run are reused
            assert out["sample"] == {"skipped": True} and out["label"].get("skipped")
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
        hits = SparSearcher.open(tmp_path / "model").search(queries, k=3)[0]
        assert len(hits) == 3 and hits[0].text
    # The static Λ was trained: its Λ-alone run differs from the projection's.
    assert results["static"]["systems"]["lambda"] != results["projection"]["systems"]["lambda"]
