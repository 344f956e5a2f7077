"""Stages as data, one runner (issue #23 item 3): every stage declares a Stage, one runner checks, skips, forces
and writes; runtime-only options are marked on their config field and never enter a fingerprint."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from pipelines import STAGES
from spar.core.config import SparConfig, load_config
from spar.core.config_fields import is_omitted_at_default, is_runtime_only
from spar.core.errors import ArtifactError
from spar.core.stage import Stage, Unit, run_unit, settings

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", STAGES)
def test_every_stage_is_declared_and_run_by_the_one_runner(name):
    module = importlib.import_module(f"pipelines.{name}")
    assert isinstance(module.STAGE, Stage) and module.STAGE.name == name and module.STAGE.summary
    assert module.run == module.STAGE.run
    # No stage builds an artifact writer or decides "up to date" by hand: the runner (spar.core.stage) does.
    tree = ast.parse((REPO / "pipelines" / f"{name}.py").read_text(encoding="utf-8"))
    calls = {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
             for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert not calls & {"ArtifactWriter", "stage_fingerprint"}, f"pipelines/{name}.py writes artifacts by hand"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "is_complete":
            assert len(node.args) == 1 and not node.keywords, f"pipelines/{name}.py checks a fingerprint by hand"


def test_the_runner_skips_forces_guards_and_never_writes_from_a_worker(tmp_path: Path):
    calls = []

    def work(writer):
        calls.append(writer.path.name)
        (writer.path / "part-0").write_text("x")
        return {"wrote": True}

    unit = Unit(tmp_path / "labels", kind="labels", config={"k": 1}, inputs={}, resumable=True)
    assert run_unit(unit, work) == {"wrote": True}
    assert run_unit(unit, work) == {"skipped": True}
    assert run_unit(unit, work, on_skip=lambda manifest: {"kind": manifest["kind"]}) == {"skipped": True,
                                                                                      "kind": "labels"}

    def refuse():
        raise ArtifactError("refused")

    other = Unit(tmp_path / "labels", kind="labels", config={"k": 2}, inputs={}, resumable=True)
    with pytest.raises(ArtifactError, match="refused"):
        run_unit(other, work, guard=refuse)
    assert run_unit(other, work, force=True, guard=refuse) == {"wrote": True}  # --force passes the guard
    assert calls == ["labels.partial", "labels.partial"]
    (tmp_path / "labels.partial").mkdir()
    (tmp_path / "labels.partial" / "half").write_text("x")
    run_unit(other, work, force=True)
    assert not (tmp_path / "labels.partial").exists()  # --force started over, then renamed into place

    worker = Unit(tmp_path / "lambda", kind="lambda", config={}, inputs={}, resumable=True, primary=False)
    (tmp_path / "lambda.partial").mkdir()
    assert run_unit(worker, lambda w: {"rank": "worker"}) == {"rank": "worker"}
    assert not (tmp_path / "lambda").exists()  # a worker rank never finalises the artifact


RUNTIME = {"experiment": {"wandb_mode", "wandb_upload"},
           "label": {"threads", "java_heap", "search_heap", "num_shards", "shard_index", "impact_device", "engine"},
           "train": {"num_workers", "log_every_n_steps", "wandb_mode", "wandb_project", "eval_batch_size",
                     "keep_checkpoint", "checkpoint_every_n_steps"},
           "encode": {"batch_size", "accelerator", "devices", "engine", "strategy"},
           "index": {"hnsw_ef_search", "nprobe", "refine"},
           "publish": {"push_to_hub", "private"}}


def test_runtime_only_options_are_marked_on_their_field_and_left_out_of_settings():
    for section, expected in RUNTIME.items():
        model = SparConfig.model_fields[section].annotation
        marked = {info.alias or name for name, info in model.model_fields.items() if is_runtime_only(info)}
        assert marked == expected, section
        cfg = load_config(None)
        assert not set(settings(getattr(cfg, section))) & expected
    cfg = load_config(None)
    # nothing runtime-only there; an option added later is left out while at its default (earlier runs stay current)
    added_later = {name for name, info in type(cfg.tune).model_fields.items() if is_omitted_at_default(info)}
    assert added_later == {"sets"}
    assert settings(cfg.tune) == {k: v for k, v in cfg.tune.model_dump(mode="json").items() if k not in added_later}
    named = load_config(None, ["tune.sets=[a]", "data.question_sets={a: {dev: x.jsonl}}"])
    assert settings(named.tune)["sets"] == ["a"]


def test_no_fingerprint_moves_with_a_runtime_option(tmp_path: Path):
    """The frontier's own list of ignored options lacked four of train's (a checkpoint interval recomputed every
    point); now one marker serves train, label, index, evaluate, publish and the frontier."""
    import pipelines.frontier
    import pipelines.label
    import pipelines.train

    runtime = ["train.eval_batch_size=7", "train.keep_checkpoint=false", "train.checkpoint_every_n_steps=3",
               "train.log_every_n_steps=2", "train.wandb_mode=disabled", "label.threads=1", "label.java_heap=2g",
               "label.engine=memory"]
    plain, changed = load_config(None, ["train.kind=static"]), load_config(None, ["train.kind=static", *runtime])
    assert pipelines.train.fingerprint_config(plain) == pipelines.train.fingerprint_config(changed)
    from spar.teacher.registry import teacher_for

    assert teacher_for(plain.label).label_settings() == teacher_for(changed.label).label_settings()
    base = tmp_path / "embeddings" / "base" / "passages"
    base.mkdir(parents=True)
    (base / "manifest.json").write_text('{"fingerprint": "b"}')
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "manifest.json").write_text('{"fingerprint": "l"}')
    plain.experiment.output_dir = changed.experiment.output_dir = str(tmp_path)
    assert (pipelines.frontier.settings_fingerprint(plain, "static")
            == pipelines.frontier.settings_fingerprint(changed, "static"))
    changed.train.max_steps = 5  # a real training option does move it
    assert (pipelines.frontier.settings_fingerprint(plain, "static")
            != pipelines.frontier.settings_fingerprint(changed, "static"))
