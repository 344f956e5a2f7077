"""Stage `train`: Λ learns to imitate the teacher on a real SciFact slice (CPU, a few dozen steps).

The fixture writes ``queries/passages.arrow`` and ``labels/labels-00000.arrow`` exactly as the sample and label
stages do (schemas from :mod:`spar.core.schemas`): the first 300 SciFact abstracts, their sentences as queries, and
BM25 labels (k1=0.9, b=0.4, title + text) from a small in-test BM25 — a fixture only; the product path labels with
Pyserini in the label stage.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from spar.core import schemas
from spar.core.config import TrainSection, load_config
from spar.data.passages import PassagesTable
from spar.lexical.transformer import ContrastiveObjective, TokenizingPreparer, TransformerLambda
from spar.train.training import build_module, train_lambda
from spar.train.data import ContrastiveBatchSampler, LabelStore, SurrogatePool, TrainBatchDataset, surrogate_mrr

N_DOCS, K, N_POS, N_NEG = 300, 50, 10, 5


def _bm25_labels(passages: list[dict], queries: list[dict]) -> list[dict]:
    """Top-K BM25 (Lucene idf, k1=0.9, b=0.4) over title + text; top n_p positives, bottom n_n of K negatives."""
    from sklearn.feature_extraction.text import CountVectorizer

    vec = CountVectorizer(lowercase=True, token_pattern=r"(?u)\b\w+\b")
    tf = vec.fit_transform([f"{p['title']} {p['text']}" for p in passages]).tocsr().astype(np.float64)
    n = tf.shape[0]
    df = np.bincount(tf.indices, minlength=tf.shape[1])
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    dl = np.asarray(tf.sum(1)).ravel()
    k1, b = 0.9, 0.4
    w = tf.copy()
    norm = np.repeat(k1 * (1 - b + b * dl / dl.mean()), np.diff(w.indptr))
    w.data = w.data * (k1 + 1) / (w.data + norm) * idf[w.indices]
    scores = (vec.transform([q["text"] for q in queries]) @ w.T).toarray()
    labels = []
    for q, row in zip(queries, scores):
        top = np.argsort(-row, kind="stable")[:K]
        top = top[row[top] > 0]
        n_pos = 1 if q["split"] == "dev" else N_POS
        pos, neg = top[:n_pos], top[max(n_pos, len(top) - N_NEG):]
        rank = {int(d): r + 1 for r, d in enumerate(top)}
        labels.append({
            "query_id": q["query_id"], "query": q["text"], "split": q["split"],
            "positive_ids": [passages[d]["id"] for d in pos], "positive_rows": [int(d) for d in pos],
            "positive_scores": [float(row[d]) for d in pos], "positive_ranks": [rank[int(d)] for d in pos],
            "negative_ids": [passages[d]["id"] for d in neg], "negative_rows": [int(d) for d in neg],
            "negative_scores": [float(row[d]) for d in neg], "negative_ranks": [rank[int(d)] for d in neg],
        })
    return labels


@pytest.fixture(scope="module")
def labelled(datasets_dir: Path, tmp_path_factory) -> Path:
    """An output dir with ``queries/passages.arrow`` and ``labels/labels-00000.arrow`` from real SciFact text."""
    import blingfire

    root = tmp_path_factory.mktemp("train-run")
    passages = []
    with (datasets_dir / "scifact" / "corpus.jsonl").open() as fh:
        for line in fh:
            doc = json.loads(line)
            passages.append({"row": len(passages), "id": doc["_id"], "title": doc["title"], "text": doc["text"]})
            if len(passages) == N_DOCS:
                break
    queries = []
    for p in passages:
        for s_i, sentence in enumerate(blingfire.text_to_sentences(p["text"]).split("\n")):
            if len(sentence.split()) >= 4:
                qid = f"{p['id']}-{s_i}"
                queries.append({"query_id": qid, "text": " ".join(sentence.split()[:64]), "source_passage_id": p["id"],
                                "source_row": p["row"], "split": "train"})
    rng = np.random.default_rng(0)
    for i in rng.choice(len(queries), 80, replace=False):
        queries[i]["split"] = "dev"
    from spar.core.artifacts import ArtifactWriter

    with ArtifactWriter(root / "queries", kind="queries", config={"fixture": "scifact-300"}, inputs={}) as w:
        schemas.write_table(w.path / "passages.arrow", pa.Table.from_pylist(passages, schemas.PASSAGES))
        schemas.write_table(w.path / "queries-00000.arrow", pa.Table.from_pylist(queries, schemas.QUERIES))
    labels = _bm25_labels(passages, queries)
    with ArtifactWriter(root / "labels", kind="labels", config={"fixture": "bm25"}, inputs={}) as w:
        # Two shards, so chunked (multi-batch) label columns are exercised.
        half = len(labels) // 2
        schemas.write_table(w.path / "labels-00000.arrow", pa.Table.from_pylist(labels[:half], schemas.LABELS))
        schemas.write_table(w.path / "labels-00001.arrow", pa.Table.from_pylist(labels[half:], schemas.LABELS))
    return root


def _tiny_train(**overrides) -> TrainSection:
    """Short sequences: a real run, small enough for a shared CPU."""
    base = dict(kind="transformer", batch_size=16, hard_negatives=1, learning_rate=3e-5, warmup_ratio=0.1,
                max_steps=30, val_check_interval=15, checkpoint_every_n_steps=10, log_every_n_steps=1,
                accelerator="cpu", devices=1, num_workers=0, wandb_mode="disabled", eval_batch_size=64,
                encoder={"model": "all-MiniLM-L6-v2", "pooling": "cls", "query_max_length": 24,
                         "passage_max_length": 48})
    base.update(overrides)
    return TrainSection.model_validate(base)


@pytest.fixture(autouse=True)
def _few_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI box is shared: one thread avoids OpenMP spin-waits under contention
    yield
    torch.set_num_threads(previous)


# ---------------------------------------------------------------------------------------------------------------


def test_surrogate_mrr_hand_computed():
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    pool = np.array([[3.0, 0.0],   # q0: 3, q1: 0, q2: 3
                     [1.0, 2.0],   # q0: 1, q1: 2, q2: 3
                     [0.0, 1.0]])  # q0: 0, q1: 1, q2: 1
    # q0's positive is passage 1 (score 1): passage 0 scores higher -> rank 2 -> 1/2
    # q1's positive is passage 1 (score 2): the best -> rank 1 -> 1
    # q2's positive is passage 0 (score 3): tied with passage 1 -> ties count against it -> rank 2 -> 1/2
    assert surrogate_mrr(q, pool, np.array([1, 1, 0])) == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    assert surrogate_mrr(torch.tensor(q), torch.tensor(pool), torch.tensor([0, 1, 1])) == pytest.approx(
        (1.0 + 1.0 + 0.5) / 3)
    with pytest.raises(ValueError):
        surrogate_mrr(q, pool, np.array([0, 1]))


def test_surrogate_pool_and_sampler_follow_the_labels(labelled: Path):
    labels = LabelStore(labelled / "labels")
    table = labels.table
    pool = SurrogatePool.from_labels(labels)
    dev = [r for r in table.to_pylist() if r["split"] == "dev"]
    assert len(pool.query_indices) == len(dev) == 80
    expected = {r["positive_rows"][0] for r in dev} | {r["negative_rows"][0] for r in dev if r["negative_rows"]}
    assert sorted(expected) == pool.pool_rows.tolist()  # at most 2N, deduplicated
    for qi, pi in zip(pool.query_indices, pool.positive_pool_index):
        assert pool.pool_rows[pi] == table.column("positive_rows")[int(qi)][0].as_py()

    train = labels.split_indices("train")
    sampler = ContrastiveBatchSampler(labels, train, batch_size=8, hard_negatives=2, seed=1,
                                      passage_lengths=np.ones(N_DOCS, dtype=np.int32))
    epoch0 = [item for batch in sampler for item in batch]
    assert len(epoch0) == len(sampler) * 8
    rows = table.to_pylist()
    for item in epoch0[:200]:
        rec = rows[item.label_index]
        assert rec["split"] == "train"
        assert 0 <= item.positive_slot < len(rec["positive_rows"])
        assert len(set(item.negative_slots)) == len(item.negative_slots) == min(2, len(rec["negative_rows"]))
    again = [item for batch in sampler for item in batch]
    assert again == epoch0  # seeded
    sampler.set_epoch(1)
    epoch1 = [item for batch in sampler for item in batch]
    assert [i.label_index for i in epoch1] != [i.label_index for i in epoch0]  # reshuffled every epoch
    # ... and each query's positive (and negatives) redrawn, not only the order: with up to 10 positives a fresh
    # draw keeps the same slot about once in 10, so most queries with several positives get another one.
    first = {i.label_index: i for i in epoch0}
    second = {i.label_index: i for i in epoch1}
    several = [q for q in first.keys() & second.keys() if len(rows[q]["positive_rows"]) > 1]
    assert len(several) > 100
    assert sum(first[q].positive_slot != second[q].positive_slot for q in several) > 0.6 * len(several)
    assert sum(first[q].negative_slots != second[q].negative_slots for q in several) > 0.3 * len(several)

    # Two ranks split every global batch without overlap.
    ranks = [ContrastiveBatchSampler(labels, train, 8, 1, seed=1, world_size=2, rank=r) for r in (0, 1)]
    first = [next(iter(s)) for s in ranks]
    assert not {i.label_index for i in first[0]} & {i.label_index for i in first[1]}


def test_batch_has_targets_masks_and_teacher_scores(labelled: Path):
    from spar.model.encoders import EncoderSettings
    from transformers import AutoTokenizer

    from spar.model.resolve import resolve_model

    labels = LabelStore(labelled / "labels")
    tok = AutoTokenizer.from_pretrained(str(resolve_model("all-MiniLM-L6-v2")))
    settings = EncoderSettings(query_max_length=16, passage_max_length=32)
    ds = TrainBatchDataset(labelled / "labels", labelled / "queries" / "passages.arrow", True,
                           TokenizingPreparer(tok, settings), kl_passages=N_POS + N_NEG)
    sampler = ContrastiveBatchSampler(labels, labels.split_indices("train"), 6, 1, seed=3)
    items = next(iter(sampler))
    batch = ds.__getitems__(items)
    rows = labels.table.to_pylist()
    assert batch["queries"]["input_ids"].shape[0] == 6
    assert batch["passages"]["input_ids"].shape[1] <= 32
    for i, item in enumerate(items):
        rec = rows[item.label_index]
        target_row = int(batch["passage_rows"][batch["target"][i]])
        assert target_row == rec["positive_rows"][item.positive_slot]
        assert batch["teacher_scores"][i, 0] == pytest.approx(rec["positive_scores"][item.positive_slot])
        cand = batch["candidates"][i]
        listed = [int(batch["passage_rows"][c]) for c in cand if c >= 0]
        assert sorted(listed) == sorted(rec["positive_rows"] + rec["negative_rows"])  # KL sees the whole list
        assert batch["positive_rows"][i][batch["positive_rows"][i] >= 0].tolist() == rec["positive_rows"]
    assert len(set(batch["passage_rows"].tolist())) == len(batch["passage_rows"])  # deduplicated


def test_every_loss_gives_finite_gradients(labelled: Path):
    """contrastive, contrastive+kl, kl and margin_mse on one real batch (KL over the query's whole labelled list)."""

    class _OneDevice:  # compute_loss reads the world size from the trainer
        world_size = 1

    cfg = _tiny_train(batch_size=4, hard_negatives=2, encoder={"model": "all-MiniLM-L6-v2", "query_max_length": 16,
                                                               "passage_max_length": 16, "shared_weights": True})
    module, data = build_module(TransformerLambda.from_section(cfg), cfg, labelled / "queries" / "passages.arrow",
                                labelled / "labels")
    module._trainer = _OneDevice()
    labels = data.labels
    sampler = ContrastiveBatchSampler(labels, data.train_indices, 4, 2, seed=0, require_negatives=True)
    items = next(iter(sampler))
    for loss in ("contrastive", "contrastive+kl", "kl", "margin_mse"):
        module.model.objective = ContrastiveObjective.from_section(cfg.model_copy(update={"loss": loss}))
        ds = TrainBatchDataset(labelled / "labels", labelled / "queries" / "passages.arrow", True,
                               module.model.batch_preparer(), kl_passages=N_POS + N_NEG if "kl" in loss else 0)
        batch = ds.__getitems__(items)
        terms = module.compute_loss(batch)
        assert torch.isfinite(terms["loss"]), loss
        module.zero_grad()
        terms["loss"].backward()
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads), loss
        if loss == "contrastive+kl":
            assert set(terms) == {"contrastive", "kl", "loss"}
    module._trainer = None


def _fixed_batch_loss(encoder, labelled: Path, batches: int = 3) -> float:
    """Contrastive loss of ``encoder`` (eval mode) on the same seeded training batches."""
    from spar.model.losses import contrastive_loss

    labels = LabelStore(labelled / "labels")
    ds = TrainBatchDataset(labelled / "labels", labelled / "queries" / "passages.arrow", True,
                           TokenizingPreparer(encoder.tokenizer, encoder.settings))
    sampler = ContrastiveBatchSampler(labels, labels.split_indices("train"), 16, 1, seed=123)
    encoder.eval()
    losses = []
    with torch.inference_mode():
        for items, _ in zip(sampler, range(batches)):
            batch = ds.__getitems__(items)
            q, p = encoder.forward_queries(batch["queries"]), encoder.forward_passages(batch["passages"])
            losses.append(float(contrastive_loss(q, p, batch["target"])))
    return float(np.mean(losses))


def _stage_config(root: Path, datasets_dir: Path, **train):
    overrides = [f"experiment.output_dir={root}", "experiment.name=test-train", "experiment.seed=7",
                 f"data.corpus={datasets_dir / 'scifact' / 'corpus.jsonl'}"]
    cfg = load_config(None, overrides)
    cfg.train = _tiny_train(**train)
    return cfg


@pytest.mark.slow  # the train stage of a transformer Λ on SciFact labels: ~3 min on 2 busy cores
def test_stage_trains_lambda_beyond_its_init_and_logs_to_wandb(labelled: Path, datasets_dir: Path, monkeypatch):
    import pipelines.train as stage
    from wandb_records import read_run

    monkeypatch.delenv("WANDB_MODE")  # W&B on (tests/conftest.py turns it off)
    from spar.core.artifacts import read_manifest
    from spar.model.encoders import BiEncoder

    cfg = _stage_config(labelled, datasets_dir, wandb_mode="offline", max_steps=24, val_check_interval=12)
    stats = stage.run(cfg)
    manifest = read_manifest(labelled / "lambda")
    m = manifest["stats"]
    assert m["steps"] == 24 and m["resumed_from_step"] == 0
    assert m["best_valid_mrr"] > m["initial_valid_mrr"] + 0.01, (m["initial_valid_mrr"], m["best_valid_mrr"])
    assert m["passages_per_s"] > 0 and m["queries_per_s"] > 0 and m["train_queries"] > 2000
    assert "valid_mrr" in stats and str(labelled / "lambda") == stats["output"]
    assert (labelled / "lambda" / "checkpoints" / "last.ckpt").exists()
    assert not list((labelled / "lambda" / "checkpoints").glob("best*"))
    assert not (labelled / "lambda.partial").exists()

    # The exported Λ is the best checkpoint: it reproduces the best valid_mrr, and its training loss fell.
    trained = BiEncoder.load(labelled / "lambda")
    assert trained.settings.pooling == "cls" and not trained.settings.shared_weights
    labels = LabelStore(labelled / "labels")
    pool = SurrogatePool.from_labels(labels)
    q = trained.encode_query(labels.queries(pool.query_indices))
    p = trained.encode_passage(PassagesTable(labelled / "queries" / "passages.arrow").get(pool.pool_rows))
    assert surrogate_mrr(q, p, pool.positive_pool_index) == pytest.approx(m["best_valid_mrr"], abs=2e-3)
    initial = BiEncoder.from_section(cfg.train.encoder)
    before, after = _fixed_batch_loss(initial, labelled), _fixed_batch_loss(trained, labelled)
    assert after < before, (before, after)

    # W&B offline run under <output_dir>/wandb: the logged history and the resolved config.
    runs = sorted((labelled / "wandb").glob("offline-run-*"))
    assert runs
    run = read_run(runs[-1])
    history, summary, config = run.history, run.summary, run.config
    assert run.job_type == "train" and run.logged["test-train-lambda"]["type"] == "lambda"  # the stage's one run
    logged = set().union(*history)
    for key in ("train/loss", "valid_mrr", "throughput/passages_per_s", "throughput/queries_per_s"):
        assert key in logged, (key, sorted(logged))
    assert any(k.startswith("lr-AdamW") for k in logged), sorted(logged)
    mrrs = [row["valid_mrr"] for row in history if "valid_mrr" in row]
    initial = [row["initial_valid_mrr"] for row in history if "initial_valid_mrr" in row]
    assert initial == [pytest.approx(m["initial_valid_mrr"])] and max(mrrs) == pytest.approx(m["best_valid_mrr"])
    assert summary["best_valid_mrr"] == pytest.approx(m["best_valid_mrr"])
    assert config["experiment"]["name"] == "test-train" and config["train"]["hard_negatives"] == 1

    # Complete and up to date: the stage skips.
    assert stage.run(cfg) == {"skipped": True}


@pytest.mark.slow  # three training processes, one killed: ~2 min
def test_resume_after_a_kill_is_identical_to_an_uninterrupted_run(labelled: Path, one_layer_minilm: Path,
                                                                  tmp_path: Path):
    """Killed after a checkpoint, re-run: same global step, the remaining batches in the same order and the same
    random state (dropout), so the final weights equal an uninterrupted run's bit for bit."""
    import lightning.pytorch as pl

    class Kill(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 5:
                raise RuntimeError("killed")

    work = tmp_path / "lambda.partial"
    args = (labelled / "queries" / "passages.arrow", labelled / "labels", work)
    cfg = _tiny_train(max_steps=9, val_check_interval=100, checkpoint_every_n_steps=3, batch_size=8,
                      encoder={"model": str(one_layer_minilm), "query_max_length": 16, "passage_max_length": 24})
    with pytest.raises(RuntimeError, match="killed"):
        train_lambda(TransformerLambda.from_section(cfg), cfg, *args, seed=3, enable_progress_bar=False,
                     callbacks=[Kill()])
    saved = torch.load(work / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == 3

    resumed = train_lambda(TransformerLambda.from_section(cfg), cfg, *args, seed=3, enable_progress_bar=False)
    assert resumed.resumed_from_step == 3
    assert resumed.steps == 9
    assert len(resumed.losses) == 6  # steps 4..9 only
    final = torch.load(work / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert final["global_step"] == 9

    straight_dir = tmp_path / "straight.partial"
    straight = train_lambda(TransformerLambda.from_section(cfg), cfg, args[0], args[1], straight_dir, seed=3,
                            enable_progress_bar=False)
    assert straight.losses[3:] == resumed.losses  # the same batches, in the same order, with the same dropout
    reference = torch.load(straight_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    differing = [k for k, v in reference["state_dict"].items() if not torch.equal(v, final["state_dict"][k])]
    assert not differing, f"{len(differing)} of {len(reference['state_dict'])} tensors differ, e.g. {differing[:3]}"


def test_sampler_resumes_mid_epoch_in_the_same_order(labelled: Path):
    labels = LabelStore(labelled / "labels")
    sampler = ContrastiveBatchSampler(labels, labels.split_indices("train"), 8, 1, seed=5)
    full = list(sampler)
    sampler.skip_batches(3)
    assert list(sampler) == full[3:]
    assert list(sampler) == full  # the skip applies once


@pytest.mark.slow
def test_two_process_ddp_on_cpu_trains_with_gathered_negatives(labelled: Path, one_layer_minilm: Path,
                                                               datasets_dir: Path, tmp_path: Path):
    """The multi-device path end to end: `spar train` with devices=2 (Lightning's DDP launcher re-runs the command
    as rank 1), sharded batches, all-gathered passages, gathered validation, rank 0 exports and writes the manifest."""
    import shutil
    import subprocess
    import sys

    from spar.core.artifacts import read_manifest
    from spar.model.encoders import BiEncoder

    out = tmp_path / "run"
    for name in ("queries", "labels"):
        shutil.copytree(labelled / name, out / name)
    cmd = [sys.executable, "-m", "pipelines.cli", "train", f"experiment.output_dir={out}",
           f"data.corpus={datasets_dir / 'scifact' / 'corpus.jsonl'}", "train.kind=transformer",
           f"train.encoder.model={one_layer_minilm}",
           "train.accelerator=cpu", "train.devices=2",
           "train.max_steps=4", "train.batch_size=8", "train.val_check_interval=2", "train.wandb_mode=disabled",
           "train.encoder.query_max_length=16", "train.encoder.passage_max_length=24", "train.num_workers=0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stats = read_manifest(out / "lambda")["stats"]
    assert stats["world_size"] == 2 and stats["steps"] == 4
    assert stats["initial_valid_mrr"] > 0 and stats["best_valid_mrr"] > 0
    assert BiEncoder.load(out / "lambda").settings.passage_max_length == 24
    assert not (out / "lambda.partial").exists()


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_clips_the_fused_optimizers_gradients(labelled: Path, one_layer_minilm: Path, tmp_path: Path,
                                                              precision: str):
    """The GPU default (precision bf16-mixed, gradient_clip on, fused AdamW) on the CPU: Lightning's own mixed
    precision refused to clip a fused optimizer ("does not allow for gradient clipping") at the first step. Each
    step's gradients, as the optimizer used them, must have a norm within the clip (1e-3 here: far below the raw
    gradients', so a step that did not clip fails). fp16's loss scaler starts at 2**16 and skips the steps whose
    gradients overflow while it halves its scale: those steps' gradients are not finite and are not checked. The
    claim is about the wiring, not what is learnt: a one-layer MiniLM (two of its 8 fp16 steps overflow)."""
    import lightning.pytorch as pl

    clip = 1e-3
    norms: list[float] = []
    optimizers: list[torch.optim.Optimizer] = []

    class GradientNorms(pl.Callback):
        def on_before_zero_grad(self, trainer, pl_module, optimizer):  # after the step, before the next backward
            optimizers.append(optimizer)
            grads = [p.grad.float() for p in pl_module.parameters() if p.grad is not None]
            if grads:
                norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

    steps = 3 if precision == "bf16-mixed" else 8
    cfg = _tiny_train(max_steps=steps, val_check_interval=100, batch_size=4, precision=precision, gradient_clip=clip,
                      encoder={"model": str(one_layer_minilm), "query_max_length": 12, "passage_max_length": 16})
    result = train_lambda(TransformerLambda.from_section(cfg), cfg, labelled / "queries" / "passages.arrow",
                          labelled / "labels", tmp_path / "lambda.partial", enable_progress_bar=False,
                          callbacks=[GradientNorms()])
    assert result.steps == steps and result.precision == precision
    assert optimizers and all(o.defaults.get("fused") for o in optimizers)  # the fused kernel is kept
    finite = [n for n in norms if np.isfinite(n)]
    assert len(finite) >= 2 and max(finite) <= clip * 1.01, norms
    assert all(np.isfinite(result.losses))


def test_batch_kl_scores_every_pair_of_the_batch_with_the_exact_teacher(labelled: Path):
    """train.kl_target=batch: the KL list is the batch's own passages (no labelled passage beyond contrastive's),
    each (query, passage) pair scored by the BM25 teacher fitted on the corpus; the loss has a finite gradient."""
    from spar.lexical import build_lambda

    class _OneDevice:
        world_size = 1

    cfg = _tiny_train(batch_size=6, loss="contrastive+kl", kl_target="batch",
                      encoder={"model": "all-MiniLM-L6-v2", "query_max_length": 16, "passage_max_length": 16})
    passages = labelled / "queries" / "passages.arrow"
    lam = build_lambda(cfg, passages, teacher="bm25", k1=0.9, b=0.4, fields=["title", "text"], seed=0)
    module, data = build_module(lam, cfg, passages, labelled / "labels")
    assert data.kl_passages == 0 and data.passages_per_query == 2  # contrastive's passages only
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    n_q, n_p = batch["target"].shape[0], batch["passage_rows"].shape[0]
    teacher = batch["teacher_matrix"]
    assert teacher.shape == (n_q, n_p) and n_p >= n_q
    # The labels' positive of each query outscores its labelled hard negative under the refitted teacher as well
    # (the labels come from another BM25 implementation, so only the order is compared, not the values).
    own = teacher[torch.arange(n_q), batch["target"]]
    negative = teacher[torch.arange(n_q), batch["candidates"][:, 1]]
    assert (own > 0).all() and (own >= negative).float().mean() >= 0.8, (own, negative)
    module._trainer = _OneDevice()
    terms = module.compute_loss(batch)
    assert set(terms) == {"contrastive", "kl", "loss"} and torch.isfinite(terms["loss"])
    terms["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)
    module._trainer = None
    with pytest.raises(Exception, match="label.teacher=bm25"):
        build_lambda(cfg, passages, teacher="impact", k1=0.9, b=0.4, fields=["title", "text"], seed=0)


@pytest.mark.slow  # worker processes start torch: minutes on 2 shared cores (CI's second command runs it)
def test_dataloader_workers_give_the_batches_of_the_main_process(labelled: Path, one_layer_minilm: Path,
                                                                tmp_path: Path):
    """num_workers > 0 (what `auto` gives on a GPU) on the CPU: the workers prepare the same batches as the main
    process (same losses, step by step), the batch-KL teacher's sparse matrices included (pickled to each worker)."""
    from spar.lexical import build_lambda

    passages = labelled / "queries" / "passages.arrow"
    losses = {}
    for workers in (0, 2):
        cfg = _tiny_train(max_steps=3, val_check_interval=100, batch_size=4, num_workers=workers,
                          loss="contrastive+kl", kl_target="batch",
                          encoder={"model": str(one_layer_minilm), "query_max_length": 12, "passage_max_length": 16})
        lam = build_lambda(cfg, passages, teacher="bm25", k1=0.9, b=0.4, fields=["title", "text"], seed=0)
        result = train_lambda(lam, cfg, passages, labelled / "labels", tmp_path / f"w{workers}", seed=7,
                              enable_progress_bar=False)
        losses[workers] = result.losses
    assert len(losses[0]) == 3 and losses[2] == pytest.approx(losses[0], rel=1e-5)
def test_two_identical_trainings_have_one_fingerprint(labelled: Path, tmp_path: Path):
    """#37 item 11: Λ's fingerprint hashed its manifest, which records when and how fast it was made: two identical
    trainings got different fingerprints, and everything downstream recomputed. A Λ trained now is identified by its
    content (its files and its manifest's settings fingerprint); one made before keeps the fingerprint it had."""
    import shutil

    import pipelines.train
    from spar.core.fingerprint import directory_fingerprint
    from spar.core.lineage import fingerprint_of
    from spar.experiment.lambda_source import resolve_lambda

    fingerprints, lineage = [], []
    for name in ("a", "b"):
        run = tmp_path / name
        for artifact in ("queries", "labels"):
            shutil.copytree(labelled / artifact, run / artifact)
        cfg = load_config(None, [f"experiment.output_dir={run}", "train.kind=static", "train.lexical.dim=16",
                                 "train.batch_size=8", "train.random_negatives=8", "train.max_steps=3",
                                 "train.val_check_interval=2", "train.wandb_mode=disabled", "train.accelerator=cpu",
                                 "train.devices=1", "train.num_workers=0"])
        pipelines.train.run(cfg)
        fingerprints.append(resolve_lambda(None, run).fingerprint())
        lineage.append(fingerprint_of(run / "lambda", "files"))
    manifests = [json.loads((tmp_path / n / "lambda" / "manifest.json").read_text()) for n in ("a", "b")]
    assert manifests[0]["created"] != manifests[1]["created"] or manifests[0]["seconds"] != manifests[1]["seconds"]
    assert fingerprints[0] == fingerprints[1] and lineage[0] == lineage[1] == fingerprints[0]
    # Another Λ's content is another fingerprint.
    changed = tmp_path / "c"
    shutil.copytree(tmp_path / "a" / "lambda", changed)
    (changed / "vocab.txt").write_text((changed / "vocab.txt").read_text() + "zzz\n")
    assert fingerprint_of(changed, "files") != fingerprints[0]
    # A Λ made before (its manifest without the mark) keeps its fingerprint: runs made before stay up to date.
    older = tmp_path / "older"
    shutil.copytree(tmp_path / "a" / "lambda", older)
    manifest = json.loads((older / "manifest.json").read_text())
    del manifest["stats"]["identity"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    assert fingerprint_of(older, "files") == directory_fingerprint(older) != fingerprints[0]


def test_checkpoint_interval_auto_is_per_device(monkeypatch):
    """``train.checkpoint_every_n_steps: auto``: 50 steps on the CPU, 500 on a GPU (a transformer Λ's last.ckpt is
    hundreds of MB: every 50 steps at a GPU's step rate it was a third of the time, bench/train_overheads.py)."""
    import torch

    from spar.core.config import load_config
    from spar.train.training import CHECKPOINT_EVERY, resolve_checkpoint_every

    cfg = load_config(None, [])
    assert cfg.train.checkpoint_every_n_steps == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_checkpoint_every(cfg.train) == CHECKPOINT_EVERY["cpu"] == 50
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_checkpoint_every(cfg.train) == CHECKPOINT_EVERY["gpu"] == 500
    pinned = load_config(None, ["train.accelerator=cpu"]).train
    assert resolve_checkpoint_every(pinned) == 50  # a GPU machine told to train on its CPU
    assert resolve_checkpoint_every(load_config(None, ["train.checkpoint_every_n_steps=7"]).train) == 7
    for bad in ("0", "-3", "often"):
        with pytest.raises(Exception, match="checkpoint_every_n_steps"):
            load_config(None, [f"train.checkpoint_every_n_steps={bad}"])
