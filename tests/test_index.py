"""SPAR index: exact scores on real MiniLM vectors of SciFact passages, ANN types, encoder/dimension checks, stage."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from spar.model.embeddings import EncodeOptions, encode_passages, encode_queries
from spar.model.stored_vectors import load_embeddings
from spar.model.encoders import BiEncoder
from spar.core.errors import ArtifactError
from spar.index.spar_index import SparIndex, build_spar_index
from spar.index.types.ivf import default_nlist
from spar.index.combine import spar_query_vectors
from spar.data.readers import read_corpus, read_queries

#: fp32 on every CPU class: the index scores are checked against these vectors (issue #45).
QUIET = EncodeOptions(batch_size=16, show_progress=False, precision="32")
MUS = [0.0, 0.3, 1.0, 3.7]


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    """OpenMP threads spin: on a shared 2-core test machine one thread (FAISS, torch) is several times faster."""
    import faiss
    import torch

    before = faiss.omp_get_max_threads(), torch.get_num_threads()
    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before[0])
    torch.set_num_threads(before[1])


@pytest.fixture(scope="module")
def encoded(tmp_path_factory, sample_dir):
    """Real vectors: base = MiniLM mean/normalised, Λ = the untrained Λ initialisation (MiniLM CLS, raw dot)."""
    root = tmp_path_factory.mktemp("emb")
    passages = list(itertools.islice(read_corpus(sample_dir / "corpus.jsonl"), 48))
    queries = dict(itertools.islice(((q.id, q.text) for q in read_queries(sample_dir / "queries.jsonl")), 6))
    base = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="mean", normalize=True, passage_max_length=64)
    lam = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="cls", normalize=False, passage_max_length=64)
    for name, enc in (("base", base), ("lambda", lam)):
        encode_passages(enc, passages, root / name / "passages", encoder_name=name, weights_fingerprint=name,
                        shard_size=20, options=QUIET)  # 3 shards: the index reads across shard boundaries
        encode_queries(enc, queries, root / name / "queries-test", encoder_name=name, weights_fingerprint=name,
                       options=QUIET)
    return root


def _emb(root: Path, name: str, split: str):
    return load_embeddings(root / name / split)


def test_flat_concat_scores_are_sim_plus_mu_sim_lambda(encoded):
    bp, lp = _emb(encoded, "base", "passages"), _emb(encoded, "lambda", "passages")
    bq, lq = _emb(encoded, "base", "queries-test"), _emb(encoded, "lambda", "queries-test")
    assert bp.manifest["stats"]["shards"] == 3
    rows = np.array([0, 19, 20, 21, 47])
    np.testing.assert_array_equal(bp.sharded[rows], bp.vectors[rows])
    np.testing.assert_array_equal(bp.sharded[15:45], bp.vectors[15:45])
    index = SparIndex.build(bp, lp, variant="concat", index_type="flat")
    assert index.info["dim"] == 768 and index.info["base_fingerprint"] == bp.model_fingerprint
    for mu in MUS:
        scores, ids = index.search(bq, lq, k=len(bp), mu=mu)
        f64 = np.float64
        expected = bq.vectors.astype(f64) @ bp.vectors.T.astype(f64) + mu * (lq.vectors.astype(f64)
                                                                            @ lp.vectors.T.astype(f64))
        row = {pid: i for i, pid in enumerate(bp.ids)}
        # 1e-5 absolute, plus float32 rounding (relative 1e-6): untrained Λ's raw dot products are about 40.
        for qi in range(len(bq)):
            got = np.array([expected[qi, row[pid]] for pid in ids[qi]])
            np.testing.assert_allclose(scores[qi], got, atol=1e-5, rtol=1e-6)
            np.testing.assert_allclose(scores[qi], np.sort(expected[qi])[::-1], atol=1e-5, rtol=1e-6)
            assert ids[qi][0] == bp.ids[int(np.argmax(expected[qi]))]
    # mu = 0 ranks exactly as the base retriever; a large mu as Λ.
    _, ids0 = index.search(bq, lq, k=5, mu=0.0)
    assert [x[:5] for x in ids0] == [[bp.ids[j] for j in np.argsort(-r, kind="stable")[:5]]
                                     for r in bq.vectors @ bp.vectors.T]


def test_sum_variant_and_its_dimension_check(encoded):
    bp, lp = _emb(encoded, "base", "passages").vectors, _emb(encoded, "lambda", "passages").vectors
    bq, lq = _emb(encoded, "base", "queries-test").vectors, _emb(encoded, "lambda", "queries-test").vectors
    index = build_spar_index(bp, lp, "sum", "flat")
    assert index.d == 384
    q = spar_query_vectors(bq, lq, 0.5, "sum")
    scores, rows = index.search(q, 3)
    np.testing.assert_allclose(scores, np.sort((bq + 0.5 * lq) @ (bp + lp).T, axis=1)[:, ::-1][:, :3], atol=1e-4)
    with pytest.raises(ArtifactError, match="variant 'sum' needs equal dimensions.*384.*256"):
        build_spar_index(bp, lp[:, :256], "sum", "flat")
    with pytest.raises(ArtifactError, match="384.*256"):
        spar_query_vectors(bq, lq[:, :256], 1.0, "sum")


def test_hnsw_returns_the_flat_neighbours(encoded):
    bp, lp = _emb(encoded, "base", "passages"), _emb(encoded, "lambda", "passages")
    bq, lq = _emb(encoded, "base", "queries-test"), _emb(encoded, "lambda", "queries-test")
    flat = SparIndex.build(bp, lp, index_type="flat")
    hnsw = SparIndex.build(bp, lp, index_type="hnsw", hnsw_m=8, hnsw_ef_search=64)
    _, exact = flat.search(bq, lq, k=10, mu=0.5)
    _, approx = hnsw.search(bq, lq, k=10, mu=0.5)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact)])
    assert recall >= 0.9
    # Each passage's own SPAR vector finds the passage itself first.
    _, self_ids = hnsw.search(bp.vectors[:10], lp.vectors[:10], k=1, mu=1.0)
    assert sum(x[0] == pid for x, pid in zip(self_ids, bp.ids[:10])) >= 9


def test_ivfpq_trains_and_finds_neighbours():
    """IVF-PQ on 3,000 unit vectors of 384+384 dims with low-rank structure: trained, finds itself and neighbours."""
    rng = np.random.default_rng(7)
    latent = rng.standard_normal((3000, 24)).astype(np.float32) @ rng.standard_normal((24, 768)).astype(np.float32)
    points = latent + 0.5 * rng.standard_normal((3000, 768)).astype(np.float32)
    base, lam = points[:, :384].copy(), points[:, 384:].copy()
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    lam /= np.linalg.norm(lam, axis=1, keepdims=True)
    ivf = SparIndex.build(base, lam, index_type="ivfpq", pq_m=48, nprobe=16)
    assert ivf.index.is_trained and ivf.index.nlist == default_nlist(3000) == 76 and ivf.index.pq.M == 48
    assert ivf.index.pq.nbits == 6  # 3,000 passages cannot train 256 centroids per sub-quantiser
    flat = SparIndex.build(base, lam, index_type="flat")
    queries = rng.choice(3000, 40, replace=False)
    _, exact = flat.search(base[queries], lam[queries], k=10, mu=1.0)
    _, approx = ivf.search(base[queries], lam[queries], k=10, mu=1.0)
    assert np.mean([x[0] == str(q) for x, q in zip(approx, queries)]) >= 0.9
    assert np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact)]) >= 0.4
    with pytest.raises(ArtifactError, match="pq_m=7 must divide the vector dimension 768"):
        SparIndex.build(base, lam, index_type="ivfpq", pq_m=7)


def test_save_load_and_refusals(encoded, tmp_path):
    bp, lp = _emb(encoded, "base", "passages"), _emb(encoded, "lambda", "passages")
    bq, lq = _emb(encoded, "base", "queries-test"), _emb(encoded, "lambda", "queries-test")
    SparIndex.build(bp, lp, index_type="hnsw", hnsw_ef_search=99).save(tmp_path / "ix")
    index = SparIndex.load(tmp_path / "ix")
    info = json.loads((tmp_path / "ix" / "index.json").read_text())
    assert {k: info[k] for k in ("variant", "type", "count", "base_dim", "lambda_dim")} == {
        "variant": "concat", "type": "hnsw", "count": 48, "base_dim": 384, "lambda_dim": 384}
    assert info["lambda_fingerprint"] == lp.model_fingerprint and index.index.hnsw.efSearch == 99
    assert index.ids == bp.ids
    # The index stores vectors, not μ: the caller always passes it.
    assert "mu" not in info
    with pytest.raises(TypeError, match="mu"):
        index.search(bq, lq, k=3)

    # Queries from the wrong encoder: Λ's queries given as the base side (same dimension, other fingerprint).
    with pytest.raises(ArtifactError) as err:
        index.search(lq, lq, k=3, mu=1.0)
    assert lq.model_fingerprint in str(err.value) and bp.model_fingerprint in str(err.value)
    # Another dimension on the query side.
    with pytest.raises(ArtifactError, match="dimension 256.*dimension 384"):
        index.search(bq.vectors[:, :256], lq.vectors, k=3, mu=1.0)
    with pytest.raises(ArtifactError, match="dimension 512, the index 768"):
        index.search_vectors(np.zeros((1, 512), np.float32), k=3)
    # A damaged directory names the missing file.
    os.remove(tmp_path / "ix" / "index.faiss")
    with pytest.raises(ArtifactError, match="index.faiss"):
        SparIndex.load(tmp_path / "ix")


def test_stage_builds_index_without_tune_and_search_params_never_reindex(encoded, tmp_path):
    import pipelines.index as stage
    from spar.core.config import load_config

    out = tmp_path / "run"
    for name in ("base", "lambda"):
        shutil.copytree(encoded / name / "passages", out / "embeddings" / name / "passages")
    cfg = load_config(None, [f"experiment.output_dir={out}"])
    result = stage.run(cfg)  # no tune/ exists: the index does not depend on it
    assert result["passages"] == "48" and "mu" not in result
    manifest = json.loads((out / "index" / "manifest.json").read_text())
    assert manifest["kind"] == "index" and "mu" not in manifest["stats"] and manifest["stats"]["count"] == 48
    assert "mu" not in SparIndex.load(out / "index").info

    # Tuning does not touch the index; a search-time parameter updates index.json in place without rebuilding.
    (out / "tune").mkdir()
    (out / "tune" / "tune.json").write_text(json.dumps({"variant": "concat", "mu": 0.7}))
    before = (out / "index" / "index.faiss").stat().st_mtime_ns
    assert stage.run(cfg) == {"skipped": True}
    cfg = load_config(None, [f"experiment.output_dir={out}", "index.nprobe=7"])
    again = stage.run(cfg)
    assert again["skipped"] and "nprobe 32 -> 7" in again["updated"]
    assert (out / "index" / "index.faiss").stat().st_mtime_ns == before
    assert SparIndex.load(out / "index").info["options"]["nprobe"] == 7

    # A build parameter does rebuild.
    cfg = load_config(None, [f"experiment.output_dir={out}", "index.type=hnsw", "index.hnsw_m=8", "index.fold=never"])
    assert "skipped" not in stage.run(cfg)
    assert SparIndex.load(out / "index").info["type"] == "hnsw"


def test_stage_requires_embeddings(tmp_path):
    import pipelines.index as stage
    from spar.core.config import load_config

    with pytest.raises(ArtifactError, match="run `spar encode`"):
        stage.run(load_config(None, [f"experiment.output_dir={tmp_path}"]))


# ---- μ folded into approximate indexes, exact re-ranking (issue #35) ------------------------------------------------


def _brute(bq, lq, bp, lp, mu):
    f64 = np.float64
    return bq.vectors.astype(f64) @ bp.vectors.T.astype(f64) + mu * (lq.vectors.astype(f64) @ lp.vectors.T.astype(f64))


def test_a_folded_index_searched_exhaustively_gives_the_exact_ranking_for_any_mu(encoded):
    """[P, μ₀·PΛ] searched with [Q, (μ/μ₀)·QΛ]: an IVF index probing every list returns the exact top-k for μ₀ and
    for μ far from it, as the never-folded flat scan does."""
    bp, lp = _emb(encoded, "base", "passages"), _emb(encoded, "lambda", "passages")
    bq, lq = _emb(encoded, "base", "queries-test"), _emb(encoded, "lambda", "queries-test")
    flat = SparIndex.build(bp, lp, index_type="flat")
    ivf = SparIndex.build(bp, lp, index_type="ivf", ivf_nlist=4, nprobe=4, fold=0.3)
    assert ivf.info["fold"] == 0.3 and "fold" not in flat.info
    for mu in (0.3, 0.02, 2.5):
        expected = _brute(bq, lq, bp, lp, mu)
        for index in (flat, ivf):
            scores, ids = index.search(bq, lq, k=10, mu=mu)
            for qi in range(len(bq)):
                order = np.argsort(-expected[qi], kind="stable")[:10]
                assert ids[qi] == [bp.ids[j] for j in order], (index.info["type"], mu, qi)
                np.testing.assert_allclose(scores[qi], expected[qi][order], atol=1e-4, rtol=1e-5)


def test_refine_serves_exact_scores_read_from_the_embeddings(encoded, tmp_path):
    """An HNSW index over 4-bit codes re-ranks the top refine·k with float32 vectors read from the embeddings on
    disk: the scores are the exact ones, and with refine·k >= every passage the ranking is the exact scan's; it
    survives save/load (embeddings found relative to the index), and refine without embeddings is refused."""
    bp, lp = _emb(encoded, "base", "passages"), _emb(encoded, "lambda", "passages")
    bq, lq = _emb(encoded, "base", "queries-test"), _emb(encoded, "lambda", "queries-test")
    index = SparIndex.build(bp, lp, index_type="hnsw", storage="sq4", hnsw_m=8, hnsw_ef_search=64, refine=5,
                            fold=0.4)
    index.save(tmp_path / "index")
    loaded = SparIndex.load(tmp_path / "index")
    assert loaded.refine == 5 and not os.path.isabs(json.loads((tmp_path / "index" / "index.json").read_text())
                                                     ["embeddings"]["base"])
    for mu in (0.4, 1.3):
        expected = _brute(bq, lq, bp, lp, mu)
        scores, ids = loaded.search(bq, lq, k=10, mu=mu)  # 5·10 = 50 >= 48 passages: every one re-scored
        for qi in range(len(bq)):
            order = np.argsort(-expected[qi], kind="stable")[:10]
            assert ids[qi] == [bp.ids[j] for j in order]
            np.testing.assert_allclose(scores[qi], expected[qi][order], atol=1e-4, rtol=1e-5)
    coded, _ = SparIndex.build(bp, lp, index_type="hnsw", storage="sq4", hnsw_m=8, fold=0.4).search(bq, lq, 10, 0.4)
    assert not np.allclose(coded, scores)  # without refine the 4-bit codes' scores are served
    matrices = SparIndex.build(bp.vectors, lp.vectors, index_type="hnsw", hnsw_m=8, refine=2)
    with pytest.raises(ArtifactError, match="index.refine needs the passage embeddings"):
        matrices.search(bq.vectors, lq.vectors, 3, 0.5)


def test_an_index_that_reranks_exactly_copied_into_a_model_takes_its_vectors_along(encoded, tmp_path):
    """`spar publish publish.copy_index=true` on a run whose index re-ranks exactly (index.type=auto above
    auto_flat_below) wrote a model whose index read its float32 vectors at ``../embeddings/...``, outside the model:
    `spar search MODEL` refused it at once ("no manifest.json"), and a copy of the model elsewhere too. The vectors
    now travel inside the copied index; the model searches alone, moved, with the run's results."""
    from spar.publish.model_dir import MODEL_CONFIG, publish_model

    class Encoder:  # what publish_model asks of a SparEncoder
        metadata: dict = {}

        def save_pretrained(self, directory, card=None):
            Path(directory).mkdir(parents=True, exist_ok=True)
            (Path(directory) / MODEL_CONFIG).write_text("{}")

    run = tmp_path / "run"
    for name in ("base", "lambda"):
        shutil.copytree(encoded / name / "passages", run / "embeddings" / name / "passages")
    bp, lp = _emb(run / "embeddings", "base", "passages"), _emb(run / "embeddings", "lambda", "passages")
    bq, lq = _emb(encoded, "base", "queries-test"), _emb(encoded, "lambda", "queries-test")
    SparIndex.build(bp, lp, index_type="hnsw", storage="sq4", hnsw_m=8, refine=3, fold=0.4).save(run / "index")
    expected = SparIndex.load(run / "index").search(bq, lq, k=5, mu=0.7)
    publish_model(Encoder(), tmp_path / "model", index_dir=run / "index", copy_index=True)
    moved = shutil.move(tmp_path / "model", tmp_path / "elsewhere")
    shutil.rmtree(run)
    copied = SparIndex.load(Path(moved) / "index")
    assert copied.refine == 3 and copied.info["embeddings"]["base"] == "embeddings/base/passages"
    scores, ids = copied.search(bq, lq, k=5, mu=0.7)
    assert ids == expected[1]
    np.testing.assert_allclose(scores, expected[0])


def test_stage_folds_the_tuned_mu_into_an_approximate_index_and_serves_it(encoded, tmp_path):
    """`spar index` with an approximate type reads μ₀ from tune/ (refusing to run before it), records it in
    index.json and its fingerprint (a new μ rebuilds; a flat index never depends on tune); refine is a search-time
    setting."""
    import pipelines.index as stage
    from spar.core.config import load_config
    from spar.core.stage import Unit, run_unit

    out = tmp_path / "run"
    for name in ("base", "lambda"):
        shutil.copytree(encoded / name / "passages", out / "embeddings" / name / "passages")
    overrides = [f"experiment.output_dir={out}", "index.type=hnsw", "index.hnsw_m=8", "index.storage=sq8"]
    with pytest.raises(ArtifactError, match="run `spar tune`"):
        stage.run(load_config(None, overrides))

    def tune(mu: float) -> None:
        def work(w):
            (w.path / "tune.json").write_text(json.dumps({"variant": "concat", "mu": mu}))
            return {}
        run_unit(Unit(out / "tune", kind="tune", config={"mu": mu}, inputs={}), work, force=True)

    tune(0.25)
    stage.run(load_config(None, overrides))
    info = SparIndex.load(out / "index").info
    assert info["fold"] == 0.25 and info["type"] == "hnsw"
    assert stage.run(load_config(None, overrides)) == {"skipped": True}
    assert "refine 0 -> 3" in stage.run(load_config(None, [*overrides, "index.refine=3"]))["updated"]
    tune(0.5)  # another μ₀: the approximate index is rebuilt
    assert "skipped" not in stage.run(load_config(None, overrides))
    assert SparIndex.load(out / "index").info["fold"] == 0.5
    flat = stage.run(load_config(None, [f"experiment.output_dir={out}", "index.storage=sq8"]))
    assert "folded" not in flat and "fold" not in SparIndex.load(out / "index").info


def test_auto_index_type_is_flat_below_the_threshold_and_the_measured_approximate_index_above(encoded, tmp_path):
    """index.type=auto: a flat scan for a corpus under index.auto_flat_below, the approximate type auto chooses
    above it (HNSW, spar.index.types.hnsw: its storage, search settings, folded μ₀, exact re-ranking); the stages see
    the concrete type (what index.json and tune record)."""
    import pipelines.index as stage
    from spar.core.config import load_config
    from spar.core.stage import Unit, run_unit
    from spar.experiment.inputs import resolved_index
    from spar.index.types.hnsw import HnswIndex

    AUTO_APPROXIMATE = {"type": "hnsw", **HnswIndex.auto}

    out = tmp_path / "run"
    for name in ("base", "lambda"):
        shutil.copytree(encoded / name / "passages", out / "embeddings" / name / "passages")
    run_unit(Unit(out / "tune", kind="tune", config={}, inputs={}),
             lambda w: (w.path / "tune.json").write_text(json.dumps({"variant": "concat", "mu": 0.3})) and {})
    small = load_config(None, [f"experiment.output_dir={out}", "index.type=auto"])
    assert resolved_index(small).index.type == "flat"  # 48 passages < 300,000
    large = load_config(None, [f"experiment.output_dir={out}", "index.type=auto", "index.auto_flat_below=10"])
    concrete = resolved_index(large).index
    assert {k: getattr(concrete, k) for k in AUTO_APPROXIMATE} == AUTO_APPROXIMATE
    stats = stage.run(large)
    info = SparIndex.load(out / "index").info
    assert info["type"] == AUTO_APPROXIMATE["type"] and info["fold"] == 0.3 and stats["type"] == info["type"]
    assert info["options"]["refine"] == AUTO_APPROXIMATE["refine"]
    # Search and graph settings given with auto are kept (auto fills the rest; its storage stands: below the
    # threshold the configured storage is the flat scan's). They were replaced by the preset's silently, and an
    # up-to-date index said "skipped (up to date)" with efSearch 2048 and refine 4 still in index.json.
    mine = [*[f"experiment.output_dir={out}", "index.type=auto", "index.auto_flat_below=10"],
            "index.hnsw_ef_search=64", "index.refine=2"]
    concrete = resolved_index(load_config(None, mine)).index
    assert (concrete.type, concrete.storage, concrete.hnsw_m, concrete.hnsw_ef_search, concrete.refine) == (
        "hnsw", AUTO_APPROXIMATE["storage"], AUTO_APPROXIMATE["hnsw_m"], 64, 2)
    updated = stage.run(load_config(None, mine))
    assert "hnsw_ef_search 2048 -> 64" in updated["updated"] and "refine 4 -> 2" in updated["updated"], updated
    assert SparIndex.load(out / "index").info["options"]["hnsw_ef_search"] == 64
    # 'sum' is not re-ranked exactly (concat only): auto leaves refine at 0 for it. Its refusal said "use
    # index.refine=0 with 'sum'", which auto replaced by its 4 again: a dead end.
    summed = resolved_index(load_config(None, [*mine[:3], "index.variant=sum", "index.fold=never"])).index
    assert (summed.type, summed.refine) == ("hnsw", 0)
    unencoded = load_config(None, [f"experiment.output_dir={tmp_path / 'none'}", "index.type=auto"])
    assert resolved_index(unencoded).index.type == "auto"  # nothing to count yet: left for the stage to refuse


@pytest.mark.parametrize("storage", ["float32", "sq4"])
def test_a_flat_index_sized_once_holds_the_codes_that_adding_batch_by_batch_gives(storage, monkeypatch):
    """add_passages fills a flat index's code array in place (sized once, not grown by doubling): the saved index
    must be byte for byte the one FAISS's own add builds, across several batches and a short last one."""
    import faiss

    import spar.index.spar_index as spar_index

    monkeypatch.setattr(spar_index, "ADD_BATCH", 64)
    rng = np.random.default_rng(3)
    base, lam = rng.standard_normal((301, 8), dtype=np.float32), rng.standard_normal((301, 5), dtype=np.float32)

    def empty():
        if storage == "float32":
            return faiss.IndexFlatIP(13)
        index = faiss.IndexScalarQuantizer(13, faiss.ScalarQuantizer.QT_4bit, faiss.METRIC_INNER_PRODUCT)
        index.train(np.hstack([base, lam]))
        return index

    filled = spar_index.add_passages(empty(), [base, lam], "concat")
    added = empty()
    for start in range(0, 301, 64):
        added.add(np.ascontiguousarray(np.hstack([base, lam])[start:start + 64]))
    assert filled.ntotal == added.ntotal == 301
    assert np.array_equal(faiss.serialize_index(filled), faiss.serialize_index(added))
    query = np.hstack([base[:3], lam[:3]])
    assert np.array_equal(filled.search(query, 5)[1], added.search(query, 5)[1])
