"""Stage `encode`: passages and dev/test queries with the base retriever and Λ -> ``embeddings/<encoder>/<split>/``.

Λ is this run's ``lambda/`` or, with ``encode.lambda``, one trained elsewhere (:mod:`spar.lambda_source`).
Splits: ``passages`` (``queries/passages.arrow`` from the sample stage, else ``data.corpus``), ``queries-dev`` and
``queries-test`` (:func:`spar.experiment.split_queries`, the split tune and evaluate use, when configured). Every
split is its own resumable artifact; see :mod:`spar.embeddings`.
"""

from __future__ import annotations

import logging

from spar.artifacts import artifact_dir, fingerprint_dict, file_fingerprint
from spar.embeddings import EncodeOptions, encode_passages, encode_queries, split_dir
from spar.passages import experiment_passages

SECTIONS = ["experiment", "data", "encode"]
SUMMARY = "encode the corpus and dev/test queries with the base retriever and Λ -> embeddings/"

log = logging.getLogger(__name__)


def query_sets(cfg) -> dict[str, list[tuple[str, str]]]:
    """``{"queries-dev": [(id, text)], "queries-test": [...]}`` for the splits the data section configures: exactly
    the queries tune and evaluate use (:func:`spar.experiment.split_queries`, seeded by ``experiment.seed``)."""
    from spar.experiment import split_queries

    data = cfg.data
    if not data.queries:
        return {}
    wanted = []
    if data.qrels_dev or data.dev_holdout_fraction is not None:
        wanted.append("dev")
    if data.qrels_test:
        wanted.append("test")
    sets = {}
    for split in wanted:
        queries = split_queries(cfg, split)
        # qrels-file order, as stored before the split had one owner (unchanged vectors and fingerprints)
        sets[f"queries-{split}"] = [(q, queries.texts[q]) for q in queries.qrels]
    return sets


def load_encoder(cfg, name: str):
    """(BiEncoder, weights fingerprint, extra manifest inputs) of ``base`` or ``lambda``."""
    from spar.encoders import BiEncoder
    from spar.models import model_fingerprint

    if name == "base":
        section = cfg.encode.base
        weights = fingerprint_dict({"model": model_fingerprint(section.model), "passage_model":
                                    model_fingerprint(section.passage_model) if section.passage_model else None})
        return BiEncoder.from_section(section), weights, {}
    from spar.lambda_source import experiment_lambda

    source = experiment_lambda(cfg)
    model = source.load()
    # The source's fingerprint hashes Λ's files; its origin is recorded without machine-specific paths (the target
    # corpus's content is in the fingerprint). The encode engines drive what the Λ names (a transformer's
    # bi-encoder: tokenised, length-sorted, multi-device).
    extra = {"lambda_source": {k: v for k, v in source.describe().items() if k not in ("path", "statistics_from")}}
    return model.batch_encoder(), source.fingerprint(), extra


def passage_titles(cfg, encoder) -> bool:
    """Whether ``encoder`` is handed passages with their titles: ``data.title_field`` for a transformer; always for a
    term-based Λ, whose own fields (the teacher's, fixed when it was fitted) make its text."""
    return cfg.data.title_field or bool(getattr(encoder, "term_based", False))


def run(cfg, force: bool = False) -> dict:
    enc = cfg.encode
    root = artifact_dir(cfg.output_dir, "embeddings")
    source = experiment_passages(cfg)
    queries = query_sets(cfg)
    options = EncodeOptions(batch_size=enc.batch_size, accelerator=enc.accelerator, devices=enc.devices,
                            engine=enc.engine, precision=enc.precision, strategy=enc.strategy)
    rows, all_skipped = [], True
    for name in enc.encoders:
        encoder, weights, extra = load_encoder(cfg, name)
        common = dict(weights_fingerprint=weights, encoder_name=name, shard_size=enc.shard_size, dtype=enc.dtype,
                      options=options, force=force)
        stats = encode_passages(encoder, source, split_dir(root, name, "passages"),
                                corpus_format=cfg.data.corpus_format,
                                on_bad_record=cfg.experiment.on_bad_record, use_titles=passage_titles(cfg, encoder),
                                inputs=extra, **common)
        rows.append((name, "passages", stats))
        for split, pairs in queries.items():
            qinputs = {**extra, "queries_file": file_fingerprint(cfg.data.queries)}
            rows.append((name, split, encode_queries(encoder, pairs, split_dir(root, name, split), inputs=qinputs,
                                                     **common)))
        del encoder
    all_skipped = all(s.get("skipped") for _, _, s in rows)
    result: dict = {"skipped": True} if all_skipped else {}
    result["source"] = str(source)
    for name, split, s in rows:
        if s.get("skipped"):
            result[f"{name}/{split}"] = f"{s['count']:,} x {s['dim']} (up to date)"
            continue
        truncated = f", {s['truncated']:,} truncated at {s['max_length']} tokens" if s["truncated"] else ""
        speed = f", {s['items_per_second']:,.1f}/s" if s.get("items_per_second") else ""
        resumed = f", {s['resumed_shards']} shards resumed" if s.get("resumed_shards") else ""
        result[f"{name}/{split}"] = f"{s['count']:,} x {s['dim']} {s['dtype']}{truncated}{speed}{resumed}"
    return result
