"""Several evaluation question sets in one experiment (open-domain QA): question files with answers, μ tuned on a
pooled dev split by Acc@k, one μ per set where asked, every test set evaluated, results grouped into files.

Runs on a copy of the sample experiment of tests/test_tune.py (its passages, Λ, index and teacher index): the
questions are the sample's real SciFact claims, and each one's answer is the first four words of one of its relevant
abstracts (DPR-style short strings), so Acc@k is checked against Pyserini's own ``has_answers`` over the TREC runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")

from spar.core.artifacts import artifact_dir  # noqa: E402
from spar.core.errors import BadRecordError, ConfigError  # noqa: E402
from spar.evaluate.metrics import read_trec_run  # noqa: E402
from test_tune import build_sample_experiment, experiment_config, sample_experiment  # noqa: E402,F401

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "data" / "scifact-sample" / "corpus.jsonl"
NO_DEFAULT_SET = ("data.question_sets={}",)


def _answers(corpus: dict[str, str], qrels: dict[str, dict[str, int]], ids) -> dict[str, list[str]]:
    return {q: [" ".join(corpus[next(iter(qrels[q]))].split()[:4])] for q in ids}


@pytest.fixture(scope="module")
def qa_files(sample_experiment, tmp_path_factory):  # noqa: F811
    """dev/test JSONL ({_id, question, answers}) of set 'claims' and a DPR TSV test file of set 'dpr'."""
    from spar.experiment.plan import split_queries
    from spar.data.readers import read_corpus

    root = tmp_path_factory.mktemp("qa-files")
    corpus = {p.id: p.text for p in read_corpus(SAMPLE_CORPUS)}
    cfg = experiment_config(sample_experiment, root / "results")
    files = {}
    for split in ("dev", "test"):
        queries = split_queries(cfg, split)
        ids = queries.ids[:40]
        answers = _answers(corpus, queries.qrels, queries.ids)
        path = root / f"claims-{split}.jsonl"
        path.write_text("".join(json.dumps({"_id": f"claims-{split}-{q}", "question": queries.texts[q],
                                            "answers": answers[q]}) + "\n" for q in ids))
        files[split] = path
        if split == "test":
            dpr = root / "dpr-test.tsv"
            dpr.write_text("".join(f"{queries.texts[q]}\t{json.dumps(answers[q])}\n" for q in queries.ids[40:70]))
            files["dpr"] = dpr
    return files


def _copy_of(sample_experiment: Path, root: Path) -> None:  # noqa: F811
    root.mkdir(parents=True)
    for name in ("queries", "teacher_index", "lambda", "embeddings", "index"):
        (root / name).symlink_to(artifact_dir(sample_experiment, name), target_is_directory=True)


def _config(root: Path, files, *extra: str):
    return experiment_config(
        root, root / "results", *NO_DEFAULT_SET,
        f"data.question_sets={{claims: {{dev: {files['dev']}, test: {files['test']}}}, "
        f"dpr: {{test: {files['dpr']}, results: dpr-results}}}}",
        "tune.metric=Acc@20", "tune.sets=[claims]", "evaluate.accuracy_at=[1,5,20]", "evaluate.shuffled=false",
        *extra)


def test_question_sets_tuned_on_acc_and_evaluated_per_set(sample_experiment, qa_files, tmp_path):  # noqa: F811
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    from pipelines import evaluate as evaluate_stage
    from pipelines import tune as tune_stage
    from spar.data.readers import read_corpus, read_questions

    root = tmp_path / "qa"
    _copy_of(sample_experiment, root)
    cfg = _config(root, qa_files)
    tune_stage.run(cfg)
    tuned = json.loads((artifact_dir(root, "tune") / "tune.json").read_text())
    assert tuned["metric"] == "Acc@20" and tuned["dev_sets"] == ["claims"] and tuned["judged_by"] == "answers"
    assert tuned["dev_queries"] == 40
    # The re-scored sweep and the real search of the index at the chosen μ agree (answers judged in both).
    assert tuned["confirmed"] == pytest.approx(tuned["dev_scores"]["spar"], abs=1e-6)
    assert all(0.0 <= v <= 1.0 for v in tuned["dev_scores"].values())

    stats = evaluate_stage.run(cfg)
    main = json.loads((root / "results" / "scifact-sample.json").read_text())
    other = json.loads((root / "results" / "dpr-results.json").read_text())
    assert list(main["sets"]) == ["claims"] and list(other["sets"]) == ["dpr"]
    assert "claims" in stats["table"] and "dpr" in stats["table"]
    corpus = {p.id: p.text for p in read_corpus(SAMPLE_CORPUS)}
    tokenizer = SimpleTokenizer()
    for name, payload, path in (("claims", main, qa_files["test"]), ("dpr", other, qa_files["dpr"])):
        report = payload["sets"][name]
        answers = {q.id: q.answers for q in read_questions(path)}
        assert report["mu"] == tuned["mu"] and report["alpha"] == tuned["alpha"]
        assert report["queries"] == len(answers)
        # Each results file says how many passages were searched and by which index (issue #35 item 4).
        assert report["passages"] == len(corpus) and report["index"]["type"] == cfg.index.type
        for system, values in report["systems"].items():
            assert set(values) == {"Acc@1", "Acc@5", "Acc@20"}, system
            run = read_trec_run(artifact_dir(root, "evaluation") / "runs" / name / f"{system}.trec")
            for k in (1, 5, 20):
                hits = sum(any(has_answers(corpus[d], answers[q], tokenizer) for d, _ in run.get(q, [])[:k])
                           for q in answers)
                assert values[f"Acc@{k}"] == pytest.approx(hits / len(answers)), (name, system, k)
        assert payload["summary"]["Acc@20"]["spar"][name] == report["systems"]["spar"]["Acc@20"]
    assert main["sets"]["claims"]["systems"]["bm25"]["Acc@20"] > 0.5
    table = (root / "results" / "scifact-sample.md").read_text()
    assert "**Acc@20** by question set" in table and "| spar |" in table
    assert evaluate_stage.run(cfg)["skipped"] is True


def test_a_set_with_its_own_mu_is_served_by_it(sample_experiment, qa_files, tmp_path):  # noqa: F811
    from spar.evaluate.evaluation import evaluate_sets
    from spar.evaluate.tuning import read_tuned, tune_experiment

    root = tmp_path / "own"
    _copy_of(sample_experiment, root)
    own = ("data.question_sets.claims.own_mu=true", "tune.sets=null", "tune.grid=[0.05,0.3,2.0]",
           "tune.max_extensions=0", "tune.confirm=false")
    # 'claims' tunes its own μ; the experiment's μ is then pooled over no set: refused in one line
    with pytest.raises(ConfigError, match="no dev split to tune on"):
        tune_experiment(_config(root, qa_files, *own))
    cfg = _config(root, qa_files, *own, "data.question_sets.dpr.dev=" + str(qa_files["dev"]))
    report = tune_experiment(cfg)
    assert report.payload["dev_sets"] == ["dpr"] and list(report.payload["sets"]) == ["claims"]
    from pipelines import tune as tune_stage

    tune_stage.run(cfg)
    tuned = read_tuned(root)
    assert tuned.for_set("claims").mu() == report.payload["sets"]["claims"]["mu"]
    assert tuned.for_set("dpr").mu() == tuned.mu()
    reports = evaluate_sets(cfg)
    assert reports["claims"].mu == tuned.for_set("claims").mu()
    assert reports["dpr"].mu == tuned.mu()
    # the pipeline's way: each set's rankings go to its files and are not held (gigabytes at ODQA scale)
    lean = evaluate_sets(cfg, runs_dir=tmp_path / "runs", keep_runs=False)
    for name, report in lean.items():
        assert report.runs == {} and report.systems == reports[name].systems
        written = (tmp_path / "runs" / name / "spar.trec").read_text().splitlines()
        assert len(written) == sum(len(hits) for hits in reports[name].runs["spar"].values())
    with pytest.raises(ValueError, match="keep_runs=False needs runs_dir"):
        evaluate_sets(cfg, keep_runs=False)


def test_dev_pool_refuses_clashing_ids_and_mixed_judgments(qa_files, sample_experiment, tmp_path):  # noqa: F811
    from spar.experiment.plan import dev_pool

    clash = _config(tmp_path, qa_files, f"data.question_sets.dpr.dev={qa_files['dev']}", "tune.sets=[claims,dpr]")
    with pytest.raises(BadRecordError, match="question id 'claims-dev-.*' is also in another pooled dev set"):
        dev_pool(clash)
    qrels_only = tmp_path / "qrels.tsv"
    first = json.loads(qa_files["dev"].read_text().splitlines()[0])
    qrels_only.write_text(f"query-id\tcorpus-id\tscore\n{first['_id']}\tx\t1\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": first["_id"] + "-b", "text": first["question"]}) + "\n")
    qrels_only.write_text(f"query-id\tcorpus-id\tscore\n{first['_id']}-b\t{_first_doc()}\t1\n")
    mixed = _config(tmp_path, qa_files, f"data.question_sets.beir={{dev: {queries}, qrels_dev: {qrels_only}}}",
                    "tune.sets=[claims,beir]")
    with pytest.raises(ConfigError, match="mix judgments"):
        dev_pool(mixed)


def _first_doc() -> str:
    return json.loads(SAMPLE_CORPUS.read_text().splitlines()[0])["_id"]


@pytest.mark.parametrize("overrides, message", [
    (("data.question_sets={a: {answer_match: regex}}",), "needs 'dev' and/or 'test'"),
    (("data.question_sets={a: {test: x.jsonl}}", "tune.sets=[b]"), "tune.sets names 'b'"),
    (("data.question_sets={a: {test: x.jsonl}}", "tune.sets=[a]"), "has no dev questions"),
    (("data.question_sets={a: {dev: x.jsonl, test: x.jsonl}}",), "never tune on the test split"),
    (("data.question_sets={a: {dev: x.jsonl, test: x.jsonl, qrels_dev: q.tsv, qrels_test: q.tsv}}",),
     "never tune on the test split"),
    (("data.question_sets={'a b': {test: x.jsonl}}",), "question set name"),
    (("data.question_sets.a.test=x.jsonl",), "name each"),  # beside the default set
    (("data.question_sets={a: {dev: x.jsonl, test: x.jsonl, qrels_test: q.tsv, dev_holdout_fraction: 0.5, "
      "qrels_dev: d.tsv}}",), "not both"),
    (("data.question_sets={a: {test: x.jsonl, dev_holdout_fraction: 0.5}}",), "set qrels_test"),
])
def test_question_set_config_errors(overrides, message, tmp_path):
    from spar.core.config import load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, list(overrides))


def _claims_test_qrels(sample_experiment: Path, qa_files, tmp_path: Path) -> tuple[Path, int]:  # noqa: F811
    """Qrels for set 'claims''s test questions (each one's SciFact judgments): the file and its judgment count."""
    from spar.experiment.plan import split_queries

    test = split_queries(experiment_config(sample_experiment, tmp_path / "results"), "test")
    ids = [json.loads(line)["_id"] for line in qa_files["test"].read_text().splitlines()]
    lines = [f"{q}\t{d}\t1\n" for q in ids for d in test.qrels[q.removeprefix("claims-test-")]]
    qrels = tmp_path / "claims-test.tsv"
    qrels.write_text("".join(lines))
    return qrels, len(lines)


def test_a_set_with_qrels_needs_no_default_queries(sample_experiment, qa_files, tmp_path):  # noqa: F811
    """A named set's qrels go with its own questions (SQuAD-open: BEIR questions + qrels + answers): the inputs check
    passed the one set's rule (data.queries) to them and refused every such experiment before its evaluate stage."""
    from spar.experiment.preflight import check_inputs

    qrels, judgments = _claims_test_qrels(sample_experiment, qa_files, tmp_path)
    cfg = _config(tmp_path / "run", qa_files, f"data.question_sets.claims.qrels_test={qrels}")
    report = check_inputs(cfg)
    assert report["data.question_sets.claims.qrels_test"]["judgments"] == judgments
    with pytest.raises(ConfigError, match="data.queries is not"):  # the old keys: qrels without their questions
        experiment_config(tmp_path / "run", tmp_path / "results", "data.question_sets={}", f"data.qrels_test={qrels}")


def test_sets_with_different_measures_log_one_wandb_table(sample_experiment, qa_files, tmp_path,  # noqa: F811
                                                          monkeypatch):
    """A set judged by qrels and answers (nDCG@10 and Acc@k) beside one judged by answers only: the W&B table of
    evaluate has every measure as a column (it was cut to the first set's and W&B refused the rows, failing the
    stage after the results were written)."""
    from pipelines import evaluate as evaluate_stage
    from pipelines import tune as tune_stage

    monkeypatch.delenv("WANDB_MODE")  # W&B on (tests/conftest.py turns it off)
    qrels, _ = _claims_test_qrels(sample_experiment, qa_files, tmp_path)
    root = tmp_path / "qa"
    _copy_of(sample_experiment, root)
    cfg = _config(root, qa_files, f"data.question_sets.claims.qrels_test={qrels}", "experiment.wandb_mode=offline",
                  "evaluate.metrics=[nDCG@10,R@100]")
    tune_stage.run(cfg)
    evaluate_stage.run(cfg)
    claims = json.loads((root / "results" / "scifact-sample.json").read_text())["sets"]["claims"]["systems"]
    dpr = json.loads((root / "results" / "dpr-results.json").read_text())["sets"]["dpr"]["systems"]
    assert "nDCG@10" in claims["spar"] and "nDCG@10" not in dpr["spar"]
    from wandb_records import read_runs

    runs = read_runs(root / "wandb")  # the run files, read with wandb's own record classes
    assert [run.job_type for run in runs] == ["tune", "evaluate"], [run.name for run in runs]
    # #47: the config is logged as nested keys (filterable: train.lexical.dim, index.storage), not one YAML string.
    for run in runs:
        assert run.config["train"]["lexical"]["dim"] > 0 and run.config["index"]["storage"], run.path
    evaluate = runs[-1]
    assert "claims/spar/nDCG@10" in evaluate.summary and "dpr/spar/nDCG@10" not in evaluate.summary
