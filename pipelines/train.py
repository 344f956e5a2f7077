"""Stage ``train``: the lexical model Λ learns to imitate the sparse teacher (SPAR §3, §4.1, §5.4).

Reads ``<output_dir>/queries/passages.arrow`` and ``<output_dir>/labels/`` (not for a fitted kind) and writes
``<output_dir>/lambda/``: the best-``valid_mrr`` Λ saved by its kind (``spar_lambda.json`` and the kind's ``files``),
``checkpoints/last.ckpt`` (Lightning, to continue training) and a manifest with the run's figures. Training runs in
``lambda.partial/``; re-running after a kill resumes from its last checkpoint. The logic lives in
:mod:`spar.train.training` (its docstring has the multi-GPU and multi-node commands); W&B logs go to
``<output_dir>/wandb``.

    spar train                                            # the embedded SciFact sample, on CPU in minutes
    spar train -c configs/experiments/scifact.yaml train.devices=4 train.wandb_mode=online
"""

from __future__ import annotations

from pathlib import Path

from spar.core.artifacts import ArtifactWriter, is_complete
from spar.core.config import SparConfig
from spar.core.fingerprint import CONTENT_IDENTITY
from spar.lexical import build_lambda
from spar.core.stage import Stage, Unit
from spar.experiment.plan import Experiment
from spar.train.training import is_primary_process, summarize, train_lambda


def fingerprint_config(cfg: SparConfig) -> dict:
    """What the trained Λ depends on (:func:`spar.experiment.declarations.lambda_`)."""
    return Experiment.of(cfg).artifact("lambda").settings


def plan(cfg: SparConfig, force: bool = False) -> Unit:
    """``lambda/`` as the experiment declares it; ``primary``: extra DDP ranks train alongside rank 0 in the same work
    directory, and rank 0 exports and finalises."""
    return Experiment.of(cfg).artifact("lambda").unit(primary=is_primary_process())


def work(cfg: SparConfig, w: ArtifactWriter, unit: Unit) -> dict:
    experiment = Experiment.of(cfg)
    ldir, passages, label = experiment.run.artifact("labels"), experiment.run.passages, experiment.label
    # A term-based Λ densifies the teacher's term weighting (BM25's, for the BM25 teachers).
    scores = experiment.teacher.term_weighting or label.teacher
    model = build_lambda(experiment.train, passages, teacher=scores, k1=label.k1, b=label.b, fields=label.fields,
                         seed=experiment.seed)
    if not model.trainable:
        return _fit_only(cfg, model, w)
    # W&B: the run's name and group, and the whole config as its record (runtime: no artifact changes with them).
    options = dict(seed=experiment.seed, use_title=experiment.data.title_field, run_name=f"{experiment.name}-lambda",
                   logger_root=cfg.output_dir, run_config=cfg.model_dump(mode="json"), wandb_group=experiment.name)
    result = train_lambda(model, experiment.train, passages, ldir, w.path, **options)
    if not unit.primary:
        return {"rank": "worker"}
    w.stats.update(result.stats(), **CONTENT_IDENTITY)  # identified by its content, not its timings (#37)
    w.stats["lambda"] = model.describe()
    training = {"steps": result.steps, "epochs": result.epochs, "seconds": round(result.seconds),
                "devices": result.world_size, "valid MRR (first → best)":
                f"{_round(result.initial_valid_mrr)} → {_round(result.best_valid_mrr)} (step {result.best_step})"}
    write_card(cfg, model, w.path, w.fingerprint, training)
    w.schema = {**model.files, **CARD_SCHEMA,
                "checkpoints/last.ckpt": "Lightning checkpoint (weights, optimiser, loops)"}
    return {
        "summary": summarize(result),
        "steps": result.steps,
        "epochs": result.epochs,
        "passages/s": result.passages_per_s,
        "valid_mrr": f"{result.initial_valid_mrr} -> {result.best_valid_mrr} (best at step {result.best_step})",
        "logs": result.logger_dir,
        "output": str(unit.output),
    }


def refuse_replacing_another_kind(cfg: SparConfig, unit: Unit) -> None:
    """Another Λ kind in the same output directory would silently replace the earlier Λ and, downstream, its index,
    results and model: refuse unless ``--force`` (issue #22)."""
    out = unit.output
    if not is_complete(out):
        return
    from spar.core.artifacts import read_manifest
    from spar.core.errors import ArtifactError

    earlier = read_manifest(out).get("stats", {}).get("lambda", {})
    kind = Experiment.of(cfg).train.kind
    if earlier.get("kind") and earlier["kind"] != kind:
        raise ArtifactError(
            f"{out}: holds a {earlier['kind']} Λ ({earlier.get('dim')} dims); train.kind={kind} would "
            "replace it and the index, results and model made from it: give this experiment its own "
            "experiment.output_dir (and experiment.name), or re-run with --force to replace it")


def _round(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


#: The files every Λ directory has besides its kind's own.
CARD_SCHEMA = {"README.md": "model card: kind, dim, teacher, training data, statistics, how to use it elsewhere",
               "manifest.json": "fingerprint, config, inputs, figures"}


def write_card(cfg: SparConfig, model, directory, fingerprint: str, training: dict | None = None) -> None:
    """The Λ's model card ``README.md`` (:mod:`spar.lexical.card`), from the run's config and query manifest."""
    from spar.core.artifacts import read_manifest
    from spar.lexical.card import lambda_card, lambda_card_facts

    experiment = Experiment.of(cfg)
    queries = read_manifest(experiment.run.artifact("queries")).get("stats", {})
    facts = lambda_card_facts(experiment.run_facts(), queries, fingerprint, training,
                              experiment.run.command_line("train"))
    (Path(directory) / "README.md").write_text(lambda_card(model.describe(), facts), encoding="utf-8")


def _fit_only(cfg: SparConfig, model, w: ArtifactWriter) -> dict:
    """A training-free Λ (projection): its corpus statistics are fitted already; save it as the stage's output."""
    model.save(w.path)
    write_card(cfg, model, w.path, w.fingerprint, {"training": "none (fitted: corpus statistics)"})
    w.stats = {"lambda": model.describe(), "steps": 0, **CONTENT_IDENTITY}
    w.schema = {**model.files, **CARD_SCHEMA}
    teacher = model.describe()["teacher"]
    return {"kind": model.kind, "dim": model.dim, "terms": f"{teacher['vocab_size']:,}",
            "passages": f"{teacher['num_docs']:,}", "output": str(w.final)}


STAGE = Stage(name="train", sections=("experiment", "data", "sample", "label", "train"), plan=plan, work=work,
              guard=refuse_replacing_another_kind,
              summary="train the lexical model Λ with Lightning on the teacher's labels (W&B-monitored, resumable) "
              "-> lambda/")
run = STAGE.run
