"""Learned-sparse teachers: the label stage with ``label.teacher=impact`` (bundled SPLADE-tiny) on a slice of the
embedded sample, and a uniCOIL checkpoint in Pyserini's layout encoded exactly as Pyserini's own uniCOIL encoders
do (a tiny random-weight BERT, built here, so nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spar.core import schemas
from spar.core.config import load_config

REPO = Path(__file__).resolve().parents[1]
N_DOCS = 40


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("impact-corpus") / "corpus.jsonl"
    lines = (REPO / "data" / "scifact-sample" / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(lines[:N_DOCS]), encoding="utf-8")
    return out


def test_label_stage_with_the_impact_teacher(small_corpus, tmp_path):
    import pipelines.label
    import pipelines.sample
    from spar.teacher.teachers import ImpactTeacher, SparseEncoder

    out = tmp_path / "run"
    cfg = load_config(None, [f"data.corpus={small_corpus}", f"experiment.output_dir={out}", "sample.strategy=all",
                             "sample.max_queries=24", "sample.dev_fraction=0.1", "label.teacher=impact",
                             "label.k=10", "label.n_positives=3", "label.n_negatives=2", "label.shard_size=12",
                             "label.batch_size=8", "label.impact_max_length=128"])
    pipelines.sample.run(cfg)
    stats = pipelines.label.run(cfg)
    labels = schemas.read_shards(out / "labels", "labels").to_pylist()
    labelled, total = (int(n) for n in stats["queries labelled"].split(" of "))
    assert 20 <= len(labels) == labelled <= total
    assert (out / "teacher_index" / "manifest.json").exists()

    # The labels are the impact teacher's own ranking: top 3 positives (1 for dev), bottom 2 of the top 10.
    s = cfg.label
    encoder = SparseEncoder(s.impact_model, s.impact_model_type)
    teacher = ImpactTeacher(out / "teacher_index", encoder, s.impact_quantization, threads=1,
                            max_length=s.impact_query_max_length)
    hits = teacher.search([(r["query_id"], r["query"]) for r in labels], k=10)
    for r in labels:
        ranked = [doc for doc, _ in hits[r["query_id"]]]
        assert r["positive_ids"] == ranked[:1 if r["split"] == "dev" else 3]
        assert r["negative_ids"] == ranked[-2:]
        assert r["positive_scores"] == [score for _, score in hits[r["query_id"]][:len(r["positive_ids"])]]
    assert pipelines.label.run(cfg) == {"skipped": True}


@pytest.fixture(scope="module")
def unicoil_dir(tmp_path_factory) -> Path:
    """A random-weight uniCOIL checkpoint saved by Pyserini's own UniCoilEncoder class (its layout: ``bert.*`` and
    ``tok_proj.*`` weights, a BERT config and a WordPiece vocab)."""
    import torch
    from transformers import BertConfig, BertTokenizer

    from spar.core.java import pyserini_module
    from spar.model.resolve import resolve_model

    unicoil = pyserini_module("pyserini.encode._unicoil")
    out = tmp_path_factory.mktemp("unicoil")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    model = unicoil.UniCoilEncoder(config)
    with torch.no_grad():  # a positive bias so that most tokens get a non-zero weight
        model.tok_proj.bias.fill_(0.5)
    model.save_pretrained(out)
    BertTokenizer(str(resolve_model("all-MiniLM-L6-v2") / "vocab.txt")).save_pretrained(out)
    return out


UNICOIL_QUERIES = ["what causes what causes scurvy", "the the the cell cycle", "DNA methylation in cancer cells"]
UNICOIL_PASSAGES = [("Scurvy", "Scurvy is caused by a lack of vitamin C, vitamin C."),
                    ("Cell cycle", "The cell cycle, the cell division cycle, is the series of events in a cell.")]


def test_unicoil_in_pyserinis_layout_encodes_as_pyserini(unicoil_dir):
    import torch

    from spar.core.java import pyserini_module
    from spar.teacher.teachers import SparseEncoder

    torch.set_num_threads(1)
    unicoil = pyserini_module("pyserini.encode._unicoil")
    spar_encoder = SparseEncoder(str(unicoil_dir))
    assert spar_encoder.kind == "unicoil"

    # Pyserini's UniCoilEncoder.from_pretrained no longer runs under transformers 5 (its class never calls
    # post_init), so its model is built by its own constructor and given the checkpoint's weights; everything else
    # (tokenizer, token weights, pooling, [SEP]) is Pyserini's code.
    from safetensors.torch import load_file
    from transformers import BertConfig, BertTokenizer

    model = unicoil.UniCoilEncoder(BertConfig.from_pretrained(unicoil_dir)).eval()
    model.load_state_dict(load_file(unicoil_dir / "model.safetensors"))
    tokenizer = BertTokenizer.from_pretrained(unicoil_dir)

    # Queries: Pyserini sums a repeated token's weights and keeps [SEP] (its raw weights before quantisation).
    reference = object.__new__(unicoil.UniCoilQueryEncoder)
    reference.model, reference.tokenizer, reference.device = model, tokenizer, "cpu"
    for text in UNICOIL_QUERIES:
        ids = tokenizer([text], max_length=128, truncation=True, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            raw = reference._output_to_weight_dicts(ids.numpy(), model(ids).numpy())[0]
        expected = {t: w for t, w in raw.items() if w > 0}
        got = spar_encoder.encode([text], max_length=128, role="query")[0]
        assert got.keys() == expected.keys(), text
        assert "[SEP]" in got and "[CLS]" not in got
        assert all(got[t] == pytest.approx(w, rel=1e-5, abs=1e-6) for t, w in expected.items()), text
    repeated = spar_encoder.encode([UNICOIL_QUERIES[1]], max_length=128, role="query")[0]
    single = spar_encoder.encode([UNICOIL_QUERIES[1]], max_length=128, role="passage")[0]
    assert repeated["the"] > single["the"]  # summed over the three occurrences, not max-pooled

    # Passages (title + " " + text, as spar's collections): Pyserini keeps a repeated token's largest weight.
    documents = object.__new__(unicoil.UniCoilDocumentEncoder)
    documents.model, documents.tokenizer, documents.device = model, tokenizer, "cpu"
    with torch.no_grad():
        raw_docs = documents.encode([t for _, t in UNICOIL_PASSAGES], titles=[t for t, _ in UNICOIL_PASSAGES],
                                    max_length=128)
    got_docs = spar_encoder.encode([f"{title} {text}" for title, text in UNICOIL_PASSAGES], max_length=128)
    for raw, got in zip(raw_docs, got_docs):
        expected = {t: w for t, w in raw.items() if w > 0}
        assert got.keys() == expected.keys()
        assert all(got[t] == pytest.approx(w, rel=1e-5, abs=1e-6) for t, w in expected.items())
