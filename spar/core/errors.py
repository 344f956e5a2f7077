"""Exceptions with messages meant for users: each names the file, line or key at fault."""

from __future__ import annotations

import re


class SparError(Exception):
    """Base class: the CLI prints these without a traceback and exits with status 2."""


class ConfigError(SparError):
    """An invalid or unknown configuration key or value."""


class BadRecordError(SparError):
    """A malformed input record. ``path`` and ``line`` say where it is."""

    def __init__(self, path: str, line: int | None, reason: str):
        self.path, self.line, self.reason = str(path), line, reason
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")


class ArtifactError(SparError):
    """An artifact that is missing, incomplete, or incompatible with what uses it."""


#: NumPy's message for a short write (``ndarray.tofile``, ``np.save``): an ``OSError`` without errno, raised when
#: the file system took fewer bytes than asked, i.e. it is full.
_SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$")


def no_space_left(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s chain that reports a full disk (errno ENOSPC / EDQUOT, NumPy's short write, or a
    library's message naming it: pyarrow, safetensors, the JVM), else None."""
    import errno

    seen: BaseException | None = exc
    while seen is not None:
        if (getattr(seen, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
                or "No space left on device" in str(seen) or "Disk quota exceeded" in str(seen)
                or (isinstance(seen, OSError) and seen.errno is None and _SHORT_WRITE.match(str(seen)))):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
