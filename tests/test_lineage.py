"""Nothing stale (#31 item 2): an artifact is used only while everything it was made from is unchanged.

The graph test walks the artifact graph of a real run (`spar run` on 30 abstracts of the embedded sample, the
projection Λ): for each input of each artifact — an input file edited, or the upstream artifact rebuilt with other
settings — every stage is asked what it would do (:meth:`spar.core.stage.Stage.status`, the runner's own decision, with
nothing written) and `spar search` opens the model. The artifact that reads the changed input must recompute; every
consumer of it, and of anything made from it, must refuse in one line naming the stage to re-run; the rest is up to
date. Before #31 a Λ retrained, re-encoded and re-indexed left `tune/` in use by `evaluate` and `publish`.

The same run logs W&B offline (#47): its runs, read back from their files, must draw this graph too — one run per
stage, each using the artifacts its manifests name and logging the ones it wrote.

Also here: temporaries of dead runs removed by every stage (item 5).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spar.core.config import load_config
from spar.core.errors import SparError

#: The experiment's one question set (data.queries & co. before spar 0.2).
QS = "data.question_sets.default"

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
ENV.pop("SPAR_OUTPUT_LOCK", None)
STAGES = ["sample", "label", "train", "encode", "tune", "index", "evaluate", "publish"]
SETTINGS = ["train.lexical.dim=32", "sample.max_queries=200", "encode.base.passage_max_length=48",
            "evaluate.shuffled=false", "train.wandb_mode=disabled", "experiment.wandb_mode=disabled",
            "experiment.name=lineage"]

#: What each artifact is made from (the projection Λ reads the corpus, not the labels). Input files: corpus,
#: passages (queries/passages.arrow, rewritten only by `spar sample`), queries_file, qrels_dev, qrels_test.
READS = {
    "queries": {"corpus"},
    "teacher_index": {"passages"},
    "labels": {"queries", "teacher_index"},
    "lambda": {"queries"},
    **{f"embeddings/{enc}/passages": {"passages", *(["lambda"] if enc == "lambda" else [])}
       for enc in ("base", "lambda")},
    **{f"embeddings/{enc}/queries-{split}": {"queries_file", f"qrels_{split}", *(["lambda"] if enc == "lambda" else [])}
       for enc in ("base", "lambda") for split in ("dev", "test")},
    "tune": {"embeddings/base/passages", "embeddings/lambda/passages", "embeddings/base/queries-dev",
             "embeddings/lambda/queries-dev", "lambda", "teacher_index", "queries_file", "qrels_dev"},
    "index": {"embeddings/base/passages", "embeddings/lambda/passages"},
    "evaluation": {"embeddings/base/passages", "embeddings/lambda/passages", "embeddings/base/queries-test",
                   "embeddings/lambda/queries-test", "lambda", "tune", "index", "teacher_index", "queries_file",
                   "qrels_test"},
    "model": {"lambda", "tune", "index", "evaluation"},
    "search": {"model"},
}
#: The artifacts each stage writes (judged together: a stage refuses if one of them would, recomputes if one would).
WRITES = {"sample": ["queries"], "label": ["teacher_index", "labels"], "train": ["lambda"],
          "encode": [a for a in READS if a.startswith("embeddings/")], "tune": ["tune"], "index": ["index"],
          "evaluate": ["evaluation"], "publish": ["model"], "search": ["search"]}

#: Each change: (what it changes, how: an input file edited, or a stage re-run with other settings).
CHANGES = {
    "corpus": ({"corpus"}, ("append", "corpus", '{"_id": "zz-new", "title": "New", "text": "A passage added."}')),
    "queries file": ({"queries_file"}, ("append", "queries", '{"_id": "zz-q", "text": "a query nobody judged"}')),
    "dev qrels": ({"qrels_dev"}, ("judge", "dev")),
    "test qrels": ({"qrels_test"}, ("judge", "test")),
    "queries (sampled again)": ({"queries"}, ("sample", "sample.max_queries=150")),
    "teacher index": ({"teacher_index", "labels"}, ("label", "label.fields=[text]")),
    "Λ (retrained)": ({"lambda"}, ("train", "train.lexical.seed=7")),
    "base embeddings": ({f"embeddings/base/{s}" for s in ("passages", "queries-dev", "queries-test")},
                        ("encode", "encode.base.passage_max_length=40")),
    "μ (tuned again)": ({"tune"}, ("tune", "tune.metric=MRR@10")),
    "index (rebuilt)": ({"index"}, ("index", "index.hnsw_m=16")),
    "results": ({"evaluation"}, ("evaluate", "evaluate.k=50")),
}


def _upstream(artifact: str) -> set[str]:
    """Everything ``artifact`` is made from, directly or not."""
    found, todo = set(), list(READS.get(artifact, ()))
    while todo:
        node = todo.pop()
        if node not in found:
            found.add(node)
            todo += READS.get(node, ())
    return found


def expected(changed: set[str]) -> dict[str, str]:
    """What each stage must do once ``changed`` changed: an artifact reading a changed input recomputes; one made
    (directly or not) from an artifact that must recompute is refused; the rest is up to date."""
    direct = {a for a in READS if READS[a] & changed and a not in changed}
    verdict = {}
    for a in READS:
        verdict[a] = ("refuse" if _upstream(a) & direct else "recompute" if a in direct else "current")
    order = ["refuse", "recompute", "current"]
    return {stage: min((verdict[a] for a in artifacts), key=order.index) for stage, artifacts in WRITES.items()}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A complete run of every stage (and its inputs) under ``<root>/work``, kept as ``<root>/snapshot``."""
    from test_reliability import _small_inputs

    root = tmp_path_factory.mktemp("lineage")
    files = _small_inputs(root / "work" / "in")
    wandb_on = {k: v for k, v in ENV.items() if k != "WANDB_MODE"}  # the W&B test reads this run's offline runs
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", *_data(files, root / "work"), *SETTINGS,
                           "experiment.wandb_mode=offline"],
                          cwd=REPO, env=wandb_on, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.copytree(root / "work", root / "snapshot", symlinks=True)
    return root


def _data(files: dict[str, Path], work: Path) -> list[str]:
    return [f"data.corpus={files['corpus']}", f"{QS}.dev={files['queries']}", f"{QS}.test={files['queries']}",
            f"{QS}.qrels_dev={files['dev']}", f"{QS}.qrels_test={files['test']}",
            f"experiment.output_dir={work / 'run'}", f"experiment.results_dir={work / 'results'}"]


def _fresh(root: Path) -> tuple[Path, dict[str, Path]]:
    """The pristine run again, at the same paths (manifests record where things are)."""
    work = root / "work"
    shutil.rmtree(work)
    shutil.copytree(root / "snapshot", work, symlinks=True)
    inputs = work / "in"
    return work, {"corpus": inputs / "corpus.jsonl", "queries": inputs / "queries.jsonl", "dev": inputs / "train.tsv",
                  "test": inputs / "test.tsv"}


def _outcome(stage: str, cfg) -> tuple[str, str]:
    """(current | recompute | refuse, the refusal) of a stage as its runner would decide it, writing nothing."""
    import importlib

    from spar.publish.search import SparSearcher

    try:
        if stage == "search":
            SparSearcher.open(Path(cfg.output_dir) / "model")
            return "current", ""
        status = importlib.import_module(f"pipelines.{stage}").STAGE.status(cfg)
    except SparError as exc:
        return "refuse", str(exc)
    return ("current" if all(status.values()) else "recompute"), ""


def _change(how: tuple, files: dict[str, Path], cfg_of) -> None:
    import importlib

    if how[0] == "append":
        with files[how[1]].open("a", encoding="utf-8") as fh:
            fh.write(how[2] + "\n")
    elif how[0] == "judge":  # one more judgment: the second judged query also judges the first one's passage
        path = files[how[1]]
        rows = path.read_text().splitlines()
        judged = sorted({r.split("\t")[0] for r in rows[1:]})
        passage = rows[1].split("\t")[1]
        path.write_text("\n".join(rows + [f"{judged[-1]}\t{passage}\t1"]) + "\n")
    else:  # the stage re-run with another setting
        importlib.import_module(f"pipelines.{how[0]}").STAGE.run(cfg_of(how[1]))


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_consumer_of_a_changed_input_refuses_or_recomputes(pristine, change):
    changed, how = CHANGES[change]
    work, files = _fresh(pristine)

    def cfg_of(*extra: str):
        return load_config(None, [*_data(files, work), *SETTINGS, *extra])

    _change(how, files, cfg_of)
    cfg = cfg_of()
    wanted = expected(changed)
    rebuilt = how[0] if how[0] in STAGES else None
    got, refusals = {}, {}
    for stage in [*STAGES, "search"]:
        if stage == rebuilt:
            continue  # re-run with other settings: the base config would of course redo it
        got[stage], refusals[stage] = _outcome(stage, cfg)
    assert got == {stage: v for stage, v in wanted.items() if stage != rebuilt}, refusals
    for stage, message in refusals.items():
        if message:
            assert "\n" not in message and "re-run `spar " in message, (stage, message)
    if change == "Λ (retrained)":  # #22 item 3: the Λ's vectors are named, and the stage that re-makes them
        for stage in ("tune", "index", "evaluate"):
            assert "embeddings/lambda/passages: made with Λ" in refusals[stage], (stage, refusals[stage])
            assert "re-run `spar encode`" in refusals[stage], (stage, refusals[stage])


def test_vectors_made_again_are_refused_up_to_the_first_stage_not_re_run(pristine):
    """#22 item 4, #31 item 2: Λ retrained and its vectors re-encoded, nothing else re-run: publish (and evaluate)
    refuse μ first, tuned on the old vectors; once μ is tuned again, the index made from the old vectors. Each
    refusal is one line, and the CLI exits 2 with it."""
    import importlib

    work, files = _fresh(pristine)
    run = work / "run"
    cfg = load_config(None, [*_data(files, work), *SETTINGS, "train.lexical.seed=7"])
    for stage in ("train", "encode"):
        importlib.import_module(f"pipelines.{stage}").STAGE.run(cfg)
    for stage in ("evaluate", "publish"):
        verdict, message = _outcome(stage, cfg)
        tune_first = f"{run / 'tune'}: made from {run / 'embeddings' / 'lambda'}"
        assert verdict == "refuse" and message.startswith(tune_first), (stage, message)
        assert "re-run `spar tune`" in message, message
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "publish", *_data(files, work), *SETTINGS,
                           "train.lexical.seed=7"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "re-run `spar tune`" in done.stderr, done.stderr
    importlib.import_module("pipelines.tune").STAGE.run(cfg)
    for stage in ("evaluate", "publish"):
        verdict, message = _outcome(stage, cfg)
        assert verdict == "refuse" and "re-run `spar index`" in message, (stage, message)


def test_the_graph_is_what_the_manifests_record(pristine):
    """The test's graph is the run's: each artifact's manifest records exactly the sources READS names."""
    from spar.core.artifacts import read_manifest

    work = pristine / "snapshot"
    run = work / "run"
    where = {"corpus": work / "in" / "corpus.jsonl", "queries_file": work / "in" / "queries.jsonl",
             "qrels_dev": work / "in" / "train.tsv", "qrels_test": work / "in" / "test.tsv",
             "passages": run / "queries" / "passages.arrow", "model": run / "model"}
    for artifact, reads in READS.items():
        if artifact == "search":
            continue
        manifest = read_manifest(run / artifact)
        recorded = {os.path.normpath(run / artifact / s["path"]) for s in manifest.get("sources", [])}
        named = {str(where.get(name, run / name)) for name in reads}
        extra = recorded - named
        assert named <= recorded, (artifact, named - recorded)
        # Besides the graph's nodes an artifact may only record the base model's files.
        assert all(s["of"] == "model" for s in manifest["sources"]
                   if os.path.normpath(run / artifact / s["path"]) in extra), (artifact, extra)


#: The W&B name of each node of READS: an artifact is ``<experiment>-<its path>``, an input file ``<dir>-<name>``, and
#: the passages are the artifact they lie in (queries/).
WANDB_NAMES = {"corpus": "in-corpus.jsonl", "queries_file": "in-queries.jsonl", "qrels_dev": "in-train.tsv",
               "qrels_test": "in-test.tsv", "passages": "lineage-queries",
               **{a: "lineage-" + a.replace("/", "-") for a in READS if a != "search"}}


def test_wandb_runs_draw_the_lineage_of_the_manifests(pristine):
    """#47: `spar run` with W&B offline logs one run per stage (job type = the stage, nested config, its own
    numbers), each logging what it wrote as a reference artifact and using what that was made from, by the digest
    its producer logged (so W&B joins them): sample → label → train → encode → tune → index → evaluate → publish."""
    from wandb_records import read_runs

    runs = read_runs(pristine / "snapshot" / "run" / "wandb")
    assert [r.job_type for r in runs] == STAGES, [(r.name, r.job_type) for r in runs]
    by_stage = {r.job_type: r for r in runs}
    ours = {"dataset", "model", "queries", "teacher_index", "labels", "lambda", "embeddings", "tune", "index",
            "evaluation"}  # (W&B logs each table as an artifact of its own too)
    producer: dict[str, tuple[str, str]] = {}
    for stage in STAGES:
        run = by_stage[stage]
        assert (run.name, run.group, run.exit_code) == (f"lineage-{stage}", "lineage", 0)
        assert run.config["train"]["lexical"]["dim"] == 32 and run.config["index"]["storage"]  # nested: filterable
        logged = {name: a for name, a in run.logged.items() if a["type"] in ours}
        assert set(logged) == {WANDB_NAMES[a] for a in WRITES[stage]}, (stage, sorted(logged))
        for name, artifact in logged.items():  # references: nothing uploaded; the manifest by content
            assert artifact["entries"] and all(ref.startswith("file://") for ref in artifact["entries"].values())
            assert "manifest.json" in artifact["entries"] and artifact["metadata"]["fingerprint"]
            producer[name] = (stage, artifact["digest"])
        reads = {WANDB_NAMES[r] for a in WRITES[stage] for r in READS[a]} - set(logged)
        used = {name: a for name, a in run.used.items() if a["type"] != "model" or name in reads}
        assert set(used) == reads, (stage, sorted(used), sorted(reads))  # besides these: the base model's weights
        for name, artifact in used.items():
            if name in producer:  # the version its producer logged: W&B de-duplicates by digest
                assert artifact["digest"] == producer[name][1], (stage, name)
            else:
                assert artifact["type"] in ("dataset", "model") and name.startswith("in-"), (stage, name)
    # Every stage after sample uses what an earlier stage wrote, and each stage's output is used by a later one.
    edges = {(producer[name][0], stage) for stage in STAGES for name in by_stage[stage].used if name in producer}
    assert {a for a, _ in edges} == set(STAGES[:-1]) and {b for _, b in edges} == set(STAGES[1:]), sorted(edges)
    assert {("sample", "train"), ("train", "encode"), ("encode", "index"), ("index", "evaluate"),
            ("tune", "evaluate"), ("evaluate", "publish"), ("sample", "label"), ("label", "tune")} <= edges

    # Each stage's own numbers.
    label, encode, index = by_stage["label"].summary, by_stage["encode"].summary, by_stage["index"].summary
    assert label["queries_per_s"] > 0 and label["dropped"] >= 0 and label["labelled"] > 0
    assert encode["base/passages_per_s"] > 0 and encode["base/precision"] == "32"
    assert encode["base/backend"] == "torch" and encode["lambda/backend"] == "sparse"
    assert index["bytes_per_passage"] > 0 and index["build_seconds"] >= 0 and index["type"] == "flat"
    tune = by_stage["tune"]
    assert tune.summary["mu"] > 0 and "dev/spar" in tune.summary
    assert tune.config["_wandb/visualize/mu_curve"]["panel_config"]["fieldSettings"]["x"] == "mu"  # a line plot
    logged = {key.split("/")[0] for row in tune.history for key in row}  # a table or image: <key>/path, ...
    assert {"mu_curve_table", "mu_curve_png", "alpha_curve_table"} <= logged, sorted(logged)
    evaluate = by_stage["evaluate"]
    assert 0 < evaluate.summary["spar/nDCG@10"] <= 1 and "spar/rbo" in evaluate.summary
    assert "results" in {key.split("/")[0] for row in evaluate.history for key in row}
    assert by_stage["publish"].summary["size_bytes"] > 1e6 and by_stage["publish"].logged["lineage-model"][
        "type"] == "model"


def test_every_stage_removes_the_temporaries_of_dead_runs_and_nothing_else(pristine, tmp_path):
    """#31 item 5: a killed index, publish, tune, ... left `<artifact>.tmp-<pid>/` behind for good (only label
    cleaned up); now each stage's runner removes its artifact's temporaries whose process is dead — while it holds
    the output directory's lock, so no other run is writing there — and keeps a live process's and anything that
    is not spar's (no writer stamp inside)."""
    import importlib

    from spar.core.output_lock import output_lock

    work, files = _fresh(pristine)
    cfg = load_config(None, [*_data(files, work), *SETTINGS])
    run = work / "run"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    artifacts = {"sample": "queries", "label": "teacher_index", "tune": "tune", "index": "index",
                 "evaluate": "evaluation", "publish": "model"}
    for stage, artifact in artifacts.items():
        litter = run / f"{artifact}.tmp-{dead}"
        (litter / "sub").mkdir(parents=True)
        (litter / ".fingerprint").write_text("f")
        (litter / "sub" / "half.bin").write_bytes(b"x" * 1000)
        live = run / f"{artifact}.tmp-{os.getppid()}"  # a live process's work
        (live / ".fingerprint").parent.mkdir()
        (live / ".fingerprint").write_text("f")
        # Not spar's: no writer stamp inside. (label also clears every dead temporary of the run directory itself,
        # as before #31: its Lucene collection copies carry no stamp.)
        mine = run / f"{artifact}.tmp-{int(dead) + 1}-notes"
        if stage != "label":
            mine.mkdir()
            (mine / "notes.txt").write_text("mine")
        stage_module = importlib.import_module(f"pipelines.{stage}")
        if stage != "label":
            stage_module.STAGE.run(cfg)  # without the lock: no one can tell whether a pid is dead here
            assert litter.exists(), stage
        with output_lock(run):
            assert stage_module.STAGE.run(cfg).get("skipped"), stage
        assert not litter.exists(), stage
        assert live.exists() and (stage == "label" or (mine / "notes.txt").read_text() == "mine"), stage
        shutil.rmtree(live)
        shutil.rmtree(mine, ignore_errors=True)
    assert json.loads((run / "queries" / "manifest.json").read_text())["kind"] == "queries"


def test_wandb_uploads_the_files_of_the_kinds_it_is_asked_to_and_refers_to_the_rest(tmp_path, monkeypatch):
    """#47 item 1, "no upload of gigabytes unless asked": an artifact is a reference to its files by path, unless its
    kind is in experiment.wandb_upload (the published model, say): then its files go into the artifact."""
    from spar.core.artifacts import ArtifactWriter
    from spar.core.errors import ConfigError
    from spar.core.tracking import StageRun
    from wandb_records import read_runs

    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "run"
    for upload in ("[]", "[model]"):
        name = "refers" if upload == "[]" else "uploads"
        cfg = load_config(None, [f"experiment.output_dir={out}", f"experiment.name={name}",
                                 "experiment.wandb_mode=offline", f"experiment.wandb_upload={upload}"])
        with ArtifactWriter(out / name, kind="model", config={}, inputs={}) as writer:
            (writer.path / "weights.bin").write_bytes(b"w" * 1000)
        run = StageRun(cfg, "publish")
        run.start()
        run.add_output(out / name)
        run.finish()
    entries = {run.name: run.logged for run in read_runs(out / "wandb")}
    referred = entries["refers-publish"]["refers-refers"]["entries"]
    uploaded = entries["uploads-publish"]["uploads-uploads"]["entries"]
    assert referred["weights.bin"].startswith("file://") and uploaded["weights.bin"] == "", (referred, uploaded)
    assert entries["uploads-publish"]["uploads-uploads"]["type"] == "model"
    with pytest.raises(ConfigError, match="modle: not an artifact kind; use queries, teacher_index"):
        load_config(None, ["experiment.wandb_upload=[modle]"])
