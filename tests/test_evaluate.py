"""Tests of the evaluate stage: metrics against ir_measures and by hand, RBO_ext by hand, DPR answer matching, TREC
runs, shuffled queries, BM25 reproducing the published SciFact figure, and an end-to-end evaluation of every system
on the embedded sample with an untrained Λ."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")

from spar.core.artifacts import artifact_dir  # noqa: E402
from spar.core.errors import BadRecordError  # noqa: E402
from spar.evaluate.evaluation import shuffle_query, shuffled_queries
from spar.evaluate.results import SYSTEMS  # noqa: E402
from spar.experiment.inputs import SplitQueries  # noqa: E402
from spar.evaluate.metrics import answer_accuracy, evaluate_run, mean_rbo, rbo, read_trec_run, write_trec_run
from spar.data.answers import has_answer, read_answers
from test_tune import build_sample_experiment, experiment_config, sample_experiment  # noqa: E402,F401

#: The experiment's one question set (data.queries & co. before spar 0.2).
QS = "data.question_sets.default"

SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "data" / "scifact-sample" / "corpus.jsonl"

# ----------------------------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------------------------

QRELS = {"q1": {"d1": 1, "d3": 2}, "q2": {"d2": 1}, "q3": {"d9": 1}}
RUN = {"q1": [("d1", 3.0), ("d2", 2.0), ("d3", 1.0)], "q2": [("d1", 2.0), ("d2", 1.0)]}  # q3 retrieved nothing


def test_metrics_by_hand_and_equal_to_ir_measures():
    import ir_measures
    from ir_measures import RR, R, nDCG

    values = evaluate_run(QRELS, RUN, ["nDCG@10", "MRR@10", "R@2"])
    # trec_eval nDCG uses linear gains: q1 DCG = 1/log2(2) + 2/log2(4) = 2, IDCG = 2 + 1/log2(3)
    ndcg_q1 = 2 / (2 + 1 / math.log2(3))
    ndcg_q2 = 1 / math.log2(3)
    assert values["nDCG@10"] == pytest.approx((ndcg_q1 + ndcg_q2 + 0) / 3)
    assert values["MRR@10"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert values["R@2"] == pytest.approx((0.5 + 1 + 0) / 3)
    run = {q: {d: s for d, s in hits} for q, hits in RUN.items()}
    agg = ir_measures.calc_aggregate([nDCG @ 10, RR @ 10, R @ 2], QRELS, run)
    assert values == pytest.approx({"nDCG@10": agg[nDCG @ 10], "MRR@10": agg[RR @ 10], "R@2": agg[R @ 2]})


def test_metrics_with_every_query_equal_ir_measures_exactly():
    import ir_measures

    qrels = {q: r for q, r in QRELS.items() if q != "q3"}
    run = {q: {d: s for d, s in hits} for q, hits in RUN.items()}
    for name in ("nDCG@10", "R@100", "RR@10", "P@1", "AP"):
        expected = ir_measures.calc_aggregate([ir_measures.parse_measure(name)], qrels, run)
        assert evaluate_run(qrels, RUN, [name])[name] == pytest.approx(list(expected.values())[0])


def test_unknown_measure_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown measure 'nDGC@10'"):
        evaluate_run(QRELS, RUN, ["nDGC@10"])


def test_trec_run_round_trip(tmp_path):
    path = tmp_path / "runs" / "x.trec"
    write_trec_run(path, RUN, tag="spar-x")
    assert path.read_text().splitlines()[0] == "q1 Q0 d1 1 3.000000 spar-x"
    assert read_trec_run(path) == RUN


# ----------------------------------------------------------------------------------------------------------------
# RBO
# ----------------------------------------------------------------------------------------------------------------


def test_rbo_hand_example_equal_lengths():
    # X_1 = 0, X_2 = 2, X_3 = 2: (1-p)/p (0 + 2/2 p^2 + 2/3 p^3) + 2/3 p^3 with p = 0.9
    p = 0.9
    expected = (1 - p) / p * (p**2 + 2 / 3 * p**3) + 2 / 3 * p**3
    assert expected == pytest.approx(0.63)
    assert rbo(["a", "b", "c"], ["b", "a", "d"], p) == pytest.approx(expected)


def test_rbo_hand_example_uneven_lengths():
    # S = [a, b] (s = 2), L = [a, c, b] (l = 3): X_1 = 1, X_2 = 1, X_3 = 2, X_s = 1 (Webber et al. eq. 32)
    p = 0.9
    first = p + 1 / 2 * p**2 + 2 / 3 * p**3
    second = 1 * (3 - 2) / (2 * 3) * p**3
    tail = ((2 - 1) / 3 + 1 / 2) * p**3
    expected = (1 - p) / p * (first + second) + tail
    assert expected == pytest.approx(0.82)
    assert rbo(["a", "b"], ["a", "c", "b"], p) == pytest.approx(expected)
    assert rbo(["a", "c", "b"], ["a", "b"], p) == pytest.approx(expected)  # symmetric


def test_rbo_bounds_and_mean():
    ranking = [f"d{i}" for i in range(100)]
    assert rbo(ranking, ranking, 0.9) == pytest.approx(1.0)
    assert rbo(ranking, [f"x{i}" for i in range(100)], 0.9) == 0.0
    assert 0 < rbo(ranking, list(reversed(ranking)), 0.9) < 0.2  # top-weighted: reversal is far apart
    first = {"q1": [(d, 1.0) for d in ranking], "q2": [("a", 1.0)]}
    second = {"q1": [(d, 1.0) for d in ranking], "q2": [("b", 1.0)]}
    assert mean_rbo(first, second, 0.9) == pytest.approx(0.5)


# ----------------------------------------------------------------------------------------------------------------
# Answers (DPR has_answer)
# ----------------------------------------------------------------------------------------------------------------


# (answers, passage): the expected value of each case comes from Pyserini's own has_answers, never from spar.
ANSWER_CASES = [
    (["cafe au lait"], "He ordered a CAFÉ AU LAIT."),  # accents are kept (NFD marks): no match in DPR
    (["café au lait"], "He ordered a CAFÉ AU LAIT."),  # same accents, other case: match
    (["1,000"], "about 1 000 people"),  # the comma is a token of its own: no match
    (["1,000"], "about 1,000 people"),
    (["São Paulo"], "He lives in Sao Paulo."),
    (["São Paulo"], "He lives in SÃO PAULO!"),
    (["Barack Obama", "Obama"], "Former president obama spoke."),
    (["art"], "The party started."),  # whole tokens, not substrings
    (["lait au"], "cafe au lait"),  # order matters
    (["U.S."], "the U.S. army"),
    (["U.S."], "the US army"),
]


def test_has_answer_string_mode_is_pyserinis():
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    tokenizer = SimpleTokenizer()
    expected = [has_answers(text, answers, tokenizer, regex=False) for answers, text in ANSWER_CASES]
    assert [has_answer(answers, text) for answers, text in ANSWER_CASES] == expected
    assert expected[:3] == [False, True, False]  # the cases the issue names are misses in DPR, as in Pyserini
    assert True in expected and False in expected


def test_has_answer_on_real_passages_is_pyserinis(datasets_dir):
    """The cached token comparison against Pyserini's own ``has_answers`` on wiki-vital passages: answers are word
    spans of the same passage (re-cased), of another passage, and with punctuation, so both outcomes occur."""
    import random

    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    from spar.data.readers import read_corpus

    texts = [p.text for _, p in zip(range(300), read_corpus(datasets_dir / "wiki-vital" / "corpus.jsonl"))]
    rng, tokenizer = random.Random(0), SimpleTokenizer()
    cases = []
    for i, text in enumerate(texts):
        words, other = text.split(), texts[(i + 7) % len(texts)].split()
        start, width = rng.randrange(max(1, len(words) - 3)), rng.randint(1, 3)
        own = " ".join(words[start:start + width])
        cases += [([own.upper()], text), ([" ".join(other[start:start + width])], text),
                  (["zzz", own.lower() + ","], text), ([own], text + " " + own)]
    expected = [has_answers(text, answers, tokenizer, regex=False) for answers, text in cases]
    assert [has_answer(answers, text) for answers, text in cases] == expected
    assert 0.2 < sum(expected) / len(expected) < 0.9


REGEX_CASES = [([r"\bcolou?r\b"], "The COLOR red"), ([r"19[0-9]{2}"], "born in 1957"),
               ([r"(unclosed"], "(unclosed"), ([r"^red$"], "The color red"), ([r"caf[eé]"], "CAFÉ")]


def test_has_answer_regex_mode_is_pyserinis():
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    expected = [has_answers(text, answers, SimpleTokenizer(), regex=True) for answers, text in REGEX_CASES]
    assert [has_answer(answers, text, match="regex") for answers, text in REGEX_CASES] == expected
    assert True in expected and False in expected


def test_answer_accuracy_and_reader(tmp_path):
    texts = {"d1": "Paris is the capital of France.", "d2": "Berlin is in Germany.", "d3": "Rome, Italy."}
    ranked = {"q1": [("d2", 2.0), ("d1", 1.0)], "q2": [("d3", 1.0)], "q3": [("d2", 1.0)]}
    answers = {"q1": ["Paris"], "q2": ["Rome"], "q3": ["Madrid"]}
    assert answer_accuracy(ranked, answers, texts, ks=[1, 2]) == pytest.approx({"Acc@1": 1 / 3, "Acc@2": 2 / 3})
    path = tmp_path / "answers.tsv"
    path.write_text('q1\t["Paris", "City of Light"]\nq2\tRome\n')
    assert read_answers(path) == {"q1": ["Paris", "City of Light"], "q2": ["Rome"]}
    path.write_text('q1\tParis\nq2\t["Rome", " "]\n')  # DPR's matching finds an empty answer everywhere
    with pytest.raises(BadRecordError, match=r"answers.tsv:2: empty answer"):
        read_answers(path)


# ----------------------------------------------------------------------------------------------------------------
# Shuffled queries
# ----------------------------------------------------------------------------------------------------------------


def test_shuffled_queries_are_seeded_permutations():
    queries = SplitQueries("test", {"a": {"d": 1}, "b": {"d": 1}},
                           {"a": "vitamin c deficiency causes scurvy in sailors", "b": "single"})
    once, again = shuffled_queries(queries, 7), shuffled_queries(queries, 7)
    assert once.texts == again.texts and once.texts["b"] == "single"
    assert sorted(once.texts["a"].split()) == sorted(queries.texts["a"].split())
    assert once.texts["a"] != queries.texts["a"]
    # Another seed gives another order for most queries (7! orders each, so all equal would be a broken seed).
    many = SplitQueries("test", {f"q{i}": {"d": 1} for i in range(20)},
                        {f"q{i}": queries.texts["a"] for i in range(20)})
    first, second = shuffled_queries(many, 7).texts, shuffled_queries(many, 8).texts
    assert sum(first[q] != second[q] for q in first) >= 15
    assert len(set(first.values())) >= 15  # per-query seeds: the same text is shuffled differently per query
    assert shuffle_query("a b c d e f", 1) == shuffle_query("a b c d e f", 1)


# ----------------------------------------------------------------------------------------------------------------
# BM25 reproduces the published SciFact figure (Pyserini BEIR flat: title + text, k1 0.9, b 0.4)
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.slow  # indexes the 5,183 SciFact abstracts and starts the JVM: ~30 s of CPU
def test_bm25_reproduces_scifact(datasets_dir, tmp_path):
    import pyarrow as pa

    from spar.core.config import load_config
    from spar.experiment.inputs import ExperimentInputs
    from spar.experiment.plan import split_queries
    from spar.data.readers import read_corpus
    from spar.core.schemas import PASSAGES, write_table

    scifact = datasets_dir / "scifact"
    cfg = load_config(None, [f"experiment.output_dir={tmp_path}", f"data.corpus={scifact / 'corpus.jsonl'}",
                             f"{QS}.dev={scifact / 'queries.jsonl'}", f"{QS}.test={scifact / 'queries.jsonl'}",
                             f"{QS}.qrels_dev={scifact / 'qrels/train.tsv'}",
                             f"{QS}.qrels_test={scifact / 'qrels/test.tsv'}"])
    corpus = list(read_corpus(cfg.data.corpus))
    (tmp_path / "queries").mkdir()
    write_table(tmp_path / "queries" / "passages.arrow", pa.table({
        "row": list(range(len(corpus))), "id": [p.id for p in corpus], "title": [p.title for p in corpus],
        "text": [p.text for p in corpus]}, schema=PASSAGES))
    test = split_queries(cfg, "test")
    run = ExperimentInputs(cfg).bm25_search(test, 100)
    values = evaluate_run(test.qrels, run, ["nDCG@10", "R@100"])
    assert values["nDCG@10"] == pytest.approx(0.679, abs=0.0015)
    assert values["R@100"] == pytest.approx(0.925, abs=0.0015)


# ----------------------------------------------------------------------------------------------------------------
# End to end on the embedded sample (untrained Λ = MiniLM with CLS pooling)
# ----------------------------------------------------------------------------------------------------------------


def test_evaluate_stage_reports_every_system(sample_experiment, tmp_path):  # noqa: F811
    from pipelines import evaluate as evaluate_stage
    from pipelines import tune as tune_stage

    results = tmp_path / "results"
    cfg = experiment_config(sample_experiment, results)
    tune_stage.run(cfg)  # skipped when tests/test_tune.py already tuned this experiment
    stats = evaluate_stage.run(cfg, force=True)

    report = json.loads((results / "scifact-sample.json").read_text())
    assert report["dataset"] == "scifact-sample"
    # every system but spar_exact (evaluate.exact_spar off) and hybrid_served (a flat index: the exact hybrid is
    # SPAR's peer)
    assert list(report["systems"]) == [name for name in SYSTEMS if name not in ("spar_exact", "hybrid_served")]
    assert report["skipped_systems"] == {}  # every system ran (its rankings are in files, not in the report)
    for name, values in report["systems"].items():
        assert set(values) == {"nDCG@10", "MRR@10", "R@20", "R@100"}, name
        assert all(0.0 <= v <= 1.0 for v in values.values()), name
    systems = report["systems"]
    assert systems["bm25"]["nDCG@10"] > 0.5  # BM25 is strong on SciFact
    assert systems["base"]["nDCG@10"] > 0.4
    assert systems["hybrid"]["nDCG@10"] > systems["base"]["nDCG@10"]  # BM25 adds lexical matching to MiniLM
    tuned = json.loads((artifact_dir(sample_experiment, "tune") / "tune.json").read_text())
    assert report["mu"] == tuned["mu"] and report["alpha"] == tuned["alpha"]
    assert set(report["rbo"]) == {"lambda", "base", "spar"} and all(0 < v <= 1 for v in report["rbo"].values())
    assert set(report["shuffled"]) == {"bm25", "base", "lambda", "spar"}
    assert report["shuffled"]["bm25"]["delta"] == pytest.approx(0.0, abs=1e-9)  # BM25 is a bag of words
    for name, values in report["shuffled"].items():
        assert values["delta"] == pytest.approx(values["nDCG@10"] - systems[name]["nDCG@10"])
    assert report["command"].startswith("spar ")

    # Every system's TREC run, re-read and re-evaluated, gives the reported figures.
    from spar.experiment.plan import split_queries

    test = split_queries(cfg, "test")
    runs = artifact_dir(sample_experiment, "evaluation") / "runs"
    for name in report["systems"]:
        run = read_trec_run(runs / f"{name}.trec")
        assert set(run) == set(test.ids), name
        # Dense systems rank the whole corpus; BM25 (and so the hybrid's BM25 part) only passages sharing a term.
        assert all(len(h) == 100 for h in run.values()) or name == "bm25", name
        assert evaluate_run(test.qrels, run, ["nDCG@10"])["nDCG@10"] == pytest.approx(systems[name]["nDCG@10"],
                                                                                      abs=1e-5), name
    table = (results / "scifact-sample.md").read_text()
    assert stats["table"] in table and all(f"| {name} |" in table for name in report["systems"])
    assert evaluate_stage.run(cfg)["skipped"] is True

    # The model card of this real run states its tuned μ, its tuning curve and its evaluation figures.
    from pipelines import publish as publish_stage

    model = tmp_path / "model"
    publish_stage.run(experiment_config(sample_experiment, results, f"publish.output={model}"))
    card = (model / "README.md").read_text()
    assert f"μ = {tuned['mu']:g} maximises {tuned['metric']}" in card
    assert all(f"{score:.4f}" in card for score in tuned["scores"].values())
    spar_ndcg = f"{systems['spar']['nDCG@10']:.4f}"
    spar_row = next(line for line in table.splitlines() if line.startswith("| spar "))
    assert spar_ndcg in spar_row and spar_row in card
    assert all(line in card for line in table.splitlines() if line.startswith("| "))


# ----------------------------------------------------------------------------------------------------------------
# Other index types, a stale index, Acc@k: on a copy of the sample experiment with its own index
# ----------------------------------------------------------------------------------------------------------------


def _experiment_with_index(sample_experiment: Path, root: Path, base_dir: str, lambda_dir: str,  # noqa: F811
                           index_type: str, *overrides: str):
    """A copy of the (tuned) sample experiment whose index is built from the given passage embeddings."""
    from pipelines import tune as tune_stage
    from spar.core.artifacts import ArtifactWriter
    from spar.model.stored_vectors import load_embeddings
    from spar.index.spar_index import SparIndex

    tune_stage.run(experiment_config(sample_experiment, root / "results"))  # skipped once tuned
    root.mkdir(parents=True)
    # μ is tuned against the passage vectors an index stores: an IVF-PQ index gets its own tune/ (PQ codes).
    shared = ("queries", "teacher_index", "lambda", "embeddings") + (("tune",) if index_type != "ivfpq" else ())
    for name in shared:
        (root / name).symlink_to(artifact_dir(sample_experiment, name), target_is_directory=True)
    if index_type == "ivfpq":
        tune_stage.run(experiment_config(root, root / "results", "index.type=ivfpq", *overrides))
    emb = artifact_dir(sample_experiment, "embeddings")
    base, lam = load_embeddings(emb / base_dir / "passages"), load_embeddings(emb / lambda_dir / "passages")
    with ArtifactWriter(artifact_dir(root, "index"), kind="index", config={"type": index_type}, inputs={}) as w:
        SparIndex.build(base, lam, variant="concat", index_type=index_type, hnsw_m=16, nprobe=64).save(w.path)
        w.stats = {"variant": "concat", "type": index_type, "count": len(base.ids)}
    # The config that index is (#31 item 3: evaluating it under another index.type is refused).
    return experiment_config(root, root / "results", f"index.type={index_type}", "index.hnsw_m=16", "index.nprobe=64",
                             *overrides)


def test_evaluation_with_hnsw_and_ivfpq_indexes(sample_experiment, tmp_path):  # noqa: F811
    from spar.evaluate.evaluation import evaluate_experiment
    from spar.index.spar_index import SparIndex

    reports = {}
    for index_type in ("flat", "hnsw", "ivfpq"):
        # The HNSW run also ranks SPAR by the exact scan beside its index (evaluate.exact_spar).
        extra = ("evaluate.exact_spar=true",) if index_type == "hnsw" else ()
        cfg = _experiment_with_index(sample_experiment, tmp_path / index_type, "base", "lambda", index_type, *extra)
        assert SparIndex.load(artifact_dir(cfg.output_dir, "index")).info["type"] == index_type
        reports[index_type] = evaluate_experiment(cfg)
    flat = reports["flat"].systems["spar"]
    # HNSW is near-exact on 600 passages; IVF-PQ (16 sub-quantisers of a 768-d vector) is lossy but useful.
    assert reports["hnsw"].systems["spar"]["nDCG@10"] == pytest.approx(flat["nDCG@10"], abs=0.02)
    assert reports["ivfpq"].systems["spar"]["R@100"] == pytest.approx(flat["R@100"], abs=0.1)
    assert reports["ivfpq"].systems["spar"]["nDCG@10"] > 0.5 * flat["nDCG@10"]
    # Only the SPAR row comes from the index: every other system is identical.
    for name in ("bm25", "base", "lambda"):
        assert reports["hnsw"].systems[name] == reports["ivfpq"].systems[name] == reports["flat"].systems[name]
    # The exact scan beside the HNSW index is the flat float32 index's SPAR (same μ, same vectors, unfolded), and
    # it is there only when asked for.
    assert reports["hnsw"].systems["spar_exact"] == pytest.approx(flat, abs=1e-6)
    assert "spar_exact" not in reports["flat"].systems and "spar_exact" not in reports["ivfpq"].systems
    assert reports["hnsw"].rbo["spar_exact"] == pytest.approx(reports["flat"].rbo["spar"], abs=1e-6)
    # Beside an approximate SPAR index, the hybrid as served (the base in HNSW, efSearch chosen on dev questions) is
    # its peer; beside the exact one, the exact hybrid is.
    assert "hybrid_served" not in reports["flat"].systems and "hybrid_served" not in reports["flat"].details
    for name in ("hnsw", "ivfpq"):
        served = reports[name].details["hybrid_served"]
        assert served["type"] == "IndexHNSWFlat" and served["calibrated_on"].startswith("dev")
        calibration = served["calibration"]
        assert served["ef_search"] == calibration["ef_search"] == calibration["tried"][-1]["ef_search"]
        assert calibration["loss"] <= calibration["max_loss"] or calibration["ef_search"] == 2048, calibration
        # 600 passages: the calibrated graph is within a point of the exact base, so within a point of the hybrid.
        assert reports[name].systems["hybrid_served"]["nDCG@10"] == pytest.approx(
            reports[name].systems["hybrid"]["nDCG@10"], abs=0.01)
        assert "| hybrid_served |" in reports[name].markdown()


def test_a_stale_index_is_refused(sample_experiment, tmp_path):  # noqa: F811
    """Λ retrained and the corpus re-encoded, but not re-indexed: here the index's Λ half is the base's vectors."""
    from spar.core.errors import ArtifactError
    from spar.evaluate.evaluation import evaluate_experiment

    cfg = _experiment_with_index(sample_experiment, tmp_path / "stale", "base", "base", "flat")
    index_dir = artifact_dir(cfg.output_dir, "index")
    with pytest.raises(ArtifactError, match=rf"^{index_dir}: built from lambda encoder .* the index is stale, "
                                            r"re-run `spar index`$"):
        evaluate_experiment(cfg)


def test_answer_accuracy_end_to_end_on_a_small_qa_file(sample_experiment, tmp_path):  # noqa: F811
    """Acc@k of every system from a QA file, checked against Pyserini's has_answers over the written TREC runs."""
    from pyserini.eval.evaluate_dpr_retrieval import SimpleTokenizer, has_answers

    from spar.evaluate.evaluation import evaluate_experiment
    from spar.experiment.plan import split_queries
    from spar.data.readers import read_corpus

    corpus = {p.id: p.text for p in read_corpus(SAMPLE_CORPUS)}
    cfg0 = experiment_config(sample_experiment, tmp_path / "results")
    test = split_queries(cfg0, "test")
    # Answers: the first four words of one relevant passage's text (DPR-style short strings), for 20 queries.
    answers = {q: [" ".join(corpus[next(iter(test.qrels[q]))].split()[:4])] for q in test.ids[:20]}
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps({"id": q, "answers": a}) + "\n" for q, a in answers.items()))
    cfg = _experiment_with_index(sample_experiment, tmp_path / "qa", "base", "lambda", "flat",
                                 f"{QS}.answers={path}", "evaluate.accuracy_at=[1,5,20]")
    report = evaluate_experiment(cfg, runs_dir=tmp_path / "runs")
    tokenizer = SimpleTokenizer()
    for name, values in report.systems.items():
        run = read_trec_run(tmp_path / "runs" / f"{name}.trec")
        for k in (1, 5, 20):
            hits = sum(any(has_answers(corpus[d], answers[q], tokenizer) for d, _ in run.get(q, [])[:k])
                       for q in answers)
            assert values[f"Acc@{k}"] == pytest.approx(hits / len(answers)), (name, k)
    assert report.systems["bm25"]["Acc@20"] > 0.5 and report.systems["bm25"]["Acc@1"] < 1.0


def test_skipped_input_records_reach_the_results(sample_experiment, tmp_path):  # noqa: F811
    """#22 item 6: records skipped with on_bad_record=skip (here a judgment naming an unknown passage) are counted in
    results/<name>.json and .md, not only in a warning line."""
    import shutil

    from pipelines import evaluate as evaluate_stage

    base_cfg = _experiment_with_index(sample_experiment, tmp_path / "run", "base", "lambda", "flat")
    qrels = tmp_path / "qrels-test.tsv"
    shutil.copyfile(base_cfg.data.question_sets["default"].qrels_test, qrels)
    first_query = qrels.read_text().splitlines()[1].split("\t")[0]
    with qrels.open("a") as fh:
        fh.write(f"{first_query}\tno-such-passage\t1\n")
    cfg = experiment_config(tmp_path / "run", tmp_path / "run" / "results", "experiment.on_bad_record=skip",
                            f"{QS}.qrels_test={qrels}", "evaluate.shuffled=false")
    evaluate_stage.run(cfg)
    results = json.loads((cfg.results_dir / f"{cfg.experiment.name}.json").read_text())
    assert results["skipped_records"][f"{QS}.qrels_test"] == {"unknown passage": 1}
    # #31 item 9: the evaluation's manifest counts them too, as the README says.
    from spar.core.artifacts import read_manifest

    assert read_manifest(tmp_path / "run" / "evaluation")["stats"]["skipped_records"] == {f"{QS}.qrels_test": 1}
    table = (cfg.results_dir / f"{cfg.experiment.name}.md").read_text()
    assert "Input records skipped (experiment.on_bad_record=skip): " in table
    assert f"{QS}.qrels_test: 1 unknown passage" in table


def test_an_evaluation_killed_part_way_resumes_at_its_next_chunk_to_the_last_digit(sample_experiment,  # noqa: F811
                                                                                tmp_path, monkeypatch):
    """#35 item 4: evaluating the six ODQA test sets over 668k passages takes hours on a few cores; a killed run
    started over from the first question. Now each set's progress is saved chunk by chunk and a re-run resumes there:
    its results and TREC runs equal an uninterrupted run's, byte for byte."""
    import spar.evaluate.evaluation as evaluation
    from pipelines import evaluate as evaluate_stage
    from spar.experiment.plan import split_queries

    monkeypatch.setattr(evaluation, "EVAL_CHUNK", 16)  # the sample's test questions in several chunks
    whole = _experiment_with_index(sample_experiment, tmp_path / "whole", "base", "lambda", "flat")
    evaluate_stage.run(whole)

    cfg = _experiment_with_index(sample_experiment, tmp_path / "killed", "base", "lambda", "flat")
    test_ids = split_queries(cfg, "test").ids
    assert len(test_ids) > 48
    real_score, scored = evaluation._score_runs, []

    def score_then_die(runs, part, *args, **kwargs):
        scored.append(part.ids[0])
        if len(scored) == 5:  # in the third chunk (each chunk is scored twice: as asked, and token-shuffled)
            raise KeyboardInterrupt
        return real_score(runs, part, *args, **kwargs)

    monkeypatch.setattr(evaluation, "_score_runs", score_then_die)
    with pytest.raises(KeyboardInterrupt):
        evaluate_stage.run(cfg)
    partial = tmp_path / "killed" / "evaluation.partial"
    assert json.loads((partial / "progress" / "test.json").read_text())["next_question"] == 32
    assert not (tmp_path / "killed" / "evaluation").exists()

    resumed: list[str] = []

    def score_and_count(runs, part, *args, **kwargs):
        resumed.append(part.ids[0])
        return real_score(runs, part, *args, **kwargs)

    monkeypatch.setattr(evaluation, "_score_runs", score_and_count)
    evaluate_stage.run(cfg)
    assert resumed[0] == test_ids[32]  # the two saved chunks were not evaluated again
    assert len(resumed) == 2 * len(range(32, len(test_ids), 16))
    name = f"{cfg.experiment.name}.json"
    got, expected = (json.loads((r / name).read_text()) for r in (cfg.results_dir, whole.results_dir))
    for report in (got, expected):
        report.pop("command"), report.pop("costs")
    assert got == expected
    runs = sorted((tmp_path / "whole" / "evaluation" / "runs").glob("*.trec"))
    assert len(runs) == len(SYSTEMS) - 2  # every system but spar_exact and hybrid_served (a flat index)
    for run in runs:
        assert (tmp_path / "killed" / "evaluation" / "runs" / run.name).read_bytes() == run.read_bytes(), run.name
    assert not (tmp_path / "killed" / "evaluation" / "progress").exists() and not partial.exists()


def test_exact_beside_refuses_a_run_it_cannot_serve_in_one_line(tmp_path):
    """``python -m bench.exact_beside`` on a run without an index, or with an override the index cannot honour,
    printed spar's refusal under a 9-12 line traceback (its own errors were already one line)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "bench.exact_beside", "-c",
                           str(repo / "configs" / "default.yaml"), "--out", str(tmp_path / "out.json"),
                           f"experiment.output_dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300,
                          cwd=repo, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith("exact_beside.py: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "run" / "exact-beside").exists()


@pytest.mark.parametrize("script, args, message", [
    ("compare_runs.py", ["--qrels", "MISSING", "--runs", "RUN", "--out", "OUT"],
     "compare_runs.py: error: argument --qrels: MISSING: no such file"),
    ("compare_runs.py", ["--qrels", "QRELS", "--runs", "RUN", "--out", "NODIR/out.json"],
     "compare_runs.py: error: argument --out: NODIR/out.json: its directory NODIR does not exist"),
    ("exact_beside.py", ["-c", "CONFIG", "--out", "OUT", "--questions", "0"],
     "exact_beside.py: error: argument --questions: must be at least 1, got 0"),
    ("exact_beside.py", ["-c", "CONFIG", "--out", "OUT", "--questions", "-5"],
     "exact_beside.py: error: argument --questions: must be at least 1, got -5"),
    ("serving_scale.py", ["-c", "CONFIG", "--out", "OUT", "--sizes", "1000", "0"],
     "serving_scale.py: error: argument --sizes: must be at least 1, got 0"),
    ("serving_scale.py", ["-c", "CONFIG", "--out", "OUT", "--report", "NODIR/out.json"],
     "serving_scale.py: error: argument --report: NODIR/out.json: its directory NODIR does not exist"),
    ("exact_beside.py", ["-c", "CONFIG", "--out", "OUT", "--sets", "nosuch"],
     "exact_beside.py: error: --sets: unknown 'nosuch'; the config's test sets: ''"),
])
def test_bench_scripts_answer_bad_arguments_in_one_line(tmp_path, script, args, message):
    """#48 item 5: a missing --qrels was an 11-line traceback around the right message, --questions 0 a KeyError,
    --questions -5 silently the first 75 of 80 questions, --sets nosuch a traceback, --out created any directory."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    names = {"MISSING": str(tmp_path / "missing.tsv"), "QRELS": str(repo / "data" / "scifact-sample" / "qrels" /
                                                                    "test.tsv"),
             "RUN": str(tmp_path / "run"), "OUT": str(tmp_path / "out.json"), "NODIR/out.json":
             str(tmp_path / "nodir" / "out.json"), "CONFIG": str(repo / "configs" / "default.yaml")}
    module = ["-m", f"bench.{script.removesuffix('.py')}"]  # run as the README says: python -m bench.NAME
    done = subprocess.run([sys.executable, *module, *[names.get(a, a) for a in args],
                           f"experiment.output_dir={tmp_path / 'run'}"] if script == "exact_beside.py" else
                          [sys.executable, *module, *[names.get(a, a) for a in args]],
                          capture_output=True, text=True, timeout=300, cwd=repo,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    expected = message.replace("MISSING", names["MISSING"]).replace("NODIR/out.json", names["NODIR/out.json"])
    expected = expected.replace("directory NODIR", f"directory {tmp_path / 'nodir'}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.startswith(expected), done.stderr
    assert not (tmp_path / "nodir").exists() and not (tmp_path / "out.json").exists()



def test_the_bm25_of_tune_and_evaluate_starts_the_jvm_at_the_search_heap(monkeypatch, tmp_path):
    """tune's and evaluate's BM25 (baseline and hybrid) are built and searched with ``label.search_heap`` (1g by
    default: the same hits as 4g at 667,980 passages with 2.2 GB less peak RSS, bench/jvm_heap.py), not the label
    stage's ``label.java_heap``."""
    from spar.core.config import load_config
    from spar.experiment import inputs as inputs_module
    from spar.teacher import teachers

    seen: dict[str, str] = {}

    def fake_build(passages, index_dir, threads=2, fields=("title", "text"), heap="4g"):
        seen["build"] = heap
        return index_dir

    class FakeSearcher:
        def __init__(self, index_dir, k1=0.9, b=0.4, threads=2, heap="4g"):
            seen["search"] = heap

    monkeypatch.setattr(teachers, "build_bm25_index", fake_build)
    monkeypatch.setattr(teachers, "BM25Searcher", FakeSearcher)
    monkeypatch.setattr(inputs_module.ExperimentInputs, "passages_arrow", tmp_path / "passages.arrow")
    assert load_config(None, []).label.search_heap == "1g"
    cfg = load_config(None, [f"experiment.output_dir={tmp_path / 'run'}", "label.search_heap=768m",
                             "label.java_heap=6g"])
    inputs_module.ExperimentInputs(cfg).bm25
    assert seen == {"build": "768m", "search": "768m"}
