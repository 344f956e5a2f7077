"""Helpers shared by the benchmark scripts: the machine description, the command line and the JSON write-out.

``bench`` is a package: each script is run from the repository root as ``python -m bench.<name> ...`` and imports
``from bench._common import machine, write_result`` (no ``sys.path`` set-up).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def proc_status(pid: str = "self") -> dict[str, int]:
    """The byte values of ``/proc/<pid>/status`` (VmRSS, VmHWM, RssAnon, RssFile, ...): the kernel writes them in
    kB (KiB), so each is multiplied by 1024; benches report GB = 1e9 bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0]) * 1024
    return out


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (else what :mod:`platform` knows)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return cpu


def machine(threads: int | None = None, device: str = "cpu") -> str:
    """One line for a result's ``machine``: CPU model, cores visible, threads used, GPU, versions, load.

    ``device="cuda"`` adds the first GPU's name (as ``encode_throughput`` always did). torch's version is given
    when the script has imported torch (the description never imports it itself, except to name a GPU). The load
    average is read when this is called, i.e. when the result is assembled (the machine may be shared).
    """
    inside = [f"{os.cpu_count()} cores visible"]
    if threads is not None:
        inside.append(f"{threads} threads used")
    if device == "cuda":
        import torch

        inside.append(torch.cuda.get_device_name(0))
    parts = [f"{cpu_model()} ({', '.join(inside)})", f"Python {platform.python_version()}"]
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__version__"):
        parts.append(f"torch {torch.__version__}")
    if hasattr(os, "getloadavg"):
        parts.append(f"load average {os.getloadavg()[0]:.1f} at write-out (shared machine)")
    return "; ".join(parts)


def module_name(script: str | Path) -> str:
    """``bench.<name>`` for ``bench/<name>.py`` (what ``python -m`` runs)."""
    return f"bench.{Path(script).stem}"


def command_line(script: str | Path, argv: list[str] | None = None) -> str:
    """``python -m bench.<script> <args>`` as typed (``argv=None``: this process's own arguments)."""
    args = argv if argv is not None else sys.argv[1:]
    return "python -m " + " ".join(shlex.quote(a) for a in [module_name(script), *args])


def self_command(script: str | Path) -> list[str]:
    """``[python, -m, bench.<script>]``: the same script in a child process (which finds ``bench`` as this one did:
    from the working directory, run from the repository root, or ``PYTHONPATH``)."""
    return [sys.executable, "-m", module_name(script)]


def write_result(result: dict, out: str | Path) -> dict:
    """Write ``result`` to ``out`` as pretty JSON, print the same JSON, return ``result``. The directory must exist
    (:func:`output_file` checks it before the work): a bench creates no directory it was not asked to."""
    text = json.dumps(result, indent=2)
    out = output_file(str(out))
    out.write_text(text + "\n")
    print(text)
    return result


# ----------------------------------------------------------------------------------------------------------------
# Arguments: bad ones are one line (argparse's usage error or spar's), before any work
# ----------------------------------------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (``--questions 0`` or ``-5`` silently meant other questions)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def existing_file(text: str) -> Path:
    """An argparse type: a file that exists."""
    import argparse

    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return path


def output_file(text: str) -> Path:
    """An argparse type: a file to write, in a directory that exists (``--out`` created any directory asked)."""
    import argparse

    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: its directory {path.parent} does not exist (create it first)")
    return path


def run_cli(main) -> None:
    """``if __name__ == "__main__": run_cli(main)``: spar's errors (a missing file, a bad record, a bad option) and
    argparse's are one line and exit 2, instead of a traceback or a usage block around the message."""
    import argparse

    from spar.core.errors import SparError

    def one_line(parser: argparse.ArgumentParser, message: str):
        print(f"{parser.prog}: error: {message}", file=sys.stderr)  # no usage block: `--help` has it
        raise SystemExit(2)

    argparse.ArgumentParser.error = one_line  # type: ignore[method-assign,assignment]  # this process is a bench
    try:
        main()
    except SparError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def directory_bytes(directory: str | Path) -> int:
    """Bytes of every file under ``directory`` (an index on disk: Lucene's directory, a FAISS index's folder)."""
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())
