"""One Experiment per stage run (issue #49 item 1): a stage's plan, work and finish, and the layers they call, share
the experiment the first of them built; the next stage run, in the same process, builds its own."""

from __future__ import annotations

from pathlib import Path

from spar.core.config import load_config
from spar.core.stage import Stage, Unit
from spar.experiment.plan import Experiment


def _counting(monkeypatch) -> list[Experiment]:
    built: list[Experiment] = []
    init = Experiment.__init__

    def counted(self, cfg):
        built.append(self)
        init(self, cfg)

    monkeypatch.setattr(Experiment, "__init__", counted)
    return built


def test_a_stage_run_shares_one_experiment_and_the_next_run_builds_its_own(tmp_path: Path, monkeypatch):
    built = _counting(monkeypatch)
    seen: list[Experiment] = []

    def plan(cfg, force):
        seen.append(Experiment.of(cfg))
        return Unit(tmp_path / "out", kind="probe", config={}, inputs={})

    def work(cfg, writer, unit):
        seen.append(Experiment.of(cfg))
        (writer.path / "x").write_text("x")
        return {}

    def finish(cfg, stats, unit):
        seen.append(Experiment.of(cfg))
        return stats

    stage = Stage(name="probe", summary="", sections=(), plan=plan, work=work, finish=finish)
    cfg = load_config(None, [f"experiment.output_dir={tmp_path}", "experiment.wandb_mode=disabled"])
    stage.run(cfg)
    assert len(built) == 1 and all(experiment is built[0] for experiment in seen) and len(seen) == 3
    stage.run(cfg)  # up to date: plan and finish, in a run of their own
    assert len(built) == 2 and seen[3] is seen[4] is built[1]
    assert Experiment.of(cfg) is not Experiment.of(cfg)  # outside a stage run: nothing is kept


def test_the_sample_stage_builds_one_experiment(tmp_path: Path, monkeypatch):
    import pipelines.sample

    built = _counting(monkeypatch)
    cfg = load_config(None, [f"experiment.output_dir={tmp_path}", "experiment.wandb_mode=disabled"])
    pipelines.sample.STAGE.run(cfg)
    assert len(built) == 1
