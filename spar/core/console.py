"""What spar prints: its own progress bars and summaries, not other libraries' chatter (unless asked).

:func:`configure` sets, once per process and at the source, how loud the libraries spar drives are:

- ``quiet`` (``-q``): errors and spar's final summary only; ``normal`` (default): spar's progress bars and stage
  lines, and real warnings; ``verbose`` (``-v``): the libraries' own INFO logs and progress bars come back.
- Python logging: one handler on the root logger; Lightning's loggers (which also print through their own handler,
  so every message appeared twice) propagate to it only, at WARNING unless verbose ("GPU available", the
  litlogger tip, "Loading `train_dataloader` ..." are INFO).
- transformers: its "Loading weights" / "Writing model shards" bars and INFO messages off unless verbose;
  the Hugging Face hub's bars likewise.
- W&B: ``WANDB_SILENT`` (no offline banner and sync hints per run; spar's summary says where the runs are);
  ``WANDB_DISABLE_CODE`` and the integrations' advertisements off.
- warnings: only the known-harmless deprecation spam of dependencies is filtered, by message; every other warning
  still shows.
- The JVM (:mod:`spar.core.java`): log4j2/SLF4J status at WARN, Lucene's java.util.logging INFO off, crash files in the
  temporary directory. Nothing redirects stderr: real errors always show.

Example::

    >>> import logging
    >>> from spar.core.console import configure
    >>> configure("normal")
    >>> logging.getLogger("lightning.pytorch").getEffectiveLevel() == logging.WARNING
    True
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Literal

Verbosity = Literal["quiet", "normal", "verbose"]

#: Loggers of libraries spar drives; at WARNING unless verbose.
LIBRARY_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "transformers",
                   "sentence_transformers", "huggingface_hub", "urllib3", "filelock", "faiss", "pyserini",
                   "torch.distributed", "wandb")
#: Deprecation messages of dependencies that say nothing to a spar user (matched at the start of the message).
HARMLESS_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\)` is deprecated",  # Lightning's _pytree shim on torch >= 2.13
    r"The '.*' does not have many workers",  # Lightning's advice; spar chooses its workers (train.num_workers)
    r".*your dataloader is not resumable",  # spar resumes exactly itself (spar/train/training.py)
)

_configured: Verbosity | None = None


def configure(verbosity: Verbosity = "normal") -> None:
    """Set the loudness of spar's dependencies for this process (see the module docstring)."""
    global _configured
    verbose = verbosity == "verbose"
    level = _level(verbosity)
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "spar", False)), None)
    if handler is None:
        # With a root handler in place, Lightning adds none of its own at import (it would print every message
        # twice); it sets its loggers to INFO, so the level that counts is this handler's.
        handler = logging.StreamHandler()
        handler.spar = True  # type: ignore[attr-defined]  # marks spar's own handler
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    handler.setLevel(level)
    root.setLevel(level)
    logging.getLogger("spar").setLevel(level)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers.clear()  # their own handlers printed every message a second time beside the root's
        logger.propagate = True
    if not verbose:
        os.environ["WANDB_SILENT"] = "true"
        os.environ["WANDB_QUIET"] = "true"
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        for pattern in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
    if verbosity == "quiet":
        warnings.simplefilter("ignore")
    os.environ.setdefault("WANDB_DISABLE_CODE", "true")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _quiet_transformers(verbose)
    _configured = verbosity
    adopt_library_loggers()


def adopt_library_loggers() -> None:
    """Route Lightning's messages through the root handler only. ``import lightning`` adds a console handler of its
    own to the ``lightning`` logger unconditionally, which printed every message twice and at INFO whatever the
    verbosity; modules that import Lightning call this right after (a no-op before :func:`configure`)."""
    if _configured is None:
        return
    logger = logging.getLogger("lightning")
    for handler in list(logger.handlers):
        if type(handler) is logging.StreamHandler:
            logger.removeHandler(handler)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(_level(_configured))


def _level(verbosity: Verbosity) -> int:
    """The logging level of spar's and the libraries' loggers: quiet is errors and the final summary only (#47)."""
    return {"verbose": logging.INFO, "quiet": logging.ERROR}.get(verbosity, logging.WARNING)


def _quiet_transformers(verbose: bool) -> None:
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - a dependency
        return
    if verbose:
        hf_logging.enable_progress_bar()
        hf_logging.set_verbosity_info()
    else:
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def verbosity() -> Verbosity:
    """The verbosity :func:`configure` set (``normal`` before any call)."""
    return _configured or "normal"


# ----------------------------------------------------------------------------------------------------------------
# spar's progress bars
# ----------------------------------------------------------------------------------------------------------------

#: Seconds between the plain lines a bar prints when stderr is not a terminal (a log file, CI, nohup).
PLAIN_PROGRESS_EVERY = 300.0


class PlainProgress:
    """A progress bar for a log file: a plain line every :data:`PLAIN_PROGRESS_EVERY` seconds and one at the end,
    never carriage returns (tqdm writes ``\\r`` chunks into a redirected stderr: 46 of them in a 5-minute run)."""

    def __init__(self, iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it"):
        import time

        self.iterable, self.total, self.desc, self.unit, self.n = iterable, total, desc, unit.strip(), 0
        self._clock = time.monotonic
        self._started = self._last = self._clock()
        self._closed = False

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _line(self, final: bool) -> None:
        import sys

        seconds = self._clock() - self._started
        of = f"/{self.total:,}" if self.total else ""
        rate = f", {self.n / seconds:,.1f} {self.unit}/s" if seconds > 0 else ""
        print(f"{self.desc}: {self.n:,}{of} {self.unit}{' in ' + f'{seconds:.0f} s' if final else ''}{rate}",
              file=sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._clock() - self._last >= PLAIN_PROGRESS_EVERY:
            self._last = self._clock()
            self._line(final=False)

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._line(final=True)


def progress_bar(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it",
                 enabled: bool = True, mininterval: float = 1.0):
    """spar's progress bar (the one factory every stage uses): tqdm on a terminal; :class:`PlainProgress` when
    stderr is a file or a pipe; nothing under ``-q`` or when ``enabled`` is false.

        >>> configure("quiet")
        >>> bar = progress_bar(total=3, desc="encoding")
        >>> bar.update(3); bar.close()
        >>> configure("normal")
    """
    import sys

    from tqdm.auto import tqdm

    if not enabled or verbosity() == "quiet":
        return tqdm(iterable, total=total, desc=desc, unit=unit, disable=True)
    if not sys.stderr.isatty():
        return PlainProgress(iterable, total=total, desc=desc, unit=unit)
    return tqdm(iterable, total=total, desc=desc, unit=unit, mininterval=mininterval)
