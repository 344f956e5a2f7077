"""One spar run per output directory: the lock file (``.spar.lock``) a run takes and the stage processes it starts
share, and stage processes that die with their parent.

Example::

    >>> import tempfile
    >>> from spar.core.output_lock import LOCK_FILE, output_lock
    >>> d = tempfile.mkdtemp()
    >>> with output_lock(d) as lock:
    ...     lock.name == LOCK_FILE
    True
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from spar.core.artifacts import ensure_writable, pid_alive
from spar.core.errors import ArtifactError

LOCK_FILE = ".spar.lock"
#: ``<lock path>|<pid>`` of the process holding the lock, inherited by the stage processes it starts (which share it).
LOCK_ENV = "SPAR_OUTPUT_LOCK"
#: How long a lock file may stay empty or unreadable before it counts as stale (its writer crashed).
_UNREADABLE_LOCK_SECONDS = 2.0


def _read_lock(path: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads(path.read_text(encoding="utf-8"))
        return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else None
    except (OSError, ValueError):
        return None


def run_lock_name(command: str, cfg: Any) -> str:
    """The lock a command takes: the whole output directory, except for one part of a multi-machine ``label``
    (``label.num_shards`` > 1), whose parts share one output directory by design and lock only their own part."""
    label = getattr(cfg, "label", None)
    if command == "label" and label is not None and label.num_shards > 1:
        return f".spar-label-part-{label.shard_index}-of-{label.num_shards}.lock"
    return LOCK_FILE


#: The directories :func:`acquire_output_lock` created for each lock (innermost first): a run refused before any
#: work leaves no empty ``runs/<name>/`` behind (#48).
_MADE_FOR_LOCK: dict[str, list[Path]] = {}


def acquire_output_lock(directory: str | Path, name: str = LOCK_FILE) -> Path | None:
    """Take ``<directory>/.spar.lock`` for this process, or fail naming the run that holds it.

    A lock whose owner died on this machine (``kill -9``, power loss) is stale and taken over. A stage process
    started by ``spar run`` shares its parent's lock (see :data:`LOCK_ENV`); then nothing is taken and None is
    returned.
    """
    made = [a for a in (Path(directory).absolute(), *Path(directory).absolute().parents) if not a.exists()]
    d = ensure_writable(directory)
    lock = d / name
    _MADE_FOR_LOCK[str(lock)] = made  # removed again at release while still empty (a refusal before any work)
    host = socket.gethostname()
    deadline = time.time() + 2 * _UNREADABLE_LOCK_SECONDS
    while time.time() < deadline:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _read_lock(lock)
            if owner is None:
                # Being written by its owner right now, or left empty/garbled by a crash (full disk, power loss):
                # an owner writes its lock within milliseconds, so one unreadable for seconds is taken over.
                time.sleep(0.05)
                try:
                    age = time.time() - lock.stat().st_mtime
                except FileNotFoundError:
                    continue
                if _read_lock(lock) is None and age > _UNREADABLE_LOCK_SECONDS:
                    lock.unlink(missing_ok=True)
                continue
            if owner.get("host") == host and owner["pid"] == os.getpid():
                return None  # this process holds it already (stages run in-process one after another)
            if os.environ.get(LOCK_ENV) == f"{lock.resolve()}|{owner['pid']}" and pid_alive(owner["pid"]):
                # A stage process of `spar run` (or a DDP rank) shares its parent's lock, so it must not outlive
                # it: an orphan would keep writing while a rerun takes the stale lock over.
                die_with_parent()
                return None
            if owner.get("host") == host and not pid_alive(owner["pid"]):
                if _read_lock(lock) == owner:
                    lock.unlink(missing_ok=True)  # stale: its owner is dead
                continue
            raise ArtifactError(
                f"{d}: another spar run (pid {owner['pid']} on {owner.get('host')}, started {owner.get('started')}) "
                f"is using this output directory; wait for it or stop it (if it is dead, delete {lock})")
        except OSError as exc:
            raise ArtifactError(f"cannot create the lock file {lock}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "command": " ".join(sys.argv)}, fh)
        os.environ[LOCK_ENV] = f"{lock.resolve()}|{os.getpid()}"
        return lock
    raise ArtifactError(f"{lock}: cannot take the lock (unreadable lock file; delete it if no spar run is active)")


def release_output_lock(lock: Path | None) -> None:
    """Remove a lock this process took (never another process's)."""
    if lock is None:
        return
    owner = _read_lock(lock)
    if owner is not None and owner["pid"] == os.getpid():
        lock.unlink(missing_ok=True)
        for made in _MADE_FOR_LOCK.pop(str(lock), []):  # innermost first; a directory with anything in it stays
            try:
                made.rmdir()
            except OSError:
                break
    if os.environ.get(LOCK_ENV, "").endswith(f"|{os.getpid()}"):
        os.environ.pop(LOCK_ENV, None)


@contextlib.contextmanager
def output_lock(directory: str | Path, name: str = LOCK_FILE):
    """``with output_lock(output_dir):`` one spar run per output directory (see :func:`acquire_output_lock`)."""
    lock = acquire_output_lock(directory, name)
    try:
        yield lock
    finally:
        release_output_lock(lock)


def hold_output_lock(directory: str | Path, name: str = LOCK_FILE) -> Path | None:
    """Take the output directory's lock until this process exits (for the CLI: one call, no indentation)."""
    lock = acquire_output_lock(directory, name)
    if lock is not None:
        atexit.register(release_output_lock, lock)
    return lock


def die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux ``PR_SET_PDEATHSIG``), so a killed
    ``spar run`` leaves no orphan stage writing into the output directory. Also usable as a ``preexec_fn``."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def holds_output_lock() -> bool:
    """Whether this process holds (or shares, as a stage of ``spar run``) an output directory's whole lock: then no
    other spar run is writing there, and a temporary whose process is dead is litter (see :func:`output_lock`)."""
    held = os.environ.get(LOCK_ENV, "")
    return Path(held.rpartition("|")[0]).name == LOCK_FILE
