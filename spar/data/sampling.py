"""Training-query sampling (SPAR §4.1): sentences of corpus passages become the queries Λ learns to answer.

Sentences come from `blingfire <https://github.com/microsoft/BlingFire>`_ (``blingfire.text_to_sentences``). It is
maintained by Microsoft, runs a compiled finite-state model shipped inside the wheel (no model download, no network,
no NLTK/spaCy data packages) and splits tens of MB of text per second, which matters for a 21M-passage corpus.
Abbreviations ("Dr.", "p.m.", "et al.") are handled by its model, unlike a regex split. Its model needs cased,
untokenised prose; for corpora already tokenised and lower-cased (the SMART Cranfield release: ``"... the wing .
an experimental study ..."``) ``sample.sentence_splitter: tokenized`` ends a sentence at every standalone ``.``, ``?``
or ``!`` token instead, which is exact for that format (abbreviations keep their full stop attached there).

Strategies (``sample.strategy``):

- ``wiki``: DPR-style Wikipedia passages. A sentence of the passage at position ``i`` (0-based) of its article is
  kept with probability ``base ** -i`` (``base`` = ``sample.exponential_base``, 1.2 in the reference
  implementation), so lead passages contribute most. At least one sentence per passage is kept: when none survives,
  one is chosen at random. The position is read from the corpus field ``sample.position_field`` (0- or 1-based,
  detected from the smallest value in the corpus); without it, consecutive passages with the same title are
  numbered 0, 1, 2, ...
- ``all``: every sentence (the MS MARCO setting).
- ``uniform``: each sentence kept with probability ``sample.uniform_rate``; at least one per passage.

Every random decision uses a generator derived from (seed, passage id) or (seed, query id), so the output does not
depend on the order of the corpus, on sharding, or on how many passages were read before.

Example::

    >>> from spar.data.sampling import SentenceSampler, split_sentences
    >>> split_sentences("BM25 is a ranking function. Dense retrievers embed text. Ok.", min_words=3, max_words=64)
    [(0, 'BM25 is a ranking function.'), (1, 'Dense retrievers embed text.')]
    >>> sampler = SentenceSampler(strategy="all", seed=42)
    >>> [q.query_id for q in sampler.sample("doc1", "BM25 is a ranking function. Dense retrievers embed text.")]
    ['doc1#s0', 'doc1#s1']
"""

from __future__ import annotations

import logging

import functools
import hashlib
import heapq
import random
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

import numpy as np
import pyarrow as pa

from spar.core import schemas
from spar.core.artifacts import PASSAGES_FILE
from spar.core.config import SampleSection
from spar.core.errors import BadRecordError
from spar.core.executor import Executor, LocalExecutor, WorkerSpec
from spar.data.passages import PassagesTable
from spar.data.readers import Passage, ReadStats

Strategy = Literal["wiki", "all", "uniform"]
Splitter = Literal["blingfire", "tokenized"]
_SENTENCE_END_TOKENS = frozenset({".", "?", "!"})


def raw_sentences(text: str, splitter: Splitter = "blingfire") -> list[str]:
    """Every sentence of ``text``, unfiltered: blingfire's on prose, standalone end tokens on tokenised text."""
    if not text.strip():
        return []
    if splitter == "blingfire":
        import blingfire  # here, not at import: the stages that never sample (a GPU node's train) need no blingfire

        return blingfire.text_to_sentences(text).split("\n")
    if splitter != "tokenized":
        raise ValueError(f"unknown sentence splitter {splitter!r}")
    sentences, current = [], []
    for token in text.split():
        current.append(token)
        if token in _SENTENCE_END_TOKENS:
            sentences.append(" ".join(current))
            current = []
    if current:
        sentences.append(" ".join(current))
    return sentences

#: Position buckets reported in the 'wiki' statistics (the last one is "this position or later").
POSITION_BUCKETS = (0, 1, 2, 3, 4, 5, 10)


def split_sentences(text: str, min_words: int, max_words: int,
                    splitter: Splitter = "blingfire") -> list[tuple[int, str]]:
    """Sentences of ``text`` as (index in the passage, sentence); fragments under ``min_words`` words are dropped and
    sentences over ``max_words`` words are cut (whitespace is normalised to single spaces)."""
    sentences = []
    for index, sentence in enumerate(raw_sentences(text, splitter)):
        words = sentence.split()
        if len(words) < min_words:
            continue
        sentences.append((index, " ".join(words[:max_words])))
    return sentences


def stable_rng(seed: int, key: str) -> random.Random:
    """A random generator determined by (seed, key) alone (stable across processes and Python versions)."""
    digest = hashlib.blake2b(f"{seed}\x1f{key}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def stable_uniform(seed: int, key: str) -> float:
    """A number in [0, 1) determined by (seed, key) alone (used for the dev split)."""
    digest = hashlib.blake2b(f"dev\x1f{seed}\x1f{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def position_bucket(position: int) -> str:
    """Label of the statistics bucket a 0-based article position falls in ('0', '1', ..., '5-9', '10+')."""
    edges = POSITION_BUCKETS
    for lo, hi in zip(edges, edges[1:]):
        if lo <= position < hi:
            return str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}"
    return f"{edges[-1]}+"


log = logging.getLogger(__name__)

@dataclass
class SampledQuery:
    query_id: str
    text: str
    source_passage_id: str
    source_row: int


@dataclass
class SamplingStats:
    """Counts reported in the ``queries/`` manifest."""

    passages: int = 0
    sentences: int = 0  # every sentence blingfire produced
    fragments: int = 0  # sentences dropped for having fewer than min_words words
    truncated: int = 0  # sentences cut to max_words words
    candidates: int = 0  # sentences long enough to be queries
    kept: int = 0
    forced: int = 0  # passages where no sentence survived the draw and one was kept at random
    passages_without_sentences: int = 0
    by_position: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0]))

    #: Above this share of candidate sentences cut to max_words, the splitter most likely found no sentence ends.
    TRUNCATED_WARNING = 0.5

    def splitter_warning(self, splitter: str, max_words: int) -> str | None:
        """A one-line warning when most candidate sentences hit ``max_words`` (e.g. blingfire on lower-cased,
        punctuation-free text yields one long "sentence" per passage), or None."""
        if not self.candidates or self.truncated / self.candidates <= self.TRUNCATED_WARNING:
            return None
        other = "tokenized" if splitter == "blingfire" else "blingfire"
        share = self.truncated / self.candidates
        return (f"{self.truncated:,} of {self.candidates:,} candidate sentences ({share:.0%}) were cut at "
                f"sample.max_words={max_words}: the '{splitter}' splitter finds few sentence ends in this corpus; "
                f"try sample.sentence_splitter={other}")

    COUNTERS = ("passages", "sentences", "fragments", "truncated", "candidates", "kept", "forced",
                "passages_without_sentences")

    def add(self, other: "SamplingStats") -> None:
        """Add the counts of another sampler's passages (a chunk sampled elsewhere) to these."""
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for bucket, counts in other.by_position.items():
            mine = self.by_position[bucket]
            for i, value in enumerate(counts):
                mine[i] += value

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "passages": self.passages, "sentences": self.sentences, "fragments_dropped": self.fragments,
            "sentences_truncated": self.truncated, "candidate_sentences": self.candidates, "kept": self.kept,
            "passages_forced_one": self.forced, "passages_without_sentences": self.passages_without_sentences,
        }
        if self.by_position:
            # bucket -> passages, mean candidate sentences per passage, mean kept per passage, keep rate
            order = sorted(self.by_position, key=lambda b: int(b.split("-")[0].rstrip("+")))
            out["by_position"] = {
                b: {
                    "passages": n,
                    "mean_kept_per_passage": round(kept / n, 4),
                    "keep_rate": round(kept / cand, 4) if cand else None,
                }
                for b in order
                for n, cand, kept in [self.by_position[b]]
            }
        return out


class SentenceSampler:
    """Chooses which sentences of a passage become training queries (see the module docstring)."""

    def __init__(self, strategy: Strategy = "all", seed: int = 42, exponential_base: float = 1.2,
                 uniform_rate: float = 0.5, min_words: int = 4, max_words: int = 64,
                 sentence_splitter: Splitter = "blingfire"):
        if strategy not in ("wiki", "all", "uniform"):
            raise ValueError(f"unknown sampling strategy {strategy!r}")
        if sentence_splitter not in ("blingfire", "tokenized"):
            raise ValueError(f"unknown sentence splitter {sentence_splitter!r}")
        self.sentence_splitter = sentence_splitter
        self.strategy, self.seed = strategy, seed
        self.exponential_base, self.uniform_rate = exponential_base, uniform_rate
        self.min_words, self.max_words = min_words, max_words
        self.stats = SamplingStats()

    def keep_rate(self, position: int) -> float:
        if self.strategy == "all":
            return 1.0
        if self.strategy == "uniform":
            return self.uniform_rate
        return self.exponential_base ** -position

    def sample(self, passage_id: str, text: str, position: int = 0, row: int = 0) -> list[SampledQuery]:
        """The queries drawn from one passage (``position``: 0-based position in its article, used by 'wiki')."""
        stats = self.stats
        stats.passages += 1
        raw = raw_sentences(text, self.sentence_splitter)
        stats.sentences += len(raw)
        candidates = []
        for index, sentence in enumerate(raw):
            words = sentence.split()
            if len(words) < self.min_words:
                stats.fragments += 1
                continue
            if len(words) > self.max_words:
                stats.truncated += 1
            candidates.append((index, " ".join(words[: self.max_words])))
        stats.candidates += len(candidates)
        if not candidates:
            stats.passages_without_sentences += 1
            kept: list[tuple[int, str]] = []
        elif self.strategy == "all":
            kept = candidates
        else:
            rng = stable_rng(self.seed, passage_id)
            rate = self.keep_rate(position)
            kept = [c for c in candidates if rng.random() < rate]
            if not kept:
                kept = [candidates[rng.randrange(len(candidates))]]
                stats.forced += 1
        stats.kept += len(kept)
        if self.strategy == "wiki":
            bucket = stats.by_position[position_bucket(position)]
            bucket[0] += 1
            bucket[1] += len(candidates)
            bucket[2] += len(kept)
        return [SampledQuery(f"{passage_id}#s{index}", sentence, passage_id, row) for index, sentence in kept]


class ArticlePositions:
    """0-based position of each passage in its article, from a corpus field or from runs of equal titles.

    Positions from the field are stored as read; :meth:`finish` tells whether the field is 1-based (its smallest
    value is 1), in which case :meth:`zero_based` subtracts one.
    """

    def __init__(self, position_field: str, corpus: str):
        self.position_field, self.corpus = position_field, corpus
        self.from_field = 0
        self.from_titles = 0
        self.minimum: int | None = None
        self._last_title: str | None = None
        self._run = -1

    def position(self, passage: Passage) -> tuple[int, bool]:
        """(position, came_from_field) for the next passage in reading order; raises BadRecordError on a bad value."""
        value = passage.extra.get(self.position_field)
        if value is not None:
            try:
                position = int(value)
                if position != float(value) or position < 0:
                    raise ValueError
            except (TypeError, ValueError):
                raise BadRecordError(
                    self.corpus, None,
                    f"bad {self.position_field!r}: passage {passage.id!r} has {value!r} (expected an integer >= 0)",
                ) from None
            self.from_field += 1
            self.minimum = position if self.minimum is None else min(self.minimum, position)
            self._last_title, self._run = passage.title, position
            return position, True
        # Without the field, consecutive passages of one article share its title (DPR's psgs_w100.tsv layout).
        # Passages without a title are each their own article.
        if passage.title and passage.title == self._last_title:
            self._run += 1
        else:
            self._run = 0
        self._last_title = passage.title
        self.from_titles += 1
        return self._run, False

    @property
    def one_based(self) -> bool:
        return self.minimum == 1

    def zero_based(self, position: int, from_field: bool) -> int:
        return position - 1 if from_field and self.one_based else position


def write_passages(passages: Iterable[Passage], path: Path, positions: ArticlePositions | None,
                   on_bad_record: str, read_stats: ReadStats, batch_rows: int = 50_000) -> tuple[int, array, bytearray]:
    """Stream the corpus into ``passages.arrow`` (schemas.PASSAGES, ``row`` = reading order).

    With ``positions`` ('wiki'), also returns each passage's article position as read and whether it came from the
    corpus field (1-based detection needs the whole corpus, so positions are made 0-based afterwards)."""
    columns: dict[str, list] = {"row": [], "id": [], "title": [], "text": []}
    raw_positions, from_field = array("q"), bytearray()
    row = 0
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schemas.PASSAGES) as writer:
        def flush() -> None:
            if columns["row"]:
                writer.write_table(pa.table(columns, schema=schemas.PASSAGES))
                for values in columns.values():
                    values.clear()

        for passage in passages:
            if positions is not None:
                try:
                    position, in_field = positions.position(passage)
                except BadRecordError as error:
                    if on_bad_record == "fail":
                        raise
                    read_stats.skip(error)
                    continue
                raw_positions.append(position)
                from_field.append(in_field)
            columns["row"].append(row)
            columns["id"].append(passage.id)
            columns["title"].append(passage.title)
            columns["text"].append(passage.text)
            row += 1
            if len(columns["row"]) >= batch_rows:
                flush()
        flush()
    return row, raw_positions, from_field


class SmallestHashes:
    """The ``cap`` keys with the smallest seeded hash among those offered: a seeded sample of fixed size that does
    not depend on the order the keys come in. ``salt`` makes samples drawn with the same seed independent."""

    def __init__(self, cap: int, seed: int, salt: str = ""):
        self.cap, self.seed, self.salt = cap, seed, salt
        self._heap: list[tuple[float, str]] = []  # max-heap (negated) of the cap smallest
        self.offered = 0

    def offer(self, key: str, u: float | None = None) -> None:
        u = stable_uniform(self.seed, self.salt + key) if u is None else u
        self.offered += 1
        if len(self._heap) < self.cap:
            heapq.heappush(self._heap, (-u, key))
        elif -self._heap[0][0] > u:
            heapq.heapreplace(self._heap, (-u, key))

    def final(self, excluding: set[str] | frozenset[str] = frozenset(), cap: int | None = None) -> set[str]:
        """The ``cap`` (default: all kept) smallest, leaving out ``excluding``."""
        ranked = sorted((-negated, key) for negated, key in self._heap)
        kept = [key for _, key in ranked if key not in excluding]
        return set(kept[:cap] if cap is not None else kept)


#: Passages per sampling task: the unit a worker samples (:class:`ChunkSampler`).
SAMPLE_CHUNK = 50_000


class ChunkSampler:
    """Samples the passages of a row range of ``passages.arrow``: the sample stage's worker (in this process or
    on a Ray worker of :mod:`spar.core.executor`, which reads only its rows of the memory-mapped table). A task is
    ``(start, stop, positions)`` (the rows' 0-based article positions for 'wiki', else None); the result is the
    chunk's queries in passage order, as a table without the ``split`` column, and the sampler's counts."""

    def __init__(self, passages_path: str | Path, options: SampleSection, seed: int):
        self.table = PassagesTable(passages_path).table
        self.options, self.seed = options, seed

    def sampler(self) -> SentenceSampler:
        o = self.options
        return SentenceSampler(o.strategy, self.seed, o.exponential_base, o.uniform_rate, o.min_words, o.max_words,
                               o.sentence_splitter)

    def __call__(self, task: tuple[int, int, Any]) -> tuple[pa.Table, SamplingStats]:
        start, stop, positions = task
        sampler = self.sampler()
        chunk = self.table.slice(start, stop - start)
        queries: list[SampledQuery] = []
        for i, (pid, text) in enumerate(zip(chunk.column("id").to_pylist(), chunk.column("text").to_pylist())):
            queries.extend(sampler.sample(pid, text, 0 if positions is None else int(positions[i]), start + i))
        return _queries_table(queries, None), sampler.stats


class DevSplit:
    """Seeded dev hold-out: a query is a dev candidate when its (seed, id) hash falls under ``fraction``; when more
    than ``cap`` qualify, the ``cap`` with the smallest hash stay dev (independent of reading order)."""

    def __init__(self, fraction: float, cap: int, seed: int):
        self.fraction, self.cap, self.seed = fraction, cap, seed
        self._smallest = SmallestHashes(cap, seed)

    @property
    def candidates(self) -> int:
        return self._smallest.offered

    def is_candidate(self, query_id: str) -> bool:
        if self.fraction <= 0 or self.cap <= 0:
            return False
        u = stable_uniform(self.seed, query_id)
        if u >= self.fraction:
            return False
        self._smallest.offer(query_id, u)
        return True

    def final(self) -> set[str]:
        """Query ids that are dev after the cap."""
        return self._smallest.final()


def _queries_table(rows: list[SampledQuery], splits: list[str] | None) -> pa.Table:
    """Sampled queries as :data:`spar.core.schemas.QUERIES` (``splits=None``: without the ``split`` column)."""
    schema = schemas.QUERIES if splits is not None else schemas.QUERIES.remove(schemas.QUERIES.get_field_index("split"))
    columns = {"query_id": [q.query_id for q in rows], "text": [q.text for q in rows],
               "source_passage_id": [q.source_passage_id for q in rows], "source_row": [q.source_row for q in rows]}
    return pa.table({**columns, **({"split": splits} if splits is not None else {})}, schema=schema)


def shard_name(index: int) -> str:
    return f"queries-{index:05d}.arrow"


def write_query_set(
    passages: Iterable[Passage],
    out_dir: Path,
    options: SampleSection | None = None,
    *,
    seed: int = 42,
    corpus_name: str = "corpus",
    on_bad_record: str = "fail",
    read_stats: ReadStats | None = None,
    progress: bool = True,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Write ``passages.arrow`` and ``queries-NNNNN.arrow`` shards into ``out_dir``; return the manifest stats.

    ``options``: the ``sample`` config section (default: its defaults), e.g. ``SampleSection(strategy="wiki")``;
    ``seed``: the experiment's. Two passes: the corpus is streamed into ``passages.arrow`` (needed anyway, and
    'wiki' must see every position to tell 0- from 1-based), then sentences are drawn from the memory-mapped
    passages. ``max_queries`` stops once that many training queries exist (smoke runs on big corpora). Dev queries
    beyond ``max_dev_queries`` are turned back into training queries in a last pass over the shards that hold them.
    ``executor`` draws the sentences of :data:`SAMPLE_CHUNK` passages per task (default: in this process); the
    queries are the same either way.
    """
    o = options or SampleSection()
    from spar.core.console import progress_bar

    out_dir = Path(out_dir)
    read_stats = read_stats if read_stats is not None else ReadStats()
    positions = ArticlePositions(o.position_field, corpus_name) if o.strategy == "wiki" else None
    passages_path = out_dir / PASSAGES_FILE
    n_passages, raw_positions, from_field = write_passages(
        progress_bar(passages, desc="reading corpus", unit=" passages", enabled=progress),
        passages_path, positions, on_bad_record, read_stats,
    )
    if n_passages == 0:
        skipped = f" ({read_stats.summary()})" if read_stats.total_skipped else ""
        raise BadRecordError(corpus_name, None, f"the corpus holds no passage{skipped}: nothing to sample")

    dev = DevSplit(o.dev_fraction, o.max_dev_queries, seed)
    # The seeded fixed-size sample of training queries: every query is offered (which dev candidates stay dev is
    # known only at the end), with room for the dev queries, which are left out of it in the final pass.
    train_sample = (SmallestHashes(o.train_sample + max(o.max_dev_queries, 0), seed, salt="train:")
                    if o.train_sample else None)
    buffer: list[SampledQuery] = []
    splits: list[str] = []
    shards_with_dev: list[int] = []
    shard_count = train_count = 0
    stopped_early = False

    def flush() -> None:
        nonlocal shard_count
        if not buffer:
            return
        if "dev" in splits:
            shards_with_dev.append(shard_count)
        schemas.write_table(out_dir / shard_name(shard_count), _queries_table(buffer, splits))
        shard_count += 1
        buffer.clear()
        splits.clear()

    # Sentences are drawn chunk by chunk (by this process or by Ray workers, each reading its rows of the
    # memory-mapped passages); chunks are consumed in order, so the dev split, the shards and max_queries see the
    # queries exactly as one sequential pass would.
    def tasks() -> Iterator[tuple[int, int, Any]]:
        for start in range(0, n_passages, SAMPLE_CHUNK):
            stop = min(n_passages, start + SAMPLE_CHUNK)
            yield start, stop, None if positions is None else np.array(
                [positions.zero_based(raw_positions[row], bool(from_field[row])) for row in range(start, stop)],
                dtype=np.int64)

    chunks = ChunkSampler(passages_path, o, seed)
    spec = WorkerSpec(f"sample:{Path(passages_path).resolve()}",
                      functools.partial(ChunkSampler, Path(passages_path).resolve(), o, seed),
                      local=chunks if executor is None or executor.kind == "local" else None,
                      needs={"passages table": passages_path})
    totals = SamplingStats()
    bar = progress_bar(total=n_passages, desc="sampling sentences", unit=" passages", enabled=progress)
    try:
        for task, (table, chunk_stats) in (executor or LocalExecutor()).map(spec, tasks(), ordered=True):
            ids, texts, sources, rows = (table.column(n).to_pylist() for n in
                                         ("query_id", "text", "source_passage_id", "source_row"))
            for i, query in enumerate(map(SampledQuery, ids, texts, sources, rows)):
                split = "dev" if dev.is_candidate(query.query_id) else "train"
                if train_sample is not None:
                    train_sample.offer(query.query_id)
                buffer.append(query)
                splits.append(split)
                train_count += split == "train"
                if len(buffer) >= o.shard_size:
                    flush()
                last_of_passage = i + 1 == len(rows) or rows[i + 1] != query.source_row
                if o.max_queries is not None and train_count >= o.max_queries and last_of_passage:
                    stopped_early = True
                    break
            if stopped_early:  # the chunk's counts up to the last passage read (one sequential pass's counts)
                end = query.source_row + 1
                totals.add(chunks((task[0], end, None if task[2] is None else task[2][:end - task[0]]))[1])
                bar.update(end - task[0])
                break
            totals.add(chunk_stats)
            bar.update(task[1] - task[0])
    finally:
        bar.close()
    flush()

    # Final pass: dev candidates beyond the cap become training queries; with max_queries, training queries past
    # the cap (from those demotions) are dropped. Shards that do not change are not rewritten.
    final_dev = dev.final()
    sampled_train = train_sample.final(final_dev, o.train_sample) if train_sample is not None else None
    counts = {"train": 0, "dev": 0}
    train_budget = o.max_queries
    for index in range(shard_count):
        path = out_dir / shard_name(index)
        table = schemas.read_table(path)
        old_splits = table.column("split").to_pylist()
        if index not in shards_with_dev and train_budget is None and sampled_train is None:
            counts["train"] += old_splits.count("train")
            counts["dev"] += old_splits.count("dev")
            continue
        new_splits, keep = [], []
        for qid, split in zip(table.column("query_id").to_pylist(), old_splits):
            split = "dev" if split == "dev" and qid in final_dev else "train"
            if split == "train" and sampled_train is not None and qid not in sampled_train:
                keep.append(False)
                new_splits.append(split)
                continue
            if split == "train" and train_budget is not None:
                if train_budget <= 0:
                    keep.append(False)
                    new_splits.append(split)
                    continue
                train_budget -= 1
            keep.append(True)
            new_splits.append(split)
            counts[split] += 1
        if new_splits == old_splits and all(keep):
            continue
        table = table.set_column(table.schema.get_field_index("split"), schemas.QUERIES.field("split"),
                                 pa.array(new_splits, pa.string()))
        schemas.write_table(path, table.filter(pa.array(keep, pa.bool_())))

    warning = totals.splitter_warning(o.sentence_splitter, o.max_words)
    if warning:
        log.warning("%s", warning)
    return {
        "passages": n_passages,
        "warnings": [warning] if warning else [],
        "queries": counts["train"] + counts["dev"],
        "queries_train": counts["train"],
        "queries_dev": counts["dev"],
        "dev_candidates": dev.candidates,
        "shards": shard_count,
        "stopped_at_max_queries": stopped_early,
        "train_sampled_from": train_sample.offered - len(final_dev) if train_sample is not None else None,
        "sampling": totals.as_dict(),
        "positions": None if positions is None else {
            "from_field": positions.from_field, "from_titles": positions.from_titles,
            "field_one_based": positions.one_based,
        },
    }
