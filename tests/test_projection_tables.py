"""The projection Λ's random tables (spar/lexical/random_tables.py): the sparse projection for Wikipedia-size
vocabularies and the compact published form (a table regenerated from its seed, checked by a checksum).

Expected values come from the definitions (the Gaussian rule NumPy draws, the former count-sketch formula, BM25's
exact scores, E[R Rᵀ] = I), never from the code's own output."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spar.core.config import load_config
from spar.core.errors import ArtifactError, ConfigError

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "data" / "scifact-sample" / "corpus.jsonl"
QUERIES = ["what causes scurvy", "vitamin C deficiency and collagen", "DNA methylation in cancer cells"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    from spar.data.readers import read_corpus

    return [" ".join(x for x in (p.title, p.text) if x) for p in read_corpus(SAMPLE_CORPUS)][:150]


@pytest.fixture(scope="module")
def base():
    from spar.model.encoders import BiEncoder

    return BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True, shared_weights=True)


# -- the sparse table ------------------------------------------------------------------------------------------


def test_sparse_rows_have_one_entry_per_block_and_depend_on_the_term_alone():
    from spar.lexical.projection import random_matrix

    vocab = [f"term{i}" for i in range(500)]
    r = random_matrix(vocab, 48, "sparse", seed=7, nonzeros=4).toarray()
    assert set(np.unique(r).tolist()) == {-0.5, 0.0, 0.5}  # ±1/√4
    blocks = np.abs(r).reshape(500, 4, 12).sum(axis=2)
    assert (blocks == 0.5).all()  # exactly one entry in each block of 12 columns
    # signs and positions look uniform (500 terms × 4 entries)
    assert abs((r > 0).sum() - 1000) < 150 and np.bincount(np.nonzero(r)[1], minlength=48).min() > 15
    # a term's row ignores the vocabulary's order and size; another seed gives another row
    other = random_matrix(vocab[::-1][:100] + ["new"], 48, "sparse", seed=7, nonzeros=4).toarray()
    assert np.array_equal(other[:100], r[::-1][:100])
    assert not np.array_equal(random_matrix(vocab, 48, "sparse", seed=8, nonzeros=4).toarray(), r)


def test_countsketch_is_the_former_rule():
    """countsketch is the sparse table with one entry: the same matrix as before the sparse projection existed
    (written out here as it was: blake2b of seed NUL term; column h mod dim; sign + when h's top bit is set)."""
    from spar.lexical.projection import random_matrix

    vocab = ["moon", "sun", "scurvi", "vitamin", "ß-carotene"]
    r = random_matrix(vocab, 10, "countsketch", seed=3).toarray()
    for i, term in enumerate(vocab):
        h = int.from_bytes(hashlib.blake2b(f"3\0{term}".encode(), digest_size=8).digest(), "little")
        expected = np.zeros(10, dtype=np.float32)
        expected[h % 10] = 1.0 if h >> 63 else -1.0
        assert np.array_equal(r[i], expected), term
    assert np.array_equal(random_matrix(vocab, 10, "sparse", seed=3, nonzeros=1).toarray(), r)


def test_query_and_passage_sides_share_the_table(texts):
    """A one-term text: the query vector is the term's row times its count, the passage vector the row times the
    term's BM25 weight; same rows on both sides."""
    from spar.lexical.analysis import bm25_weights
    from spar.lexical.projection import ProjectionLambda

    lam = ProjectionLambda.fit(texts, dim=64, projection="sparse", seed=0, nonzeros=8)
    r = lam.matrix.toarray()
    w = lam.weights
    for term_text, term in (("cells cells", "cell"), ("protein", "protein")):
        i = w.index[term]
        assert np.allclose(lam.encode_query([term_text])[0], r[i] * len(term_text.split()))
        weight = bm25_weights(np.array([len(term_text.split())]), np.array([len(term_text.split())]),
                              np.array([w.idf[i]]), w.avg_length, w.k1, w.b)[0]
        assert np.allclose(lam.encode_passage([term_text])[0], r[i] * weight, atol=1e-6)


@pytest.mark.parametrize("projection,nonzeros", [("sparse", 4), ("gaussian", None)])
def test_the_mean_over_seeds_is_bm25(texts, projection, nonzeros):
    """E[Λ(q)·Λ(p)] = c(q)·w(p) = BM25(q, p): the average over 300 seeds is the exact score, up to the noise of
    300 draws (sd of one draw / √300)."""
    from spar.lexical.projection import ProjectionLambda

    corpus, queries = texts[:40], ["vitamin C deficiency", "cancer cells methylation", "blood pressure in children"]
    exact = (ProjectionLambda.fit(corpus, 32).weights.query_matrix(queries)
             @ ProjectionLambda.fit(corpus, 32).weights.passage_matrix(corpus).T).toarray()
    draws = []
    for seed in range(300):
        lam = ProjectionLambda.fit(corpus, 32, projection=projection, seed=seed, nonzeros=nonzeros)
        draws.append(lam.encode_query(queries) @ lam.encode_passage(corpus).T)
    draws = np.stack(draws)
    error = np.abs(draws.mean(0) - exact)
    assert (error <= 5 * draws.std(0) / np.sqrt(len(draws)) + 1e-3).all(), error.max()
    assert draws.std(0).max() > 0.1 * exact.max()  # one draw alone is noisy: the average is what matches


# -- config and fingerprints -----------------------------------------------------------------------------------


def test_fingerprints_of_existing_runs_stay_and_nonzeros_counts_for_sparse():
    from pipelines.train import fingerprint_config
    from spar.core.fingerprint import fingerprint_dict
    from spar.core.stage import settings

    default = load_config(None, [])
    assert "nonzeros" not in settings(default.train)["lexical"]  # static and transformer fingerprints unchanged
    assert fingerprint_config(default)["train"] == {
        "kind": "projection", "lexical": {"dim": default.train.lexical.dim, "projection": "gaussian", "seed": None}}

    def fp(*overrides: str) -> str:
        return fingerprint_dict(fingerprint_config(load_config(None, list(overrides))))

    sparse8 = fp("train.lexical.projection=sparse")
    assert sparse8 == fp("train.lexical.projection=sparse", "train.lexical.nonzeros=8")
    assert len({fp(), fp("train.lexical.projection=countsketch"), sparse8,
                fp("train.lexical.projection=sparse", "train.lexical.nonzeros=4")}) == 4
    static = "train.kind=static"
    assert fp(static, "train.lexical.projection=sparse") != fp(static, "train.lexical.projection=sparse",
                                                               "train.lexical.nonzeros=2")
    with pytest.raises(ConfigError, match="nonzeros applies to projection 'sparse' only"):
        load_config(None, ["train.lexical.nonzeros=4"])
    with pytest.raises(ConfigError, match="exceeds train.lexical.dim"):
        load_config(None, ["train.lexical.projection=sparse", "train.lexical.dim=4", "train.lexical.nonzeros=8"])


def test_lambda_directories_written_before_still_load(texts, tmp_path):
    """A Λ directory as spar wrote it before (spar_lambda.json without nonzeros) loads with the Gaussian rule as
    NumPy draws it."""
    from spar.lexical import load_lambda
    from spar.lexical.projection import ProjectionLambda

    lam = ProjectionLambda.fit(texts, dim=24, seed=5)
    lam.save(tmp_path)
    config = json.loads((tmp_path / "spar_lambda.json").read_text())
    assert set(config) == {"kind", "dim", "projection", "seed", "teacher", "checksums"}
    del config["checksums"]  # as written before #31 recorded the files' checksums
    (tmp_path / "spar_lambda.json").write_text(json.dumps(config))
    loaded = load_lambda(tmp_path)
    rng = np.random.default_rng(5)
    r = rng.standard_normal((loaded.weights.vocab_size, 24), dtype=np.float32) * np.float32(1 / np.sqrt(24))
    assert np.array_equal(loaded.matrix, r)
    assert np.allclose(loaded.encode_query(QUERIES), loaded.weights.query_matrix(QUERIES) @ r, atol=1e-6)


# -- the published model -------------------------------------------------------------------------------------


def _publish(base, lam, path: Path) -> Path:
    from spar.publish.model_dir import SparEncoder

    return SparEncoder(base, lam, mu=0.5).save_pretrained(path)


def test_published_projection_stores_no_table_and_loads_identically_without_spar(texts, base, tmp_path):
    from spar.lexical.projection import ProjectionLambda
    from spar.publish.model_dir import SparEncoder

    docs = [("Scurvy", "Scurvy is caused by a lack of vitamin C."), texts[3]]
    models, expected = {}, {}
    for projection, nonzeros in (("gaussian", None), ("sparse", 4)):
        lam = ProjectionLambda.fit(texts, dim=256, projection=projection, seed=2, nonzeros=nonzeros)
        d = _publish(base, lam, tmp_path / projection)
        table = lam.weights.vocab_size * 256 * 4
        assert (d / "lambda" / "model.safetensors").stat().st_size < 0.05 * table  # df only
        bag = json.loads((d / "lambda" / "lexical_bag.json").read_text())["table"]
        assert bag["projection"] == projection and bag["seed"] == 2 and len(bag["sha256"]) == 64
        enc = SparEncoder(base, lam, mu=0.5)
        expected[projection] = (enc.encode_queries(QUERIES), enc.encode_passages(docs))
        back = SparEncoder.from_pretrained(d)
        assert isinstance(back.lambda_, ProjectionLambda) and back.lambda_.projection == projection
        assert np.array_equal(back.encode_queries(QUERIES), expected[projection][0])
        assert np.array_equal(back.encode_passages(docs), expected[projection][1])
        models[projection] = str(d)
    script = (
        "import sys, json; sys.modules['spar'] = None\n"  # spar cannot be imported in this process
        "from sentence_transformers import SentenceTransformer\n"
        "out = {}\n"
        f"for name, path in {models!r}.items():\n"
        "    m = SentenceTransformer(path, trust_remote_code=True, device='cpu')\n"
        f"    out[name] = [m.encode_query({QUERIES!r}).tolist(), m.encode_document({docs!r}).tolist()]\n"
        "print(json.dumps(out))\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (q, p) in expected.items():
        assert np.allclose(out[name][0], q, atol=1e-5) and np.allclose(out[name][1], p, atol=1e-5), name


def test_a_model_published_with_the_whole_table_still_loads(texts, base, tmp_path):
    """Models published before tables were regenerated hold ``embeddings`` [V, dim] and no table spec."""
    from safetensors.numpy import load_file, save_file

    from spar.lexical.projection import ProjectionLambda
    from spar.publish.model_dir import SparEncoder

    lam = ProjectionLambda.fit(texts, dim=64, seed=1)
    d = _publish(base, lam, tmp_path / "m")
    folder = d / "lambda"
    config = json.loads((folder / "lexical_bag.json").read_text())
    del config["table"]
    (folder / "lexical_bag.json").write_text(json.dumps(config))
    save_file({"embeddings": lam.dense_matrix(), "df": load_file(str(folder / "model.safetensors"))["df"]},
              str(folder / "model.safetensors"))
    model = json.loads((d / "spar_model.json").read_text())  # as such a model was written: format 1, no checksums
    del model["checksums"]
    (d / "spar_model.json").write_text(json.dumps({**model, "format_version": 1}))
    back = SparEncoder.from_pretrained(d)
    assert back.lambda_.kind == "static"  # the stored table, served as term embeddings
    enc = SparEncoder(base, lam, mu=0.5)
    assert np.allclose(back.encode_queries(QUERIES), enc.encode_queries(QUERIES), atol=1e-6)
    assert np.allclose(back.encode_passages(texts[:5]), enc.encode_passages(texts[:5]), atol=1e-6)


@pytest.mark.parametrize("edit", ["seed", "sha256"])
def test_a_regenerated_table_that_fails_its_checksum_is_refused_naming_the_file(texts, base, tmp_path, edit):
    from spar.lexical.projection import ProjectionLambda
    from spar.publish.model_dir import SparEncoder
    from spar.lexical.st_modules import load_sentence_transformer

    d = _publish(base, ProjectionLambda.fit(texts, dim=32, projection="sparse", seed=1, nonzeros=2),
                 tmp_path / "m")
    path = d / "lambda" / "lexical_bag.json"
    config = json.loads(path.read_text())
    config["table"][edit] = 2 if edit == "seed" else "0" * 64
    path.write_text(json.dumps(config))
    # The edit recorded in spar_model.json too (its own file checksums would refuse it first): the table's check,
    # regenerating it from the seed and comparing its SHA-256, is what must refuse it here.
    from spar.core.artifacts import file_checksums

    model = json.loads((d / "spar_model.json").read_text())
    model["checksums"].update(file_checksums(d, ["lambda/lexical_bag.json"]))
    (d / "spar_model.json").write_text(json.dumps(model))
    with pytest.raises(ArtifactError, match="checksum") as error:
        SparEncoder.from_pretrained(d)
    assert str(path) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match=f"{path}.*checksum"):
        load_sentence_transformer(str(d), device="cpu")
