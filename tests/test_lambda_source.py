"""Λ trained once, used anywhere (`encode.lambda`): resolution, checks with one-line errors, corpus statistics
carried or refitted, and the run plans it changes. (`spar run` with a Λ from another run's directory and from a
published model, end to end, is tests/test_kinds.py's: on the projection run made there, one pipeline fewer.)"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spar.core.errors import ArtifactError, SparError
from spar.experiment.lambda_source import resolve_lambda
from spar.lexical.projection import ProjectionLambda
from spar.lexical.static import StaticLambda
from spar.lexical.terms import BM25Weights

REPO = Path(__file__).resolve().parents[1]
WIKI = ["The Moon orbits the Earth once a month", "The Earth orbits the Sun", "Mars is the fourth planet"]
TARGET = ["Vitamin C prevents scurvy in sailors", "The Sun gives vitamin D", "Scurvy was common on long voyages"]


def _spar(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1500)
    if check:
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
    return done


@pytest.fixture()
def projection_dir(tmp_path: Path) -> Path:
    d = tmp_path / "wiki-lambda"
    ProjectionLambda.fit(WIKI, dim=32, seed=7).save(d)
    return d


# -- resolution and one-line errors ----------------------------------------------------------------------------


def test_a_lambda_directory_a_run_directory_and_a_checked_kind_and_dim_resolve(projection_dir: Path, tmp_path: Path):
    source = resolve_lambda({"path": str(projection_dir), "kind": "projection", "dim": 32}, tmp_path)
    assert (source.location, source.origin, source.kind, source.dim) == (projection_dir, "directory", "projection", 32)
    run = tmp_path / "other-run"
    shutil.copytree(projection_dir, run / "lambda")
    assert resolve_lambda(str(run), tmp_path).location == run / "lambda"  # a run's output dir: its lambda/
    assert resolve_lambda(None, run).origin == "run"                      # unset: this run's own lambda/


@pytest.mark.parametrize("spec, message", [
    ({"kind": "static"}, "is a projection Λ, but encode.lambda.kind expects static"),
    ({"dim": 384}, "has 32 dimensions, but encode.lambda.dim expects 384"),
])
def test_a_mismatched_lambda_fails_naming_its_path(projection_dir: Path, spec: dict, message: str):
    with pytest.raises(ArtifactError) as error:
        resolve_lambda({"path": str(projection_dir), **spec}, "unused")
    text = str(error.value)
    assert str(projection_dir) in text and message in text and "\n" not in text


def test_missing_lambdas_and_missing_files_fail_naming_the_path(projection_dir: Path, tmp_path: Path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the hub id case fails at once, offline
    def error_of(action) -> str:
        with pytest.raises(ArtifactError) as error:
            action()
        assert "\n" not in str(error.value)
        return str(error.value)

    assert "no such directory" in error_of(lambda: resolve_lambda(str(tmp_path / "nowhere"), tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert f"{empty}: missing file 'spar_lambda.json'" in error_of(lambda: resolve_lambda(str(empty), tmp_path))
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "spar_lambda.json").write_text('["projection", 384]\n')  # valid JSON, not an object (#22 item 11)
    assert (f"{listed / 'spar_lambda.json'}: expected a JSON object with the Λ's kind and dim, got list"
            in error_of(lambda: resolve_lambda(str(listed), tmp_path)))
    assert f"{tmp_path / 'lambda'}: Λ is missing" in error_of(lambda: resolve_lambda(None, tmp_path))
    (projection_dir / "vocab.txt").unlink()
    # Without a manifest, the checksums spar_lambda.json records name the missing file (#31 item 9) ...
    assert (f"{projection_dir / 'vocab.txt'}: missing since the Λ was saved"
            in error_of(lambda: resolve_lambda(str(projection_dir), tmp_path)))
    from spar.lexical import load_lambda

    # ... and opening it directly names it too.
    assert f"{projection_dir}: missing file 'vocab.txt'" in error_of(lambda: load_lambda(projection_dir))
    static = tmp_path / "static"
    StaticLambda.from_projection(ProjectionLambda.fit(WIKI, dim=8)).save(static)
    (static / "term_embeddings.safetensors").unlink()
    assert "term_embeddings.safetensors" in error_of(lambda: resolve_lambda(str(static), tmp_path))
    offline = error_of(lambda: resolve_lambda("nobody-here/no-such-spar-model", tmp_path))
    assert offline.startswith("nobody-here/no-such-spar-model: encode.lambda is not a local path")


def test_a_lambda_changed_after_it_was_written_is_refused(tmp_path: Path):
    """#22 items 8 and 10: manifests list each Λ file with its checksum, so a reordered vocab.txt (same size, other
    term ids) is refused instead of being read as a different Λ; truncated weights are named in one line, with or
    without a manifest (a Λ copied by hand)."""
    from spar.core.artifacts import ArtifactWriter

    run_lambda = tmp_path / "run" / "lambda"
    with ArtifactWriter(run_lambda, kind="lambda", config={}, inputs={}) as w:
        StaticLambda.from_projection(ProjectionLambda.fit(WIKI, dim=8)).save(w.path)
    assert resolve_lambda(None, tmp_path / "run").kind == "static"
    vocab = run_lambda / "vocab.txt"
    terms = vocab.read_text().splitlines()
    vocab.write_text("\n".join([terms[1], terms[0], *terms[2:]]) + "\n")
    with pytest.raises(ArtifactError, match=rf"^{vocab}: content changed since `spar train` wrote it; re-run "
                                            r"`spar train --force`$"):
        resolve_lambda(None, tmp_path / "run")

    copied = tmp_path / "copied"  # no manifest: the weights' own header tells their size
    StaticLambda.from_projection(ProjectionLambda.fit(WIKI, dim=8)).save(copied)
    weights = copied / "term_embeddings.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(SparError, match=rf"^{weights}: truncated safetensors file \(\d+ bytes; its header "
                                        r"describes \d+\): copy or download it again$"):
        resolve_lambda(str(copied), tmp_path)
    from spar.lexical import load_lambda

    with pytest.raises(SparError, match="truncated safetensors file"):
        load_lambda(copied)


def test_the_cli_reports_a_mismatched_lambda_in_one_line(projection_dir: Path, tmp_path: Path):
    done = _spar("encode", f"experiment.output_dir={tmp_path / 'run'}", f"encode.lambda.path={projection_dir}",
                 "encode.lambda.dim=384", "encode.encoders=[lambda]", check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(projection_dir) in lines[0] and "expects 384" in lines[0], done.stderr


# -- statistics carried or refitted on the target corpus -------------------------------------------------------


def _bm25_by_hand(query: str, passage: str, corpus: list[str], k1: float = 0.9, b: float = 0.4) -> float:
    """BM25 written out from its definition (Lucene's idf), over analysed terms."""
    from spar.lexical.analysis import LuceneAnalyzer

    analyze = LuceneAnalyzer().analyze
    docs = [analyze(t) for t in corpus]
    avg = sum(map(len, docs)) / len(docs)
    terms = analyze(passage)
    score = 0.0
    for term in analyze(query):
        df = sum(term in d for d in docs)
        tf = terms.count(term)
        if df == 0 or tf == 0:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        score += idf * tf / (tf + k1 * (1 - b + b * len(terms) / avg))
    return score


def test_target_statistics_give_the_target_corpus_bm25_and_carried_ones_the_training_corpus_bm25():
    wiki = BM25Weights.fit(WIKI)
    target = wiki.refit(TARGET)
    queries = ["the sun and vitamin C", "earth orbits"]
    refitted = (target.query_matrix(queries) @ target.passage_matrix(TARGET).T).toarray()
    carried = (wiki.query_matrix(queries) @ wiki.passage_matrix(TARGET).T).toarray()
    for i, q in enumerate(queries):
        for j, p in enumerate(TARGET):
            assert refitted[i, j] == pytest.approx(_bm25_by_hand(q, p, TARGET), rel=1e-5), (q, p)
            assert carried[i, j] == pytest.approx(_carried_by_hand(q, p), rel=1e-5), (q, p)
    assert refitted[0].max() > 0 and carried[0, 1] > 0  # the examples do match terms
    assert target.describe()["carried_terms"] == wiki.vocab_size


def _carried_by_hand(query: str, passage: str) -> float:
    """Carried statistics: idf and average length of WIKI; only WIKI's terms count."""
    from spar.lexical.analysis import LuceneAnalyzer

    analyze = LuceneAnalyzer().analyze
    docs = [analyze(t) for t in WIKI]
    avg = sum(map(len, docs)) / len(docs)
    known = {t for d in docs for t in d}
    terms = analyze(passage)
    score = 0.0
    for term in analyze(query):
        if term not in known or term not in terms:
            continue
        df = sum(term in d for d in docs)
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        tf = terms.count(term)
        score += idf * tf / (tf + 0.9 * (1 - 0.4 + 0.4 * len(terms) / avg))
    return score


def test_refitting_keeps_the_rows_of_the_carried_terms_and_gives_new_terms_their_initial_rows():
    projection = ProjectionLambda.fit(WIKI, dim=16, seed=3)
    static = StaticLambda.from_projection(projection)
    static.embedding.weight.data += 1.0  # "trained": every learnt row moved
    refitted_projection = projection.with_statistics(TARGET)
    refitted_static = static.with_statistics(TARGET)
    v = projection.weights.vocab_size
    assert refitted_projection.weights.vocab[:v] == projection.weights.vocab
    assert np.array_equal(refitted_projection.dense_matrix()[:v], projection.dense_matrix())
    table = refitted_static.embedding.weight.detach().numpy()
    assert np.allclose(table[:v], projection.dense_matrix() + 1.0)         # learnt rows travel with their terms
    assert np.array_equal(table[v:], refitted_projection.dense_matrix()[v:])  # new terms: untrained, projected
    # A refitted projection is a projection fitted on the target corpus whose vocabulary starts with Λ's terms.
    fresh = ProjectionLambda(BM25Weights(refitted_projection.weights.vocab, refitted_projection.weights.df,
                                         len(TARGET), refitted_projection.weights.avg_length), 16, seed=3)
    assert np.allclose(fresh.encode_passage(TARGET), refitted_projection.encode_passage(TARGET))


def test_target_statistics_are_refused_for_a_transformer(tmp_path: Path):
    d = tmp_path / "transformer"
    d.mkdir()
    (d / "spar_lambda.json").write_text(json.dumps({"kind": "transformer", "dim": 384}))
    with pytest.raises(ArtifactError, match="statistics=target refits a term-based"):
        resolve_lambda({"path": str(d), "statistics": "target"}, tmp_path)


# -- spar run with a Λ from elsewhere ----------------------------------------------------------------------------
# End to end (a second experiment using another run's directory, then its published model) in tests/test_kinds.py,
# on the projection run the kinds test makes: the slow suite runs that pipeline once, not a third time here.


def test_run_plans_skip_the_lambda_stages_with_encode_lambda_and_the_evaluation_stages_without_queries():
    from pipelines import STAGES, skipped_by_config
    from spar.core.config import load_config

    def skipped(config: str) -> list[str]:
        cfg = load_config(REPO / "configs" / "experiments" / config)
        return [stage for stage in STAGES if skipped_by_config(cfg, stage)]

    assert skipped("wiki-vital.yaml") == ["encode", "tune", "index", "evaluate", "publish"]
    assert skipped("scifact-wiki.yaml") == skipped("cranfield-wiki.yaml") == ["sample", "label", "train"]
    assert skipped("scifact.yaml") == []
    wiki = load_config(REPO / "configs" / "experiments" / "scifact-wiki.yaml").encode.lambda_
    # relative to the YAML (configs/experiments/), so the same directory from wherever spar runs
    assert (wiki.path, wiki.kind, wiki.dim, wiki.statistics) == (str(REPO / "runs" / "wiki-vital" / "lambda"),
                                                                 "static", 384, "carried")


def test_the_lambda_card_names_the_teacher_the_labels_came_from():
    from spar.core.config import load_config
    from spar.experiment.plan import Experiment
    from spar.lexical.card import lambda_card, lambda_card_facts

    stats = {"passages": 600, "queries_train": 1500}
    for overrides, teacher in (([], "Pyserini Lucene BM25, k1=0.9, b=0.4, fields title+text, top 50"),
                               (["label.teacher=impact", "train.kind=transformer"], "impact index of splade-tiny")):
        cfg = load_config(None, overrides)
        facts = lambda_card_facts(Experiment(cfg).run_facts(), stats, "f00d", {}, None)
        card = lambda_card({"kind": cfg.train.kind, "dim": 384}, facts)
        assert f"| teacher | {teacher}" in card, card
        assert "| training queries | 1,500 |" in card and "| manifest fingerprint | `f00d` |" in card


def test_a_bad_encode_lambda_is_refused_before_any_encoder_runs(tmp_path):
    """#48 item 7: a bad `encode.lambda` path was found only after the base encoder had encoded every passage."""
    import pipelines.encode
    import pipelines.sample
    from spar.core.config import load_config
    from spar.core.errors import ArtifactError

    cfg = load_config(None, [f"experiment.output_dir={tmp_path / 'run'}", f"encode.lambda={tmp_path / 'nope'}"])
    pipelines.sample.run(cfg)
    with pytest.raises(ArtifactError, match="encode.lambda: no such directory"):
        pipelines.encode.run(cfg)
    assert not (tmp_path / "run" / "embeddings").exists()


# ---- #47 item 6: a Hugging Face dual encoder (the paper's released Λ, a Tevatron pair) as encode.lambda -------------


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """A query and a context encoder saved as the paper's checkpoints are (BertModel, pytorch_model.bin, a
    tokenizer beside each), made from the bundled MiniLM; the context side's weights differ."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from spar.model.resolve import resolve_model

    root = tmp_path_factory.mktemp("hf-pair")
    source = str(resolve_model("all-MiniLM-L6-v2"))
    for side, scale in (("query-encoder", 1.0), ("context-encoder", 1.5)):
        model = AutoModel.from_pretrained(source)
        with torch.no_grad():
            model.embeddings.word_embeddings.weight.mul_(scale)
        # The pickled state dict older checkpoints ship (transformers 5 writes safetensors only)
        (root / side).mkdir()
        model.config.save_pretrained(root / side)
        torch.save(model.state_dict(), root / side / "pytorch_model.bin")
        AutoTokenizer.from_pretrained(source).save_pretrained(root / side)
    assert (root / "query-encoder" / "pytorch_model.bin").exists()
    assert not (root / "query-encoder" / "model.safetensors").exists()
    return root


def _cls(directory, texts):
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(str(directory)), AutoModel.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        return model(**tok(texts, padding=True, truncation=True, max_length=64,
                           return_tensors="pt")).last_hidden_state[:, 0].numpy()


def test_a_hugging_face_dual_encoder_is_a_transformer_lambda(hf_pair, tmp_path):
    from spar.experiment.lambda_source import resolve_lambda

    spec = {"path": str(hf_pair / "query-encoder"), "passage_path": str(hf_pair / "context-encoder")}
    source = resolve_lambda(spec, output_dir=tmp_path / "run")
    assert (source.origin, source.kind, source.dim) == ("huggingface", "transformer", 384)
    assert source.location == tmp_path / "run" / "lambda-imported"
    lam = source.load()
    texts = ["what causes scurvy", "vitamin C deficiency"]
    np.testing.assert_allclose(lam.encode_query(texts), _cls(hf_pair / "query-encoder", texts), atol=1e-5)
    np.testing.assert_allclose(lam.encode_passage(texts), _cls(hf_pair / "context-encoder", texts), atol=1e-5)
    assert np.abs(lam.encode_query(texts) - lam.encode_passage(texts)).max() > 1e-2  # two sides, two encoders
    fingerprint = source.fingerprint()
    converted = (source.location / "manifest.json").stat().st_mtime_ns
    again = resolve_lambda(spec, output_dir=tmp_path / "run")  # converted once
    assert again.fingerprint() == fingerprint and (again.location / "manifest.json").stat().st_mtime_ns == converted
    assert source.describe()["spec"] == str(hf_pair / "query-encoder")


def test_another_context_encoder_converts_again_with_another_fingerprint(hf_pair, tmp_path):
    import shutil

    from spar.experiment.lambda_source import resolve_lambda

    first = resolve_lambda({"path": str(hf_pair / "query-encoder"), "passage_path": str(hf_pair / "context-encoder")},
                           output_dir=tmp_path / "run").fingerprint()
    other = shutil.copytree(hf_pair / "query-encoder", tmp_path / "other-context")
    second = resolve_lambda({"path": str(hf_pair / "query-encoder"), "passage_path": str(other)},
                            output_dir=tmp_path / "run").fingerprint()
    assert first != second


@pytest.mark.parametrize("spec, message", [
    ({"path": "QUERY", "passage_path": "MISSING"}, "MISSING: encode.lambda.passage_path: no such directory"),
    ({"path": "SPAR_LAMBDA", "passage_path": "CONTEXT"}, "encode.lambda.passage_path is for a Hugging Face dual "
                                                         "encoder, but encode.lambda.path is not a Hugging Face model"),
    ({"path": "QUERY", "passage_path": "EMPTY"}, "EMPTY: encode.lambda.passage_path is not a Hugging Face model"),
])
def test_a_dual_encoder_that_cannot_be_read_is_one_line(hf_pair, tmp_path, spec, message):
    from spar.core.errors import ArtifactError
    from spar.experiment.lambda_source import resolve_lambda
    from spar.lexical.projection import ProjectionLambda

    ProjectionLambda.fit(["sparse retrieval", "dense retrieval"], dim=8).save(tmp_path / "spar-lambda")
    (tmp_path / "empty").mkdir()
    names = {"QUERY": str(hf_pair / "query-encoder"), "CONTEXT": str(hf_pair / "context-encoder"),
             "MISSING": str(tmp_path / "missing"), "SPAR_LAMBDA": str(tmp_path / "spar-lambda"),
             "EMPTY": str(tmp_path / "empty")}
    with pytest.raises(ArtifactError) as err:
        resolve_lambda({k: names[v] for k, v in spec.items()}, output_dir=tmp_path / "run")
    expected = message.replace("MISSING", names["MISSING"]).replace("EMPTY", names["EMPTY"])
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run" / "lambda-imported").exists()


def test_the_config_takes_a_dual_encoder_and_runs_made_before_keep_their_fingerprints(hf_pair):
    from spar.core.config import load_config
    from spar.core.stage import settings

    cfg = load_config(None, [f"encode.lambda.path={hf_pair / 'query-encoder'}",
                             f"encode.lambda.passage_path={hf_pair / 'context-encoder'}", "encode.lambda.pooling=cls"])
    assert cfg.encode.lambda_.passage_path == str(hf_pair / "context-encoder")
    before = load_config(None, ["encode.lambda=/some/lambda"])
    assert set(settings(before.encode.lambda_)) == {"path", "kind", "dim", "statistics"}  # ADDED_LATER at defaults
