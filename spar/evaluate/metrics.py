"""Retrieval metrics: ir_measures for the standard ones, plus DPR answer accuracy and rank-biased overlap.

- :func:`evaluate_run` computes any ir_measures measure (``nDCG@10``, ``RR@10``, ``R@100``, ...; ``MRR@k`` is
  accepted as the common name of ``RR@k``) averaged over **every judged query of the qrels**: a query the run
  misses counts as 0 (as ``trec_eval -c``; plain trec_eval would silently drop it).
- :func:`has_answer` / :func:`answer_accuracy`: top-k retrieval accuracy with Pyserini's (DPR's) answer matching
  (an answer string occurs as a token subsequence of a passage, or a regular expression matches it).
- :func:`rbo` : extrapolated rank-biased overlap RBO_ext (Webber, Moffat and Zobel, TOIS 2010, eq. 32), which also
  handles rankings of different lengths. (The ``rbo`` package on PyPI pins ``numpy<2``, so it is not used.)
- :func:`write_trec_run` / :func:`read_trec_run`: TREC run files (``qid Q0 docid rank score tag``).

A ranking ("ranked run") is ``{qid: [(docid, score), ...]}`` best first; ir_measures gets ``{qid: {docid: score}}``.

Example::

    >>> from spar.evaluate.metrics import evaluate_run, rbo
    >>> from spar.data.answers import has_answer
    >>> qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}}
    >>> ranked = {"q1": [("d1", 2.0), ("d2", 1.0)], "q2": [("d2", 2.0), ("d3", 1.0)]}
    >>> evaluate_run(qrels, ranked, ["MRR@10", "R@1"])
    {'MRR@10': 0.75, 'R@1': 0.5}
    >>> round(rbo(["a", "b", "c"], ["b", "a", "d"], p=0.9), 3)
    0.63
    >>> has_answer(["Marie Curie"], "Discovered by marie   CURIE, in 1898.")
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Literal, Mapping, Sequence

from spar.core.errors import BadRecordError
from spar.data.answers import has_answer

Ranked = Mapping[str, Sequence[tuple[str, float]]]
Qrels = Mapping[str, Mapping[str, int]]

#: Names people use that ir_measures spells differently.
MEASURE_ALIASES = {"MRR": "RR", "Acc": "Success"}  # Acc@k over answer qrels is Success@k


# ----------------------------------------------------------------------------------------------------------------
# ir_measures
# ----------------------------------------------------------------------------------------------------------------


def parse_measure(name: str):
    """The ir_measures measure for a name such as ``nDCG@10``, ``MRR@10`` (= ``RR@10``), ``R@100``."""
    import ir_measures

    base, _, cutoff = name.partition("@")
    canonical = MEASURE_ALIASES.get(base, base) + (f"@{cutoff}" if cutoff else "")
    try:
        return ir_measures.parse_measure(canonical)
    except (ValueError, NameError, SyntaxError, TypeError) as exc:
        raise ValueError(f"unknown measure {name!r} (ir_measures: {exc})") from None


def measure_depth(name: str, default: int = 1000) -> int:
    """How deep a ranking must go for ``name`` to be computed exactly (its cutoff, else ``default``)."""
    cutoff = parse_measure(name).params.get("cutoff")
    return int(cutoff) if cutoff else default


def as_scored(ranked: Ranked) -> dict[str, dict[str, float]]:
    """``{qid: [(docid, score)]}`` -> ``{qid: {docid: score}}`` (the run format ir_measures takes)."""
    return {qid: {doc: float(score) for doc, score in hits} for qid, hits in ranked.items()}


def ranked_run(query_ids: Sequence[str], rows, scores, doc_ids: Sequence[str]) -> dict[str, list[tuple[str, float]]]:
    """The ranked run of a top-k search: query ``i`` gets ``(doc_ids[rows[i, j]], scores[i, j])`` for every
    ``rows[i, j] >= 0`` (FAISS pads missing hits with -1), best first as searched.

    >>> ranked_run(["q1", "q2"], [[1, 0], [0, -1]], [[2.0, 1.0], [0.5, 0.0]], ["d0", "d1"])
    {'q1': [('d1', 2.0), ('d0', 1.0)], 'q2': [('d0', 0.5)]}
    """
    return {qid: [(doc_ids[r], float(s)) for r, s in zip(rows[i], scores[i]) if r >= 0]
            for i, qid in enumerate(query_ids)}


def per_query_values(qrels: Qrels, run: Mapping[str, Mapping[str, float]], measure: str) -> dict[str, float]:
    """ir_measures' value of one measure for each query of ``run`` (``{qid: {docid: score}}``) judged in qrels."""
    import ir_measures

    parsed = parse_measure(measure)
    return {m.query_id: float(m.value) for m in ir_measures.iter_calc([parsed], qrels, run) if m.query_id in run}


def evaluate_run(qrels: Qrels, ranked: Ranked, measures: Iterable[str]) -> dict[str, float]:
    """Mean of each measure over every judged query in ``qrels`` (queries absent from the run score 0).

    Only queries with at least one judgment are evaluated, as trec_eval does; run queries without judgments are
    ignored.
    """
    import ir_measures

    names = list(measures)
    parsed = {name: parse_measure(name) for name in names}
    judged = [q for q in qrels if qrels[q]]
    if not judged:
        raise ValueError("qrels hold no judged query")
    run = {q: hits for q, hits in as_scored(ranked).items() if q in qrels and hits}
    totals = {measure: 0.0 for measure in parsed.values()}
    if run:
        # Per-query values summed over judged queries and divided by their number: a query the run misses counts
        # 0 whatever the provider does with it.
        for metric in ir_measures.iter_calc(list(parsed.values()), {q: dict(qrels[q]) for q in run}, run):
            if metric.query_id in run:
                totals[metric.measure] += float(metric.value)
    return {name: totals[measure] / len(judged) for name, measure in parsed.items()}


# ----------------------------------------------------------------------------------------------------------------
# TREC run files
# ----------------------------------------------------------------------------------------------------------------


def trec_lines(ranked: Ranked, tag: str) -> Iterator[str]:
    """The TREC run lines of ``ranked``: ``qid Q0 docid rank score tag``, queries in the given order, ranks from 1
    (the one spelling of a run line: evaluate's runs, :func:`write_trec_run`, ``spar search --topics``).

        >>> list(trec_lines({"q1": [("d3", 2.5), ("d1", 1.0)]}, "spar"))
        ['q1 Q0 d3 1 2.500000 spar\\n', 'q1 Q0 d1 2 1.000000 spar\\n']
    """
    for qid, hits in ranked.items():
        for rank, (doc, score) in enumerate(hits, start=1):
            yield f"{qid} Q0 {doc} {rank} {float(score):.6f} {tag}\n"


def write_trec_run(path: str | Path, ranked: Ranked, tag: str) -> None:
    """Write ``ranked`` as a TREC run (:func:`trec_lines`)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as fh:
        fh.writelines(trec_lines(ranked, tag))


def read_trec_run(path: str | Path) -> dict[str, list[tuple[str, float]]]:
    """Read a TREC run file back into a ranked run (hits sorted by rank)."""
    p = Path(path)
    rows: dict[str, list[tuple[int, str, float]]] = {}
    with p.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise BadRecordError(str(p), number, f"wrong column count: expected 6, found {len(parts)}")
            qid, _, doc, rank, score, _ = parts
            rows.setdefault(qid, []).append((int(rank), doc, float(score)))
    return {q: [(d, s) for _, d, s in sorted(hits)] for q, hits in rows.items()}


# ----------------------------------------------------------------------------------------------------------------
# Rank-biased overlap
# ----------------------------------------------------------------------------------------------------------------


def rbo(first: Sequence[str], second: Sequence[str], p: float = 0.9) -> float:
    """Extrapolated rank-biased overlap RBO_ext of two rankings (Webber et al. 2010, eq. 32).

    With S the shorter list (length s) and L the longer (length l), and X_d the overlap of the two prefixes of
    depth d (for d > s, S is taken whole)::

        RBO_ext = (1-p)/p * (sum_{d=1..l} X_d/d p^d + sum_{d=s+1..l} X_s (d-s)/(s d) p^d) + ((X_l-X_s)/l + X_s/s) p^l

    For equal lengths k this is ``(1-p)/p * sum_{d<=k} X_d/d p^d + X_k/k p^k``; identical rankings give 1,
    disjoint ones 0. Items are assumed unique within a ranking (later duplicates are ignored).
    """
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    a, b = _unique(first), _unique(second)
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    s, n_long = len(short), len(long_)
    if n_long == 0:
        return 1.0
    if s == 0:
        return 0.0
    short_set = set(short)
    seen_short: set[str] = set()
    seen_long: set[str] = set()
    overlap = 0  # X_d
    x_s = 0
    total = 0.0
    weight = 1.0
    for d in range(1, n_long + 1):
        weight *= p
        item_long = long_[d - 1]
        if d <= s:
            item_short = short[d - 1]
            if item_short == item_long:
                overlap += 1
            else:
                overlap += (item_short in seen_long) + (item_long in seen_short)
            seen_short.add(item_short)
            seen_long.add(item_long)
            if d == s:
                x_s = overlap
        else:
            overlap += item_long in short_set
            total += x_s * (d - s) / (s * d) * weight
        total += overlap / d * weight
    tail = ((overlap - x_s) / n_long + x_s / s) * weight
    return (1 - p) / p * total + tail


def _unique(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def mean_rbo(first: Ranked, second: Ranked, p: float = 0.9, depth: int = 100,
             queries: Iterable[str] | None = None) -> float:
    """Mean RBO_ext of the top-``depth`` rankings of two runs over ``queries`` (default: the first run's)."""
    qids = list(queries) if queries is not None else list(first)
    if not qids:
        raise ValueError("no queries to compare")
    values = [rbo([d for d, _ in first.get(q, [])[:depth]], [d for d, _ in second.get(q, [])[:depth]], p)
              for q in qids]
    return float(sum(values) / len(values))


# ----------------------------------------------------------------------------------------------------------------
# Answer accuracy (DPR has_answer)
# ----------------------------------------------------------------------------------------------------------------

def answer_accuracy(ranked: Ranked, answers: Mapping[str, Sequence[str]], passage_text: Mapping[str, str],
                    ks: Iterable[int] = (20, 100), match: Literal["string", "regex"] = "string") -> dict[str, float]:
    """Top-k retrieval accuracy (``Acc@k``): the share of queries with an answer in one of their top k passages.

    Averaged over every query of ``answers``; a query missing from ``ranked`` counts as a miss.
    """
    ks = sorted(set(int(k) for k in ks))
    if not answers:
        raise ValueError("no answers to evaluate")
    hits = {k: 0 for k in ks}
    for qid, gold in answers.items():
        first_hit = None
        for rank, (doc, _) in enumerate(ranked.get(qid, [])[:ks[-1]], start=1):
            if has_answer(gold, passage_text[doc], match):
                first_hit = rank
                break
        for k in ks:
            hits[k] += first_hit is not None and first_hit <= k
    return {f"Acc@{k}": hits[k] / len(answers) for k in ks}

