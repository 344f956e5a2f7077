"""Publish and search: a tiny real run is exported, reloaded in fresh processes and searched.

The run: the real sample stage on the embedded SciFact sample; Λ = all-MiniLM-L6-v2 (CLS, unnormalised) after a few
real contrastive optimizer steps on sampled sentences -> their source passages; the base = all-MiniLM-L6-v2
(mean, normalised); a real FAISS index of 64 passages. ``tune.json`` and the results table are stand-ins written
by the fixture (those stages are tested on their own); their values only flow into the model card.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml

from spar.core.errors import ArtifactError, SparError

REPO = Path(__file__).resolve().parents[1]
MU = 0.7
N_INDEXED = 64
#: Short passages keep the fixture quick on CPU (a real setting: it is published and checked like any other).
PASSAGE_TOKENS = 128
QUERIES = ["what causes scurvy", "likelihood ratios diagnostic accuracy", "DNA methylation in cancer cells"]


def _subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)})
    env.update(extra)
    return env


def _train_lambda_a_few_steps(passages, queries, steps: int = 3):
    """Λ after a few real contrastive steps (in-batch negatives) on sampled sentences -> source passages."""
    import torch

    from spar.model.encoders import BiEncoder

    torch.manual_seed(0)
    lam = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling="cls", normalize=False,
                                    passage_max_length=PASSAGE_TOKENS)
    before = {k: v.clone() for k, v in lam.query_model.state_dict().items()}
    lam.train()
    optimizer = torch.optim.AdamW(lam.parameters(), lr=5e-5)
    batch = 8
    for step in range(steps):
        rows = queries[step * batch:(step + 1) * batch]
        q = lam.forward_queries(lam.tokenize_queries([text for text, _ in rows]))
        p = lam.forward_passages(lam.tokenize_passages([passages[row] for _, row in rows]))
        loss = lam.loss(q, p, torch.arange(len(rows)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    changed = [k for k, v in lam.query_model.state_dict().items() if not torch.equal(v, before[k])]
    assert len(changed) > len(before) // 2, "Λ did not train"
    return lam.eval()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run directory with queries/ (real sample stage), lambda/, index/, tune/ and results/, then published."""
    import torch

    torch.set_num_threads(1)
    import pipelines.publish
    import pipelines.sample
    from spar.core.artifacts import ArtifactWriter
    from spar.core.config import load_config
    from spar.model.encoders import BiEncoder
    from spar.index.spar_index import SparIndex
    from spar.lexical.transformer import TransformerLambda
    from spar.core.schemas import read_shards, read_table

    run = tmp_path_factory.mktemp("run")
    cfg = load_config(None, [f"experiment.output_dir={run}", f"experiment.results_dir={run / 'results'}",
                             "experiment.name=tiny", "publish.data_license=CC BY-NC 2.0",
                             "publish.dataset=BeIR/scifact", "publish.push_to_hub=null",
                             f"encode.base.passage_max_length={PASSAGE_TOKENS}", "index.storage=float32",
                             f"train.encoder.passage_max_length={PASSAGE_TOKENS}",
                             # fp32 on every CPU class: the tests compare with the encoders' own fp32 vectors
                             "encode.precision=32"])
    pipelines.sample.run(cfg)
    table = read_table(run / "queries" / "passages.arrow")
    passages = list(zip(table.column("title").to_pylist(), table.column("text").to_pylist()))
    ids = table.column("id").to_pylist()
    sampled = read_shards(run / "queries", "queries").to_pylist()
    train = [(r["text"], r["source_row"]) for r in sampled if r["split"] == "train"][::97]

    base = BiEncoder.from_section(cfg.encode.base)  # what publish builds the base from
    lam = _train_lambda_a_few_steps(passages, train)
    TransformerLambda(lam).save(run / "lambda")

    indexed = passages[:N_INDEXED]
    base_p, lam_p = base.encode_passage(indexed), lam.encode_passage(indexed)
    SparIndex.build(base_p, lam_p, ids=ids[:N_INDEXED], variant="concat", index_type="flat").save(run / "index")
    with ArtifactWriter(run / "tune", kind="tune", config={}, inputs={}) as w:  # what `spar tune` leaves
        (w.path / "tune.json").write_text(json.dumps({
            "variant": "concat", "metric": "nDCG@10", "mu": MU, "grid": [0.1, 0.3, 0.7, 1.0, 3.0],
            "scores": {"0.1": 0.61, "0.3": 0.63, "0.7": 0.655, "1.0": 0.64, "3.0": 0.58}, "confirmed": 0.655,
            "alpha": 0.5, "alpha_scores": {"0.5": 0.66}}))
    (run / "results").mkdir()
    (run / "results" / "tiny.md").write_text("| system | nDCG@10 |\n|---|---|\n| BM25 | 0.679 |\n| SPAR | 0.700 |\n")

    stats = pipelines.publish.run(cfg)
    return {"cfg": cfg, "run": run, "model": Path(stats["output"]), "stats": stats, "base": base, "lambda": lam,
            "passages": passages, "ids": ids, "base_p": base_p, "lambda_p": lam_p}


# ----------------------------------------------------------------------------------------------------------------
# The model directory and its card
# ----------------------------------------------------------------------------------------------------------------


def test_publish_writes_a_complete_model_directory(tiny_run):
    import pipelines.publish
    from spar.core.artifacts import read_manifest
    from spar.publish.model_dir import check_model_dir, required_files

    model = tiny_run["model"]
    assert model == tiny_run["run"] / "model"
    config = check_model_dir(model)
    assert config["variant"] == "concat" and config["mu"] == pytest.approx(MU)
    assert config["dims"] == {"base": 384, "lambda": 384, "combined": 768}
    assert config["encoders"]["base"]["pooling"] == "mean" and config["encoders"]["base"]["normalize"] is True
    assert config["encoders"]["lambda"]["pooling"] == "cls" and config["encoders"]["lambda"]["normalize"] is False
    assert config["index"] is None  # no path outside the model: `spar search` finds the run's index beside it
    for rel in required_files(model, config):
        assert (model / rel).is_file(), rel
    assert read_manifest(model)["kind"] == "model"
    query_route = json.loads((model / "query" / "spar_combination.json").read_text())
    assert [e["weight"] for e in query_route["encoders"]] == [1.0, MU]
    # Unchanged inputs: the stage skips itself.
    assert pipelines.publish.run(tiny_run["cfg"]) == {"skipped": True}


def test_model_card_states_how_the_model_was_made(tiny_run):
    # The fixture's tune.json and results table are stand-ins: this checks that what they say reaches the card.
    # The card of a real tuned and evaluated run is checked in tests/test_evaluate.py (test_evaluate_stage_...).
    card = (tiny_run["model"] / "README.md").read_text()
    assert card.startswith("---\n")
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["library_name"] == "sentence-transformers"
    assert meta["pipeline_tag"] == "sentence-similarity"
    assert meta["license"] == "cc-by-nc-2.0"  # configs/default.yaml: a model learnt from SciFact is non-commercial
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert "spar" in meta["tags"] and meta["datasets"] == ["BeIR/scifact"]
    body = card.split("---\n", 2)[2]
    assert "5,058" in body and "200 dev" in body  # training/dev query counts of the real sample stage
    assert "K=50" in body and "n_p=10" in body and "n_n=5" in body
    assert "μ = 0.7" in body and "nDCG@10" in body and "[0.1, 0.3, 0.7, 1.0, 3.0]" in body and "train.tsv" in body
    assert "| SPAR | 0.700 |" in body  # the evaluation table from results/<name>.md
    assert "spar run" in body or "spar publish" in body
    assert "CC BY-NC 2.0" in body and body.count("apache-2.0") == 2  # data licence; base model and Λ init
    assert "trust_remote_code=True" in body and "SparEncoder.from_pretrained" in body


# ----------------------------------------------------------------------------------------------------------------
# Loading it back: SparEncoder, sentence-transformers and AutoModel, in a fresh process
# ----------------------------------------------------------------------------------------------------------------

FRESH_LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    from pathlib import Path
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer
    from spar.publish.model_dir import SparEncoder
    from spar.lexical.st_modules import load_sentence_transformer

    torch.set_num_threads(1)
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    queries = json.loads(sys.argv[3])
    passages = [tuple(p) if isinstance(p, list) else p for p in json.loads(sys.argv[4])]
    st = SentenceTransformer(str(model_dir), device="cpu", trust_remote_code=True)
    np.save(out / "st_q.npy", st.encode_query(queries, convert_to_numpy=True))
    np.save(out / "st_p.npy", st.encode_document(passages, convert_to_numpy=True))
    np.save(out / "st_sim.npy", st.similarity(st.encode_query(queries), st.encode_document(passages)).numpy())
    st2 = load_sentence_transformer(str(model_dir), mu=2.0, device="cpu")   # no trust_remote_code, mu overridden
    np.save(out / "st2_q.npy", st2.encode_query(queries, convert_to_numpy=True))
    enc = SparEncoder.from_pretrained(model_dir)
    np.save(out / "spar_q.npy", enc.encode_queries(queries)); np.save(out / "spar_p.npy", enc.encode_passages(passages))
    np.save(out / "spar2_q.npy", SparEncoder.from_pretrained(model_dir, mu=2.0).encode_queries(queries))
    # Plain Hugging Face: AutoModel + the pooling recorded in spar_model.json.
    cfg = json.loads((model_dir / "spar_model.json").read_text())
    for route, texts, key in (("query", queries, "query_max_length"), ("document", passages, "passage_max_length")):
        for name in ("base", "lambda"):
            spec = next(e for e in json.loads((model_dir / route / "spar_combination.json").read_text())["encoders"]
                        if e["name"] == name)
            sub = model_dir / spec["path"] if spec.get("path") else model_dir / route / name
            tok, model = AutoTokenizer.from_pretrained(sub), AutoModel.from_pretrained(sub).eval()
            s = cfg["encoders"][name]
            strs = [t if isinstance(t, str) else f"{t[0]} {tok.sep_token} {t[1]}" for t in texts]
            batch = tok(strs, padding=True, truncation=True, max_length=s[key], return_tensors="pt")
            with torch.no_grad():
                hidden = model(**batch).last_hidden_state
            if s["pooling"] == "cls":
                vec = hidden[:, 0]
            else:
                m = batch["attention_mask"].unsqueeze(-1).float()
                vec = (hidden * m).sum(1) / m.sum(1)
            if s["normalize"]:
                vec = torch.nn.functional.normalize(vec, dim=-1)
            np.save(out / f"hf_{route}_{name}.npy", vec.numpy())
    print(json.dumps({"st_dim": st.get_embedding_dimension(), "mu": enc.mu, "variant": enc.variant,
                      "similarity_fn": st.similarity_fn_name}))
""")


def test_fresh_process_reload_matches_the_pipeline_vectors(tiny_run, tmp_path):
    from spar.index.combine import spar_passage_vectors, spar_query_vectors

    base, lam = tiny_run["base"], tiny_run["lambda"]
    passages = tiny_run["passages"][:4] + ["a passage given as a plain string, without a title"]
    script = tmp_path / "load.py"
    script.write_text(FRESH_LOAD)
    env = _subprocess_env(HF_HOME=str(tmp_path / "hf_home"))  # dynamic module cache for trust_remote_code
    proc = subprocess.run([sys.executable, str(script), str(tiny_run["model"]), str(tmp_path), json.dumps(QUERIES),
                           json.dumps(passages)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info == {"st_dim": 768, "mu": MU, "variant": "concat", "similarity_fn": "dot"}
    load = lambda name: np.load(tmp_path / f"{name}.npy")  # noqa: E731

    bq, lq = base.encode_query(QUERIES), lam.encode_query(QUERIES)
    bp, lp = base.encode_passage(passages), lam.encode_passage(passages)
    expected_q, expected_p = spar_query_vectors(bq, lq, MU, "concat"), spar_passage_vectors(bp, lp, "concat")
    for name in ("st_q", "spar_q"):
        np.testing.assert_allclose(load(name), expected_q, atol=1e-5, err_msg=name)
    for name in ("st_p", "spar_p"):
        np.testing.assert_allclose(load(name), expected_p, atol=1e-5, err_msg=name)
    for name in ("st2_q", "spar2_q"):
        np.testing.assert_allclose(load(name), spar_query_vectors(bq, lq, 2.0, "concat"), atol=1e-5, err_msg=name)
    for route, (b, lam_vectors) in {"query": (bq, lq), "document": (bp, lp)}.items():
        np.testing.assert_allclose(load(f"hf_{route}_base"), b, atol=1e-5)
        np.testing.assert_allclose(load(f"hf_{route}_lambda"), lam_vectors, atol=1e-5)
    # μ on the query side reproduces sim + μ·simΛ.
    np.testing.assert_allclose(load("st_sim"), bq @ bp.T + MU * (lq @ lp.T), atol=1e-4)


def test_the_model_directory_stores_each_weight_once(tiny_run):
    """The base's two sides hold the same weights: stored once (``base/``, named by both routes); the DPR Λ's
    two encoders differ: one folder each. The directory is no larger than its distinct weights plus small files."""
    model = tiny_run["model"]
    weights = sorted(model.rglob("*.safetensors"))
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in weights}
    distinct = {d: p.stat().st_size for p, d in digests.items()}
    assert len(distinct) == len(weights), sorted(str(p.relative_to(model)) for p in weights)
    assert sorted(str(p.relative_to(model)) for p in weights) == [
        "base/model.safetensors", "document/lambda/model.safetensors", "query/lambda/model.safetensors"]
    for route in ("query", "document"):
        specs = json.loads((model / route / "spar_combination.json").read_text())["encoders"]
        assert [s.get("path") for s in specs] == ["base", None]
    total = sum(p.stat().st_size for p in model.rglob("*") if p.is_file() and ".tmp" not in p.name)
    assert total <= sum(distinct.values()) + 4_000_000, (total, sum(distinct.values()))


def test_a_term_based_lambda_is_stored_once_and_loads_back(tiny_run, tmp_path):
    from spar.lexical.projection import ProjectionLambda
    from spar.publish.model_dir import SparEncoder
    from spar.lexical.st_modules import load_sentence_transformer

    lam = ProjectionLambda.fit(tiny_run["passages"][:200], dim=32, seed=0)
    enc = SparEncoder(tiny_run["base"], lam, mu=0.4)
    enc.save_pretrained(tmp_path / "m")
    weights = sorted(str(p.relative_to(tmp_path / "m")) for p in (tmp_path / "m").rglob("*.safetensors"))
    assert weights == ["base/model.safetensors", "lambda/model.safetensors"]
    passages = tiny_run["passages"][:3]
    expected_q, expected_p = enc.encode_queries(QUERIES), enc.encode_passages(passages)
    back = SparEncoder.from_pretrained(tmp_path / "m")
    np.testing.assert_allclose(back.encode_queries(QUERIES), expected_q, atol=1e-5)
    np.testing.assert_allclose(back.encode_passages(passages), expected_p, atol=1e-5)
    st = load_sentence_transformer(str(tmp_path / "m"), device="cpu")
    np.testing.assert_allclose(st.encode_query(QUERIES, convert_to_numpy=True), expected_q, atol=1e-5)
    np.testing.assert_allclose(st.encode_document(passages, convert_to_numpy=True),
                               expected_p, atol=1e-5)


def _stored_weights(model_dir: Path) -> int:
    """The weights a model directory stores (each file holds distinct weights: see the test above), float tensors
    only (a term bag's document frequencies and BERT's position ids are integer buffers, not parameters)."""
    import math

    from safetensors import safe_open

    total = 0
    for path in sorted(model_dir.rglob("*.safetensors")):
        with safe_open(str(path), "pt") as fh:
            total += sum(math.prod(fh.get_slice(k).get_shape()) for k in fh.keys()
                         if fh.get_slice(k).get_dtype() in ("F32", "F16", "BF16"))
    return total


def test_sentence_transformers_hold_each_weight_once_in_memory(tiny_run, tmp_path):
    """#30 item 2: the query and document routes share the base (and a term-based Λ's table) instead of each
    loading its own copy: the parameters in memory are the distinct weights on disk, for every way to load."""
    from spar.lexical.projection import ProjectionLambda
    from spar.publish.model_dir import SparEncoder
    from spar.lexical.st_modules import load_sentence_transformer

    term_based = tmp_path / "projection"
    SparEncoder(tiny_run["base"], ProjectionLambda.fit(tiny_run["passages"][:200], dim=64, seed=0),
                mu=0.4).save_pretrained(term_based)
    minilm = 22_713_216  # all-MiniLM-L6-v2's parameters
    terms = len((term_based / "lambda" / "vocab.txt").read_text(encoding="utf-8").splitlines())
    # The DPR Λ's two encoders and the base once; the base once and the projection's table (not stored: regenerated
    # from its seed and checked against a checksum) once in memory, shared by both routes.
    for model_dir, on_disk, in_memory in ((tiny_run["model"], 3 * minilm, 3 * minilm),
                                          (term_based, minilm, minilm + terms * 64)):
        assert _stored_weights(model_dir) == on_disk, model_dir.name
        loads = {"load_sentence_transformer": load_sentence_transformer(str(model_dir), device="cpu"),
                 "to_sentence_transformer": SparEncoder.from_pretrained(model_dir).to_sentence_transformer("cpu")}
        for how, st in loads.items():
            assert sum(p.numel() for p in st.parameters()) == in_memory, (model_dir.name, how)
        # A second load is its own model (the routes of one model share; two models do not).
        again = load_sentence_transformer(str(model_dir), device="cpu")
        first = {id(p) for p in loads["load_sentence_transformer"].parameters()}
        assert not {id(p) for p in again.parameters()} & first
    q = loads["load_sentence_transformer"].encode_query(QUERIES[:1], convert_to_numpy=True)
    d = loads["load_sentence_transformer"].encode_document(QUERIES[:1], convert_to_numpy=True)
    np.testing.assert_allclose(q, SparEncoder.from_pretrained(term_based).encode_queries(QUERIES[:1]), atol=1e-5)
    np.testing.assert_allclose(d, SparEncoder.from_pretrained(term_based).encode_passages(QUERIES[:1]), atol=1e-5)


def test_sum_variant_round_trips(tmp_path, tiny_run):
    from spar.publish.model_dir import SparEncoder

    enc = SparEncoder(tiny_run["base"], tiny_run["lambda"], mu=0.3, variant="sum")
    enc.save_pretrained(tmp_path / "sum")
    back = SparEncoder.from_pretrained(tmp_path / "sum")
    assert back.variant == "sum" and back.dim == 384
    q = back.encode_queries(QUERIES[:2])
    expected = tiny_run["base"].encode_query(QUERIES[:2]) + 0.3 * tiny_run["lambda"].encode_query(QUERIES[:2])
    np.testing.assert_allclose(q, expected, atol=1e-5)
    st = back.to_sentence_transformer(device="cpu")
    np.testing.assert_allclose(st.encode_query(QUERIES[:2], convert_to_numpy=True), expected, atol=1e-5)


def _linked_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=os.link)  # hard links: no 360 MB copy
    return dst


@pytest.mark.parametrize("missing", ["query/lambda/model.safetensors", "base/config.json",
                                     "spar_model.json", "query/spar_combination.json"])
def test_missing_file_is_named(tiny_run, tmp_path, missing):
    from spar.publish.model_dir import SparEncoder

    broken = _linked_copy(tiny_run["model"], tmp_path / "broken")
    (broken / missing).unlink()
    with pytest.raises(ArtifactError, match=f"missing file '{missing}'"):
        SparEncoder.from_pretrained(broken)


def test_missing_tokenizer_is_refused(tiny_run, tmp_path):
    """Without its tokenizer files a published encoder would load and encode every text to nearly one vector."""
    from spar.publish.model_dir import SparEncoder

    broken = _linked_copy(tiny_run["model"], tmp_path / "broken")
    for name in ("tokenizer.json", "vocab.txt"):
        (broken / "query" / "lambda" / name).unlink(missing_ok=True)
    with pytest.raises(ArtifactError, match=r"broken/query/lambda: no tokenizer vocabulary .*re-run `spar publish`"):
        SparEncoder.from_pretrained(broken)


def test_sentence_transformers_load_names_a_missing_encoder_file(tiny_run, tmp_path):
    from spar.lexical.st_modules import load_sentence_transformer

    broken = _linked_copy(tiny_run["model"], tmp_path / "broken")
    (broken / "document" / "lambda" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"document/lambda/model\.safetensors"):
        load_sentence_transformer(str(broken))


@pytest.mark.parametrize("damaged", ["base/model.safetensors", "query/lambda/model.safetensors"])
def test_a_damaged_weight_file_of_the_same_size_is_refused_at_load(tiny_run, tmp_path, capsys, damaged):
    """#37 item 5: 16 bytes flipped in a published weight file (same size: the header still parses) loaded as is;
    `spar index --model` and `spar search` gave other scores. The model's manifest.json records every file's SHA-256:
    every load checks it, in one line naming the file."""
    from pipelines import cli
    from spar.publish.model_dir import SparEncoder

    broken = _linked_copy(tiny_run["model"], tmp_path / "broken")
    data = bytearray((broken / damaged).read_bytes())
    (broken / damaged).unlink()  # a hard link: the original model must stay intact
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(255 - b for b in data[middle:middle + 16])
    (broken / damaged).write_bytes(bytes(data))
    refusal = rf"^{broken / damaged}: content changed since `spar publish` wrote it .*publish or download it again$"
    with pytest.raises(ArtifactError, match=refusal):
        SparEncoder.from_pretrained(broken)
    corpus = _beir_dir(tiny_run, tmp_path / "corpus", 0, 10)
    out = tmp_path / "index"
    assert cli.main(["index", "--model", str(broken), "--corpus", str(corpus), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{broken / damaged}: content changed" in err, err
    assert not out.exists() and not list(tmp_path.glob("index*"))
    assert cli.main(["search", str(broken), "scurvy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{broken / damaged}: content changed" in err, err


def test_a_model_without_its_manifest_is_checked_by_spar_model_json(tiny_run, tmp_path, capsys):
    """#48 item 4: with manifest.json gone, damaged weights were indexed by `spar index --model` without a word
    (spar_model.json held no checksums). Now format 2 records them; a model with neither is refused."""
    from pipelines import cli
    from spar.publish.model_dir import MODEL_CONFIG, SparEncoder

    bare = _linked_copy(tiny_run["model"], tmp_path / "bare")
    (bare / "manifest.json").unlink()
    config = json.loads((bare / MODEL_CONFIG).read_text())
    assert config["format_version"] == 2 and "base/model.safetensors" in config["checksums"]
    SparEncoder.from_pretrained(bare)  # intact: loads
    damaged = bare / "base" / "model.safetensors"
    data = bytearray(damaged.read_bytes())
    damaged.unlink()  # a hard link: the original model must stay intact
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=rf"^{damaged}: content changed since `spar publish` wrote it \(its "
                                            rf"{MODEL_CONFIG} records another size or SHA-256\)"):
        SparEncoder.from_pretrained(bare)
    corpus = _beir_dir(tiny_run, tmp_path / "corpus", 0, 10)
    assert cli.main(["index", "--model", str(bare), "--corpus", str(corpus), "--output", str(tmp_path / "i")]) == 2
    assert f"{damaged}: content changed" in capsys.readouterr().err
    del config["checksums"]
    (bare / MODEL_CONFIG).unlink()
    (bare / MODEL_CONFIG).write_text(json.dumps(config))
    with pytest.raises(ArtifactError, match="no manifest.json and no checksums in spar_model.json"):
        SparEncoder.from_pretrained(bare)


def test_publish_is_not_up_to_date_over_a_damaged_model(tiny_run, tmp_path):
    """#48 item 4: with a weight file damaged in place (same size), `spar publish` said 'skipped (up to date)'."""
    import pipelines.publish

    cfg = tiny_run["cfg"].model_copy(deep=True)
    cfg.publish.output = str(tmp_path / "model")
    pipelines.publish.run(cfg)
    assert pipelines.publish.run(cfg).get("skipped") is True
    weights = tmp_path / "model" / "base" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    again = pipelines.publish.run(cfg)
    assert not again.get("skipped") and weights.read_bytes() != bytes(data)


def test_an_edited_model_card_still_loads_and_a_garbled_manifest_is_one_line(tiny_run, tmp_path):
    """The card is documentation (edited on the hub, say): the load-time check leaves it out. A manifest that is not a
    JSON object is refused in one line (it was an AttributeError)."""
    from spar.publish.model_dir import SparEncoder

    edited = _linked_copy(tiny_run["model"], tmp_path / "edited")
    card = (edited / "README.md").read_text(encoding="utf-8")
    (edited / "README.md").unlink()
    (edited / "README.md").write_text(card + "\nNotes added on the hub.\n", encoding="utf-8")
    assert SparEncoder.from_pretrained(edited).dim == tiny_run["base"].dim + tiny_run["lambda"].dim
    (edited / "manifest.json").unlink()
    (edited / "manifest.json").write_text("[]")
    with pytest.raises(ArtifactError, match=rf"^{edited / 'manifest.json'}: corrupt manifest: not a JSON object$"):
        SparEncoder.from_pretrained(edited)


# ----------------------------------------------------------------------------------------------------------------
# spar search
# ----------------------------------------------------------------------------------------------------------------


def test_search_from_model_dir_and_index_dir(tiny_run, capsys):
    from pipelines import cli
    from spar.publish.search import SparSearcher

    base_p, lam_p, ids = tiny_run["base_p"], tiny_run["lambda_p"], tiny_run["ids"][:N_INDEXED]
    query = tiny_run["passages"][5][0]  # a title of an indexed passage
    bq, lq = tiny_run["base"].encode_query([query]), tiny_run["lambda"].encode_query([query])
    for mu in (None, 3.0):
        used = MU if mu is None else mu
        brute = (bq @ base_p.T + used * lq @ lam_p.T)[0]
        for path in (tiny_run["model"], tiny_run["run"] / "index"):
            hits = SparSearcher.open(path).search([query], k=5, mu=mu)[0]
            assert [h.id for h in hits] == [ids[i] for i in np.argsort(-brute)[:5]]
            np.testing.assert_allclose([h.score for h in hits], np.sort(brute)[::-1][:5], atol=1e-4)
            assert hits[0].title and hits[0].text  # looked up in queries/passages.arrow
    assert cli.main(["search", str(tiny_run["model"]), *query.split(), "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert ids[int(np.argmax((bq @ base_p.T + MU * lq @ lam_p.T)[0]))] in out and "μ=0.7" in out


def test_search_on_onnx_runtime_gives_the_torch_hits(tiny_run, tmp_path, monkeypatch, capsys):
    """``backend="onnx"`` (``spar search --backend onnx``) runs the base's and the transformer Λ's query encoders in
    ONNX Runtime after the fingerprint checks (which compare the torch encoders the index was made with): the same
    hits and scores as torch, from an index torch encoded."""
    from pipelines import cli
    from spar.model.onnx_encoder import OnnxBiEncoder
    from spar.publish.search import SparSearcher

    monkeypatch.setenv("SPAR_CACHE_DIR", str(tmp_path / "cache"))  # never the user's cache
    query = tiny_run["passages"][5][0]
    torch_hits = SparSearcher.open(tiny_run["model"]).search([query], k=5)[0]
    searcher = SparSearcher.open(tiny_run["model"], backend="onnx")
    assert isinstance(searcher.encoder.base, OnnxBiEncoder)
    assert isinstance(searcher.encoder.lambda_.encoder, OnnxBiEncoder)
    onnx_hits = searcher.search([query], k=5)[0]
    assert [h.id for h in onnx_hits] == [h.id for h in torch_hits]
    np.testing.assert_allclose([h.score for h in onnx_hits], [h.score for h in torch_hits], atol=1e-4)
    assert sorted(p.name for p in (tmp_path / "cache" / "onnx").iterdir())  # exported into the given cache
    assert cli.main(["search", str(tiny_run["model"]), *query.split(), "-k", "1", "--backend", "onnx"]) == 0
    assert torch_hits[0].id in capsys.readouterr().out


def test_a_runs_index_that_reranks_exactly_is_searched_with_the_mu_tuned_against_float32():
    """`spar search MODEL` (the command `spar run` prints) on a run with ``index.type=auto`` above
    ``index.auto_flat_below`` was refused: "stores passages as sq4, but the μ of MODEL was tuned against float32".
    That index (HNSW over sq4 codes, ``refine`` 4) serves exact float32 scores, which μ was tuned against, as
    evaluate already knew (TunedWeights.check_served_by). An index serving its codes' scores is still refused."""
    from types import SimpleNamespace

    from spar.publish.search import _check_run_index

    encoder = SimpleNamespace(metadata={"provenance": {"tuning": {"storage": "float32"}}})
    refining = SimpleNamespace(info={"type": "hnsw"}, storage="sq4", refine=4)
    _check_run_index(refining, Path("run/index"), encoder, Path("run/model"))
    coded = SimpleNamespace(info={"type": "hnsw"}, storage="sq4", refine=0)
    with pytest.raises(ArtifactError, match=r"^run/index stores passages as sq4, but the μ of run/model was tuned "
                                            r"against float32; re-run"):
        _check_run_index(coded, Path("run/index"), encoder, Path("run/model"))


def test_a_corpus_index_that_reranks_exactly_says_nothing_of_another_storage():
    """`spar index --model` with the model of an auto run (HNSW over sq4, refine 4; μ tuned against float32) noted
    "μ was tuned against float32 passages; this index stores sq4 (index.storage overrides the model's own)", about
    an index that serves float32 scores and a storage nobody overrode. An index serving its codes' scores still
    gets the note."""
    from types import SimpleNamespace

    from spar.publish.corpus_index import storage_note

    assert storage_note("float32", SimpleNamespace(storage="sq4", refine=4)) is None
    assert storage_note("float32", SimpleNamespace(storage="sq4", refine=0)).startswith(
        "μ was tuned against float32 passages; this index stores sq4")
    assert storage_note(None, SimpleNamespace(storage="sq4", refine=0)) is None
    assert storage_note("sq4", SimpleNamespace(storage="sq4", refine=0)) is None


def test_index_refine_with_a_flat_index_is_refused_unless_it_is_the_models_own():
    """A flat index ignored ``index.refine`` (it has no candidates to re-rank; the storage's scores were served while
    `spar index index.refine=4` said "updated: refine 0 -> 4"): refused in one line when asked for. The exact
    re-ranking a model's approximate index recorded does not follow `spar index --model M --type flat`."""
    from spar.core.errors import ConfigError
    from spar.publish.corpus_index import ModelDefaults, index_options

    model = ModelDefaults({"type": "hnsw", "storage": "sq4", "hnsw_m": 16, "refine": 4})
    assert index_options(model).refine == 4
    flat = index_options(model, {"type": "flat"})
    assert (flat.type, flat.storage, flat.refine) == ("flat", "sq4", 0)
    with pytest.raises(ConfigError, match=r"^index\.refine=3 re-ranks the candidates of an approximate index"):
        index_options(model, {"type": "flat", "refine": 3})


def test_search_errors_are_clear(tiny_run, tmp_path, capsys):
    from pipelines import cli

    assert cli.main(["search", str(tmp_path), "q"]) == 2
    assert "neither a SPAR model directory" in capsys.readouterr().err
    lone_index = shutil.copytree(tiny_run["run"] / "index", tmp_path / "other" / "index")
    assert cli.main(["search", str(lone_index), "q"]) == 2
    assert "no published model" in capsys.readouterr().err



@pytest.mark.parametrize("query, k, message", [
    ("", 10, "query 1 is empty: nothing to search for"),
    ("   ", 10, "query 1 is empty: nothing to search for"),
    ("scurvy", 0, "k must be at least 1, got 0"),
    (b"caf\xe9".decode("utf-8", "surrogateescape"), 10, "query 1 is not valid UTF-8 text"),
    ("scurvy --mu nan", 10, "mu must be a finite number, got nan"),
    ("scurvy --mu inf", 10, "mu must be a finite number, got inf"),
])
def test_search_refuses_empty_queries_k_0_and_undecodable_bytes(tiny_run, capsys, query, k, message):
    """#22 items 9 and 12: these returned 10 arbitrary hits or a traceback; now one line, exit 2. #31 item 9: so
    did --mu nan / inf (no hits, exit 0)."""
    from pipelines import cli

    flags = query.split(" --mu ")
    mu = ["--mu", flags[1]] if len(flags) > 1 else []
    assert cli.main(["search", str(tiny_run["model"]), flags[0], "-k", str(k), *mu]) == 2
    err = capsys.readouterr().err
    assert f"spar: error: {message}" in err and err.count("\n") == 1


def test_copy_index_makes_the_model_dir_self_contained(tiny_run, tmp_path):
    from spar.publish.model_dir import SparEncoder, publish_model
    from spar.publish.search import SparSearcher

    enc = SparEncoder.from_pretrained(tiny_run["model"])
    out = publish_model(enc, tmp_path / "portable", index_dir=tiny_run["run"] / "index",
                        passages=tiny_run["run"] / "queries" / "passages.arrow", copy_index=True)
    moved = shutil.move(str(out), str(tmp_path / "moved"))  # still works after a move: paths are relative
    searcher = SparSearcher.open(moved)
    assert searcher.index_dir == Path(moved) / "index" and searcher.passages == Path(moved) / "index" / "passages.arrow"
    assert len(searcher.search(["scurvy"], k=3)[0]) == 3
    # #48 item 6: one string is one query (it returned one hit list per character, and a space was "query 8 is empty")
    one = searcher.search("vitamin c deficiency", k=2)
    assert [h.id for h in one] == [h.id for h in searcher.search(["vitamin c deficiency"], k=2)[0]] and len(one) == 2
    from spar.core.errors import ConfigError
    with pytest.raises(ConfigError, match="not bytes"):
        searcher.search(b"scurvy", k=2)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------------
# Hub upload
# ----------------------------------------------------------------------------------------------------------------


def _no_stored_token(monkeypatch, tmp_path) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)


def test_stage_push_without_token_fails_clearly(tiny_run, monkeypatch, tmp_path):
    import pipelines.publish

    _no_stored_token(monkeypatch, tmp_path)
    cfg = tiny_run["cfg"].model_copy(deep=True)
    cfg.publish.push_to_hub = "someone/spar-tiny"  # not part of the model's fingerprint: the stage goes to the push
    with pytest.raises(SparError, match="no Hugging Face token"):
        pipelines.publish.run(cfg)
    assert not (tiny_run["model"] / pipelines.publish.PUSH_MARKER).exists()


def test_push_without_token_or_network_fails_clearly(tiny_run, monkeypatch, tmp_path):
    from spar.publish.model_dir import push_to_hub

    _no_stored_token(monkeypatch, tmp_path)
    with pytest.raises(SparError, match="no Hugging Face token"):
        push_to_hub(tiny_run["model"], "someone/spar-tiny", token=None)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SparError, match="cannot reach the hub|HF_HUB_OFFLINE"):
        push_to_hub(tiny_run["model"], "someone/spar-tiny", token="hf_fake", endpoint=f"http://127.0.0.1:{port}")


class _MockHub(BaseHTTPRequestHandler):
    """The Hub endpoints ``create_repo`` and ``upload_folder`` (legacy LFS path) use, recording what arrives."""

    state: dict = {}

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def _reply(self, payload, status: int = 200) -> None:
        blob = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(blob)))
        self.end_headers()
        self.wfile.write(blob)

    def do_POST(self):  # noqa: N802
        s, body, path = self.state, self._body(), self.path.split("?")[0]
        s["auth"].add(self.headers.get("Authorization"))
        base = f"http://127.0.0.1:{self.server.server_port}"
        if path == "/api/repos/create":
            s["created"] = json.loads(body)
            return self._reply({"url": f"{base}/{s['created'].get('organization')}/{s['created']['name']}"})
        if path == "/api/validate-yaml":  # the hub checks the model card's metadata
            s["card"] = json.loads(body)["content"]
            return self._reply({"errors": [], "warnings": []})
        if path.endswith("/preupload/main"):
            files = json.loads(body)["files"]
            return self._reply({"files": [{"path": f["path"], "shouldIgnore": False,
                                           "uploadMode": "lfs" if f["path"].endswith(".safetensors") else "regular"}
                                          for f in files]})
        if path.endswith(".git/info/lfs/objects/batch"):
            objects = json.loads(body)["objects"]
            return self._reply({"transfer": "basic", "objects": [
                {"oid": o["oid"], "size": o["size"], "authenticated": True,
                 "actions": {"upload": {"href": f"{base}/lfs-upload/{o['oid']}"}}} for o in objects]})
        if path.endswith("/commit/main"):
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            s["commit"] = lines
            return self._reply({"commitUrl": f"{base}/someone/spar-tiny/commit/{'0' * 40}", "commitOid": "0" * 40})
        s["unexpected"].append(("POST", path))
        self._reply({"error": "not found"}, 404)

    def do_PUT(self):  # noqa: N802
        body = self._body()
        oid = self.path.rsplit("/", 1)[-1]
        self.state["lfs"][oid] = (hashlib.sha256(body).hexdigest(), len(body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):  # noqa: N802
        # huggingface_hub fetches its user-agent registry once a day and tolerates its absence.
        if self.path.split("?")[0] != "/api/agent-harnesses":
            self.state["unexpected"].append(("GET", self.path))
        self._reply({"error": "not found"}, 404)


PUSH = textwrap.dedent("""
    import sys
    from spar.publish.model_dir import push_to_hub
    print(push_to_hub(sys.argv[1], "someone/spar-tiny", private=True))
""")


def test_push_uploads_every_file_to_a_local_hub(tiny_run, tmp_path):
    """Real huggingface_hub (create_repo + upload_folder, LFS for weights) against a local HTTP hub.

    hf_xet's content-addressed protocol is switched off (``HF_HUB_DISABLE_XET=1``) so uploads take the plain LFS
    path a local server can speak; the Xet path itself is not exercised here.
    """
    _MockHub.state = {"auth": set(), "lfs": {}, "unexpected": []}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MockHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        script = tmp_path / "push.py"
        script.write_text(PUSH)
        env = _subprocess_env(HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}", HF_TOKEN="hf_local_test",
                              HF_HUB_OFFLINE="0", HF_HUB_DISABLE_XET="1", HF_HOME=str(tmp_path / "hf"))
        proc = subprocess.run([sys.executable, str(script), str(tiny_run["model"])], capture_output=True, text=True,
                              env=env, timeout=600)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = _MockHub.state
    assert state["unexpected"] == []
    assert state["created"]["name"] == "spar-tiny" and state["created"]["organization"] == "someone"
    assert state["created"]["visibility"] == "private" and state["created"].get("type", "model") == "model"
    assert state["auth"] == {"Bearer hf_local_test"}
    header, *entries = state["commit"]
    assert header["key"] == "header"
    committed = {e["value"]["path"]: e for e in entries}
    model = tiny_run["model"]
    local = {str(p.relative_to(model)) for p in model.rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert set(committed) == local
    for path, entry in committed.items():
        data = (model / path).read_bytes()
        if entry["key"] == "lfsFile":  # weights went through LFS: the bytes the server got hash to the file's
            assert path.endswith(".safetensors")
            digest = hashlib.sha256(data).hexdigest()
            assert entry["value"]["oid"] == digest and state["lfs"][digest] == (digest, len(data))
        else:
            import base64

            assert base64.b64decode(entry["value"]["content"]) == data
    assert "commit/" + "0" * 40 in proc.stdout
    assert state["card"] == (model / "README.md").read_text()


# ----------------------------------------------------------------------------------------------------------------
# Publish never deletes what spar did not write (#22 items 1, 2, 13)
# ----------------------------------------------------------------------------------------------------------------


def _publish_to(tiny_run, output, force: bool = False):
    import pipelines.publish

    cfg = tiny_run["cfg"]
    return pipelines.publish.run(cfg.model_copy(update={"publish": cfg.publish.model_copy(
        update={"output": str(output)})}), force=force)


def test_publish_refuses_the_run_its_ancestors_other_artifacts_files_and_foreign_directories(tiny_run, tmp_path):
    from spar.core.errors import ArtifactError

    run = tiny_run["run"]
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("my notes")
    a_file = tmp_path / "model.txt"
    a_file.write_text("not a directory")
    cases = [(run, "not empty and not a spar artifact"), (run.parent, "not empty and not a spar artifact"),
             (run / "tune", "not empty and a spar 'tune' artifact"),
             (foreign, "not empty and not a spar artifact"), (a_file, "exists and is not a directory")]
    for output, message in cases:
        for force in (False, True):  # --force re-publishes spar's own model, never over anything else
            with pytest.raises(ArtifactError, match=message) as error:
                _publish_to(tiny_run, output, force)
            assert "\n" not in str(error.value) and str(error.value).startswith(str(output))
    # Nothing was deleted or left behind.
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before
    assert (foreign / "notes.txt").read_text() == "my notes" and a_file.read_text() == "not a directory"
    assert not [p for p in [*run.parent.iterdir(), *tmp_path.iterdir()] if ".tmp-" in p.name]
    # An empty directory, and spar's own earlier model, are fine.
    (tmp_path / "empty").mkdir()
    assert Path(_publish_to(tiny_run, tmp_path / "empty")["output"]) == tmp_path / "empty"
    assert Path(_publish_to(tiny_run, tmp_path / "empty", force=True)["output"]) == tmp_path / "empty"


def test_publish_replaces_only_what_it_wrote(tiny_run, tmp_path):
    """#31 item 1: files a user put into an earlier model directory (notes, a folder of theirs) were deleted by the
    next publish, exit 0. The old model's manifest lists every file it wrote: anything else makes publish refuse in
    one line naming it, --force or not, with nothing deleted."""
    from spar.core.artifacts import read_manifest
    from spar.core.errors import ArtifactError

    model = tmp_path / "model"
    _publish_to(tiny_run, model)
    (model / "notes.txt").write_text("my notes")
    (model / "mine").mkdir()
    (model / "mine" / "x.dat").write_bytes(b"mine")
    before = {str(p.relative_to(model)): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert _publish_to(tiny_run, model).get("skipped")  # up to date: nothing to replace
    import pipelines.publish

    cfg = tiny_run["cfg"]
    other = cfg.model_copy(update={"publish": cfg.publish.model_copy(update={"output": str(model), "license": "mit"})})
    for publish in (lambda: pipelines.publish.run(other), lambda: _publish_to(tiny_run, model, force=True)):
        with pytest.raises(ArtifactError, match=rf"^{model}: holds files its earlier model artifact does not list "
                                                r"\(mine/x.dat, notes.txt\); spar replaces only what it wrote"):
            publish()
    assert {str(p.relative_to(model)): p.read_bytes() for p in model.rglob("*") if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    # Without them it is replaced in place (the directory itself stays), and an upload marker spar wrote is its own.
    shutil.rmtree(model / "mine")
    (model / "notes.txt").unlink()
    (model / ".hub_push.json").write_text("{}")
    inode = model.stat().st_ino
    _publish_to(tiny_run, model, force=True)
    assert model.stat().st_ino == inode and read_manifest(model)["kind"] == "model"
    assert not (model / ".hub_push.json").exists() and not (model / ".spar-replacing.json").exists()


def test_publish_into_a_mount_point(tiny_run, tmp_path):
    """#31 item 5: publish.output at an empty mount point failed with a traceback ("Device or resource busy":
    spar removed the directory before renaming its work into place) and left the complete model behind as
    model.tmp-<pid>/. Now an existing directory is written into, never removed: a real tmpfs mount where this
    machine allows it (CI runs as root), else an empty directory (same code path; the inode must not change)."""
    import subprocess

    from spar.publish.model_dir import check_model_dir

    target = tmp_path / "mnt"
    target.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(target)],
                                                  capture_output=True).returncode == 0
    try:
        inode = target.stat().st_ino
        for force in (False, True):  # into the empty mount, then over its own earlier model
            assert Path(_publish_to(tiny_run, target, force=force)["output"]) == target
            check_model_dir(target)
            assert target.stat().st_ino == inode and (not mounted or os.path.ismount(target))
        assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    finally:
        if mounted:
            subprocess.run(["umount", str(target)], check=True)


@pytest.mark.parametrize("moment", ["before the work", "while moving in"])
def test_a_read_only_publish_target_is_one_line_and_leaves_nothing_behind(tiny_run, tmp_path, monkeypatch, capsys,
                                                                         moment):
    """#37 item 9: an empty read-only mount as publish.output (--force) gave a 40-line chained traceback (EROFS from
    _replace_in_place's journal) and left the complete model beside it as <target>.tmp-<pid>/. Now one line, nothing
    left. Before the work: a real read-only tmpfs where this machine allows it (CI runs as root), else every write
    into it refused with EROFS; while moving in: the target stops taking files after the work (the journal's write
    refused), which only the late check can catch."""
    import errno
    import subprocess

    import spar.core.artifacts as artifacts
    from pipelines import cli
    from spar.core.errors import ArtifactError

    target = tmp_path / "ro"
    target.mkdir()
    erofs = OSError(errno.EROFS, "Read-only file system")
    mounted = False
    if moment == "before the work":
        mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs",
                                                        str(target)], capture_output=True).returncode == 0
        if not mounted:
            write_bytes = Path.write_bytes

            def refusing(self, data):
                if self.parent == target:
                    raise erofs
                return write_bytes(self, data)

            monkeypatch.setattr(Path, "write_bytes", refusing)
    else:
        write_json = artifacts.write_json_atomic

        def journal_refused(path, payload):
            if Path(path).parent == target:
                raise erofs
            return write_json(path, payload)

        monkeypatch.setattr(artifacts, "write_json_atomic", journal_refused)
    try:
        with pytest.raises(ArtifactError, match=rf"^(cannot write to output directory )?{target}(: cannot write the "
                                                r"model artifact there \()?:? ?Read-only file system"):
            _publish_to(tiny_run, target, force=True)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"] and not list(target.iterdir())
        cfg = tiny_run["cfg"]
        assert cli.main(["publish", "--force", f"experiment.output_dir={cfg.output_dir}",
                         f"experiment.results_dir={cfg.results_dir}", f"publish.output={target}",
                         *(f"{k}={v}" for k, v in (("experiment.name", "tiny"), ("index.storage", "float32"),
                                                   ("publish.data_license", "'CC BY-NC 2.0'"),
                                                   ("publish.dataset", "BeIR/scifact"),
                                                   ("encode.base.passage_max_length", PASSAGE_TOKENS),
                                                   ("train.encoder.passage_max_length", PASSAGE_TOKENS)))]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Read-only file system" in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"] and not list(target.iterdir())
    finally:
        if mounted:
            subprocess.run(["umount", str(target)], check=True)


# ----------------------------------------------------------------------------------------------------------------
# A published model works anywhere: no absolute path; index any corpus with it and search it (#30 item 1)
# ----------------------------------------------------------------------------------------------------------------

INDEXED_ELSEWHERE = 40


def _beir_dir(tiny_run, directory: Path, start: int, n: int) -> Path:
    directory.mkdir(parents=True)
    with (directory / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for pid, (title, text) in zip(tiny_run["ids"][start:start + n], tiny_run["passages"][start:start + n]):
            fh.write(json.dumps({"_id": pid, "title": title, "text": text}) + "\n")
    return directory


def test_the_published_model_records_no_absolute_path(tiny_run):
    """spar_model.json, the shipped config, the card and the manifest name no directory of the machine that made the
    model (they would be uploaded with it, and point nowhere on another machine)."""
    import re

    model = tiny_run["model"]
    machine_paths = {str(tiny_run["run"]), str(tiny_run["run"].resolve()), str(REPO), "/tmp/", "/home/", "/work/"}
    for name in ("spar_model.json", "spar_config.yaml", "README.md", "manifest.json"):
        text = (model / name).read_text(encoding="utf-8")
        # as an absolute path: at the start of a value or word (a relative '../x' may pass through those names)
        found = [path for path in machine_paths if re.search(r"(^|[\s\"'=:(\[])" + re.escape(path), text, re.M)]
        assert not found, (name, found)
    # The shipped config still resolves, from the model directory, to the files the run read.
    from spar.core.config import load_config

    shipped = load_config(model / "spar_config.yaml")
    assert Path(shipped.data.corpus) == Path(tiny_run["cfg"].data.corpus)
    assert Path(shipped.output_dir) == Path(tiny_run["cfg"].output_dir)


def test_a_copied_model_indexes_any_corpus_and_searches_it(tiny_run, tmp_path, capsys):
    """Copy the model away from its run, index a BEIR directory with it (no run, no config), search: the hits are
    the brute-force SPAR ranking of the fixture's own encoders, with the model's μ."""
    from pipelines import cli
    from spar.core.errors import ArtifactError
    from spar.publish.search import SparSearcher, resolve_index_location

    moved = _linked_copy(tiny_run["model"], tmp_path / "elsewhere" / "model")
    with pytest.raises(ArtifactError, match="the model holds no index; index a corpus with it"):
        resolve_index_location(moved)  # nothing ties the copy to its run
    start = N_INDEXED  # passages the run never indexed
    corpus = _beir_dir(tiny_run, tmp_path / "my-corpus", start, INDEXED_ELSEWHERE)
    out = tmp_path / "indexes" / "mine"
    # encode.precision=32: the brute-force reference below is the encoders' fp32 vectors, on every CPU class
    assert cli.main(["index", "--model", str(moved), "--corpus", str(corpus), "--output", str(out),
                     "--storage", "float32", "--type", "flat", "encode.precision=32"]) == 0
    printed = capsys.readouterr().out
    assert f"{INDEXED_ELSEWHERE:,} records read" in printed and "B/passage" in printed
    assert sorted(p.name for p in out.iterdir()) == ["ids.arrow", "index.faiss", "index.json", "manifest.json",
                                                     "passages.arrow"]
    info = json.loads((out / "index.json").read_text())
    assert info["model"]["location"] == "../../elsewhere/model" and info["model"]["mu"] == pytest.approx(MU)
    assert not list(tmp_path.glob("indexes/*.partial")) and not list(tmp_path.glob("indexes/*.tmp-*"))

    texts = tiny_run["passages"][start:start + INDEXED_ELSEWHERE]
    ids = tiny_run["ids"][start:start + INDEXED_ELSEWHERE]
    base_p, lam_p = tiny_run["base"].encode_passage(texts), tiny_run["lambda"].encode_passage(texts)
    query = texts[7][0]  # the title of an indexed passage
    bq, lq = tiny_run["base"].encode_query([query]), tiny_run["lambda"].encode_query([query])
    brute = (bq @ base_p.T + MU * lq @ lam_p.T)[0]
    hits = SparSearcher.open(out).search([query], k=5)[0]
    assert [h.id for h in hits] == [ids[i] for i in np.argsort(-brute)[:5]]
    np.testing.assert_allclose([h.score for h in hits], np.sort(brute)[::-1][:5], atol=1e-4)
    assert hits[0].title == texts[int(np.argmax(brute))][0]
    assert cli.main(["search", str(out), *query.split(), "-k", "2"]) == 0
    assert ids[int(np.argmax(brute))] in capsys.readouterr().out
    # Up to date: nothing is re-encoded. Without --storage/--type the model's own index options are the defaults
    # (shipped in spar_config.yaml: the index it was published with, float32 and flat here, where
    # configs/default.yaml says sq4), so that index is up to date too.
    assert cli.main(["index", "--model", str(moved), "--corpus", str(corpus), "--output", str(out),
                     "--storage", "float32", "--type", "flat", "encode.precision=32"]) == 0
    assert "skipped (up to date)" in capsys.readouterr().out
    assert cli.main(["index", "--model", str(moved), "--corpus", str(corpus), "--output", str(out),
                     "encode.precision=32"]) == 0
    assert "skipped (up to date)" in capsys.readouterr().out
    info = json.loads((out / "index.json").read_text())
    assert (info["storage"], info["type"]) == (tiny_run["cfg"].index.storage, tiny_run["cfg"].index.type) == (
        "float32", "flat")


def test_a_tsv_corpus_with_another_storage_and_index_type(tiny_run, tmp_path):
    from spar.publish.corpus_index import index_corpus
    from spar.publish.search import SparSearcher

    texts = tiny_run["passages"][:30]
    tsv = tmp_path / "passages.tsv"
    tsv.write_text("id\ttext\ttitle\n" + "".join(f"p{i}\t{text}\t{title}\n" for i, (title, text)
                                                 in enumerate(texts)), encoding="utf-8")
    stats = index_corpus(tiny_run["model"], tsv, tmp_path / "hnsw", index={"storage": "sq8", "type": "hnsw"},
                         show_progress=False)
    assert stats["type"] == "hnsw" and stats["storage"].startswith("8-bit scalar quantizer (768 B/passage)")
    searcher = SparSearcher.open(tmp_path / "hnsw")
    assert searcher.index.storage == "sq8" and searcher.index.info["type"] == "hnsw"
    assert searcher.search([texts[3][0]], k=1)[0][0].id == "p3"
    # A BEIR directory whose corpus is gzip-compressed.
    import gzip

    beir = tmp_path / "beir-gz"
    beir.mkdir()
    with gzip.open(beir / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"_id": f"g{i}", "title": t, "text": x}) + "\n" for i, (t, x) in enumerate(texts[:10]))
    assert index_corpus(tiny_run["model"], beir, tmp_path / "gz", show_progress=False)["passages"] == 10
    assert SparSearcher.open(tmp_path / "gz").search([texts[4][0]], k=1)[0][0].id == "g4"


def _one_line_error(capsys, argv) -> str:
    from pipelines import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("spar: error: ") and err.count("\n") == 1, err
    return err


def test_corpus_index_bad_input_is_one_line_and_deletes_nothing(tiny_run, tmp_path, capsys):
    """#31 item 6 on this surface: garbled and missing corpus lines name file and line; a directory that is not a
    model, an index searched with another model, a foreign output directory: one line each, nothing deleted."""
    from spar.lexical.projection import ProjectionLambda
    from spar.publish.model_dir import SparEncoder

    model = str(tiny_run["model"])
    corpus = _beir_dir(tiny_run, tmp_path / "bad", 0, 3)
    lines = (corpus / "corpus.jsonl").read_text().splitlines()
    (corpus / "corpus.jsonl").write_text("\n".join([lines[0], lines[1][:25], lines[2]]) + "\n")
    out = tmp_path / "idx"
    err = _one_line_error(capsys, ["index", "--model", model, "--corpus", str(corpus), "--output", str(out)])
    assert f"{corpus / 'corpus.jsonl'}:2: malformed JSON" in err
    assert not out.exists() and not list(tmp_path.glob("idx.*"))  # no litter of a refused input
    (corpus / "corpus.jsonl").write_text(lines[0] + "\n" + json.dumps({"_id": "x", "title": "t"}) + "\n")
    err = _one_line_error(capsys, ["index", "--model", model, "--corpus", str(corpus), "--output", str(out)])
    assert f"{corpus / 'corpus.jsonl'}:2: missing text" in err
    err = _one_line_error(capsys, ["index", "--model", model, "--corpus", str(tmp_path / "nope"),
                                   "--output", str(out)])
    assert "nope: file not found" in err
    empty_dir = tmp_path / "not-beir"
    empty_dir.mkdir()
    err = _one_line_error(capsys, ["index", "--model", model, "--corpus", str(empty_dir), "--output", str(out)])
    assert "not-beir: a directory without corpus.jsonl" in err
    # Not a model: the run directory (with a hint), a plain directory, a missing path; --corpus without --model.
    good = _beir_dir(tiny_run, tmp_path / "good", 0, 12)
    err = _one_line_error(capsys, ["index", "--model", str(tiny_run["run"]), "--corpus", str(good),
                                   "--output", str(out)])
    assert "not a published SPAR model: no spar_model.json; did you mean" in err
    err = _one_line_error(capsys, ["index", "--model", str(empty_dir), "--corpus", str(good), "--output", str(out)])
    assert "not-beir: not a published SPAR model: no spar_model.json" in err
    err = _one_line_error(capsys, ["index", "--corpus", str(good), "--output", str(out)])
    assert "--model missing" in err
    # A foreign output directory is never replaced.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    err = _one_line_error(capsys, ["index", "--model", model, "--corpus", str(good), "--output", str(mine)])
    assert "not empty and not a spar artifact" in err and (mine / "notes.txt").read_text() == "my notes"
    # An index searched with another model than the one that built it.
    from pipelines import cli

    assert cli.main(["index", "--model", model, "--corpus", str(good), "--output", str(out)]) == 0
    capsys.readouterr()
    other = SparEncoder(tiny_run["base"], ProjectionLambda.fit(tiny_run["passages"][:50], dim=384, seed=0), mu=MU)
    other.save_pretrained(tmp_path / "other-model")
    err = _one_line_error(capsys, ["search", str(out), "scurvy", "--model", str(tmp_path / "other-model")])
    assert f"{out} was built with another model" in err


# ----------------------------------------------------------------------------------------------------------------
# #47 items 2-3: files users can trust, no side without a task
# ----------------------------------------------------------------------------------------------------------------


def test_published_files_are_readable_by_all_and_name_no_machine_path(tiny_run):
    """transformers writes model.safetensors 0600 (a copied model was unreadable to other users); the results'
    'Cost per stage' rows held the absolute output directory; the card's metadata lacked `language`."""
    from spar.experiment.costs import stage_costs

    model = tiny_run["model"]
    files = [p for p in model.rglob("*") if p.is_file()]
    unreadable = {str(p.relative_to(model)): oct(p.stat().st_mode & 0o777) for p in files
                  if p.stat().st_mode & 0o044 != 0o044}
    assert files and not unreadable, unreadable
    run = str(tiny_run["run"].resolve())
    for path in files:
        if path.suffix in (".json", ".md", ".yaml", ".py", ".txt"):
            assert run not in path.read_text(encoding="utf-8", errors="replace"), path
    rows = stage_costs([tiny_run["run"]])
    assert rows and {row["run"] for row in rows} == {tiny_run["run"].name}
    meta = yaml.safe_load((model / "README.md").read_text().split("---\n")[1])
    assert meta["language"] == ["en"]


def test_the_card_states_the_index_precision_and_its_results_as_model_index(tiny_run):
    from dataclasses import replace

    from spar.publish.card import ModelCardFacts, render_model_card

    facts = ModelCardFacts(name="scifact", base_model="all-MiniLM-L6-v2", base_pooling="mean", base_normalize=True,
                           lambda_init="all-MiniLM-L6-v2", lambda_pooling="cls", lambda_normalize=False,
                           variant="concat", mu=0.7, dim=768, dataset="BeIR/scifact")
    bf16 = {"base": {"precision": "bf16-mixed", "backend": "torch"}, "lambda": {"precision": "32", "backend": "sparse"}}
    card = render_model_card(replace(facts, encoding=bf16, results={
        "dataset": "scifact", "systems": {"spar": {"nDCG@10": 0.87594, "R@100": 0.97}, "bm25": {"nDCG@10": 0.85}}}))
    meta = yaml.safe_load(card.split("---\n")[1])
    (entry,) = meta["model-index"][0]["results"]
    assert meta["model-index"][0]["name"] == "scifact"
    assert entry["dataset"] == {"name": "BeIR/scifact", "type": "BeIR/scifact", "split": "test"}
    assert entry["metrics"] == [{"type": "ndcg_at_10", "value": 0.8759, "name": "nDCG@10"},
                                {"type": "r_at_100", "value": 0.97, "name": "R@100"}]
    assert "## Precision" in card and "base bf16 (torch), Λ fp32 (sparse)" in card
    assert "encode.precision=32" in card
    sets = render_model_card(replace(facts, results={"sets": {
        "nq": {"dataset": "odqa: nq", "systems": {"spar": {"Acc@20": 0.8}}},
        "trivia": {"dataset": "odqa: trivia", "systems": {"spar": {"Acc@20": 0.7}}}}}))
    entries = yaml.safe_load(sets.split("---\n")[1])["model-index"][0]["results"]
    assert [(e["dataset"]["name"], e["metrics"][0]["type"]) for e in entries] == [
        ("BeIR/scifact (nq)", "acc_at_20"), ("BeIR/scifact (trivia)", "acc_at_20")]
    assert "## Precision" not in sets  # no encoding record: nothing claimed


def test_sentence_transformers_encode_without_a_task_is_refused(tiny_run):
    """#47 item 3: `model.encode(question)` returned the passage side's vector (the Router's default route)."""
    from spar.lexical.st_modules import load_sentence_transformer

    st = load_sentence_transformer(str(tiny_run["model"]), device="cpu")
    with pytest.raises(ValueError, match="task"):
        st.encode(["what causes scurvy"])
    query, document = st.encode_query(["what causes scurvy"]), st.encode_document(["what causes scurvy"])
    assert np.abs(query - document).max() > 1e-3  # the two sides really differ
    router = json.loads((tiny_run["model"] / "router_config.json").read_text())["parameters"]
    assert router["default_route"] is None and router["allow_empty_key"] is False
    assert "`model.encode(text)` without `task=` is refused" in (tiny_run["model"] / "README.md").read_text()


# ----------------------------------------------------------------------------------------------------------------
# #47 item 5: Pyserini-style batch search
# ----------------------------------------------------------------------------------------------------------------


def test_batch_search_writes_a_trec_run_that_ir_measures_reads(tiny_run, tmp_path, capsys):
    import ir_measures

    from pipelines import cli
    from spar.publish.search import SparSearcher

    texts = ["what causes scurvy", "vitamin c deficiency", "bone density in older women"]
    jsonl = tmp_path / "topics.jsonl"
    jsonl.write_text("".join(json.dumps({"_id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    tsv = tmp_path / "topics.tsv"
    tsv.write_text("".join(f"t{i}\t{t}\n" for i, t in enumerate(texts)))
    expected = SparSearcher.open(tiny_run["model"]).search(texts, k=5)
    for topics in (jsonl, tsv):
        run = tmp_path / "runs" / f"{topics.suffix[1:]}.trec"  # its directory is made
        assert cli.main(["search", str(tiny_run["model"]), "--topics", str(topics), "--output", str(run), "-k", "5",
                         "--run-tag", "spar-test", "--batch-size", "2"]) == 0
        assert f"3 topics, 15 hits (k=5, μ={MU:g}) -> {run}" in capsys.readouterr().out
        lines = run.read_text().splitlines()
        assert lines[0].split()[1::2] == ["Q0", "1", "spar-test"]
        read = {}
        for row in ir_measures.read_trec_run(str(run)):
            read.setdefault(row.query_id, []).append((row.doc_id, row.score))
        for i, hits in enumerate(expected):
            assert [d for d, _ in read[f"t{i}"]] == [h.id for h in hits]
            np.testing.assert_allclose([s for _, s in read[f"t{i}"]], [h.score for h in hits], atol=1e-5)
        assert [int(line.split()[3]) for line in lines[:5]] == [1, 2, 3, 4, 5]
    assert not list(tmp_path.glob("runs/.*.tmp-*"))


@pytest.mark.parametrize("args, message", [
    (["--topics", "TOPICS"], "--topics needs --output RUN.trec"),
    (["scurvy", "--output", "RUN"], "--output writes the run of a batch search: give --topics FILE too"),
    (["scurvy", "--topics", "TOPICS", "--output", "RUN"], "give a query or --topics FILE, not both"),
    ([], "nothing to search for"),
    (["--topics", "TOPICS", "--output", "RUN", "--run-tag", "two words"], "--run-tag must be one word"),
    (["--topics", "BAD", "--output", "RUN"], "BAD_NAME:2: empty text in query 't2'"),
])
def test_batch_search_errors_are_one_line_and_write_nothing(tiny_run, tmp_path, capsys, args, message):
    from pipelines import cli

    topics = tmp_path / "topics.tsv"
    topics.write_text("t1\tscurvy\n")
    bad = tmp_path / "bad.tsv"
    bad.write_text("t1\tscurvy\nt2\t   \n")
    run = tmp_path / "run.trec"
    names = {"TOPICS": str(topics), "BAD": str(bad), "RUN": str(run)}
    assert cli.main(["search", str(tiny_run["model"]), *[names.get(a, a) for a in args]]) == 2
    err = capsys.readouterr().err
    assert message.replace("BAD_NAME", str(bad)) in err and err.count("\n") == 1, err
    assert not run.exists()
