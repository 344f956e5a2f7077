"""Artifacts declared once by the Experiment (issue #49 item 1): the fingerprints of the embedded default are those the
code before the declarations gave, so runs made before stay up to date.

Every value pinned here was read from the manifests of `spar run` made by main's code at c41cec3, before this change
(``cd /tmp/decls-proof && PYTHONPATH=/work/main spar run experiment.output_dir=/tmp/decls-proof/old``), never from
the declarations' own output. The test runs sample, label and train for real (a minute on the CPU) and asks encode,
tune, index and evaluate for their plans (nothing encoded: the embeddings they read are stood in for by manifests
carrying the old run's fingerprints).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spar.core.config import load_config

#: ``fingerprint`` of each manifest of the old run (the embedded default, projection Λ, flat index, seed 42).
OLD_FINGERPRINTS = {
    "queries": "d848f6be38fceb8f",
    "teacher_index": "8c800cc15f026385",
    "labels": "bc52b4108f206452",
    "lambda": "40ff969dfc3c3d35",
    "embeddings/base/passages": "d633a4eddc1ee4d5",
    "embeddings/base/queries-dev": "90abe844056eca29",
    "embeddings/base/queries-test": "d85d70aad2f2cf8a",
    "embeddings/lambda/passages": "31a45ab9c8712b79",
    "embeddings/lambda/queries-dev": "772c4eab2e586b45",
    "embeddings/lambda/queries-test": "0d736ef2aef32f25",
    "tune": "4f575565eb457e68",
    "index": "aefa4e6aa06c09c3",
}
#: Λ's content fingerprint there (the ``lambda`` input of tune, evaluate and publish).
OLD_LAMBDA_CONTENT = "d473d8cbfe907efa"
#: ``inputs`` of the old run's manifests (evaluate's fingerprint also hashes its results path: its inputs are pinned).
OLD_INPUTS = {
    "queries": {"corpus": "a49cf448572103e1"},
    "teacher_index": {"passages": "48abdcf0604fc72c"},
    "labels": {"queries": "d848f6be38fceb8f", "teacher_index": "8c800cc15f026385"},
    "lambda": {"queries": "d848f6be38fceb8f"},
    "tune": {"base/passages": "d633a4eddc1ee4d5", "base/queries-dev": "90abe844056eca29",
             "lambda/passages": "31a45ab9c8712b79", "lambda/queries-dev": "772c4eab2e586b45",
             "lambda": OLD_LAMBDA_CONTENT, "queries": "53495500a9907068", "qrels_dev": "39819dab99997f10",
             "teacher_index": "8c800cc15f026385"},
    "index": {"base": "d633a4eddc1ee4d5", "lambda": "31a45ab9c8712b79", "seed": "42"},
    "evaluation": {"base/passages": "d633a4eddc1ee4d5", "base/queries-test": "d85d70aad2f2cf8a",
                   "lambda/passages": "31a45ab9c8712b79", "lambda/queries-test": "0d736ef2aef32f25",
                   "lambda": OLD_LAMBDA_CONTENT, "tune": "4f575565eb457e68", "index": "aefa4e6aa06c09c3",
                   "teacher_index": "8c800cc15f026385", "queries": "53495500a9907068",
                   "qrels_test": "944769143d868fd8"},
}


def _stand_in(directory: Path, kind: str, fingerprint: str) -> None:
    """An artifact as a manifest only (no files recorded): what a plan reads of an input is its fingerprint."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps({"kind": kind, "fingerprint": fingerprint, "stats": {}}))


def _units(stage: str, cfg) -> dict[str, object]:
    import importlib

    module = importlib.import_module(f"pipelines.{stage}")
    cfg = module.STAGE.prepare(cfg) if module.STAGE.prepare is not None else cfg
    plan = module.STAGE.plan(cfg, False)
    units = [plan] if hasattr(plan, "kind") else list(plan)
    return {str(unit.output.relative_to(cfg.output_dir)): unit for unit in units}


@pytest.mark.precision_independent("no vectors are made: only the plans' fingerprints (fp32 adds nothing to them)")
def test_the_embedded_default_keeps_the_fingerprints_the_code_before_the_declarations_gave(tmp_path: Path):
    from spar.core.artifacts import read_manifest
    from spar.experiment.plan import Experiment
    import pipelines.label
    import pipelines.sample
    import pipelines.train

    cfg = load_config(None, [f"experiment.output_dir={tmp_path / 'run'}", f"experiment.results_dir={tmp_path}",
                             "experiment.wandb_mode=disabled", "train.wandb_mode=disabled", "encode.precision=32"])
    for stage in (pipelines.sample, pipelines.label, pipelines.train):
        stage.STAGE.run(cfg)
    run = Path(cfg.output_dir)
    for name in ("queries", "teacher_index", "labels", "lambda"):
        manifest = read_manifest(run / name)
        assert (manifest["fingerprint"], manifest["inputs"]) == (OLD_FINGERPRINTS[name], OLD_INPUTS[name]), name
    assert Experiment(cfg).lambda_source.fingerprint() == OLD_LAMBDA_CONTENT

    encoded = _units("encode", cfg)
    assert {name: unit.writer().fingerprint for name, unit in encoded.items()} == {
        name: fp for name, fp in OLD_FINGERPRINTS.items() if name.startswith("embeddings/")}
    for name, fingerprint in OLD_FINGERPRINTS.items():
        if name.startswith("embeddings/"):
            _stand_in(run / name, "embeddings", fingerprint)

    tune = _units("tune", cfg)["tune"]
    assert (tune.writer().fingerprint, tune.inputs) == (OLD_FINGERPRINTS["tune"], OLD_INPUTS["tune"])
    index = _units("index", cfg)["index"]
    assert (index.writer().fingerprint, index.inputs) == (OLD_FINGERPRINTS["index"], OLD_INPUTS["index"])
    for name in ("tune", "index"):
        _stand_in(run / name, name, OLD_FINGERPRINTS[name])
    (run / "tune" / "tune.json").write_text(json.dumps({"mu": 0.04, "alpha": 0.07}))
    assert _units("evaluate", cfg)["evaluation"].inputs == OLD_INPUTS["evaluation"]
