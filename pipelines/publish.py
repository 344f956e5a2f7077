"""Stage ``publish``: export the combined SPAR encoders as one self-contained model directory -> ``model/``.

Reads ``lambda/`` (Λ), ``tune/tune.json`` (μ and the variant), ``index/`` (checked against the run; copied in with
``publish.copy_index=true``, else found beside the model by ``spar search MODEL_DIR``) and the base retriever from
``encode.base``; writes the model directory (``publish.output``, default ``<output_dir>/model``) with a model card,
and uploads it when ``publish.push_to_hub=REPO_ID`` is set. The model records no absolute path (its config's paths
are relative to it). Logic and layout: :mod:`spar.publish.model_dir`.
"""

from __future__ import annotations

import json
from pathlib import Path

from spar.core.artifacts import ArtifactWriter, is_complete, read_manifest, write_json_atomic
from spar.core.errors import ArtifactError
from spar.core.stage import Stage, Unit
from spar.core.tracking import Report, figures
from spar.evaluate.tuning import read_tuned
from spar.experiment.inputs import ExperimentInputs, resolved_index
from spar.experiment.plan import Experiment
from spar.index.files import require_index
from spar.index.files import index_info as index_info_of

#: Marker of the last successful upload (dot file: never uploaded itself).
PUSH_MARKER = ".hub_push.json"


def plan(cfg, force: bool = False) -> Unit:
    """``model/`` as the experiment declares it (:func:`spar.experiment.declarations.model`), from μ of
    ``tune/`` (refused naming `spar tune` when missing) and the index (checked against the run)."""
    experiment = Experiment.of(cfg)
    tuned = read_tuned(experiment.output_dir)  # fails naming `spar tune` when μ is missing
    index_dir = experiment.run.artifact("index")
    require_index(index_dir)
    ExperimentInputs(cfg, experiment).check_embeddings()  # vectors encode would not make now: `spar encode`, first
    # An override the index cannot honour is refused, also when the model is up to date (as evaluate does).
    _check_served(cfg, tuned, index_dir)
    return experiment.artifact("model", tuned=tuned.path).unit(
        payload=(experiment.lambda_source, tuned, index_dir, experiment.run.results[1]))


def work(cfg, w: ArtifactWriter, unit: Unit) -> dict:
    from spar.model.encoders import BiEncoder
    from spar.publish.card import gather_card_facts, model_provenance
    from spar.publish.model_dir import MODEL_CONFIG, SparEncoder, publish_model

    source, tuned, index_dir, results_md = unit.payload
    index_info = index_info_of(index_dir, required=False)
    variant = tuned.variant
    _check_index_is_current(cfg, index_dir)
    experiment = Experiment.of(cfg)
    run, base_section, publish = experiment.run, experiment.encode.base, experiment.publish
    base = BiEncoder.from_section(base_section)
    out = unit.output
    run_facts = experiment.run_facts()
    provenance = _portable_provenance(model_provenance(run_facts, base_section.model, source, tuned.payload,
                                                       index_info), out)
    encoder = SparEncoder(base, source.load(), tuned.mu(variant), variant, metadata={"provenance": provenance})
    manifests = {name: _manifest_or_empty(run.artifact(name)) for name in ("queries", "labels")}
    manifests["lambda"] = {} if source.published else _manifest_or_empty(source.location)
    config_yaml = portable_config_yaml(cfg, out)
    command = run.command_line("run")
    results_text = results_md.read_text(encoding="utf-8") if results_md.exists() else None
    if results_text is not None:  # the results table ends with the command that made it
        results_text = results_text.replace(command, _portable_command(command))
    results_json = results_md.with_suffix(".json")
    encoding = run.encoding()
    encoder.metadata["provenance"]["encoding"] = encoding  # spar_model.json: the precision the index was made in
    facts = gather_card_facts(run_facts, base_section, publish, experiment.dev_pool_description(), encoder,
                              tuned.payload, manifests, results_text, _portable_command(command), config_yaml,
                              source.describe(), encoding=encoding,
                              results=json.loads(results_json.read_text()) if results_json.exists() else None)
    passages = run.passages
    publish_model(encoder, w.path, facts, config_yaml, index_dir=index_dir,
                  passages=passages if passages.exists() else None, copy_index=publish.copy_index)
    w.stats = {"variant": variant, "mu": encoder.mu, "dim": encoder.dim,
               "index": "copied into the model" if publish.copy_index else "none (the run's index/ beside it)"}
    w.schema = {MODEL_CONFIG: "format, variant, mu, dims, encoders, index, provenance",
                "modules.json": "sentence-transformers Router (query/document routes)"}
    return {"output": str(out), "variant": variant, "mu": encoder.mu, "dim": encoder.dim,
            "load": f'SentenceTransformer("{out}", trust_remote_code=True) or SparEncoder.from_pretrained("{out}")',
            "search": f'spar search {out} "your query"'}


def portable_config_yaml(cfg, model_dir: Path) -> str:
    """The resolved config as YAML, its paths relative to the model directory: ``spar run spar_config.yaml`` in
    place reads the same files, and the model names no directory of the machine that made it."""
    import yaml

    from spar.core.config import SparConfig
    from spar.core.config_fields import relative_paths

    tree = cfg.model_dump(mode="json", by_alias=True)
    relative_paths(tree, SparConfig, Path(model_dir).resolve())
    return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)


def _portable_provenance(provenance: dict, model_dir: Path) -> dict:
    """``spar_model.json``'s provenance without absolute paths (Λ's location goes; paths become relative)."""
    from spar.publish.model_dir import portable_path

    base = Path(model_dir).resolve()
    out = {k: portable_path(v, base) for k, v in provenance.items()}
    source = dict(provenance.get("lambda_source") or {})
    source.pop("path", None)  # the resolved location: `spec` says what was asked for
    out["lambda_source"] = {k: portable_path(v, base) for k, v in source.items()} or None
    return out


def _portable_command(command: str) -> str:
    """The reproducing command with absolute paths written relative to the current directory."""
    import os
    import shlex

    def portable(token: str) -> str:
        key, sep, value = token.partition("=") if "=" in token and not token.startswith("/") else ("", "", token)
        if os.path.isabs(value):
            value = os.path.relpath(value)
        return f"{key}{sep}{value}"

    try:
        tokens = shlex.split(command)
    except ValueError:
        return command
    return shlex.join(portable(t) for t in tokens)


def _manifest_or_empty(path: Path) -> dict:
    return read_manifest(path) if is_complete(path) else {}


def finish(cfg, stats: dict, unit: Unit) -> dict:
    """Upload the (new or up-to-date) model directory when ``publish.push_to_hub`` is set."""
    experiment = Experiment.of(cfg)
    return {**stats, **_push(experiment, experiment.model_dir)} if experiment.publish.push_to_hub else stats


def _check_served(cfg, tuned, index_dir: Path) -> None:
    """The index serves what the config asks for (an override it cannot honour is refused: the card's config is
    what is served), with the variant and the stored passage vectors μ was tuned for."""
    from spar.index.spar_index import check_serves

    index_info = index_info_of(index_dir, required=False)
    if not index_info:
        return
    if index_info.get("variant") and index_info["variant"] != tuned.variant:
        raise ArtifactError(f"{index_dir}: the index is '{index_info['variant']}' but μ was tuned for "
                            f"'{tuned.variant}' ({tuned.path}); re-run `spar tune` and `spar index` with one "
                            "index.variant")
    experiment = Experiment.of(cfg)
    check_serves(index_info, experiment.index, experiment.seed, index_dir)
    tuned.check_served_by(index_info, index_dir)  # μ of the model must match the stored passage vectors


def _check_index_is_current(cfg, index_dir: Path) -> None:
    """As ``evaluate`` does: never publish an index built from other passage vectors than the run's current ones
    (Λ re-encoded but not re-indexed would pair the new query Λ with old passages). The vectors themselves were
    checked by :func:`plan` (``check_embeddings``)."""
    inputs = ExperimentInputs(cfg)
    if not all(is_complete(inputs.passage_dir(name)) for name in ("base", "lambda")):
        return  # a run without passage embeddings (an index built elsewhere): nothing to compare with
    inputs.check_index(index_dir)


def _push(experiment: Experiment, out: Path) -> dict:
    from spar.publish.model_dir import push_to_hub

    marker, repo_id = out / PUSH_MARKER, experiment.publish.push_to_hub
    manifest = read_manifest(out)
    if marker.exists():
        done = json.loads(marker.read_text())
        if done.get("repo_id") == repo_id and done.get("fingerprint") == manifest["fingerprint"]:
            return {"hub": f"{repo_id} (already uploaded)"}
    url = push_to_hub(out, repo_id, private=experiment.publish.private,
                      commit_message=f"spar publish: {experiment.name} (mu={manifest['stats'].get('mu')})")
    write_json_atomic(marker, {"repo_id": repo_id, "fingerprint": manifest["fingerprint"], "commit": url})
    return {"hub": url}


def report(cfg, written: dict) -> Report:
    """The W&B run's numbers: the model directory's size and files, μ, the variant and the dimension."""
    manifest = next(iter(written.values()))
    sizes = [record["bytes"] for record in (manifest.get("checksums") or {}).values()]
    return Report(summary={**figures(manifest), "size_bytes": sum(sizes), "files": len(sizes)})


STAGE = Stage(name="publish", sections=("experiment", "data", "sample", "label", "train", "encode", "tune", "index",
                                        "publish"),
              summary="export the combined SPAR encoders (sentence-transformers + HF + spar) with a model card -> "
              "model/", plan=plan, work=work, finish=finish, report=report,
              prepare=resolved_index)
run = STAGE.run
