"""Config: defaults, overrides, unknown keys with suggestions, dev/test guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from spar.core.config import SparConfig, describe_options, load_config
from spar.core.errors import ConfigError


def test_default_config_loads_and_resolves_data_paths():
    cfg = load_config()
    assert Path(cfg.data.corpus).exists() and Path(cfg.data.question_sets["default"].qrels_test).exists()
    assert cfg.label.k == 50 and cfg.label.n_positives == 10 and cfg.label.n_negatives == 5


def test_overrides_are_typed():
    cfg = load_config(None, ["label.k=100", "train.encoder.pooling=mean", "tune.grid=[0.5, 1]"])
    assert cfg.label.k == 100 and cfg.train.encoder.pooling == "mean" and cfg.tune.grid == [0.5, 1.0]


@pytest.mark.parametrize("override, hint", [
    ("label.kk=3", "did you mean 'label.k'"),
    ("trian.batch_size=3", "did you mean 'train'"),
    ("train.encoder.poolin=cls", "did you mean 'train.encoder.pooling'"),
])
def test_unknown_key_names_it_and_suggests(override, hint):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert hint in str(info.value) and "unknown key" in str(info.value)


def test_invalid_values_are_explained():
    with pytest.raises(ConfigError, match="exceeds k"):
        load_config(None, ["label.k=10", "label.n_positives=10"])
    with pytest.raises(ConfigError, match="label.teacher"):
        load_config(None, ["label.teacher=tfidf"])


def test_tuning_on_test_is_refused(tmp_path: Path):
    qrels = tmp_path / "q.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(ConfigError, match="never tune on the test split"):
        load_config(None, [f"data.question_sets.default.qrels_dev={qrels}",
                           f"data.question_sets.default.qrels_test={qrels}"])


def test_every_option_is_documented():
    for section in ("sample", "label", "train", "encode", "tune", "index", "evaluate", "publish"):
        rows = describe_options(SparConfig.model_fields[section].annotation, f"{section}.")
        assert rows
        undocumented = [key for key, _, desc in rows if not desc and key.split(".")[-1] not in (
            "learning_rate", "max_epochs", "gradient_clip", "log_every_n_steps", "wandb_project", "batch_size",
            "weight_decay", "hnsw_m", "hnsw_ef_search", "nprobe", "accelerator", "devices", "variant", "private",
            "license", "rbo_p", "answer_match", "wandb_mode")]
        assert not undocumented, undocumented


def test_bad_yaml_names_file_and_line(tmp_path: Path):
    bad = tmp_path / "x.yaml"
    bad.write_text("data:\n  corpus: a\n label: [\n")
    with pytest.raises(ConfigError, match=r"x.yaml:\d+: not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize("override, message", [
    ("train.max_steps=-5", "'train.max_steps': Value error, must be -1 (run max_epochs) or at least 1, not -5"),
    ("train.max_steps=0", "must be -1 (run max_epochs) or at least 1, not 0"),
    ("train.val_check_interval=0", "'train.val_check_interval': Value error, a number of steps must be at least 1"),
    ("train.val_check_interval=0.0", "a fraction of an epoch must be in (0, 1], not 0.0"),
    ("experiment.name=../../x", "'experiment.name': Value error, '../../x' is not a plain name"),
    ("experiment.name=a/b", "'a/b' is not a plain name"),
    ("experiment.name=..", "'..' is not a plain name"),
    # A μ or α grid of nan/inf ran the whole sweep, then died in a 60-line matplotlib traceback; 0 or a negative
    # weight in a ValueError traceback at the sweep's end.
    ("tune.grid=[nan]", "'tune.grid': Value error, every weight must be a finite number above 0, not nan"),
    ("tune.grid=[0.5, inf]", "'tune.grid': Value error, every weight must be a finite number above 0, not inf"),
    ("tune.grid=[0]", "'tune.grid': Value error, every weight must be a finite number above 0, not 0"),
    ("tune.grid=[]", "'tune.grid': Value error, an empty grid"),
    # A flat index ignored index.refine ("updated: refine 0 -> 4", the storage's scores still served).
    ("index.refine=4", "'index': Value error, index.refine=4 re-ranks the candidates of an approximate index"),
    ("tune.hybrid_alphas=[-0.5]", "'tune.hybrid_alphas': Value error, every weight must be a finite number above 0"),
])
def test_values_that_used_to_crash_later_are_refused_up_front(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert message in str(info.value)


def test_valid_steps_intervals_and_names_load():
    cfg = load_config(None, ["train.max_steps=-1", "train.val_check_interval=10", "experiment.name=scifact-2.0_b"])
    assert cfg.train.val_check_interval == 10 and cfg.experiment.name == "scifact-2.0_b"
    assert load_config(None, ["train.max_steps=1", "train.val_check_interval=0.25"]).train.max_steps == 1


def test_every_path_in_a_config_is_relative_to_the_yaml(tmp_path: Path, monkeypatch):
    """#22 item 16: output_dir, results_dir and encode.lambda.path resolved against the current directory while data
    paths resolved against the YAML, so a copied config wrote into the checkout's committed results/. One rule now:
    relative to the YAML; command-line overrides relative to the current directory."""
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "data" / "corpus.jsonl").write_text('{"_id": "1", "title": "", "text": "x"}\n')
    (project / "configs" / "mine.yaml").write_text(
        "experiment: {name: mine, output_dir: ../runs/mine, results_dir: ../results}\n"
        "data: {corpus: ../data/corpus.jsonl,\n"
        "       question_sets: {default: {test: q.jsonl, qrels_test: ../data/qrels.tsv}}}\n"
        "encode: {lambda: ../runs/wiki/lambda, base: {model: all-MiniLM-L6-v2}}\n"
        "publish: {output: ../published}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(project / "configs" / "mine.yaml")
    assert cfg.output_dir == project / "runs" / "mine" and cfg.results_dir == project / "results"
    assert Path(cfg.data.corpus) == project / "data" / "corpus.jsonl"
    assert Path(cfg.data.question_sets["default"].qrels_test) == project / "data" / "qrels.tsv"  # not there yet
    assert Path(cfg.data.question_sets["default"].test) == project / "configs" / "q.jsonl"  # beside the YAML
    assert Path(cfg.encode.lambda_.path) == project / "runs" / "wiki" / "lambda"
    assert Path(cfg.publish.output) == project / "published"
    assert cfg.encode.base.model == "all-MiniLM-L6-v2"  # a model name stays a name
    overridden = load_config(project / "configs" / "mine.yaml", ["experiment.output_dir=out", "publish.output=m"])
    assert overridden.output_dir == Path("out") and overridden.publish.output == "m"  # the shell's directory


def test_a_config_without_output_dir_writes_runs_name_in_the_current_directory(tmp_path: Path):
    """The embedded default sets no output_dir: installed in site-packages, it must not write beside itself."""
    installed = tmp_path / "site-packages" / "share" / "spar" / "configs" / "default.yaml"
    installed.parent.mkdir(parents=True)
    installed.write_text("experiment: {name: scifact-sample}\ndata: {corpus: corpus.jsonl}\n")
    cfg = load_config(installed)
    assert cfg.output_dir == Path("runs/scifact-sample") and cfg.results_dir == Path("runs/scifact-sample/results")
    assert load_config(None).output_dir == Path("runs/scifact-sample")


def test_an_empty_section_is_named_with_its_line_and_the_fix(tmp_path):
    """#37 item 12: a `lexical:` left without keys (after deleting its only one) was refused as "Input should be a
    valid dictionary or instance of LexicalSection", without saying it is empty or what to do."""
    import re

    cfg = tmp_path / "x.yaml"
    cfg.write_text(f"data:\n  corpus: {tmp_path / 'c.jsonl'}\ntrain:\n  kind: projection\n  lexical:\nindex:\n"
                   "  storage: sq4\n")
    with pytest.raises(ConfigError) as error:
        load_config(cfg)
    message = str(error.value)
    assert re.search(rf"'train\.lexical' is empty \({re.escape(str(cfg))}:5\): a section with no keys left; give it "
                     r"a key \(e\.g\. train\.lexical\.\w+\) or delete the line 'lexical:' \(its defaults then apply\)$",
                     message), message
    assert "valid dictionary" not in message
    cfg.write_text(f"data:\n  corpus: {tmp_path / 'c.jsonl'}\n  question_sets:\n    nq:\n")
    with pytest.raises(ConfigError, match=r"'data\.question_sets\.nq' is empty \(.*x\.yaml:4\): .*delete the line "
                                          r"'nq:'"):
        load_config(cfg)


# ------------------------------------------------------------------------------------------------------------
# The one question set: data.queries & co. (spar < 0.2) fold into data.question_sets.default
# ------------------------------------------------------------------------------------------------------------


def _old_form(tmp_path: Path, data: str, extra: str = "") -> Path:
    (tmp_path / "configs").mkdir(exist_ok=True)
    path = tmp_path / "configs" / "old.yaml"
    path.write_text(f"experiment: {{name: old}}\ndata: {{corpus: ../d/corpus.jsonl, {data}}}\n{extra}")
    return path


def test_the_old_keys_fold_into_the_default_set_with_a_warning(tmp_path: Path):
    path = _old_form(tmp_path, "queries: ../d/q.jsonl, qrels_dev: ../d/dev.tsv, qrels_test: ../d/test.tsv",
                     "evaluate: {answers: ../d/answers.jsonl, answer_match: regex, k: 50}\n")
    with pytest.warns(FutureWarning, match="data.question_sets.default now"):
        cfg = load_config(path)
    d = tmp_path / "d"
    default = cfg.data.question_sets["default"]
    assert list(cfg.data.question_sets) == ["default"]  # relative paths resolve against the YAML, as they did
    assert (default.dev, default.test) == (str(d / "q.jsonl"), str(d / "q.jsonl"))
    assert (default.qrels_dev, default.qrels_test) == (str(d / "dev.tsv"), str(d / "test.tsv"))
    assert (default.answers, default.answer_match, cfg.evaluate.k) == (str(d / "answers.jsonl"), "regex", 50)


def test_a_hold_out_folds_into_a_dev_split_of_the_test_questions(tmp_path: Path):
    path = _old_form(tmp_path, "queries: ../d/q.jsonl, qrels_test: ../d/test.tsv, dev_holdout_fraction: 0.5")
    with pytest.warns(FutureWarning):
        default = load_config(path).data.question_sets["default"]
    assert default.dev == default.test and default.qrels_dev is None and default.dev_holdout_fraction == 0.5
    only_test = _old_form(tmp_path, "queries: ../d/q.jsonl, qrels_test: ../d/test.tsv")
    with pytest.warns(FutureWarning):
        default = load_config(only_test).data.question_sets["default"]
    assert default.dev is None and default.test is not None  # no dev qrels, no hold-out: no dev split


def test_an_old_key_overrides_the_default_set_and_queries_null_removes_it():
    with pytest.warns(FutureWarning, match="data.qrels_test"):
        cfg = load_config(None, ["data.qrels_test=/elsewhere/test.tsv"])
    default = cfg.data.question_sets["default"]
    assert default.qrels_test == "/elsewhere/test.tsv" and default.qrels_dev.endswith("qrels/train.tsv")
    with pytest.warns(FutureWarning):
        assert load_config(None, ["data.queries=null"]).data.question_sets == {}
    with pytest.warns(FutureWarning):
        held = load_config(None, ["data.qrels_dev=null", "data.dev_holdout_fraction=0.3"]).data.question_sets
    assert held["default"].dev == held["default"].test and held["default"].dev_holdout_fraction == 0.3


def test_a_default_set_judged_by_nothing_or_beside_named_sets_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="data.queries is not"):
        load_config(_old_form(tmp_path, "qrels_test: ../d/test.tsv"))
    with pytest.raises(ConfigError, match="no qrels judge it"):
        load_config(_old_form(tmp_path, "queries: ../d/q.jsonl"))
    with pytest.raises(ConfigError, match="name each"):
        load_config(None, ["data.question_sets.nq.test=nq.jsonl"])


def test_the_default_set_keeps_its_fingerprint_spelling(tmp_path: Path):
    """Fingerprints spell the default set as the keys before spar 0.2 did (data.queries & co., evaluate.answers), so
    runs made before stay up to date; the expected dicts are the old sections' fields."""
    from spar.data.question_sets import data_settings, evaluate_settings
    from spar.experiment.declarations import EVALUATE_SET_OPTIONS, TUNE_SET_OPTIONS
    from spar.experiment.plan import Experiment

    cfg = load_config(None)
    default = cfg.data.question_sets["default"]
    experiment = Experiment(cfg)
    assert data_settings(cfg.data) == {"corpus": cfg.data.corpus, "corpus_format": "auto", "title_field": True,
                                       "queries": default.test, "qrels_dev": default.qrels_dev,
                                       "qrels_test": default.qrels_test, "dev_holdout_fraction": None}
    assert evaluate_settings(cfg.evaluate, experiment.sets) == {
        "k": 100, "metrics": ["nDCG@10", "MRR@10", "R@20", "R@100"], "rbo_p": 0.9, "shuffled": True, "answers": None,
        "answer_match": "string", "accuracy_at": [20, 100]}
    assert experiment.holdout_setting() == {"dev_holdout_fraction": None}
    assert experiment.set_settings(EVALUATE_SET_OPTIONS) == {}
    assert experiment.question_files("dev") == {"queries": default.dev, "qrels_dev": default.qrels_dev}
    assert experiment.question_files("test") == {"queries": default.test, "qrels_test": default.qrels_test}
    with pytest.warns(FutureWarning):
        held = Experiment(load_config(None, ["data.qrels_dev=null", "data.dev_holdout_fraction=0.5"]))
    assert held.question_files("dev") == {"queries": default.dev, "qrels_test": default.qrels_test}
    assert held.holdout_setting() == {"dev_holdout_fraction": 0.5}
    named = Experiment(load_config(None, ["data.question_sets={nq: {dev: a.jsonl, test: b.jsonl, dev_sample: 5}}"]))
    assert named.question_files("dev") == {"nq.dev": "a.jsonl"}
    assert named.question_files("test") == {"nq.test": "b.jsonl"}
    assert {**named.holdout_setting(), **named.set_settings(TUNE_SET_OPTIONS)} == {
        "dev_holdout_fraction": None, "question_sets": {
        "nq": {"answer_match": "string", "dev_sample": 5, "own_mu": False}}}
    assert named.dev_pool_keys() == ["dev-nq"] and named.test_split_keys() == ["test-nq"]
    assert "question_sets" not in data_settings(cfg.data) and data_settings(named.data)["queries"] is None


@pytest.mark.parametrize("spelling, canonical", [("32", "32"), ("fp32", "32"), ("'32'", "32"), ("32-true", "32"),
                                                ("bf16", "bf16-mixed"), ("bf16-mixed", "bf16-mixed"),
                                                ("fp16", "16-mixed"), ("16", "16-mixed"), ("auto", "auto")])
def test_precision_spellings_the_docs_name_are_accepted(spelling, canonical):
    """#48 item 2: `encode.precision=32` (read as a number by YAML and the overrides) was refused."""
    cfg = load_config(None, [f"encode.precision={spelling}", f"train.precision={spelling}"])
    assert cfg.encode.precision == cfg.train.precision == canonical


@pytest.mark.parametrize("override, words", [
    ("label.search_heap=abc", "'label.search_heap': Value error, 'abc' is not a JVM heap size"),
    ("label.search_heap=100t", "'label.search_heap': Value error, '100t' is not a JVM heap size"),
    ("label.java_heap=8m", "'label.java_heap': Value error, '8m' is below the 16m a JVM needs"),
    ("label.java_heap=99999g", "'label.java_heap': Value error, '99999g' is more than a JVM heap can be"),
    ("experiment.seed=99999999999999999999999", "'experiment.seed': Input should be less than or equal to 4294967295"),
    ("train.lexical.seed=-1", "'train.lexical.seed': Input should be greater than or equal to 0"),
])
def test_values_that_reach_the_jvm_or_a_generator_are_checked_at_load(override, words):
    """#48 item 3: a bad heap was a 59-line traceback from the JVM's start (or an exit from inside it, leaving
    temporaries); a seed past 2**32 - 1 a traceback after minutes of work."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert words in str(err.value)
