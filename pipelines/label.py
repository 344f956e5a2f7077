"""Stage ``label``: the sparse teacher ranks passages for every sampled query (SPAR §4.1).

Writes ``<output_dir>/teacher_index/`` (Lucene BM25 or impact index of ``queries/passages.arrow``; reused while its
manifest matches) and ``<output_dir>/labels/labels-NNNNN.arrow``. The logic lives in :mod:`spar.teachers` and
:mod:`spar.labelling`.

    spar label                                   # resumable: a killed run continues at the first missing shard
    spar label label.num_shards=4 label.shard_index=2   # machine 2 of 4 -> labels-part-2-of-4/

Several machines: run each part with the same config and ``label.shard_index`` = 0..N-1. Each writes
``labels-part-<i>-of-<N>/``. When all N part directories sit in one output directory (shared file system, or copy
them there), the next ``spar label label.num_shards=N label.shard_index=<any>`` merges them into ``labels/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from spar import schemas
from spar.artifacts import (ArtifactWriter, artifact_dir, file_fingerprint, is_complete, manifest_fingerprint,
                            read_manifest, remove_stale_temporaries, require)
from spar.config import LabelSection, SparConfig
from spar.java import start_jvm
from spar.labelling import LabelSettings, label_queries, merge_label_parts, part_dir_name
from spar.models import model_fingerprint

SECTIONS = ["experiment", "data", "label"]
SUMMARY = "label sampled queries with the sparse teacher (BM25 or impact index) into positives/negatives"

#: Options that never change the labels (excluded from the fingerprint, so changing them does not invalidate them).
_RUNTIME_ONLY = {"threads", "java_heap", "num_shards", "shard_index", "impact_device"}


def _teacher_config(section: LabelSection) -> dict:
    config = {"teacher": section.teacher, "fields": list(section.fields)}
    if section.teacher == "impact":
        config.update(model=model_fingerprint(section.impact_model), model_type=section.impact_model_type,
                      quantization=section.impact_quantization, max_length=section.impact_max_length)
    return config


def _job_config(section: LabelSection) -> dict:
    config = {k: v for k, v in section.model_dump(mode="json").items() if k not in _RUNTIME_ONLY}
    if section.teacher == "bm25":
        config = {k: v for k, v in config.items() if not k.startswith("impact_")}
    else:
        config = {k: v for k, v in config.items() if k not in ("k1", "b")}
        config["impact_model"] = model_fingerprint(section.impact_model)
    return config


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _encoder(section: LabelSection):
    from spar.teachers import SparseEncoder

    return SparseEncoder(section.impact_model, section.impact_model_type, device=_device(section.impact_device))


def build_teacher_index(cfg: SparConfig, force: bool = False) -> Path:
    """Build ``teacher_index/`` unless a complete one with the same corpus and settings exists."""
    from spar.teachers import build_bm25_index, build_impact_index

    section = cfg.label
    qdir = artifact_dir(cfg.output_dir, "queries")
    stats = require(qdir, "queries").get("stats", {})
    passages = qdir / "passages.arrow"
    passages_fp = stats.get("passages_fingerprint") or file_fingerprint(passages)
    out = artifact_dir(cfg.output_dir, "teacher_index")
    writer = ArtifactWriter(out, kind="teacher_index", config=_teacher_config(section),
                            inputs={"passages": passages_fp})
    if not force and is_complete(out, writer.fingerprint):
        return out
    with writer as w:
        if section.teacher == "bm25":
            build_bm25_index(passages, w.path, section.threads, section.fields, heap=section.java_heap)
        else:
            build_impact_index(passages, w.path, _encoder(section), section.impact_quantization, section.threads,
                               section.fields, section.impact_max_length, section.impact_batch_size,
                               heap=section.java_heap)
        w.stats.update(passages=stats.get("passages"), teacher=section.teacher)
    return out


def _teacher(cfg: SparConfig, index_dir: Path):
    from spar.teachers import BM25Searcher, ImpactTeacher

    s = cfg.label
    if s.teacher == "bm25":
        return BM25Searcher(index_dir, s.k1, s.b, s.threads, heap=s.java_heap)
    return ImpactTeacher(index_dir, _encoder(s), s.impact_quantization, s.threads, s.impact_query_max_length,
                         s.impact_batch_size, heap=s.java_heap)


def run(cfg: SparConfig, force: bool = False) -> dict:
    s = cfg.label
    qdir = artifact_dir(cfg.output_dir, "queries")
    require(qdir, "queries")
    if s.num_shards == 1:  # parts on other machines may share this directory: their pids mean nothing here
        remove_stale_temporaries(cfg.output_dir)  # a killed run's teacher_index.tmp-<pid>/ and collection copy
    start_jvm(s.java_heap)
    index_dir = build_teacher_index(cfg, force=force)
    inputs = {"queries": manifest_fingerprint(qdir), "teacher_index": manifest_fingerprint(index_dir)}
    job = _job_config(s)
    labels_dir = artifact_dir(cfg.output_dir, "labels")
    final = ArtifactWriter(labels_dir, kind="labels", config=job, inputs=inputs, resumable=s.num_shards == 1)
    if not force and is_complete(labels_dir, final.fingerprint):
        return {"skipped": True}
    settings = LabelSettings.from_section(s)
    teacher = _teacher(cfg, index_dir)
    part_dir = labels_dir.with_name(part_dir_name(s.shard_index, s.num_shards))
    if force:  # start over instead of resuming finished shards
        for partial in (final.path, part_dir.with_name(part_dir.name + ".partial")):
            shutil.rmtree(partial, ignore_errors=True)

    if s.num_shards == 1:
        with final as w:
            stats = label_queries(teacher, qdir, w.path, settings)
            w.stats.update(stats, teacher=s.teacher)
            w.schema = {"labels-*.arrow": schemas.LABELS.names}
        return _summary(stats, labels_dir)

    part = ArtifactWriter(part_dir, kind="labels-part", config={**job, "num_shards": s.num_shards,
                          "shard_index": s.shard_index}, inputs=inputs, resumable=True)
    stats = {}
    if force or not is_complete(part_dir, part.fingerprint):
        with part as w:
            stats = label_queries(teacher, qdir, w.path, settings, num_shards=s.num_shards, shard_index=s.shard_index)
            w.stats.update(stats, teacher=s.teacher, job=final.fingerprint, num_shards=s.num_shards,
                           shard_index=s.shard_index)
            w.schema = {"labels-*.arrow": schemas.LABELS.names}
    parts = [labels_dir.with_name(part_dir_name(i, s.num_shards)) for i in range(s.num_shards)]
    ready = [p for p in parts if is_complete(p) and read_manifest(p)["stats"].get("job") == final.fingerprint]
    if len(ready) < s.num_shards:
        waiting = [p.name for p in parts if p not in ready]
        return {**_summary(stats, part_dir), "merged": f"no: waiting for {', '.join(waiting)}"}
    with final as w:
        merged = merge_label_parts(parts, w.path)
        w.stats.update(merged, teacher=s.teacher)
        w.schema = {"labels-*.arrow": schemas.LABELS.names}
    return {**_summary(stats, part_dir), "merged": f"yes: {merged['parts']} parts -> {labels_dir}",
            "labelled (all parts)": f"{merged['labelled']:,}", "dropped (all parts)": f"{merged['dropped']:,}"}


def _summary(stats: dict, out: Path) -> dict:
    if not stats:
        return {"output": str(out)}
    return {
        "queries labelled": f"{stats['labelled']:,} of {stats['queries']:,}",
        "dropped (too few hits)": f"{stats['dropped']:,} ({stats['dropped_dev']:,} dev)",
        "shards": f"{stats['shards_written']} written, {stats['shards_reused']} reused",
        "throughput": f"{stats['queries_per_second']} queries/s over {stats['seconds']} s",
        "output": str(out),
    }
