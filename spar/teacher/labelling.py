"""Teacher labelling (SPAR §4.1): each sampled query gets the sparse teacher's top-K passages as training signal.

Per query the teacher returns its top ``k`` hits; the top ``n_positives`` are positives (dev queries keep only the
top 1) and the bottom ``n_negatives`` of the ``k`` (or of ``negative_window`` ranks) are hard negatives. Scores
and 1-based ranks are kept (for KL-style losses). Queries with too few hits are dropped and counted. Nothing else
is excluded: the query's source passage usually ranks first, which the paper intends.

Output: ``labels-NNNNN.arrow`` shards (:data:`spar.core.schemas.LABELS`). Shard ``s`` holds the labelled queries among
input queries ``[s * shard_size, (s + 1) * shard_size)`` (global order of the ``queries/`` shards), so a shard's
bytes depend only on its queries and the teacher: a killed run resumes at the first missing shard, and the result
is byte-identical to an uninterrupted run.

Where shards are labelled: by :class:`ShardLabeller` workers, in this process or on Ray workers (the ``executor``,
:mod:`spar.core.executor`); each worker writes its shards, :func:`label_queries` counts them and the stage writes the
manifest. Several machines without Ray: ``num_shards=N, shard_index=i`` labels the global shards ``s`` with
``s % N == i`` into
``labels-part-<i>-of-<N>/`` (same file names as the single-machine run). :func:`merge_label_parts` combines the N
part directories into ``labels/`` with the manifest a single-machine run would have written; ``spar label`` does it
by itself once every part directory is present in the output directory (shared file system, or copied there).

Example (skipped in the doctest run: it needs a run's teacher index and queries, and starts the JVM)::

    >>> from spar.teacher.teachers import BM25Searcher
    >>> from spar.core.config import LabelSection
    >>> from spar.teacher.labelling import label_queries
    >>> teacher = BM25Searcher("runs/x/teacher_index")                                       # doctest: +SKIP
    >>> stats = label_queries(teacher, "runs/x/queries", "runs/x/labels.partial", LabelSection(k=50))  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import pyarrow as pa

from spar.core import schemas
from spar.core.artifacts import PASSAGES_FILE
from spar.core.config import LabelSection
from spar.core.errors import ArtifactError, ConfigError
from spar.core.executor import Executor, LocalExecutor, WorkerSpec

Hits = dict[str, list[tuple[str, float]]]

#: Teacher batches queued on the search thread: the next one is searched while this one's hits are written.
PREFETCH_BATCHES = 2


def _detach_from_jvm() -> None:
    """Detach the current thread from the JVM (pyjnius attaches threads that call Java and needs this on exit)."""
    import sys

    jnius = sys.modules.get("jnius")
    if jnius is not None:
        jnius.detach()


class Teacher(Protocol):
    num_docs: int

    def search(self, queries: Sequence[tuple[str, str]], k: int) -> Hits: ...


def positives_for(section: LabelSection, split: str) -> int:
    """Positives kept per query: ``label.n_positives`` for training queries, the top hit alone for dev queries."""
    return 1 if split == "dev" else section.n_positives


def select(hits: Sequence[tuple[str, float]], n_positives: int, n_negatives: int,
           negative_window: tuple[int, int] | None = None) -> tuple[list[int], list[int]] | None:
    """0-based hit indices of (positives, negatives), or None when there are too few hits.

    Positives are the top ``n_positives``; negatives are the last ``n_negatives`` hits of the window (default: all
    hits after the positives; ``negative_window=(lo, hi)``: 1-based ranks lo..hi, never overlapping positives).
    """
    if len(hits) < n_positives:
        return None
    lo, hi = (n_positives, len(hits)) if negative_window is None else (
        max(negative_window[0] - 1, n_positives), min(negative_window[1], len(hits)))
    if hi - lo < n_negatives:
        return None
    negatives = list(range(hi - n_negatives, hi)) if n_negatives else []
    return list(range(n_positives)), negatives


def passage_row_map(passages_arrow: str | Path) -> dict[str, int]:
    """passage id -> row in ``passages.arrow`` (a dict: :func:`build_label_table` looks ids up one hit at a time)."""
    from spar.data.passages import PassagesTable

    return PassagesTable(passages_arrow).row_map()


def shard_name(index: int) -> str:
    return f"labels-{index:05d}.arrow"


def part_dir_name(shard_index: int, num_shards: int) -> str:
    return f"labels-part-{shard_index}-of-{num_shards}"


def shards_of_part(total_shards: int, num_shards: int, shard_index: int) -> list[int]:
    """Global label shards one machine labels (round-robin, so parts are balanced)."""
    return [s for s in range(total_shards) if s % num_shards == shard_index]


def build_label_table(queries: Sequence[tuple[str, str, str]], hits: Hits, rows: dict[str, int],
                      settings: LabelSection) -> tuple[pa.Table, int]:
    """One shard's table from (query id, text, split) and the teacher's hits; returns (table, dropped)."""
    cols: dict[str, list] = {name: [] for name in schemas.LABELS.names}
    dropped = 0
    for qid, text, split in queries:
        ranked = hits.get(qid, [])
        chosen = select(ranked, positives_for(settings, split), settings.n_negatives, settings.negative_window)
        if chosen is None:
            dropped += 1
            continue
        cols["query_id"].append(qid)
        cols["query"].append(text)
        cols["split"].append(split)
        for kind, indices in zip(("positive", "negative"), chosen):
            ids = [ranked[i][0] for i in indices]
            try:
                cols[f"{kind}_rows"].append([rows[pid] for pid in ids])
            except KeyError as missing:
                raise ArtifactError(f"teacher returned passage {missing} which is not in passages.arrow: the teacher "
                                    "index was built from another corpus (re-run `spar label --force`)") from None
            cols[f"{kind}_ids"].append(ids)
            cols[f"{kind}_scores"].append([ranked[i][1] for i in indices])
            cols[f"{kind}_ranks"].append([i + 1 for i in indices])
    return pa.table(cols, schema=schemas.LABELS), dropped


def _clean_temporaries(directory: Path) -> None:
    for stale in directory.glob(".labels-*.arrow.tmp-*"):
        stale.unlink(missing_ok=True)


class ShardLabeller:
    """Labels whole shards: the label stage's worker (one per process: this one, or each Ray worker of
    :mod:`spar.core.executor`). ``teacher`` is a teacher or a picklable factory of one (a Ray worker builds its own: a
    JVM and a searcher per worker). The query shards are memory-mapped and the passage id -> row map is built
    once per worker; passage texts are never loaded (the teacher index holds what search needs).

    ``labeller(s)`` writes shard ``s`` (``labels-<s>.arrow``, atomically) and returns its counts; ``map(shards)``
    does several in a row, searching the next batch while the previous shard is written.
    """

    def __init__(self, teacher: Teacher | Callable[[], Teacher], queries_dir: str | Path, out_dir: str | Path,
                 settings: LabelSection, passage_rows: dict[str, int] | None = None,
                 on_batch: Callable[[int], Any] | None = None):
        self.teacher: Teacher = teacher if hasattr(teacher, "search") else teacher()  # type: ignore[operator,assignment]
        self.queries_dir, self.out_dir, self.settings = Path(queries_dir), Path(out_dir), settings
        minimum_hits = settings.n_positives + settings.n_negatives
        if minimum_hits > self.teacher.num_docs:
            raise ConfigError(
                f"label: the teacher index holds {self.teacher.num_docs} passages but every training query needs "
                f"n_positives + n_negatives = {minimum_hits} hits: lower label.n_positives / label.n_negatives")
        self.rows = passage_rows if passage_rows is not None else passage_row_map(self.queries_dir / PASSAGES_FILE)
        self.table = schemas.read_shards(self.queries_dir, "queries")
        self.on_batch = on_batch

    def __call__(self, shard: int) -> dict[str, int]:
        result: dict[str, int] = {}
        for _, result in self.map([shard]):
            pass
        return result

    def _queries(self, s: int) -> list[tuple[str, str, str]]:
        size = self.settings.shard_size
        chunk = self.table.slice(s * size, size)
        return list(zip(chunk.column("query_id").to_pylist(), chunk.column("text").to_pylist(),
                        chunk.column("split").to_pylist()))

    def map(self, shards: Iterable[int]) -> Iterator[tuple[int, dict[str, int]]]:
        """Label ``shards`` in order, yielding ``(shard, counts)`` as each is written."""
        settings = self.settings
        shard_queries: dict[int, list[tuple[str, str, str]]] = {}
        shard_hits: dict[int, Hits] = {}

        def batches() -> Iterator[tuple[int, list[tuple[str, str]], bool]]:
            for s in shards:
                shard_queries[s] = self._queries(s)
                shard_hits[s] = {}
                for b in range(0, len(shard_queries[s]), settings.batch_size):
                    batch = shard_queries[s][b:b + settings.batch_size]
                    yield s, [(qid, text) for qid, text, _ in batch], b + settings.batch_size >= len(shard_queries[s])

        # Prefetch: the teacher searches the next batch (Java threads, GIL released) while this thread turns the
        # previous hits into Arrow shards; results are consumed in order, so shards do not depend on timing.
        # One worker only: pyjnius is not safe when two Python threads call into the JVM at once (it fails with
        # IncompatibleClassChangeError on SciFact-sized runs); Anserini parallelises each batch_search itself.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="teacher") as pool:
            try:
                pending: deque = deque()
                plan = batches()
                for item in islice(plan, PREFETCH_BATCHES):
                    pending.append((item, pool.submit(self.teacher.search, item[1], settings.k)))
                while pending:
                    (s, batch, last), future = pending.popleft()
                    hits = future.result()
                    following = next(plan, None)
                    if following is not None:
                        pending.append((following, pool.submit(self.teacher.search, following[1], settings.k)))
                    shard_hits[s].update(hits)
                    if self.on_batch is not None:
                        self.on_batch(len(batch))
                    if not last:
                        continue
                    queries = shard_queries.pop(s)
                    labels, dropped = build_label_table(queries, shard_hits.pop(s), self.rows, settings)
                    dropped_dev = sum(1 for _, _, split in queries if split == "dev") - sum(
                        1 for split in labels.column("split").to_pylist() if split == "dev")
                    schemas.write_table(self.out_dir / shard_name(s), labels)
                    yield s, {"queries": len(queries), "labelled": labels.num_rows, "dropped": dropped,
                              "dropped_dev": dropped_dev}
            finally:
                pool.submit(_detach_from_jvm).result()


def label_queries(
    teacher: Teacher | Callable[[], Teacher],
    queries_dir: str | Path,
    out_dir: str | Path,
    settings: LabelSection,
    *,
    passage_rows: dict[str, int] | None = None,
    num_shards: int = 1,
    shard_index: int = 0,
    progress: bool = True,
    executor: Executor | None = None,
    needs: Mapping[str, str | Path] | None = None,
    on_shard: Callable[[int, dict[str, int]], Any] | None = None,
) -> dict[str, Any]:
    """Label every query of ``queries_dir`` (or this machine's part) into ``out_dir``, skipping finished shards.

    ``teacher``: a teacher, or a picklable factory of one (required by a Ray ``executor``, whose workers each
    build their own). ``needs``: more paths a worker must see (the teacher index), see :mod:`spar.core.executor`.
    ``on_shard(shard, counts)`` is called as each shard is written. Returns stats: queries (input), labelled,
    dropped, shards written / reused, seconds and queries/s of this run, and where it ran.
    """
    from spar.core.console import progress_bar

    queries_dir, out_dir = Path(queries_dir), Path(out_dir)
    executor = executor if executor is not None else LocalExecutor()
    out_dir.mkdir(parents=True, exist_ok=True)
    _clean_temporaries(out_dir)
    n_queries = schemas.read_shards(queries_dir, "queries").num_rows
    total_shards = math.ceil(n_queries / settings.shard_size)
    mine = shards_of_part(total_shards, num_shards, shard_index)

    def shard_bounds(s: int) -> tuple[int, int]:
        return s * settings.shard_size, min((s + 1) * settings.shard_size, n_queries)

    stats: dict[str, Any] = {"queries": 0, "labelled": 0, "dropped": 0, "dropped_dev": 0, "shards_written": 0,
                             "shards_reused": 0}
    todo = []
    for s in mine:
        start, end = shard_bounds(s)
        stats["queries"] += end - start
        path = out_dir / shard_name(s)
        if path.exists():
            done = schemas.read_table(path).num_rows
            stats["labelled"] += done
            stats["dropped"] += (end - start) - done
            stats["shards_reused"] += 1
        else:
            todo.append(s)

    searched = 0
    started = time.perf_counter()
    bar = progress_bar(total=sum(shard_bounds(s)[1] - shard_bounds(s)[0] for s in todo), desc="labelling",
                       unit=" q", enabled=progress)
    local = executor.kind == "local"
    if not local and hasattr(teacher, "search"):
        raise ConfigError("label: a Ray executor builds a teacher on each worker; pass a factory of the teacher "
                          "(functools.partial(spar.teacher.registry.configured_teacher, section, index_dir))")
    spec = WorkerSpec(
        f"label:{out_dir.resolve()}",
        functools.partial(ShardLabeller, teacher, queries_dir.resolve(), out_dir.resolve(), settings),
        local=ShardLabeller(teacher, queries_dir, out_dir, settings, passage_rows, bar.update) if local and todo
        else None,
        needs={"queries directory": queries_dir, "passages table": queries_dir / PASSAGES_FILE,
               "labels' partial directory": out_dir, **(needs or {})},
        describe_task=lambda s: f"shard {s} ({shard_name(s)})")
    try:
        for s, counts in executor.map(spec, todo):
            stats["labelled"] += counts["labelled"]
            stats["dropped"] += counts["dropped"]
            stats["dropped_dev"] += counts["dropped_dev"]
            stats["shards_written"] += 1
            searched += counts["queries"]
            if not local:
                bar.update(counts["queries"])
            bar.set_postfix(dropped=stats["dropped"], refresh=False)
            if on_shard is not None:
                on_shard(s, counts)
    finally:
        bar.close()
    _clean_temporaries(out_dir)  # a worker killed while writing leaves its temporary behind
    seconds = time.perf_counter() - started
    stats.update({
        "total_shards": total_shards, "part_shards": len(mine), "seconds": round(seconds, 3),
        "queries_per_second": round(searched / seconds, 1) if searched and seconds > 0 else None,
        "queries_labelled_this_run": searched, **executor.describe(),
    })
    teacher_start = getattr(getattr(spec.local, "teacher", None), "stats", {}).get("start_seconds")
    if teacher_start is not None:  # an in-memory teacher built here: how long its postings took
        stats["teacher_start_seconds"] = teacher_start
    return stats


def merge_label_parts(part_dirs: Sequence[str | Path], out_dir: str | Path) -> dict[str, Any]:
    """Check that ``part_dirs`` are the N complete parts of one labelling job and gather their shards into
    ``out_dir`` (files are hard-linked when possible, else copied). Returns the summed stats."""
    from spar.core.artifacts import read_manifest

    out_dir = Path(out_dir)
    manifests = [(Path(d), read_manifest(d)) for d in part_dirs]
    jobs = {m["stats"].get("job") for _, m in manifests}
    if len(jobs) != 1 or None in jobs:
        raise ArtifactError(f"label parts {[str(d) for d in part_dirs]} come from different labelling jobs "
                            "(config or inputs differ): re-run the parts with one config")
    n = {m["stats"]["num_shards"] for _, m in manifests}
    indices = sorted(m["stats"]["shard_index"] for _, m in manifests)
    if len(n) != 1 or indices != list(range(n.pop())):
        raise ArtifactError(f"label parts present: {indices}; expected every shard_index of num_shards")
    total = manifests[0][1]["stats"]["total_shards"]
    out_dir.mkdir(parents=True, exist_ok=True)
    placed = set()
    for directory, _ in manifests:
        for f in sorted(directory.glob("labels-*.arrow")):
            target = out_dir / f.name
            if target.exists():
                target.unlink()
            try:
                os.link(f, target)
            except OSError:
                shutil.copy2(f, target)
            placed.add(f.name)
    missing = [shard_name(s) for s in range(total) if shard_name(s) not in placed]
    if missing:
        raise ArtifactError(f"label parts are missing shards {missing[:5]}")
    summed = {key: sum(m["stats"][key] for _, m in manifests)
              for key in ("queries", "labelled", "dropped", "dropped_dev")}
    summed.update({"total_shards": total, "parts": len(manifests)})
    return summed


def merge_parts_when_ready(final, num_shards: int, teacher: str) -> dict[str, Any]:
    """Merge the ``num_shards`` parts of one labelling job into ``final`` (a :class:`~spar.core.stage.Unit` for
    ``labels/``; each part's manifest records its fingerprint as ``job``) once every part is complete in the output
    directory; else say which parts are missing. Returns printable statistics."""
    from spar.core.artifacts import is_complete, read_manifest
    from spar.core.stage import run_unit

    labels_dir, job = final.output, final.writer().fingerprint
    parts = [labels_dir.with_name(part_dir_name(i, num_shards)) for i in range(num_shards)]
    ready = [p for p in parts if is_complete(p) and read_manifest(p)["stats"].get("job") == job]
    if len(ready) < num_shards:
        return {"merged": f"no: waiting for {', '.join(p.name for p in parts if p not in ready)}"}

    def merge(w) -> dict[str, Any]:
        merged = merge_label_parts(parts, w.path)
        w.stats.update(merged, teacher=teacher)
        w.schema = {"labels-*.arrow": schemas.LABELS.names}
        return merged

    merged = run_unit(final, merge)
    if merged.get("skipped"):
        merged = read_manifest(labels_dir)["stats"]
    return {"merged": f"yes: {merged['parts']} parts -> {labels_dir}",
            "labelled (all parts)": f"{merged['labelled']:,}", "dropped (all parts)": f"{merged['dropped']:,}"}
