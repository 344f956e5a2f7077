"""The passages table ``queries/passages.arrow``: its one reader.

The sample stage writes the corpus in reading order as :data:`spar.core.schemas.PASSAGES` (``row``, ``id``, ``title``,
``text``); ``row`` is the passage's index everywhere else (labels, training batches, embeddings). Every stage that
reads the table goes through :class:`PassagesTable`: it memory-maps the file, checks the schema and that ``row``
numbers the passages 0..n-1 in file order, and offers the access patterns the stages need (rows -> texts, ids ->
rows, batches in order, lookup for search).

Example::

    >>> import tempfile, pyarrow as pa
    >>> from pathlib import Path
    >>> from spar.core.schemas import PASSAGES, write_table
    >>> path = Path(tempfile.mkdtemp()) / "passages.arrow"
    >>> write_table(path, pa.table({"row": [0, 1, 2], "id": ["a", "b", "c"], "title": ["A", "", "C"],
    ...                             "text": ["one", "two", "three"]}, schema=PASSAGES))
    >>> table = PassagesTable(path)
    >>> len(table), table.get([2, 0])
    (3, [('C', 'three'), ('A', 'one')])
    >>> table.row_of(["c", "zz", "a"]).tolist()
    [2, -1, 0]
    >>> [ids for ids, _, _ in table.iter_slices(2)]
    [['a', 'b'], ['c']]
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spar.core.errors import ArtifactError
from spar.core.schemas import PASSAGES, read_table

COLUMNS = tuple(PASSAGES.names)


class PassagesTable:
    """``passages.arrow`` memory-mapped and checked (schema :data:`spar.core.schemas.PASSAGES`, rows 0..n-1).

    ``use_title=False`` blanks titles in :meth:`get`, :meth:`char_lengths` and :meth:`iter_slices` (each also takes
    ``use_title`` per call).
    """

    def __init__(self, path: str | Path, use_title: bool = True):
        self.path = Path(path)
        if not self.path.exists():
            raise ArtifactError(f"{self.path}: passages file missing (run `spar sample`)")
        try:
            self.table = read_table(self.path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise ArtifactError(f"{self.path}: not an Arrow IPC file ({exc}); re-run `spar sample --force`") from None
        missing = [name for name in COLUMNS if name not in self.table.column_names]
        if missing:
            raise ArtifactError(f"{self.path}: lacks columns {missing} (schema spar.core.schemas.PASSAGES)")
        n = self.table.num_rows
        rows = self.table.column("row")
        if n and not pc.all(pc.equal(rows, pa.array(np.arange(n, dtype=np.int64)))).as_py():
            raise ArtifactError(f"{self.path}: column 'row' must number passages 0..{n - 1} in file order")
        self.use_title = use_title

    @classmethod
    def open(cls, path: str | Path, use_title: bool = True) -> "PassagesTable":
        return cls(path, use_title)

    def __len__(self) -> int:
        return self.table.num_rows

    def _titles(self, use_title: bool | None) -> bool:
        return self.use_title if use_title is None else use_title

    # -- by row ----------------------------------------------------------------------------------------------------
    def get(self, rows: Sequence[int] | np.ndarray, use_title: bool | None = None) -> list[tuple[str, str]]:
        """``(title, text)`` of each row, in the order given (title ``""`` without titles)."""
        taken = self.table.select(["title", "text"]).take(pa.array(np.asarray(rows, dtype=np.int64)))
        texts = taken.column("text").to_pylist()
        if not self._titles(use_title):
            return [("", t) for t in texts]
        return list(zip(taken.column("title").to_pylist(), texts))

    def char_lengths(self, use_title: bool | None = None) -> np.ndarray:
        """Characters of (title +) text per row: a cheap proxy for token length, for length-grouped batches."""
        length = pc.utf8_length(self.table.column("text"))
        if self._titles(use_title):
            length = pc.add(length, pc.utf8_length(self.table.column("title")))
        return length.to_numpy().astype(np.int32)

    # -- by id -----------------------------------------------------------------------------------------------------
    @cached_property
    def ids(self) -> list[str]:
        """Passage ids in row order."""
        return self.table.column("id").to_pylist()

    def row_of(self, ids: Sequence[str]) -> np.ndarray:
        """Row of each passage id (vectorised), -1 where the id is not in the table."""
        positions = pc.index_in(pa.array([str(i) for i in ids], pa.string()), value_set=self.table.column("id"))
        return positions.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    def row_map(self) -> dict[str, int]:
        """``{passage id: row}`` (for callers that look ids up one at a time in a hot loop)."""
        return dict(zip(self.ids, range(len(self))))

    def lookup(self, ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """The row (``row``, ``id``, ``title``, ``text``) of each passage id, ``None`` where it is absent."""
        rows = self.row_of(ids)
        found = self.table.take(pa.array(np.where(rows >= 0, rows, 0))).to_pylist() if len(rows) else []
        return [record if row >= 0 else None for row, record in zip(rows.tolist(), found)]

    # -- in order --------------------------------------------------------------------------------------------------
    def iter_batches(self, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
        """Record batches of at most ``batch_rows`` rows, in row order (zero-copy slices of the mapped file)."""
        for batch in self.table.to_batches():
            for offset in range(0, batch.num_rows, batch_rows):
                yield batch.slice(offset, batch_rows)

    def iter_columns(self, columns: Sequence[str] = ("id", "title", "text"),
                     batch_rows: int = 10_000) -> Iterator[dict[str, list]]:
        """Column batches (``{name: list}``) in row order."""
        for batch in self.iter_batches(batch_rows):
            yield {name: batch.column(name).to_pylist() for name in columns}

    def iter_slices(self, size: int, use_title: bool | None = None) -> Iterator[tuple[list[str], list[str], list[str]]]:
        """``(ids, titles, texts)`` of consecutive slices of ``size`` rows (titles ``""`` without titles)."""
        titles_on = self._titles(use_title)
        for start in range(0, len(self), size):
            piece = self.table.slice(start, size)
            ids, texts = piece.column("id").to_pylist(), piece.column("text").to_pylist()
            titles = piece.column("title").to_pylist() if titles_on else [""] * len(ids)
            yield ids, titles, texts


def indexed_text(fields: Iterable[str | None]) -> str:
    """A passage as the BM25 teacher indexes it (and a term-based Λ reads it): its non-empty fields joined by one
    space, e.g. ``indexed_text((title, text))``."""
    return " ".join(part for part in fields if part)


def encoded_passages(passages_arrow: Path, corpus: str | list[str]) -> Path | list[Path]:
    """The passages an experiment encodes and indexes: ``passages_arrow`` (a run's ``queries/passages.arrow``) when
    the sample stage wrote it (the rows labels refer to), else the ``data.corpus`` file or files (e.g. an experiment
    whose Λ comes from elsewhere)."""
    from spar.data.readers import corpus_files

    if passages_arrow.exists():
        return passages_arrow
    return Path(corpus) if isinstance(corpus, str) else corpus_files(corpus)


def passage_contents(fields: Sequence[str], batch: dict[str, list]) -> list[str]:
    """The indexed text of each passage of a batch: the non-empty ``fields`` joined by one space."""
    columns = [batch[f] for f in fields]
    return [indexed_text(values) for values in zip(*columns)]


def corpus_texts(passages_arrow: str | Path, fields: Sequence[str] = ("title", "text")) -> Iterator[str]:
    """Every passage of ``passages.arrow`` as the teacher indexed it (the ``label.fields`` joined by a space)."""
    for batch in PassagesTable.open(passages_arrow).iter_columns(("id", *fields)):
        yield from passage_contents(fields, batch)
