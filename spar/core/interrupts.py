"""Ctrl-C that always stops a stage: a SIGINT handler that is Python's own, except where Python would lose it.

Python raises ``KeyboardInterrupt`` in whatever code runs when SIGINT arrives. When that code is a finalizer
(``__del__``, run by the garbage collector in the middle of anything: the ``regex`` module's pattern objects have
one), the exception is printed as "Exception ignored in ..." and dropped: the stage ran on to its end as if Ctrl-C had
never been pressed (#48). :func:`install` puts a handler in place that raises as Python's does, but inside a
finalizer defers the interrupt by a few milliseconds, to the code that runs next. (The in-process JVM of tune and
evaluate leaves SIGINT to Python: :func:`spar.core.java.start_jvm` starts it with ``-Xrs``.)

Example::

    >>> import signal
    >>> previous = install()
    >>> signal.getsignal(signal.SIGINT) is on_sigint
    True
    >>> _ = signal.signal(signal.SIGINT, previous)
"""

from __future__ import annotations

import _thread
import signal
import threading
from types import FrameType
from typing import Any

#: How long an interrupt that arrived inside a finalizer waits before it is raised again (seconds).
DEFER_SECONDS = 0.05


def on_sigint(signum: int, frame: FrameType | None) -> None:
    """Raise ``KeyboardInterrupt`` here, or a moment later when ``frame`` is a finalizer (which would drop it)."""
    if frame is not None and frame.f_code.co_name == "__del__":
        threading.Timer(DEFER_SECONDS, _thread.interrupt_main).start()
        return
    raise KeyboardInterrupt


def settle() -> None:
    """Record that an interrupt was handled, so that the process ends with the exit code it chose.

    CPython marks a ``KeyboardInterrupt`` that escaped an ``exec()`` of a string as unhandled, even when it is caught
    further up, and then ends the interpreter by SIGINT instead of the code passed to ``sys.exit`` (scipy's
    array-API shim imports numpy through such an ``exec``: a Ctrl-C during ``spar publish``'s imports exited -2
    instead of 130). A string ``exec`` that completes clears that mark; nothing else that Python exposes does.
    """
    exec("pass")  # noqa: S102  (the one public way to clear CPython's unhandled-interrupt mark)


def install() -> Any:
    """Make :func:`on_sigint` the SIGINT handler of this process (main thread only); returns the previous one."""
    if threading.current_thread() is not threading.main_thread():
        return signal.getsignal(signal.SIGINT)
    return signal.signal(signal.SIGINT, on_sigint)
