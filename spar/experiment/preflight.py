"""Check every input of an experiment before its first stage runs.

``spar run`` calls :func:`check_inputs` first, so a missing queries file or a qrels line naming an unknown passage
fails in seconds with the file and line, not after training. Each file is streamed once: the qrels first (they are
small), then the corpus, keeping only the ids the qrels name, then the queries.

With ``experiment.on_bad_record=skip`` malformed records and qrels naming unknown queries or passages are counted
(the report lists them by file and reason) instead of failing; the stages skip the same records.

Example::

    >>> from spar.core.config import load_config
    >>> from spar.experiment.preflight import check_inputs
    >>> check_inputs(load_config())["corpus"]["passages"]
    600
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from spar.core.errors import BadRecordError, ConfigError
from spar.data.readers import ReadStats, corpus_files, input_file_problem, read_corpus, read_qrels

log = logging.getLogger(__name__)


def _readable(path: str | None, key: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    problem = input_file_problem(p)
    if problem:
        raise BadRecordError(str(p), None, f"{problem} ({key})")
    try:
        with p.open("rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise BadRecordError(str(p), None, f"cannot read ({key}): {exc.strerror or exc}") from None
    return p


def qrels_files(data) -> dict[str, Path]:
    """The configured qrels files of every question set, by config key."""
    files = {}
    for name, qs in data.question_sets.items():
        for key in ("qrels_dev", "qrels_test"):
            path = _readable(getattr(qs, key), f"data.question_sets.{name}.{key}")
            if path is not None:
                files[f"data.question_sets.{name}.{key}"] = path
    return files


def _check_question_sets(data, on_bad, found: set[str], report: dict[str, Any]) -> None:
    """Each named set's question files (every question, its answers: present where the file's other questions carry
    them, compiled in regex mode), answers file and qrels (against the questions and the corpus)."""
    from spar.data.question_sets import split_answers, split_files
    from spar.data.readers import read_questions

    for name, qs in data.question_sets.items():
        answers_path = _readable(qs.answers, f"data.question_sets.{name}.answers")
        answers_stats, answers_counted = ReadStats(), False
        for split in ("dev", "test"):
            key = f"data.question_sets.{name}.{split}"
            path = _readable(getattr(qs, split), key)
            if path is None:
                continue
            stats = ReadStats()
            questions = list(read_questions(path, on_bad, stats, answer_match=qs.answer_match))
            ids = {q.id for q in questions}
            if not ids:
                raise BadRecordError(str(path), None, f"no question ({key}; {stats.summary()})")
            wanted = ids
            # A dev hold-out is judged by the test qrels it is drawn from.
            qrels_option = next((o for o in split_files(qs, split) if o.startswith("qrels_")), f"qrels_{split}")
            qrels_path = _readable(getattr(qs, qrels_option), f"data.question_sets.{name}.{qrels_option}")
            if qrels_path is not None:
                qrels_stats = ReadStats()
                kept = read_qrels(qrels_path, known_queries=ids, known_passages=found, on_bad_record=on_bad,
                                  stats=qrels_stats)
                if not kept:
                    raise BadRecordError(str(qrels_path), None, f"no judgment left ({qrels_stats.summary()})")
                report[f"data.question_sets.{name}.{qrels_option}"] = {"judgments": qrels_stats.read,
                                                                        **qrels_stats.as_dict()}
                wanted = set(kept)
            # Skips of the answers file are counted once (it is read for each split); a question that carries no
            # answers when others do is counted as a skip of its own file.
            counted = (answers_stats if not answers_counted else ReadStats()) if qs.answers else stats
            answers_counted = answers_counted or bool(qs.answers)
            answers = split_answers(qs, path, questions, wanted, on_bad, counted, judged=qrels_path is not None)
            if answers is None and qrels_path is None:
                raise ConfigError(f"data.question_sets.{name}: the {split} questions ({path}) carry no answers and "
                                  f"no qrels_{split} is set: nothing to judge them by")
            report[key] = {"questions": stats.read, **stats.as_dict()}
        if answers_path is not None:
            report[f"data.question_sets.{name}.answers"] = {"answers": answers_stats.read, **answers_stats.as_dict()}


def check_models(cfg) -> None:
    """Every model option names a bundled model, a complete local directory or a hub id (no download here)."""
    from spar.model.resolve import resolve_model

    models = {"encode.base.model": cfg.encode.base.model, "train.encoder.model": cfg.train.encoder.model,
              "encode.base.passage_model": getattr(cfg.encode.base, "passage_model", None)}
    from spar.teacher.registry import teacher_for

    models.update(teacher_for(cfg.label).models())  # e.g. the impact teacher's label.impact_model
    for key, name in models.items():
        if name:
            try:
                resolve_model(name)
            except ConfigError as exc:
                raise type(exc)(f"{key}: {exc}") from None
    # A Λ from elsewhere: found, of the expected kind and dimension, before any stage.
    if cfg.encode.lambda_ is not None:
        from spar.experiment.lambda_source import resolve_lambda

        resolve_lambda(cfg.encode.lambda_, cfg.output_dir)


def check_inputs(cfg) -> dict[str, Any]:
    """Check the corpus, queries, qrels (every judged query and passage must exist) and answers files of ``cfg``.

    Raises :class:`~spar.core.errors.BadRecordError` naming the file and line (``on_bad_record=fail``), or returns the
    counts of what the stages will skip (``skip``). Returns a report: passages read, queries read, judgments kept
    per qrels file and skipped records by reason.
    """
    data, on_bad = cfg.data, cfg.experiment.on_bad_record
    corpus = [p for p in (_readable(str(path), "data.corpus") for path in corpus_files(data.corpus)) if p]
    for name, qs in data.question_sets.items():  # every question set's files readable, before the corpus is read
        for option in ("dev", "test", "answers"):
            _readable(getattr(qs, option), f"data.question_sets.{name}.{option}")
    qrels = qrels_files(data)
    check_models(cfg)

    # 1. Which passages the qrels name (format errors are reported here, with their line).
    named: set[str] = set()
    for path in qrels.values():
        for rels in read_qrels(path, on_bad_record=on_bad).values():
            named.update(rels)

    # 2. The corpus, streamed once: every record checked, only the named ids kept.
    corpus_stats = ReadStats()
    found: set[str] = set()
    passages = 0
    for passage in read_corpus(corpus, data.corpus_format, on_bad, corpus_stats):
        passages += 1
        if passage.id in named:
            found.add(passage.id)
    if passages == 0:
        raise BadRecordError(", ".join(map(str, corpus)), None, "the corpus holds no passage" + (
            f" ({corpus_stats.summary()})" if corpus_stats.total_skipped else ""))

    # 3. Each set's questions, then its qrels again against the known ids (line numbers for unknown ones).
    report: dict[str, Any] = {"corpus": {"passages": passages, **corpus_stats.as_dict()}}
    _check_question_sets(data, on_bad, found, report)
    skipped = skipped_records(report)
    if skipped:
        log.warning("inputs: records that will be skipped (on_bad_record=skip): %s", skipped)
    return report


def skipped_records(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The records a :func:`check_inputs` report says the stages skip: input key -> reason -> count."""
    return {k: dict(v["skipped"]) for k, v in report.items() if isinstance(v, dict) and v.get("skipped")}


def describe_skipped(skipped: dict[str, dict[str, int]]) -> str:
    """One line for summaries and results, e.g. ``corpus: 2 empty text and title; data.qrels_test: 1 unknown
    passage``."""
    return "; ".join(f"{key}: " + ", ".join(f"{n:,} {reason}" for reason, n in reasons.items())
                     for key, reasons in skipped.items())
