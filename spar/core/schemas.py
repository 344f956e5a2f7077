"""Arrow schemas of every tabular artifact, in one place.

Layout under ``<experiment.output_dir>`` (names from :data:`spar.core.artifacts.LAYOUT`):

- ``queries/``: ``passages.arrow`` (:data:`PASSAGES`, the corpus in reading order; ``row`` is the passage's
  index everywhere else) and ``queries-NNNNN.arrow`` shards (:data:`QUERIES`).
- ``labels/``: ``labels-NNNNN.arrow`` shards (:data:`LABELS`), one per ``label.shard_size`` queries.
- ``embeddings/<encoder>/<split>/``: ``part-NNNNN.npy`` float matrices + ``ids.arrow`` (:data:`EMBEDDING_IDS`).

Arrow files are written in the IPC *file* format, so readers memory-map them (``pa.memory_map``) instead of
loading them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa

PASSAGES = pa.schema([
    pa.field("row", pa.int64(), nullable=False),
    pa.field("id", pa.string(), nullable=False),
    pa.field("title", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
])

QUERIES = pa.schema([
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("source_passage_id", pa.string(), nullable=False),
    pa.field("source_row", pa.int64(), nullable=False),
    pa.field("split", pa.string(), nullable=False),  # "train" or "dev"
])

LABELS = pa.schema([
    pa.field("query_id", pa.string(), nullable=False),
    pa.field("query", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("positive_ids", pa.list_(pa.string()), nullable=False),
    pa.field("positive_rows", pa.list_(pa.int64()), nullable=False),
    pa.field("positive_scores", pa.list_(pa.float32()), nullable=False),
    pa.field("positive_ranks", pa.list_(pa.int32()), nullable=False),
    pa.field("negative_ids", pa.list_(pa.string()), nullable=False),
    pa.field("negative_rows", pa.list_(pa.int64()), nullable=False),
    pa.field("negative_scores", pa.list_(pa.float32()), nullable=False),
    pa.field("negative_ranks", pa.list_(pa.int32()), nullable=False),
])

EMBEDDING_IDS = pa.schema([
    pa.field("row", pa.int64(), nullable=False),
    pa.field("id", pa.string(), nullable=False),
])
#: The file of :data:`EMBEDDING_IDS` rows: beside an embeddings split's vectors, and in an index directory.
IDS_FILE = "ids.arrow"


def write_table(path: str | Path, table: pa.Table) -> None:
    """Write an Arrow IPC file (memory-mappable) atomically: a temporary file renamed into place."""
    from spar.core.artifacts import atomic_file

    with atomic_file(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def read_table(path: str | Path) -> pa.Table:
    """Memory-map an Arrow IPC file written by :func:`write_table`; a damaged (e.g. truncated) or missing file is
    an :class:`~spar.core.errors.ArtifactError` naming it."""
    with open_ipc(path) as reader:
        return reader.read_all()


@contextlib.contextmanager
def open_ipc(path: str | Path):
    """``with open_ipc(path) as reader:`` a memory-mapped Arrow IPC file reader; read errors name the file."""
    from spar.core.errors import ArtifactError

    try:
        with pa.memory_map(str(path), "r") as source:
            yield pa.ipc.open_file(source)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing file (re-run the stage that writes it)") from None
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"{path}: damaged Arrow file ({reason}); delete it and re-run the stage that writes "
                            "it") from None


def read_shards(directory: str | Path, prefix: str) -> pa.Table:
    """Concatenate every ``<prefix>-NNNNN.arrow`` shard of a directory, in order (memory-mapped)."""
    files = sorted(Path(directory).glob(f"{prefix}-*.arrow"))
    if not files:
        from spar.core.errors import ArtifactError

        raise ArtifactError(f"{directory}: no '{prefix}-*.arrow' shards")
    return pa.concat_tables([read_table(f) for f in files])
