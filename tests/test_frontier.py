"""The frontier's default rule (#28 item 3), the defaults that follow it, and `spar frontier`'s arguments (#31 items
7 and 8)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pipelines import cli
from pipelines.frontier import point_stages
from spar.core.artifacts import artifact_dir
from spar.core.config import IndexSection, LexicalSection, TrainSection, load_config
from spar.core.errors import ArtifactError, ConfigError
from spar.sweep.report import FrontierPoint, FrontierReport

from test_tune import experiment_config, sample_experiment  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def _point(dim, storage, nbytes, dev, seed=0, test=None, ms=None, kind="projection"):
    return FrontierPoint(kind=kind, dim=dim, seed=seed, mu=1.0, dev_spar=dev,
                         spar={"nDCG@10": dev if test is None else test, "R@100": 0.9}, lambda_alone={"nDCG@10": 0.5},
                         rbo=0.5, bytes_per_passage=nbytes, train_seconds=0.0, storage=storage,
                         latency={"flat": {"single_ms": ms}} if ms is not None else {})


def _seeds(dim, storage, nbytes, devs, ms=None, tests=None):
    """One group: a point per seed (the first seed timed, as the frontier does)."""
    return [_point(dim, storage, nbytes, dev, seed, None if tests is None else tests[seed],
                   ms if seed == 0 else None) for seed, dev in enumerate(devs)]


REFS = {"base": {"nDCG@10": 0.6, "R@100": 0.9, "bytes_per_passage": 1536}, "bm25": {"nDCG@10": 0.6, "R@100": 0.9},
        "hybrid": {"nDCG@10": 0.7, "R@100": 0.9, "alpha": 0.1}}

# ----------------------------------------------------------------------------------------------------------------
# The rule
# ----------------------------------------------------------------------------------------------------------------


def test_the_rule_takes_the_cheapest_point_within_one_seed_sd_of_the_best_on_dev():
    best = _seeds(6144, "sq4", 3264, [0.80, 0.79, 0.81], ms=6.0)           # the best on dev: mean 0.80, sd 0.01
    others = (_seeds(3072, "sq4", 1728, [0.79, 0.79, 0.80], ms=3.0)        # 0.7933: within 0.01 of the best
              + _seeds(768, "sq4", 576, [0.78, 0.79, 0.78], ms=1.0)        # 0.7833: below the best by more
              + _seeds(6144, "float32", 26112, [0.80, 0.795, 0.80]))     # as good, at 8x the bytes
    choice = FrontierReport("toy", best + others, REFS).choice()
    assert choice.key == ("projection", 3072, "sq4") and choice.bytes_per_passage == 1728
    assert choice.best == ("projection", 6144, "sq4") and choice.tolerance == pytest.approx(0.01)
    # The tolerance is the best group's own spread over seeds: a noisier best lets a cheaper point in.
    noisy = _seeds(6144, "sq4", 3264, [0.83, 0.80, 0.77], ms=6.0)          # mean 0.80, sd 0.03
    assert FrontierReport("toy", noisy + others, REFS).choice().key == ("projection", 768, "sq4")


def test_equal_bytes_are_decided_by_single_query_latency():
    points = (_seeds(5376, "sq4", 2880, [0.80, 0.80, 0.80], ms=4.8)
              + _seeds(5376, "fs4", 2880, [0.79, 0.80, 0.80], ms=1.5)      # same bytes, a little worse, 3x faster
              + _seeds(5376, "sq6", 4320, [0.82, 0.80, 0.79], ms=5.5))     # the best on dev: sd 0.015
    assert FrontierReport("toy", points, REFS).choice().key == ("projection", 5376, "fs4")
    # An untimed point counts as the slowest of its byte size.
    untimed = [p for p in points if p.storage != "fs4"] + _seeds(5376, "fs4", 2880, [0.79, 0.80, 0.80])
    assert FrontierReport("toy", untimed, REFS).choice().key == ("projection", 5376, "sq4")


def test_the_rule_never_looks_at_test_and_one_seed_means_the_best_on_dev():
    points = (_seeds(3072, "sq4", 1728, [0.80], tests=[0.60])
              + _seeds(768, "sq4", 576, [0.799], tests=[0.90]))  # better on test, a hair worse on dev
    report = FrontierReport("toy", points, REFS)
    choice = report.choice()
    assert choice.key == ("projection", 3072, "sq4") and choice.tolerance is None
    assert "one seed: the noise is unknown" in report.choice_line()
    assert FrontierReport("toy", [], REFS).choice() is None


def test_a_report_reads_back_from_its_json_with_older_files_too():
    points = _seeds(3072, "fs2", 864, [0.79, 0.80], ms=0.7)
    report = FrontierReport("toy", points, REFS, {"commands": ["spar frontier --dims 3072"]})
    again = FrontierReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.points == report.points and again.details["commands"] == ["spar frontier --dims 3072"]
    older = report.to_json()
    for p in older["points"]:
        del p["approximate"]  # written before approximate indexes joined the frontier
    assert FrontierReport.from_json(older).choice().key == ("projection", 3072, "fs2")


# ----------------------------------------------------------------------------------------------------------------
# The defaults follow the rule
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config,frontier", [(None, "scifact-sample"),
                                             ("configs/experiments/scifact.yaml", "scifact"),
                                             ("configs/experiments/cranfield.yaml", "cranfield")])
def test_shipped_configs_use_the_point_their_frontier_chose(config, frontier):
    report = FrontierReport.from_json(json.loads((REPO / "results" / f"{frontier}-frontier.json").read_text()))
    choice = report.choice()
    cfg = load_config(REPO / config if config else None)
    assert (cfg.train.kind, cfg.train.lexical.dim, cfg.index.type, cfg.index.storage) == (
        choice.kind, choice.dim, "flat", choice.storage)


def test_the_codes_own_defaults_are_the_embedded_defaults_choice():
    """A config written from `--help` (no train/index sections) gets the rule's point, not 384 float32."""
    report = FrontierReport.from_json(json.loads((REPO / "results" / "scifact-sample-frontier.json").read_text()))
    choice = report.choice()
    assert (TrainSection().kind, LexicalSection().dim, IndexSection().storage) == (
        choice.kind, choice.dim, choice.storage)
    bare = load_config(None, ["train.lexical.dim=1"])  # any config that leaves them out gets the same
    assert bare.index.storage == IndexSection().storage


def test_frontier_help_lists_every_storage(capsys):
    from spar.index.storage import STORAGES

    with pytest.raises(SystemExit):
        cli.main(["frontier", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(s in text for s in STORAGES) and "fs4" in text and "fs2" in text and "--indexes" in text


# ----------------------------------------------------------------------------------------------------------------
# `spar frontier` checks its arguments (#31 items 7 and 8)
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag,value", [("--dims", "abc"), ("--seeds", "x"), ("--dims", "64,b")])
def test_non_integer_dims_and_seeds_are_a_usage_error_not_a_traceback(flag, value, capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        cli.main(["frontier", flag, value, f"experiment.output_dir={tmp_path}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected comma-separated integers, got '{value}'" in err and "Traceback" not in err


@pytest.mark.parametrize("args,message", [
    (["--kinds", "foo"], "--kinds: unknown 'foo'; use transformer, projection, static"),
    (["--kinds", ""], "--kinds is empty"),
    (["--storages", ","], "--storages is empty"),
    (["--storages", "sq4,int3"], "--storages: unknown 'int3'"),
    (["--indexes", "flat,lsh"], "--indexes: unknown 'lsh'"),
    (["--dims", "64,64"], "--dims lists 64 more than once"),
    (["--seeds", "0,1,0"], "--seeds lists 0 more than once"),
    (["--dims", "0"], "--dims must be positive"),
    (["--seeds", "-1"], "--seeds must be between 0 and 4,294,967,295, got -1"),  # #37 item 8: NumPy's traceback
    (["--seeds", "99999999999999999999999"],  # #48 item 3: seed_everything's traceback after 26 s of work
     "--seeds must be between 0 and 4,294,967,295, got 99999999999999999999999"),
    (["--kinds", "projection,transformer"], "--kinds transformer: the frontier scores the run's own trained "
                                            "transformer Λ, but"),
])
def test_bad_arguments_are_refused_and_nothing_is_written(args, message, capsys, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    earlier = results / "default-frontier.md"
    earlier.write_text("an earlier frontier\n")
    code = cli.main(["frontier", *args, f"experiment.output_dir={tmp_path / 'run'}",
                     f"experiment.results_dir={results}", "experiment.name=default"])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert earlier.read_text() == "an earlier frontier\n" and sorted(p.name for p in results.iterdir()) == [
        "default-frontier.md"]
    assert not (tmp_path / "run" / "frontier").exists()


def test_force_recomputes_only_what_it_is_asked_and_every_command_is_recorded(sample_experiment, tmp_path,  # noqa: F811
                                                                              monkeypatch):
    import pipelines.frontier as frontier_stage

    root = tmp_path / "run"
    root.mkdir()
    for name in ("queries", "teacher_index", "lambda", "embeddings"):
        (root / name).symlink_to(artifact_dir(sample_experiment, name), target_is_directory=True)
    cfg = experiment_config(root, root / "results")
    monkeypatch.setattr(sys, "argv", ["spar", "frontier", "--dims", "16", "--seeds", "0,1"])
    frontier_stage.run(cfg, ("projection",), (16,), (0, 1))
    first = json.loads((root / "frontier" / "frontier.json").read_text())
    assert sorted((p["dim"], p["seed"]) for p in first["points"]) == [(16, 0), (16, 1)]
    lam = root / "frontier" / "points" / "projection-d16-s0" / "lambda" / "manifest.json"
    made = json.loads(lam.read_text())["created"]

    monkeypatch.setattr(sys, "argv", ["spar", "frontier", "--dims", "16", "--seeds", "0", "--force"])
    frontier_stage.run(cfg, ("projection",), (16,), (0,), force=True)
    second = json.loads((root / "frontier" / "frontier.json").read_text())
    assert sorted((p["dim"], p["seed"]) for p in second["points"]) == [(16, 0), (16, 1)]
    assert json.loads(lam.read_text())["created"] != made  # --force: the point's stages started over
    before = {(p["dim"], p["seed"]): p for p in first["points"]}
    after = {(p["dim"], p["seed"]): p for p in second["points"]}
    assert after[(16, 1)] == before[(16, 1)]  # the other point is untouched
    assert second["commands"] == ["spar frontier --dims 16 --seeds 0,1", "spar frontier --dims 16 --seeds 0 --force"]
    table = (root / "frontier" / "frontier.md").read_text()
    assert all(f"`{command}`" in table for command in second["commands"])
    assert "| projection | 16 | float32 | " in table and " | 2 | " in table  # two seeds, not three

    # A results copy holding points this run's frontier lacks (a committed frontier) is kept before it is replaced.
    copy = root / "results" / f"{cfg.experiment.name}-frontier.json"
    committed = json.loads(copy.read_text())
    committed["points"].append({**committed["points"][0], "dim": 6144})
    copy.write_text(json.dumps(committed))
    frontier_stage.run(cfg, ("projection",), (16,), (0,))
    kept = json.loads((root / "frontier" / f"replaced-{copy.name}").read_text())
    assert kept == committed

    # Points of other settings are moved aside, not dropped.
    changed = experiment_config(root, root / "results", "label.k1=1.2")
    monkeypatch.setattr(sys, "argv", ["spar", "frontier", "--dims", "16", "--seeds", "0"])
    frontier_stage.run(changed, ("projection",), (16,), (0,))
    third = json.loads((root / "frontier" / "frontier.json").read_text())
    assert [(p["dim"], p["seed"]) for p in third["points"]] == [(16, 0)]
    aside = list((root / "frontier").glob("superseded-*.json"))
    assert len(aside) == 1 and len(json.loads(aside[0].read_text())["points"]) == 2


def test_a_repeated_point_is_computed_once(sample_experiment, tmp_path):  # noqa: F811
    from spar.sweep.frontier import run_frontier

    root = tmp_path / "run"
    root.mkdir()
    for name in ("queries", "teacher_index", "embeddings"):
        (root / name).symlink_to(artifact_dir(sample_experiment, name), target_is_directory=True)
    report = run_frontier(experiment_config(root, root / "results"), point_stages(), ("projection",), (16, 16), (0, 0),
                          progress=lambda _: None)
    assert [(p.dim, p.seed) for p in report.points] == [(16, 0)]


def test_transformer_named_on_a_run_without_one_is_refused(tmp_path):
    import pipelines.frontier as frontier_stage

    cfg = experiment_config(tmp_path, tmp_path / "results")
    with pytest.raises(ConfigError, match=r"--kinds transformer: .* holds no trained Λ"):
        frontier_stage.check_arguments(cfg, ("transformer",), (64,), (0,), ("float32",), ("flat",))


def test_a_frontier_refused_for_want_of_base_embeddings_leaves_no_directory(tmp_path, capsys):
    """#37 item 8: the refusal left an empty frontier/ behind."""
    code = cli.main(["frontier", "--dims", "16", "--seeds", "0", f"experiment.output_dir={tmp_path / 'run'}",
                     f"experiment.results_dir={tmp_path / 'results'}"])
    err = capsys.readouterr().err
    assert code == 2 and "embeddings/base/passages" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "frontier").exists() and not (tmp_path / "results").exists()


def test_the_default_dims_reach_the_default_point():
    """#37 item 12: the default dims stopped at 3072 while the embedded default's point is 4608."""
    from spar.sweep.frontier import DEFAULT_DIMS

    assert LexicalSection().dim in DEFAULT_DIMS and load_config().train.lexical.dim in DEFAULT_DIMS


def _one_point_frontier(sample: Path, tmp_path: Path):
    """The frontier of one projection point (16 dims, seed 0) on a run sharing the sample's upstream artifacts."""
    from spar.sweep.frontier import run_frontier

    root = tmp_path / "run"
    root.mkdir()
    for name in ("queries", "teacher_index", "embeddings"):
        (root / name).symlink_to(artifact_dir(sample, name), target_is_directory=True)
    report = run_frontier(experiment_config(root, root / "results"), point_stages(), ("projection",), (16,), (0,),
                          progress=lambda _: None)
    return report


def test_each_ratio_to_the_hybrid_divides_timings_of_one_moment(sample_experiment, tmp_path, monkeypatch):  # noqa: F811
    """#37 item 12: the "× hybrid" ratio went through a hybrid timed once per frontier (SPAR / base now × base / hybrid
    then): on CISI a 6.14 ms point was printed as 0.10× beside a 9.90 ms hybrid. Here every timing is made up, and
    the base indexes are twice as slow at each later moment: the ratio printed must be the point's own SPAR time over
    the hybrid time printed beside it, timed together."""
    import spar.evaluate.latency as latency

    moments: list[list[str]] = []

    def timed(systems, queries, single):
        moments.append(sorted(systems))
        slower = 2 ** (len(moments) - 1)
        ms = {name: 10.0 if name == "hybrid" else (1.0 * slower if name.startswith("base") else 6.0)
              for name in systems}
        return {name: {"single_ms": v, "p50_ms": v, "batched_ms": v / 2} for name, v in ms.items()}

    monkeypatch.setattr(latency, "time_systems", timed)  # what spar.sweep.timing.time_beside_peers times with
    report = _one_point_frontier(sample_experiment, tmp_path)
    flat = report.points[0].latency["flat"]
    assert flat["single_ms"] == 6.0 and flat["hybrid"]["single_ms"] == 10.0
    assert flat["vs_hybrid"]["single_ms"] == pytest.approx(0.6) and flat["vs_base"]["single_ms"] == pytest.approx(
        6.0 / flat["base"]["single_ms"])
    assert "6.00 (0.60× hybrid" in report.markdown()


def test_the_frontiers_hybrid_is_the_hybrid_as_served(sample_experiment, tmp_path, monkeypatch):  # noqa: F811
    """Issue #46 item 1: the frontier's "× hybrid" peer scanned the base flat. Its timed hybrid now answers one
    question through ServedHybrid (the base in HNSW and BM25 at once), and the references hold that hybrid's and the
    graph's quality beside the exact ones, with the efSearch chosen on dev."""
    import spar.evaluate.latency as latency
    from spar.evaluate.served_hybrid import EF_LADDER, ServedHybrid

    served_calls: list[str] = []
    real_search = ServedHybrid.search

    def spy(self, qid, text, query, k, depth=None, timings=None):
        served_calls.append(qid)
        return real_search(self, qid, text, query, k, depth, timings)

    def timed(systems, queries, single):
        systems["hybrid"]([0])  # one question: through ServedHybrid
        systems["hybrid"]([0, 1])  # batched: the graph and BM25 in one call each
        return {name: {"single_ms": 1.0, "p50_ms": 1.0, "batched_ms": 1.0} for name in systems}

    monkeypatch.setattr(ServedHybrid, "search", spy)
    monkeypatch.setattr(latency, "time_systems", timed)
    report = _one_point_frontier(sample_experiment, tmp_path)
    assert served_calls and len(served_calls) == served_calls.count(served_calls[0])  # one per single-question call
    refs = report.references
    graph = refs["base_hnsw"]
    assert graph["type"] == "IndexHNSWFlat" and graph["ef_search"] in EF_LADDER
    assert graph["calibration"]["loss"] <= 0.3 or graph["ef_search"] == max(EF_LADDER)
    assert refs["hybrid_served"]["ef_search"] == graph["ef_search"] and refs["hybrid_served"]["alpha"] == refs[
        "hybrid"]["alpha"]
    # 600 passages: the calibrated graph is (near) exact, so the served hybrid is within a point of the exact one
    assert refs["hybrid_served"]["nDCG@10"] == pytest.approx(refs["hybrid"]["nDCG@10"], abs=0.01)
    assert f"as served {refs['hybrid_served']['nDCG@10']:.3f}" in report.markdown()


def test_each_point_is_a_run_of_the_stages_and_found_up_to_date_again(sample_experiment, tmp_path):  # noqa: F811
    """#49 item 2: a point was fitted, tuned and indexed in memory by the frontier's own code. Now its Λ, vectors,
    μ and index are the train, encode, tune and index stages' artifacts in a run of its own, linking the run's; the
    stages find that run up to date, and a frontier asked again rebuilds nothing."""
    import pipelines.index as index_stage
    import pipelines.train as train_stage
    import pipelines.tune as tune_stage
    from spar.core.artifacts import is_complete, read_manifest
    from spar.core.config import load_config
    from spar.evaluate.tuning import read_tuned

    report = _one_point_frontier(sample_experiment, tmp_path)
    point = report.points[0]
    run = Path(point.run)
    top = run.parent
    assert run == tmp_path / "run" / "frontier" / "points" / "projection-d16-s0" / "float32"
    for name in ("queries", "teacher_index"):  # the run's own, linked: never copied
        assert (top / name).is_symlink() and os.path.realpath(top / name) == os.path.realpath(
            artifact_dir(sample_experiment, name))
    assert (top / "embeddings" / "base").is_symlink() and not (top / "embeddings" / "lambda").is_symlink()
    lam = read_manifest(top / "lambda")
    assert lam["kind"] == "lambda" and lam["stats"]["lambda"]["dim"] == 16 and lam["config"]["seed"] == 0
    assert is_complete(top / "embeddings" / "lambda" / "passages") and is_complete(top / "embeddings" / "lambda"
                                                                                    / "queries-test")
    assert read_tuned(run).mu() == point.mu and read_manifest(run / "index")["stats"]["storage"] == "float32"
    # the point's config is one the stages take as it is: each finds its artifact up to date
    cfg = load_config(run / "config.yaml")
    assert cfg.output_dir == run.resolve() and cfg.train.lexical.dim == 16
    # its own name and results directory: evaluating or publishing a point never replaces the run's results
    assert cfg.experiment.name == "scifact-sample-projection-d16-s0-float32" and cfg.results_dir == run.resolve(
        ) / "results"
    for stage, config in ((train_stage.STAGE, load_config(top / "config.yaml")), (tune_stage.STAGE, cfg),
                          (index_stage.STAGE, cfg)):
        assert all(stage.status(config).values()), stage.name

    made = {p: read_manifest(p)["created"] for p in (top / "lambda", run / "tune", run / "index")}
    again = _one_point_frontier_in(tmp_path / "run")
    assert {p: read_manifest(p)["created"] for p in made} == made  # nothing was made again
    assert (again.points[0].mu, again.points[0].spar) == (point.mu, point.spar)


def _one_point_frontier_in(root: Path):
    from spar.sweep.frontier import run_frontier

    return run_frontier(experiment_config(root, root / "results"), point_stages(), ("projection",), (16,), (0,),
                        progress=lambda _: None)


def test_a_point_never_replaces_what_is_not_its_link(tmp_path):
    """A point links the run's artifacts; a directory where a link belongs is refused, and left as it was."""
    from spar.sweep.points import link

    target, there = tmp_path / "queries", tmp_path / "point" / "queries"
    target.mkdir()
    there.mkdir(parents=True)
    (there / "mine.txt").write_text("kept")
    with pytest.raises(ArtifactError, match=r"point/queries: expected a link to .*never deletes"):
        link(target, there)
    assert (there / "mine.txt").read_text() == "kept"
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "point" / "teacher_index").symlink_to(other)
    link(target, tmp_path / "point" / "teacher_index")  # a link of its own pointing elsewhere: re-pointed
    assert os.path.realpath(tmp_path / "point" / "teacher_index") == os.path.realpath(target) and other.exists()


@pytest.mark.slow
def test_the_runs_own_lambda_is_a_point_run_too(sample_experiment, tmp_path):  # noqa: F811
    """The run's own trained Λ (a transformer here, a kind the frontier does not make) is scored as one more point:
    a run ``points/own-transformer/`` linking the run's ``lambda/`` (never copying or writing it), encoded there by
    the encode stage, whatever ``encode.lambda`` names."""
    from spar.core.artifacts import read_manifest
    from spar.sweep.frontier import run_frontier

    root = tmp_path / "run"
    root.mkdir()
    for name in ("queries", "teacher_index", "lambda", "embeddings"):
        (root / name).symlink_to(artifact_dir(sample_experiment, name), target_is_directory=True)
    before = read_manifest(root / "lambda")
    cfg = experiment_config(root, root / "results", f"encode.lambda.path={tmp_path / 'nowhere'}")
    report = run_frontier(cfg, point_stages(), ("transformer",), (16,), (0,), progress=lambda _: None,
                          index_types=())
    (point,) = report.points
    top = root / "frontier" / "points" / "own-transformer"
    assert point.kind == "transformer" and point.seed is None and point.run == str(top / "float32")
    assert (top / "lambda").is_symlink() and os.path.realpath(top / "lambda") == os.path.realpath(
        artifact_dir(sample_experiment, "lambda"))
    assert read_manifest(top / "embeddings" / "lambda" / "passages")["stats"]["dim"] == point.dim == 384
    assert read_manifest(root / "lambda") == before
