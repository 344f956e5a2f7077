"""Reading offline W&B runs back, for the tests: wandb 0.31 has no public reader of its ``run-*.wandb`` files.

The file is a LevelDB-style log of wandb's own ``Record`` protobufs (:mod:`wandb.proto.wandb_internal_pb2`, decoded
with wandb's classes) after a 7-byte header: 32 KiB blocks of chunks, each ``crc32 | length (2) | type (1) |
payload``, a record split over blocks as first/middle/last chunks. (wandb >= 0.2x writes no ``wandb-summary.json``
offline.)
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """One offline run as its record log holds it."""

    path: Path
    name: str = ""
    job_type: str = ""
    group: str = ""
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    #: ``{"name", "type", "digest", "used", "entries": {path: ref}, "metadata"}`` of every artifact it logged or
    #: declared it used (``used``: logged with ``use_after_commit``, as ``run.use_artifact`` does).
    artifacts: list[dict] = field(default_factory=list)
    exit_code: int | None = None

    @property
    def logged(self) -> dict[str, dict]:
        return {a["name"]: a for a in self.artifacts if not a["used"]}

    @property
    def used(self) -> dict[str, dict]:
        return {a["name"]: a for a in self.artifacts if a["used"]}


def records(path: Path):
    """Every ``Record`` of a ``run-*.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, buf = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        payload, pos = data[pos + HEADER:pos + HEADER + length], pos + HEADER + length
        if kind == 0:
            continue
        buf = payload if kind in (FULL, FIRST) else buf + payload
        if kind in (FIRST, MIDDLE):
            continue
        record = pb.Record()
        record.ParseFromString(buf)
        yield record


def _items(items) -> dict:
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}


def read_run(path: Path, wait: float = 60.0) -> OfflineRun:
    """An offline run directory (``offline-run-*``) or its ``run-*.wandb`` file, read back once complete: W&B's
    service process writes the file and may still be at it when ``run.finish()`` has returned (waits up to ``wait``
    seconds for its exit record)."""
    path = Path(path)
    file = next(path.glob("run-*.wandb")) if path.is_dir() else path
    deadline = time.monotonic() + wait
    while True:
        run = _read(file)
        if run.exit_code is not None or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def _read(file: Path) -> OfflineRun:
    run = OfflineRun(file)
    for record in records(file):
        which = record.WhichOneof("record_type")
        if which == "run":  # the run record carries wandb.init's name, job type, group and config
            run.name, run.job_type, run.group = record.run.display_name, record.run.job_type, record.run.run_group
            run.config.update(_items(record.run.config.update))
        elif which == "config":
            run.config.update(_items(record.config.update))
        elif which == "history":
            run.history.append(_items(record.history.item))
        elif which == "summary":
            run.summary.update(_items(record.summary.update))
        elif which == "artifact":
            a = record.artifact
            run.artifacts.append({"name": a.name, "type": a.type, "digest": a.digest, "used": a.use_after_commit,
                                  "entries": {e.path: e.ref for e in a.manifest.contents},
                                  "metadata": json.loads(a.metadata) if a.metadata else {}})
        elif which == "exit":
            run.exit_code = record.exit.exit_code
    return run


def read_runs(wandb_dir: Path) -> list[OfflineRun]:
    """Every offline run under ``<output_dir>/wandb``, oldest first."""
    return [read_run(d) for d in sorted(Path(wandb_dir).glob("offline-run-*"))]
