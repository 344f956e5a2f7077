"""Evaluation question sets: the questions ``tune`` and ``evaluate`` read, with their judgments and answers.

An experiment's question sets are ``data.question_sets``: BEIR-style experiments have one, ``default`` (before spar
0.2 written ``data.queries`` / ``data.qrels_dev`` / ``data.qrels_test`` / ``data.dev_holdout_fraction`` and
``evaluate.answers``, which the config folds into it at load), the open-domain QA experiments several named ones
(NQ, TriviaQA, ...). A set's split is judged by qrels (nDCG, R@k), by reference answers (Acc@k, DPR's
``has_answer``), or both. This module is the one owner of

- each set's dev and test **splits** (:class:`SplitQueries`, :func:`read_split`), the **files** each reads
  (:func:`split_files`) and where their query vectors are stored (``embeddings/<encoder>/queries-<split>[-<set>]``:
  the default set's carry no suffix, as they always had);
- the **dev pool** μ is tuned on (:func:`pool`: the dev splits of ``tune.sets``, each capped by a seeded sample);
- how fingerprints spell the sets (:func:`file_key`, :func:`data_settings`, :func:`set_settings`): the default set
  as its options were spelled before spar 0.2 (the one table of those spellings:
  :mod:`spar.core.legacy_spellings`), so runs made before stay up to date.

Every function takes typed parts (a set's section, the seed, ...); :mod:`spar.experiment.plan` applies them to an
experiment.
- **answer judgments** (:class:`AnswerJudge`): whether a passage holds an answer, turned into qrels over exactly the
  passages a ranking can show, so Acc@k is ir_measures' ``Success@k`` and tuning treats it like any measure.

Example::

    >>> judge = AnswerJudge({"q1": ["Marie Curie"]}, lambda rows: ["discovered by marie curie", "radium"])
    >>> judge.qrels({"q1": [0, 1]})
    {'q1': {'0': 1, '1': 0}}
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from spar.core.config_sections import DEFAULT_SET, stored_set_name
from spar.core.errors import BadRecordError, ConfigError
from spar.core.legacy_spellings import DEFAULT_SET_PREFIX, default_set_option, old_key, old_section_settings
from spar.data.readers import OnBad


@dataclass
class SplitQueries:
    """The questions of one split of one set, in a fixed order, with their qrels and/or answers.

    ``split``: the embeddings key (``dev``, ``test``, ``test-nq``...; vectors in ``queries-<split>``); ``name``: the
    set as its outputs name it (``""`` for the default set: :func:`spar.core.config_sections.stored_set_name`);
    ``stored``: the keys whose stored vectors hold these questions (a dev pool spans several sets).
    """

    split: str
    qrels: dict[str, dict[str, int]]
    texts: dict[str, str]
    answers: dict[str, list[str]] | None = None
    answer_match: str = "string"
    name: str = ""
    stored: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.stored = self.stored or (self.split,)

    @property
    def ids(self) -> list[str]:
        return list(self.texts)

    def pairs(self) -> list[tuple[str, str]]:
        return list(self.texts.items())

    @property
    def judged_by(self) -> str:
        """``qrels``, ``answers`` or ``qrels+answers``."""
        return "+".join(kind for kind, have in (("qrels", bool(self.qrels)), ("answers", self.answers is not None))
                        if have)


def embeddings_key(name: str, split: str) -> str:
    """The embeddings split of a set's ``split`` (``dev``/``test``): ``test`` for the default set, ``test-nq``."""
    stored = stored_set_name(name)
    return f"{split}-{stored}" if stored else split


def configured_splits(sets: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (set, split) that ``data.question_sets`` defines questions for, in config order."""
    return [(name, split) for name, qs in sets.items() for split in ("dev", "test") if getattr(qs, split) is not None]


#: The file options of a question set.
QUESTION_FILES = ("dev", "test", "qrels_dev", "qrels_test", "answers")


def split_files(qs, split: str) -> dict[str, str]:
    """``{option: path}`` of every file a set's ``split`` reads: its questions, the qrels that judge them (a dev
    hold-out's are the test qrels it is drawn from) and the answers file."""
    if split not in ("dev", "test"):
        raise ValueError(f"split must be 'dev' or 'test', not {split!r}")
    qrels = "qrels_test" if split == "dev" and qs.dev_holdout_fraction is not None else f"qrels_{split}"
    return {option: getattr(qs, option) for option in (split, qrels, "answers") if getattr(qs, option)}


def file_key(name: str, option: str) -> str:
    """The key a set's file option has in fingerprints: ``<set>.<option>``; the default set's keep the names of
    the options they were before spar 0.2 (``queries``, ``qrels_dev``, ``qrels_test``, ``answers``:
    :data:`spar.core.legacy_spellings.PRE_0_2`)."""
    if name == DEFAULT_SET:
        return old_key(f"{DEFAULT_SET_PREFIX}{option}")
    return f"{name}.{option}"


# ----------------------------------------------------------------------------------------------------------------
# Fingerprints: the default set spelled as before spar 0.2 (spar.core.legacy_spellings)
# ----------------------------------------------------------------------------------------------------------------


def data_settings(data) -> dict[str, Any]:
    """The ``data`` section as fingerprints spell it (:func:`spar.core.stage.settings`): the default set's files
    under the keys they had before spar 0.2 (``queries``, ``qrels_dev``, ``qrels_test``, ``dev_holdout_fraction``),
    each named set as it was (its ``dev_holdout_fraction`` only when set)."""
    from spar.core.stage import settings

    values = settings(data)
    sets = {name: {k: v for k, v in qs.items() if k != "dev_holdout_fraction" or v is not None}
            for name, qs in values.pop("question_sets", {}).items() if name != DEFAULT_SET}
    values.update(old_section_settings("data", _default_set_reader(data.question_sets)))
    if sets:
        values["question_sets"] = sets
    return values


def evaluate_settings(evaluate, sets: Mapping[str, Any]) -> dict[str, Any]:
    """The ``evaluate`` section as fingerprints spell it: with the default set's answers options under the keys
    they had there before spar 0.2 (``answers``, ``answer_match``)."""
    from spar.core.stage import settings

    return {**settings(evaluate), **old_section_settings("evaluate", _default_set_reader(sets))}


def _default_set_reader(sets: Mapping[str, Any]) -> Callable[[str], Any]:
    """Reads a key of :data:`spar.core.legacy_spellings.PRE_0_2` of the default set: its option's value, or (no
    default set) the option's default."""
    from spar.core.config_sections import QuestionSetSection

    default = sets.get(DEFAULT_SET)

    def read(key: str) -> Any:
        option = default_set_option(key)
        if option is None:
            raise KeyError(f"{key} is not an option of the default question set")
        return getattr(default, option) if default else QuestionSetSection.model_fields[option].default

    return read


def default_holdout(sets: Mapping[str, Any]) -> float | None:
    """The default set's ``dev_holdout_fraction`` (``data.dev_holdout_fraction`` before spar 0.2, a key of the tune
    and evaluate fingerprints), None without one."""
    default = sets.get(DEFAULT_SET)
    return default.dev_holdout_fraction if default else None


def set_settings(sets: Mapping[str, Any], options: Sequence[str]) -> dict[str, Any]:
    """``{"question_sets": {set: {option: value}}}`` of the sets' ``options`` that change a stage's output (and a
    named set's ``dev_holdout_fraction`` when it has one); ``{}`` when no set is left. The default set is left out
    while its options are at their defaults (before spar 0.2 it had none of them; its hold-out is
    :func:`default_holdout`)."""
    found = {}
    for name, qs in sets.items():
        values = {option: getattr(qs, option) for option in options}
        if name == DEFAULT_SET:
            if all(values[o] == type(qs).model_fields[o].default for o in options):
                continue
        elif qs.dev_holdout_fraction is not None:
            values["dev_holdout_fraction"] = qs.dev_holdout_fraction
        found[name] = values
    return {"question_sets": found} if found else {}


# ----------------------------------------------------------------------------------------------------------------
# Reading a split
# ----------------------------------------------------------------------------------------------------------------


def read_split(name: str, qs, split: str, *, seed: int, on_bad_record: OnBad = "fail",
               known_passages: set[str] | None = None) -> SplitQueries:
    """The questions of set ``name`` (its ``data.question_sets`` section ``qs``) for ``split`` ("dev" or "test"),
    with their qrels (a dev hold-out drawn with ``seed``) and/or answers; judgments naming passages outside
    ``known_passages`` are bad records."""
    if split not in ("dev", "test"):
        raise ValueError(f"split must be 'dev' or 'test', not {split!r}")
    from spar.data.readers import evaluation_qrels, read_questions

    on_bad = on_bad_record
    path = getattr(qs, split)
    if path is None:
        raise ConfigError(f"data.question_sets.{name}.{split} is not set")
    questions = list(read_questions(path, on_bad, answer_match=qs.answer_match))
    if not questions:
        raise BadRecordError(path, None, f"no question in the {split} split of set {name!r}")
    texts = {q.id: q.text for q in questions}
    qrels: dict[str, dict[str, int]] = {}
    qrels_path = next((p for option, p in split_files(qs, split).items() if option.startswith("qrels_")), None)
    if qrels_path:
        # Judgments naming unknown questions or passages: file:line errors, or skipped with on_bad_record=skip.
        qrels = evaluation_qrels(qs, split, seed=seed, known_queries=set(texts), known_passages=known_passages,
                                 on_bad_record=on_bad)
        if not qrels:
            raise BadRecordError(qrels_path, None, f"the {split} qrels of set {name!r} hold no question")
        texts = {q: texts[q] for q in texts if q in qrels}  # a judged split is its judged questions
    answers = split_answers(qs, path, questions, set(texts), on_bad, judged=bool(qrels))
    if not qrels and answers is None:
        raise ConfigError(f"data.question_sets.{name}: the {split} questions ({path}) carry no answers and no "
                          f"qrels_{split} is set: nothing to judge them by")
    if answers is not None and not qs.answers:
        texts = {q: texts[q] for q in texts if q in answers}  # skipped for carrying none (on_bad_record=skip)
        qrels = {q: r for q, r in qrels.items() if q in texts}
    texts = {q: texts[q] for q in sorted(texts)}
    return SplitQueries(embeddings_key(name, split), qrels, texts, answers, qs.answer_match, stored_set_name(name))


def split_answers(qs, path: str | Path, questions, wanted: set[str], on_bad: str = "fail",
                  stats: Any = None, judged: bool = False) -> dict[str, list[str]] | None:
    """The answers of the ``wanted`` questions of a set's question file ``path``: from the set's answers file, or
    carried by the questions; None when neither holds any. Preflight and the stages judge alike: a question without
    answers in a file whose other questions carry them, or a regex answer that does not compile, is a bad record
    (file and line), skipped and counted in ``stats`` (a :class:`~spar.data.readers.ReadStats`) with
    ``on_bad="skip"``. An answers file that names none of a split ``judged`` by qrels leaves it to them (a test
    split's answers file, e.g., does not judge the dev split drawn from the same queries file)."""
    if qs.answers:
        from spar.data.answers import read_answers

        answers = {q: a for q, a in read_answers(qs.answers, qs.answer_match, on_bad, stats).items() if q in wanted}
        if not answers:
            if judged:
                return None
            raise BadRecordError(qs.answers, None, f"no answers for any question of {path}")
        return answers
    carried = {q.id: q.answers for q in questions if q.id in wanted and q.answers is not None}
    if not carried:
        return None
    for question in questions:
        if question.id in wanted and question.answers is None:
            error = BadRecordError(str(path), question.line, f"no answers: question {question.id!r} carries none, "
                                   "other questions of this file do (give it answers, or remove it)")
            if on_bad != "skip":
                raise error
            if stats is not None:
                stats.skip(error)
                stats.read -= 1
    return carried


def pooled_names(sets: Mapping[str, Any], tune_sets: Sequence[str] | None) -> list[str]:
    """The sets whose dev splits make the experiment's μ: ``tune.sets``, else every set with a dev split that does
    not tune its own μ."""
    if tune_sets is not None:
        return list(tune_sets)
    return [name for name, qs in sets.items() if qs.dev is not None and not qs.own_mu]


def own_mu_names(sets: Mapping[str, Any]) -> list[str]:
    """Sets tuned on their own dev split (``own_mu``), whose test split uses that μ and α."""
    return [name for name, qs in sets.items() if qs.own_mu]


def sampled(queries: SplitQueries, cap: int | None, seed: int) -> SplitQueries:
    """A seeded sample of at most ``cap`` questions (the ``cap`` with the smallest hash of (seed, id))."""
    if cap is None or len(queries.texts) <= cap:
        return queries

    def rank(qid: str) -> bytes:
        return hashlib.sha256(f"{seed}:dev-sample:{qid}".encode()).digest()

    keep = set(sorted(queries.texts, key=rank)[:cap])
    return SplitQueries(queries.split, {q: r for q, r in queries.qrels.items() if q in keep},
                        {q: t for q, t in queries.texts.items() if q in keep},
                        None if queries.answers is None else {q: a for q, a in queries.answers.items() if q in keep},
                        queries.answer_match, queries.name, queries.stored)


def pool(parts: Sequence[SplitQueries], names: Sequence[str], sets: Mapping[str, Any]) -> SplitQueries:
    """The dev splits ``parts`` of sets ``names`` as one split (μ's dev pool). Every part must be judged the same way
    (all by qrels or all by answers), and ids must not repeat across sets."""
    if not parts:
        raise ConfigError("no dev split to tune on: give a question set a 'dev' file (or set tune.sets)")
    if len(parts) == 1:
        return parts[0]
    kinds = {part.judged_by for part in parts}
    if len(kinds) > 1:
        raise ConfigError(f"tune.sets {list(names)} mix judgments ({sorted(kinds)}): pool sets judged the same way")
    matches = {part.answer_match for part in parts if part.answers is not None}
    if len(matches) > 1:
        raise ConfigError(f"tune.sets {list(names)} mix answer matching ({sorted(matches)}): pool sets matched "
                          "alike")
    texts: dict[str, str] = {}
    for name, part in zip(names, parts):
        clash = texts.keys() & part.texts.keys()
        if clash:
            raise BadRecordError(str(sets[name].dev), None,
                                 f"question id {sorted(clash)[0]!r} is also in another pooled dev set")
        texts.update(part.texts)
    answers = None
    if parts[0].answers is not None:
        answers = {q: a for part in parts for q, a in (part.answers or {}).items()}
    return SplitQueries("+".join(part.split for part in parts), {q: r for part in parts for q, r in part.qrels.items()},
                        texts, answers, parts[0].answer_match, "+".join(names),
                        tuple(part.split for part in parts))


# ----------------------------------------------------------------------------------------------------------------
# Answer judgments: Acc@k as a measure over qrels
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class AnswerJudge:
    """Whether passages hold a question's answer (DPR's ``has_answer``, :func:`spar.data.answers.has_answer`), as qrels.

    ``texts(rows)`` returns the passage texts of passage rows (DPR and Pyserini match answers in the text, not the
    title); ``names(rows)`` their ids (default: the row number as a string). Judgments are memoised, so judging the
    union of every ranking a tuning sweep can produce costs one match per (question, passage) pair.
    """

    answers: Mapping[str, Sequence[str]]
    texts: Callable[[Sequence[int]], Sequence[str]]
    match: str = "string"
    names: Callable[[Sequence[int]], Sequence[str]] | None = None
    _memo: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)

    def qrels(self, rows_by_query: Mapping[str, Sequence[int]]) -> dict[str, dict[str, int]]:
        """Grades (1: holds an answer, 0: does not) of every given passage row of every question with answers; a
        question whose passages hold no answer keeps its zero grades, so Acc@k counts it as a miss."""
        from spar.data.answers import has_answer

        wanted = sorted({int(r) for q, rows in rows_by_query.items() if q in self.answers for r in rows
                         if int(r) >= 0 and (q, int(r)) not in self._memo})
        text_of = dict(zip(wanted, self.texts(wanted))) if wanted else {}
        out: dict[str, dict[str, int]] = {}
        for q, rows in rows_by_query.items():
            gold = self.answers.get(q)
            if gold is None:
                continue
            valid = [int(r) for r in rows if int(r) >= 0]
            for r in valid:
                if (q, r) not in self._memo:
                    self._memo[(q, r)] = int(has_answer(gold, text_of[r], self.match))  # type: ignore[arg-type]
            names = self.names(valid) if self.names is not None else [str(r) for r in valid]
            out[q] = {name: self._memo[(q, r)] for name, r in zip(names, valid)}
        return out


def answer_judge(queries: SplitQueries, table: Any) -> AnswerJudge:
    """An :class:`AnswerJudge` for ``queries``' answers over a :class:`spar.data.passages.PassagesTable`."""
    if queries.answers is None:
        raise ValueError(f"the {queries.split} questions carry no answers")
    ids = table.ids

    def texts(rows: Sequence[int]) -> list[str]:
        return [text for _, text in table.get(list(rows), use_title=False)]

    return AnswerJudge(queries.answers, texts, queries.answer_match, lambda rows: [ids[r] for r in rows])


def judged_qrels(queries: SplitQueries, judge: AnswerJudge | None, row_of: Mapping[str, int],
                 *runs: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, dict[str, int]]:
    """``queries``' qrels when judged by qrels; else answer qrels over every passage the ``runs`` rank."""
    if queries.answers is None or judge is None:
        return queries.qrels
    rows: dict[str, list[int]] = {q: [] for q in queries.ids}
    for run in runs:
        for q, hits in run.items():
            if q in rows:
                rows[q].extend(row_of[doc] for doc, _ in hits)
    return judge.qrels(rows)
