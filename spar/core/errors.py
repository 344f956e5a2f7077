"""Exceptions with messages meant for users: each names the file, line or key at fault."""

from __future__ import annotations


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


def no_space_left(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s chain that reports a full disk (errno ENOSPC / EDQUOT, or a library's message
    naming it: pyarrow, safetensors, the JVM), else None."""
    import errno

    seen: BaseException | None = exc
    while seen is not None:
        if (getattr(seen, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
                or "No space left on device" in str(seen) or "Disk quota exceeded" in str(seen)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
