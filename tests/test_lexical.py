"""Λ kinds (spar/lexical): the analyzer and BM25 weights against Pyserini, the projection's fidelity by dimension,
static training through the real label shards, save/load and publish round trips, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spar.core import schemas
from spar.core.config import load_config
from spar.core.errors import ConfigError
from spar.data.readers import read_corpus

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "data" / "scifact-sample" / "corpus.jsonl"


@pytest.fixture(scope="module")
def corpus() -> list:
    return list(read_corpus(SAMPLE_CORPUS))


@pytest.fixture(scope="module")
def texts(corpus) -> list[str]:
    return [" ".join(x for x in (p.title, p.text) if x) for p in corpus]


@pytest.fixture(scope="module")
def bm25_index(corpus, tmp_path_factory) -> Path:
    """A real Pyserini BM25 index of the embedded sample (what the label stage builds)."""
    from spar.teacher.teachers import build_bm25_index

    root = tmp_path_factory.mktemp("lexical")
    table = pa.table({"row": pa.array(range(len(corpus)), pa.int64()), "id": [p.id for p in corpus],
                      "title": [p.title for p in corpus], "text": [p.text for p in corpus]}, schema=schemas.PASSAGES)
    schemas.write_table(root / "passages.arrow", table)
    return build_bm25_index(root / "passages.arrow", root / "index", threads=2)


def _queries(texts: list[str], n: int = 40) -> list[str]:
    """Real sentences of the corpus (what the sample stage turns into training queries)."""
    from spar.data.sampling import split_sentences

    out = []
    for text in texts[::7]:
        out.extend(sentence for _, sentence in split_sentences(text, 4, 24)[:1])
    return out[:n]


def test_analyzer_gives_pyserini_terms(texts):
    from spar.core.java import pyserini_module
    from spar.lexical.analysis import LuceneAnalyzer

    analysis = pyserini_module("pyserini.analysis")
    lucene = analysis.Analyzer(analysis.get_lucene_analyzer())
    ours = LuceneAnalyzer()
    from collections import Counter

    total = same = identical = 0
    for text in texts[:300]:
        expected, got = lucene.analyze(text), ours.analyze(text)
        total += len(expected)
        same += sum((Counter(expected) & Counter(got)).values())  # the terms BM25 sees, with their counts
        identical += expected == got
    assert total > 40_000
    assert same / total > 0.999, same / total  # seen: all but a few trademark signs (™, ®) that Lucene keeps
    assert identical / 300 > 0.98, identical


def test_bm25_weights_and_projection_track_pyserini_scores(texts, corpus, bm25_index):
    """Exact sparse BM25 reproduces Pyserini's scores; the projection's dot products track them closely at a large
    dimension and loosely at a small one (Luan et al.: the error shrinks as 1/dim)."""
    from spar.lexical.projection import ProjectionLambda
    from spar.teacher.teachers import BM25Searcher

    queries = _queries(texts)
    hits = BM25Searcher(bm25_index).search([(str(i), q) for i, q in enumerate(queries)], k=30)
    row = {p.id: i for i, p in enumerate(corpus)}
    pairs = [(int(q), row[doc], score) for q, ranked in hits.items() for doc, score in ranked]
    assert len(pairs) > 600
    qi, pi, lucene = (np.array(x) for x in zip(*pairs))

    def correlation(model) -> float:
        q, p = model.encode_query(queries), model.encode_passage(texts)
        return float(np.corrcoef((q[qi] * p[pi]).sum(1), lucene)[0, 1])

    large = ProjectionLambda.fit(texts, dim=4096, seed=0)
    exact = (large.weights.query_matrix(queries) @ large.weights.passage_matrix(texts).T).toarray()[qi, pi]
    assert np.corrcoef(exact, lucene)[0, 1] > 0.995  # Lucene quantises lengths to one byte: not exactly equal
    high = correlation(large)
    low = correlation(ProjectionLambda(large.weights, dim=32, seed=0))
    assert high > 0.95, high
    assert low < 0.9 and low < high - 0.1, (low, high)
    sketch = correlation(ProjectionLambda(large.weights, dim=4096, projection="countsketch", seed=0))
    assert sketch > 0.9, sketch


def test_save_load_round_trips_are_exact(texts, tmp_path):
    from spar.lexical import load_lambda
    from spar.lexical.projection import ProjectionLambda
    from spar.lexical.static import StaticLambda

    projection = ProjectionLambda.fit(texts[:200], dim=48, seed=3)
    static = StaticLambda.from_projection(projection)
    with __import__("torch").no_grad():
        static.embedding.weight.mul_(1.5)  # a "trained" table: not the projection's any more
    queries = _queries(texts, 10)
    for model in (projection, static):
        model.save(tmp_path / model.kind)
        loaded = load_lambda(tmp_path / model.kind)
        assert loaded.kind == model.kind and loaded.dim == 48
        assert np.array_equal(loaded.encode_query(queries), model.encode_query(queries))
        assert np.array_equal(loaded.encode_passage(texts[:50]), model.encode_passage(texts[:50]))
    assert not np.array_equal(static.encode_query(queries), projection.encode_query(queries))


def test_published_lexical_lambda_loads_identically_with_and_without_spar(texts, tmp_path):
    """A static Λ published with the base: SparEncoder reloads the same vectors, and sentence-transformers loads the
    directory in a process where spar cannot be imported (the shipped spar_modules.py/spar_analysis.py)."""
    from spar.model.encoders import BiEncoder
    from spar.lexical.projection import ProjectionLambda
    from spar.lexical.static import StaticLambda
    from spar.publish.model_dir import SparEncoder

    static = StaticLambda.from_projection(ProjectionLambda.fit(texts[:200], dim=32, seed=1))
    base = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True)
    model_dir = SparEncoder(base, static, mu=0.25).save_pretrained(tmp_path / "model")
    queries, docs = _queries(texts, 5), [("Scurvy", "Scurvy is caused by a lack of vitamin C."), "BM25 in Lucene"]
    expected_q, expected_p = SparEncoder(base, static, mu=0.25).encode_queries(queries), \
        SparEncoder(base, static, mu=0.25).encode_passages(docs)
    reloaded = SparEncoder.from_pretrained(model_dir)
    assert np.array_equal(reloaded.encode_queries(queries), expected_q)
    assert np.allclose(reloaded.encode_passages(docs), expected_p, atol=1e-6)
    script = (
        "import sys, json, numpy as np; sys.modules['spar'] = None\n"  # spar is not importable in this process
        "from sentence_transformers import SentenceTransformer\n"
        f"m = SentenceTransformer({str(model_dir)!r}, trust_remote_code=True, device='cpu')\n"
        f"q = m.encode_query({queries!r}); p = m.encode_document({docs!r})\n"
        "print(json.dumps({'q': q.tolist(), 'p': p.tolist()}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert np.allclose(out["q"], expected_q, atol=1e-5) and np.allclose(out["p"], expected_p, atol=1e-5)


#: The embedded sample sampled and labelled (what a static Λ trains on).
LABELLED = ["sample.max_queries=3000", "train.kind=static"]


@pytest.fixture(scope="module")
def labelled_sample(tmp_path_factory) -> Path:
    """The real path: the embedded sample sampled and labelled by the stages (Pyserini BM25)."""
    import pipelines.label
    import pipelines.sample

    root = tmp_path_factory.mktemp("labelled")
    cfg = load_config(None, [f"experiment.output_dir={root}", *LABELLED])
    pipelines.sample.run(cfg)
    pipelines.label.run(cfg)
    return root


def test_static_training_lowers_its_objective_and_raises_agreement_with_the_teacher(labelled_sample, tmp_path):
    """The real path: the embedded sample's labels (Pyserini BM25), a static Λ trained with Lightning."""
    from spar.lexical import build_lambda, load_lambda
    from spar.evaluate.metrics import mean_rbo
    import torch

    from spar.train.training import train_lambda
    from spar.train.data import ContrastiveBatchSampler, LabelStore, SurrogatePool, TrainBatchDataset
    from spar.data.passages import PassagesTable

    cfg = load_config(None, [f"experiment.output_dir={labelled_sample}", *LABELLED,
                             "train.lexical.dim=64", "train.max_steps=60", "train.batch_size=32",
                             "train.learning_rate=0.002",
                             "train.val_check_interval=20", "train.random_negatives=64", "train.wandb_mode=disabled"])
    passages = labelled_sample / "queries" / "passages.arrow"
    model = build_lambda(cfg.train, passages, seed=0)
    start = model.embedding.weight.detach().clone()

    # The objective on fixed batches of training queries, before and after (per-step losses are too noisy).
    store = PassagesTable(passages)
    preparer = model.batch_preparer(passages_path=passages)
    data = TrainBatchDataset(labelled_sample / "labels", passages, True, preparer, random_negatives=64, seed=9)
    labels = LabelStore(labelled_sample / "labels")
    sampler = ContrastiveBatchSampler(labels, labels.split_indices("train"), 32, 1, seed=9)
    fixed = [data.__getitems__(items) for items, _ in zip(sampler, range(4))]

    def objective() -> float:
        with torch.no_grad():
            return float(np.mean([model.training_loss(model.forward_queries(b["queries"]),
                                                      model.forward_passages(b["passages"]), b, None)["loss"]
                                  for b in fixed]))

    before_loss = objective()
    result = train_lambda(model, cfg.train, passages, labelled_sample / "labels", tmp_path / "lambda.partial", seed=0,
                          enable_progress_bar=False)
    assert result.steps == 60
    assert objective() < 0.9 * before_loss, (before_loss, objective())

    dev = SurrogatePool.from_labels(labels).query_indices
    queries = labels.queries(dev)
    docs = store.get(np.arange(len(store)))
    ids = [str(i) for i in range(len(store))]
    teacher_scores = (model.weights.query_matrix(queries) @ model.weights.passage_matrix(
        [" ".join(x for x in d if x) for d in docs]).T).toarray()

    def ranking(scores):
        top = np.argsort(-scores, axis=1)[:, :50]
        return {str(q): [(ids[j], float(scores[q, j])) for j in row] for q, row in enumerate(top)}

    def agreement(table) -> float:
        q = model.weights.query_matrix(queries) @ table
        p = model.weights.passage_matrix([" ".join(x for x in d if x) for d in docs]) @ table
        return mean_rbo(ranking(q @ p.T), ranking(teacher_scores), p=0.9, depth=50)

    trained = load_lambda(tmp_path / "lambda.partial").embedding.weight.detach().numpy()
    before, after = agreement(start.numpy()), agreement(trained)
    assert after > before + 0.02, (before, after)


def test_train_stage_logs_one_wandb_run_with_its_curves_and_lineage(labelled_sample, monkeypatch):
    """#47: the train stage's W&B run (job type ``train``) holds Lightning's curves beside its figures and its
    lineage (queries, labels → Λ). The validation before training is ``initial_valid_mrr``, not the first point of
    ``valid_mrr``: a static Λ starts as the densified teacher and scores ~1.0 there (docs/user-guide.md), and its
    ``valid_mrr`` curve started at its best though that point is never a checkpoint the stage can export."""
    import pipelines.train
    from spar.core.artifacts import read_manifest
    from wandb_records import read_runs

    monkeypatch.delenv("WANDB_MODE")  # W&B on (tests/conftest.py turns it off)
    cfg = load_config(None, [f"experiment.output_dir={labelled_sample}", *LABELLED, "train.lexical.dim=32",
                             "train.max_steps=4", "train.batch_size=16", "train.val_check_interval=2",
                             "train.random_negatives=16", "train.log_every_n_steps=1", "train.wandb_mode=offline",
                             "experiment.name=static"])
    pipelines.train.run(cfg)
    [run] = read_runs(labelled_sample / "wandb")
    assert (run.job_type, run.name, run.group, run.exit_code) == ("train", "static-train", "static", 0)
    assert run.config["train"]["lexical"]["dim"] == 32  # the resolved config, nested
    stats = read_manifest(labelled_sample / "lambda")["stats"]
    initial = [row for row in run.history if "initial_valid_mrr" in row]
    during = [row for row in run.history if "valid_mrr" in row]
    assert [row["initial_valid_mrr"] for row in initial] == [pytest.approx(stats["initial_valid_mrr"])]
    assert len(during) == 2 and not any("valid_mrr" in row for row in initial), run.history  # steps 2 and 4 only
    assert max(row["valid_mrr"] for row in during) == pytest.approx(stats["best_valid_mrr"])
    assert run.summary["best_valid_mrr"] == pytest.approx(stats["best_valid_mrr"]) and run.summary["steps"] == 4
    assert any("train/loss" in row for row in run.history)
    assert set(run.used) == {"static-queries", "static-labels"}
    assert {name for name, a in run.logged.items() if a["type"] == "lambda"} == {"static-lambda"}

    pipelines.train.run(cfg)  # up to date: nothing done, no run
    assert len(read_runs(labelled_sample / "wandb")) == 1


def test_bad_lambda_settings_fail_with_one_line(tmp_path):
    from spar.lexical import build_lambda
    from spar.lexical.projection import ProjectionLambda

    with pytest.raises(ConfigError, match="train.kind"):
        load_config(None, ["train.kind=bag-of-words"])
    with pytest.raises(ConfigError, match="train.lexical.dim"):
        load_config(None, ["train.lexical.dim=0"])
    cfg = load_config(None, ["train.kind=projection"])
    with pytest.raises(ConfigError, match="label.teacher='impact'") as error:
        build_lambda(cfg.train, tmp_path / "passages.arrow", teacher="impact")
    assert "\n" not in str(error.value)
    with pytest.raises(ConfigError, match="positive"):
        ProjectionLambda.fit(["a b c"], dim=-3)
