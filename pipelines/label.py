"""Stage ``label``: the sparse teacher ranks passages for every sampled query (SPAR §4.1).

Writes ``<output_dir>/teacher_index/`` (Lucene BM25 or impact index of ``queries/passages.arrow``; reused while its
manifest matches) and ``<output_dir>/labels/labels-NNNNN.arrow``. The teacher is the registered one ``label.teacher`` /
``label.engine`` name (:mod:`spar.teacher.registry`); labelling is :mod:`spar.teacher.labelling`.

    spar label                                   # resumable: a killed run continues at the first missing shard
    spar label executor.kind=ray executor.address=auto  # shards on the workers of a Ray cluster (spar/core/executor.py)
    spar label label.num_shards=4 label.shard_index=2   # machine 2 of 4 -> labels-part-2-of-4/

Several machines: with Ray (``executor.kind=ray``), one run schedules the shards on the cluster's workers, retries
those of dead workers and writes ``labels/``. Without Ray (e.g. a SLURM job array), run each part with the same
config and ``label.shard_index`` = 0..N-1: a thin layer over the same shard workers, each part labelling its own
shards into ``labels-part-<i>-of-<N>/``. When all N part directories sit in one output directory (shared file
system, or copy them there), the next ``spar label label.num_shards=N label.shard_index=<any>`` merges them into
``labels/``.
"""

from __future__ import annotations

import functools
from pathlib import Path

from spar.core import schemas
from spar.core.artifacts import ArtifactWriter, read_manifest, remove_stale_temporaries
from spar.core.config import SparConfig
from spar.core.executor import make_executor
from spar.experiment.plan import Experiment
from spar.teacher.labelling import label_queries, merge_parts_when_ready, part_dir_name
from spar.core.stage import Stage, Unit, run_unit
from spar.core.tracking import Report, figures
from spar.teacher.registry import choose_engine, configured_teacher


def build_teacher_index(cfg: SparConfig, force: bool = False, experiment: Experiment | None = None) -> Path:
    """Build ``teacher_index/`` unless a complete one with the same corpus and settings exists
    (:func:`spar.experiment.declarations.teacher_index`)."""
    experiment = experiment if experiment is not None else Experiment.of(cfg)
    teacher, passages = experiment.teacher, experiment.run.passages
    unit = experiment.artifact("teacher_index").unit()

    def work(w: ArtifactWriter) -> dict:
        queries = read_manifest(experiment.run.artifact("queries")).get("stats", {})
        w.stats.update(passages=queries.get("passages"), **teacher.build_index(passages, w.path))
        return {}

    run_unit(unit, work, force)
    return unit.output


def _engine(cfg: SparConfig) -> tuple[str, str]:
    """The engine ``label.engine`` asks for, and why (:func:`spar.teacher.registry.choose_engine`)."""
    experiment = Experiment.of(cfg)
    s = experiment.label
    total = read_manifest(experiment.run.artifact("queries"))["stats"].get("queries")
    queries = None if total is None else -(-int(total) // s.num_shards)  # this machine's share
    return choose_engine(s, experiment.run.passages, queries)


def plan(cfg: SparConfig, force: bool = False) -> Unit:
    """The labels (one machine), or this machine's part of them (``label.num_shards`` > 1); builds the teacher
    index first, since the labels depend on it (:func:`spar.experiment.declarations.labels`: the passages table is
    checked unchanged since `spar sample` wrote it, --force too: another table put there would label rows of one
    corpus with an index of another)."""
    experiment = Experiment.of(cfg)
    s = experiment.label
    declared = experiment.artifact("labels")
    if s.num_shards == 1:  # parts on other machines may share this directory: their pids mean nothing here
        remove_stale_temporaries(experiment.output_dir)  # a killed run's teacher_index.tmp-<pid>/, collection copy
    experiment.teacher.start()  # (the Lucene teachers start the JVM)
    build_teacher_index(cfg, force, experiment)
    final = declared.unit()
    if s.num_shards == 1:
        return final
    # A part's payload is the final labels' unit: its fingerprint names the job the parts belong to.
    return Unit(declared.output.with_name(part_dir_name(s.shard_index, s.num_shards)), kind="labels-part",
                config={**final.config, "num_shards": s.num_shards, "shard_index": s.shard_index},
                needs=declared.needs, resumable=True, payload=final)


def work(cfg: SparConfig, w: ArtifactWriter, unit: Unit) -> dict:
    experiment = Experiment.of(cfg)
    s = experiment.label
    part = unit.kind == "labels-part"
    sharding = {"num_shards": s.num_shards, "shard_index": s.shard_index} if part else {}
    index_dir = experiment.run.artifact("teacher_index")
    passages = experiment.run.passages
    engine, why = _engine(cfg)
    with make_executor(cfg.executor) as executor:
        # The teacher as a factory: this process builds it once, or each Ray worker its own (spar/core/executor.py).
        teacher = functools.partial(configured_teacher, s, index_dir.resolve(), engine,
                                    cfg.executor.cpus_per_worker if executor.kind == "ray" else None,
                                    passages.resolve(), executor.kind == "local")
        stats = label_queries(teacher, experiment.run.artifact("queries"), w.path, s, executor=executor,
                              needs={"teacher index": index_dir}, **sharding)
    started = stats.pop("teacher_start_seconds", None)
    engine = f"{engine} ({why}" + (f"; postings built in {started} s)" if started else ")")
    w.stats.update(stats, teacher=s.teacher, engine=engine,
                   **({"job": unit.payload.writer().fingerprint, **sharding} if part else {}))
    w.schema = {"labels-*.arrow": schemas.LABELS.names}
    return {"engine": engine, **_summary(stats, unit.output)}


def merge(cfg: SparConfig, stats: dict, unit: Unit) -> dict:
    """After this machine's part: merge the parts into labels/ once all are there."""
    if unit.kind != "labels-part":
        return stats
    s = Experiment.of(cfg).label
    merged = merge_parts_when_ready(unit.payload, s.num_shards, teacher=s.teacher)
    return {**({} if stats.get("skipped") else stats), "output": str(unit.output), **merged}


def _summary(stats: dict, out: Path) -> dict:
    where = (f"{stats['workers']} Ray workers ({stats['worker_restarts']} restarted)"
             if stats.get("executor") == "ray" else "this process")
    return {
        "queries labelled": f"{stats['labelled']:,} of {stats['queries']:,}",
        "dropped (too few hits)": f"{stats['dropped']:,} ({stats['dropped_dev']:,} dev)",
        "shards": f"{stats['shards_written']} written, {stats['shards_reused']} reused",
        "throughput": f"{stats['queries_per_second']} queries/s over {stats['seconds']} s in {where}",
        "output": str(out),
    }


def report(cfg: SparConfig, written: dict) -> Report:
    """The W&B run's numbers: queries/s, queries labelled and dropped (too few teacher hits), the engine; the
    teacher index's build time when it was built too."""
    summary: dict = {}
    for path, manifest in written.items():
        if manifest["kind"] == "teacher_index":
            summary["teacher_index/seconds"] = manifest.get("seconds")
            continue
        stats = manifest["stats"]
        summary.update(figures(manifest), queries_per_s=stats.get("queries_per_second"))
    return Report(summary=summary)


STAGE = Stage(name="label", sections=("experiment", "data", "label", "executor"), plan=plan, work=work, finish=merge,
              report=report,
              summary="label sampled queries with the sparse teacher (BM25 or impact index) into positives/negatives")
run = STAGE.run
