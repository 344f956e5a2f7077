"""Stage ``sample``: corpus sentences become training queries (SPAR §4.1).

Writes ``<output_dir>/queries/``: ``passages.arrow`` (the whole corpus, ``row`` = reading order) and
``queries-NNNNN.arrow`` shards (train and dev queries). The logic lives in :mod:`spar.data.sampling`.

    spar sample --config configs/experiments/wiki-vital.yaml sample.max_queries=1000
"""

from __future__ import annotations

from spar.core import schemas
from spar.core.artifacts import PASSAGES_FILE, ArtifactWriter
from spar.core.fingerprint import fingerprint_dict
from spar.core.config import SparConfig
from spar.core.executor import make_executor
from spar.data.readers import ReadStats, read_corpus
from spar.data.sampling import write_query_set
from spar.core.stage import Stage, Unit
from spar.experiment.plan import Experiment


def plan(cfg: SparConfig, force: bool = False) -> Unit:
    """``queries/`` as the experiment declares it (:func:`spar.experiment.declarations.queries`)."""
    return Experiment.of(cfg).artifact("queries").unit()


def work(cfg: SparConfig, w: ArtifactWriter, unit: Unit) -> dict:
    experiment = Experiment.of(cfg)
    s, data, on_bad = experiment.sample, experiment.data, experiment.on_bad_record
    read_stats = ReadStats()
    with make_executor(cfg.executor) as executor:  # Ray: workers draw the sentences of chunks of passages.arrow
        stats = write_query_set(
            read_corpus(data.corpus, data.corpus_format, on_bad, read_stats), w.path,
            s, seed=experiment.seed, corpus_name=str(data.corpus), on_bad_record=on_bad,
            read_stats=read_stats, executor=executor)
    stats.update(executor.describe())
    # Identifies passages.arrow for the teacher index (it does not change with the sampling options).
    stats["passages_fingerprint"] = fingerprint_dict({k: unit.config[k] for k in ("corpus", "format")})
    stats["read"] = read_stats.as_dict()
    w.stats.update(stats)
    w.schema = {PASSAGES_FILE: schemas.PASSAGES.names, "queries-*.arrow": schemas.QUERIES.names}
    sampling = stats["sampling"]
    return {
        "passages": stats["passages"],
        "sentences": f"{sampling['sentences']:,} ({sampling['candidate_sentences']:,} with >= {s.min_words} words)",
        "queries": f"{stats['queries_train']:,} train, {stats['queries_dev']:,} dev",
        "records": read_stats.summary(),
        **({"warning": " ".join(stats["warnings"])} if stats["warnings"] else {}),
        "output": str(unit.output),
    }


STAGE = Stage(name="sample", summary="split corpus passages into sentences and sample training queries (+ a dev split)",
              sections=("experiment", "data", "sample", "executor"), plan=plan, work=work)
run = STAGE.run
