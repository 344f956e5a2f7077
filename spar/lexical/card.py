"""The model card of a Λ directory (``README.md``): what a Λ is and where it comes from, so it can travel alone.

A Λ directory written by ``spar train`` is self-contained: ``spar_lambda.json`` (kind, dim, settings), the kind's
files, ``manifest.json`` (fingerprint, inputs, figures) and this card. Copy the directory anywhere and point
another experiment at it with ``encode.lambda: <path>``.

Example::

    >>> from spar.lexical.card import lambda_card
    >>> card = lambda_card({"kind": "projection", "dim": 384, "projection": "gaussian", "seed": 42,
    ...                     "teacher": {"weighting": "bm25", "k1": 0.9, "b": 0.4, "num_docs": 5183,
    ...                                 "avg_length": 161.7, "vocab_size": 28857}},
    ...                    {"experiment": "scifact", "corpus": "scifact/corpus.jsonl", "passages": 5183})
    >>> card.splitlines()[0]
    '# Λ (projection, 384 dimensions) from the spar experiment `scifact`'
    >>> "| vocabulary | 28,857 terms |" in card
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spar.core.config_sections import LabelSection, SampleSection, TrainSection


@dataclass(frozen=True)
class RunFacts:
    """What a card says about the run that made a model (typed parts of its experiment, built by
    :meth:`spar.experiment.plan.Experiment.run_facts`): its name and corpus, how its training queries were sampled
    and labelled, how Λ was trained, and the teacher's description
    (:meth:`spar.teacher.registry.SparseTeacher.describe`)."""

    experiment: str
    corpus: str | list[str]
    sample: SampleSection
    label: LabelSection
    train: TrainSection
    teacher: str

KIND_SUMMARY = {
    "transformer": "a DPR bi-encoder fine-tuned on the teacher's labels (SPAR §3)",
    "projection": "the densified teacher: BM25 term weights (passages) and term counts (queries) times a seeded "
                  "random matrix; training-free",
    "static": "a bag of term embeddings, initialised from the projection and distilled from the teacher's BM25 scores",
}

STATISTICS_NOTE = (
    "**Statistics that travel with this Λ.** A term-based Λ carries its training corpus's BM25 statistics: the "
    "vocabulary (`vocab.txt`, the row order of its term table), document frequencies (`document_frequencies.npy`), "
    "the number of passages and their average length (`term_statistics.json`). Used on another corpus, "
    "`encode.lambda.statistics: carried` (default) keeps them all: terms the training corpus never saw are "
    "ignored. `encode.lambda.statistics: target` refits document frequencies, passage count and average length on "
    "the target corpus and appends its unseen terms (a static Λ gives them their untrained, projected rows); k1, "
    "b, the analyzer, the learnt rows and the random matrix of the carried terms are kept."
)


def lambda_card_facts(run: RunFacts, queries_stats: dict[str, Any], fingerprint: str,
                      training: dict[str, Any] | None, command: str | None) -> dict[str, Any]:
    """The ``facts`` of :func:`lambda_card` for a Λ trained by a run: what the run says of itself and its query
    manifest's stats."""
    sample, label = run.sample, run.label
    sampling = {"wiki": f"wiki: pseudo-exponential over the passage's position in its article (base "
                        f"{sample.exponential_base}, at least one sentence per passage)",
                "all": "every sentence of every passage",
                "uniform": f"each sentence with probability {sample.uniform_rate}"}[sample.strategy]
    teacher = (f"{run.teacher}, top {label.k} ({label.n_positives} positives, {label.n_negatives} "
               "hard negatives)")
    return {"experiment": run.experiment, "corpus": run.corpus, "passages": queries_stats.get("passages"),
            "sampling": sampling, "queries": queries_stats.get("queries_train", queries_stats.get("queries")),
            "teacher": teacher, "fingerprint": fingerprint, "training": training or {}, "command": command}


def _rows(pairs: list[tuple[str, Any]]) -> list[str]:
    return ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in pairs if v not in (None, ""))]


def lambda_card(description: dict[str, Any], facts: dict[str, Any]) -> str:
    """A Markdown card for a Λ: ``description`` is its :meth:`~spar.lexical.base.LexicalModel.describe`,
    ``facts`` what the training run knows (``experiment``, ``corpus``, ``passages``, ``sampling``, ``queries``,
    ``teacher``, ``training``: a dict of figures, ``fingerprint``, ``command``)."""
    kind, dim = description.get("kind", "transformer"), description.get("dim")
    teacher = description.get("teacher") or {}
    lines = [f"# Λ ({kind}, {dim} dimensions) from the spar experiment `{facts.get('experiment', '?')}`", "",
             f"Λ is SPAR's lexical model (Chen et al., *Salient Phrase Aware Dense Retrieval*): its vectors' dot "
             f"product imitates a sparse teacher, so `[Q(q), μ·Λ(q)] · [P(p), Λ(p)]` adds the teacher's lexical "
             f"signal to a dense retriever. This one is {KIND_SUMMARY.get(kind, kind)}.", "", "## What it is", ""]
    lines += _rows([
        ("kind", f"`{kind}`"), ("dimensions", dim),
        ("projection", description.get("projection")), ("seed", description.get("seed")),
        ("objective", description.get("objective")),
        ("teacher", facts.get("teacher") or (f"BM25 k1={teacher.get('k1')} b={teacher.get('b')}" if teacher else None)),
        ("vocabulary", f"{teacher['vocab_size']:,} terms" if "vocab_size" in teacher else None),
        ("analyzer", f"{teacher.get('analyzer')} (stemmer {teacher.get('stemmer')}, stopwords "
                     f"{teacher.get('stopwords')})" if teacher.get("analyzer") else None),
        ("corpus statistics", f"{teacher['num_docs']:,} passages, average length {teacher['avg_length']:.1f} terms"
         if "num_docs" in teacher else None),
    ])
    lines += ["", "## Training data", ""]
    lines += _rows([
        ("experiment", f"`{facts.get('experiment')}`"), ("corpus", f"`{facts.get('corpus')}`"),
        ("passages", f"{facts['passages']:,}" if isinstance(facts.get("passages"), int) else facts.get("passages")),
        ("query sampling", facts.get("sampling")),
        ("training queries",
         f"{facts['queries']:,}" if isinstance(facts.get("queries"), int) else facts.get("queries")),
        ("manifest fingerprint", f"`{facts['fingerprint']}`" if facts.get("fingerprint") else None),
    ])
    training = facts.get("training") or {}
    if training:
        lines += ["", "## Training", ""] + _rows(list(training.items()))
    lines += ["", "## Use", "", "In another spar experiment (any corpus, any base retriever):", "", "```yaml",
              "encode:", "  lambda:", "    path: path/to/this/directory", f"    kind: {kind}        # checked",
              f"    dim: {dim}            # checked", "    statistics: carried   # or target (term-based kinds)",
              "```", "", "In Python: `spar.lexical.load_lambda(path).encode_query([...])` / `.encode_passage([...])`."]
    if kind != "transformer":
        lines += ["", STATISTICS_NOTE]
    if facts.get("command"):
        lines += ["", "## Reproduce", "", "```", facts["command"], "```"]
    return "\n".join(lines) + "\n"
