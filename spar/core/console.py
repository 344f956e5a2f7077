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
    level = logging.INFO if verbose else logging.WARNING
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
    logging.getLogger("spar").setLevel(logging.INFO if verbose else logging.WARNING)
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO if verbose else logging.WARNING)
        logger.handlers.clear()  # their own handlers printed every message a second time beside the root's
        logger.propagate = True
    if not verbose:
        os.environ["WANDB_SILENT"] = "true"
        os.environ["WANDB_QUIET"] = "true"
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        for pattern in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern)
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
        logging.getLogger(name).setLevel(logging.INFO if _configured == "verbose" else logging.WARNING)


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
