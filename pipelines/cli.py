"""The ``spar`` command: one subcommand per stage, ``run`` to chain them, ``search`` to query an index.

    spar run [CONFIG] [section.key=value ...]        # the whole pipeline; complete stages are skipped
    spar <stage> [--config CONFIG] [overrides ...]   # one stage
    spar <stage> --help                              # every option of the stage, with defaults
    spar search MODEL_OR_INDEX_DIR "query text"      # top-k passages with the published model
    spar index --model MODEL --corpus C --output DIR # index any corpus with a published model (then search DIR)
    spar frontier -c CONFIG [--kinds ..] [--dims ..] [--storages ..] [--indexes ..]  # quality per byte

The command sits above the stages (``pipelines/``), which sit above the library (``spar/``): nothing in ``spar/``
imports this module.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from pipelines import STAGES, skipped_by_config
from spar.core.artifacts import RUN_COMMAND_ENV
from spar.core.output_lock import acquire_output_lock, release_output_lock, run_lock_name
from spar.core.errors import SparError, no_space_left
from spar.experiment.preflight import check_inputs, skipped_records

#: One line per stage for ``spar --help`` (kept here so the top-level help imports no stage module).
STAGE_HELP = {
    "sample": "sample training queries (sentences) from the corpus -> queries/",
    "label": "label queries with the sparse teacher (BM25 or impact) via Pyserini -> teacher_index/, labels/",
    "train": "train the lexical model Λ with Lightning on the teacher's labels -> lambda/",
    "encode": "encode corpus and dev/test queries with the base retriever and Λ -> embeddings/",
    "tune": "tune mu (and the hybrid's alpha) on the dev qrels -> tune/",
    "index": "build one FAISS index of [P(p), PΛ(p)] -> index/",
    "evaluate": "evaluate BM25, base, Λ, SPAR and hybrid; RBO; shuffled queries -> results/, evaluation/",
    "publish": "export the combined SPAR encoders with a model card -> model/",
}


def _stage(name: str):
    """The :class:`~spar.core.stage.Stage` a stage module declares."""
    return importlib.import_module(f"pipelines.{name}").STAGE


def _options_epilog(sections: Sequence[str]) -> str:
    from spar.core.config import SparConfig, describe_options

    import shutil
    import textwrap

    # One heading per section, each option's description wrapped to the terminal (#47: lines of up to 442
    # characters, no headings).
    width = max(80, min(shutil.get_terminal_size((100, 24)).columns, 120))
    lines = ["options (override any as section.key=value; values are YAML):"]
    for section in sections:
        model = SparConfig.model_fields[section].annotation
        lines += ["", f"{section}:"]
        for key, default, desc in describe_options(model, f"{section}."):
            lines.append(f"  {key}  [default: {default}]")
            lines += textwrap.wrap(desc, width=width, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", default=None, help="experiment YAML (default: the embedded SciFact sample)")
    p.add_argument("--force", action="store_true", help="re-run even if the output is complete")
    p.add_argument("--on-bad-record", choices=["fail", "skip"], default=None,
                   help="on malformed input: fail naming file and line (default), or skip and count")
    p.add_argument("-v", "--verbose", action="store_true", help="show the libraries' own logs and progress bars")
    p.add_argument("-q", "--quiet", action="store_true", help="errors and the final summary only")
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")


def build_parser(with_epilogs: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spar", description="SPAR: train a dense lexical model that imitates a sparse teacher, combine it with "
        "a dense retriever in one FAISS index, tune, evaluate and publish.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="run every stage in order, skipping stages whose outputs are complete",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("config_file", nargs="?", default=None, help="experiment YAML (default: embedded sample)")
    run.add_argument("--from", dest="from_stage", choices=STAGES, default=None, help="first stage to run")
    run.add_argument("--to", dest="to_stage", choices=STAGES, default=None, help="last stage to run")
    _add_common(run)
    for name in STAGES:
        summary, epilog = STAGE_HELP[name], None
        if with_epilogs:
            stage = _stage(name)
            summary, epilog = stage.summary, _options_epilog(stage.sections)
        sp = sub.add_parser(name, help=summary, description=summary, epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_common(sp)
        if name == "index":
            from pipelines.corpus_index import add_arguments

            add_arguments(sp)
    frontier = sub.add_parser("frontier", help="Λ kinds × dimensions × seeds: Λ fidelity and SPAR nDCG@10 against "
                              "index size -> frontier/, results/", formatter_class=argparse.RawDescriptionHelpFormatter,
                              description=_frontier_doc())
    frontier.add_argument("--kinds", type=_names, default=None,
                          help="comma-separated Λ kinds: projection, static, transformer (the run's own trained Λ; "
                          "default: projection,static and the run's own Λ when it has one)")
    frontier.add_argument("--dims", type=_ints, default=None, help="comma-separated dimensions (default 128,...,4608)")
    frontier.add_argument("--seeds", type=_ints, default=None, help="comma-separated seeds of the random matrices "
                          "(default 0,1,2)")
    frontier.add_argument("--storages", type=_names, default=("float32",),
                          help="comma-separated passage storages, the bytes-per-passage axis: "
                          f"{', '.join(_storages())} (default float32)")
    frontier.add_argument("--indexes", type=_names, default=("flat",),
                          help="comma-separated index types timed on the first seed: flat (what the default rule "
                          f"needs), {', '.join(_index_types()[1:])} (approximate: also scored against the exact "
                          "scan); default flat")
    _add_common(frontier)
    search = sub.add_parser("search", help="search a published SPAR model's index from the command line")
    search.add_argument("index_dir", help="index directory written by `spar index` (or a published model dir)")
    search.add_argument("query", nargs="*", help="query text (or --topics FILE for a batch search)")
    search.add_argument("-k", type=int, default=None, help="hits per query (default: 10 printed; 1000 per topic "
                        "with --topics, as Pyserini)")
    search.add_argument("--topics", default=None, help="batch search: a topics file (BEIR queries.jsonl, "
                        "id<TAB>text TSV, or a question-set file), written as a TREC run to --output")
    search.add_argument("--output", default=None, help="the TREC run a batch search writes (qid Q0 docid rank "
                        "score tag)")
    search.add_argument("--run-tag", default="spar", help="the run's tag, its sixth column (default: spar)")
    search.add_argument("--batch-size", type=int, default=64, help="topics encoded and searched at once")
    search.add_argument("--mu", type=float, default=None, help="override the tuned mu at query time")
    search.add_argument("--model", default=None, help="the model of an index directory (default: the one it was "
                        "built with, or the run's model/ beside a run's index)")
    search.add_argument("--backend", choices=("torch", "onnx", "auto"), default="torch",
                        help="what runs the query encoders' transformers: torch (default), onnx (ONNX Runtime on "
                        "the CPU, exported once and cached: the same vectors within 1e-6), auto (onnx on the CPU)")
    return parser


def _frontier_doc() -> str:
    import pipelines.frontier

    return pipelines.frontier.__doc__ or ""


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated option (checked by the command: empty, repeated and unknown values are refused)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers; anything else is argparse's one-line usage error (#31 item 8)."""
    try:
        return tuple(int(x) for x in _names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _storages() -> tuple[str, ...]:
    from spar.index.storage import STORAGES

    return STORAGES


def _index_types() -> tuple[str, ...]:
    from spar.index.types.registry import index_type_names

    return index_type_names()


def _version() -> str:
    from spar import __version__

    return f"spar {__version__}"


def _load(args: argparse.Namespace):
    from spar.core.config import load_config

    overrides = list(args.overrides)
    config_file = getattr(args, "config_file", None)
    if config_file and "=" in config_file and not config_file.endswith((".yaml", ".yml")):
        # `spar run label.k=30`: the optional positional caught an override.
        overrides.insert(0, config_file)
        config_file = None
    if args.on_bad_record:
        overrides.append(f"experiment.on_bad_record={args.on_bad_record}")
    path = config_file or args.config
    return load_config(path, overrides)


#: Set by ``spar run`` for each stage process: where the stage writes its statistics (JSON) for the final summary.
STAGE_STATS_ENV = "SPAR_STAGE_STATS"


def _print_stats(stage: str, stats: dict, seconds: float) -> None:
    import json

    from rich.console import Console

    from spar.core.console import verbosity

    if os.environ.get(STAGE_STATS_ENV):  # a stage of `spar run`: its parent prints one summary at the end
        with open(os.environ[STAGE_STATS_ENV], "w") as fh:
            json.dump({"seconds": seconds, **stats}, fh, default=str)
    console = Console(stderr=False)
    status = (f"skipped ({stats['why']})" if stats.get("why") else "skipped (up to date)" if stats.get("skipped")
              else f"done in {seconds:.1f}s")
    if verbosity() == "quiet":
        return
    console.print(f"[bold]{stage}[/bold]: {status}")
    if os.environ.get(STAGE_STATS_ENV) and verbosity() != "verbose":
        return
    for key, value in stats.items():
        if key in ("skipped", "table", "why"):
            continue
        console.print(f"  {key}: {value}")
    if stats.get("table"):
        console.print(stats["table"])


def _read_stats(path: Path, seconds: float) -> dict:
    """A stage process's statistics (written by :func:`_print_stats`): ``stage_seconds``, the stage's own time (its
    ``done in`` line), and ``seconds``, the process's wall time its parent measured (with start-up)."""
    try:
        stats = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        stats = {}
    own = stats.pop("seconds", None)
    return {**stats, "seconds": seconds, **({"stage_seconds": own} if own is not None else {})}


def run_stages(cfg, stages: Sequence[str], force: bool = False) -> dict[str, dict]:
    """Run ``stages`` in order on ``cfg``; each stage skips itself when its output is up to date."""
    results = {}
    for name in stages:
        start = time.time()
        stats = _stage(name).run(cfg, force=force) or {}
        _print_stats(name, stats, time.time() - start)
        results[name] = stats
    return results


#: What Ctrl-C prints (exit 130, as a shell reports SIGINT): one line, no traceback.
INTERRUPTED = "spar: interrupted: nothing written; re-run to continue"


class _StageInterrupted(KeyboardInterrupt):
    """Ctrl-C while a stage process of ``spar run`` ran: that process printed :data:`INTERRUPTED`."""


def _run_stage_process(stage: str, args: argparse.Namespace, stats_file: Path) -> int:
    """Run one stage of ``spar run`` in its own process.

    Why: a stage that has trained with torch and then loads FAISS and the JVM in the same process crashed with a
    segmentation fault (competing OpenMP/JVM runtimes); a process per stage also returns each stage's memory.
    """
    import subprocess

    cmd = [sys.executable, "-m", "pipelines.cli", stage]
    config_file = getattr(args, "config_file", None)
    overrides = list(args.overrides)
    if config_file and "=" in config_file and not config_file.endswith((".yaml", ".yml")):
        overrides.insert(0, config_file)
        config_file = None
    if config_file or args.config:
        cmd += ["--config", config_file or args.config]
    if args.force:
        cmd.append("--force")
    if args.on_bad_record:
        cmd += ["--on-bad-record", args.on_bad_record]
    if args.verbose:
        cmd.append("--verbose")
    if args.quiet:
        cmd.append("--quiet")
    env = {**os.environ, STAGE_STATS_ENV: str(stats_file)}
    child = subprocess.Popen(cmd + overrides, env=env)
    try:
        return child.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the stage's process too: let it clean up and say so (one line)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.terminate()
            child.wait()
        raise _StageInterrupted from None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    wants_help = any(a in ("-h", "--help") for a in argv)
    parser = build_parser(with_epilogs=wants_help and bool(argv) and argv[0] in STAGES)
    args, extra = parser.parse_known_args(argv)
    # Overrides may come after a flag (`spar encode CFG --force k=v`): argparse leaves those over; take them.
    if extra and hasattr(args, "overrides") and all("=" in a and not a.startswith("-") for a in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 0
    from spar.core import interrupts
    from spar.core.console import configure

    interrupts.install()  # Ctrl-C stops every stage, in one line (#48)
    configure("verbose" if getattr(args, "verbose", False) else "quiet" if getattr(args, "quiet", False)
              else "normal")
    previous_run_command, lock = os.environ.get(RUN_COMMAND_ENV), None
    try:
        if args.command == "search":
            from pipelines.search import search_command

            return search_command(args)
        if args.command == "index":
            from pipelines.corpus_index import run_from_args, wants_corpus_index

            if wants_corpus_index(args):  # a published model on any corpus: no run, no config
                started = time.time()
                _print_stats("index", run_from_args(args), time.time() - started)
                return 0
        cfg = _load(args)
        lock = acquire_output_lock(cfg.output_dir, run_lock_name(args.command, cfg))  # one run per output directory
        if args.command == "frontier":
            import pipelines.frontier

            started = time.time()
            stats = pipelines.frontier.run(cfg, args.kinds, args.dims, args.seeds, force=args.force,
                                           storages=args.storages, index_types=args.indexes)
            _print_stats("frontier", stats, time.time() - started)
            return 0
        if args.command == "run":
            inputs_report = check_inputs(cfg)  # every input file and qrels id, before the first stage runs
            # Results and model cards record the command that reproduces them: this one, not the stage's.
            os.environ[RUN_COMMAND_ENV] = "spar " + shlex.join(argv)
            first = STAGES.index(args.from_stage) if args.from_stage else 0
            last = STAGES.index(args.to_stage) if args.to_stage else len(STAGES) - 1
            ran: dict[str, dict] = {}
            with tempfile.TemporaryDirectory(prefix="spar-run-") as tmp:
                for stage in STAGES[first:last + 1]:
                    why = skipped_by_config(cfg, stage)
                    if why:
                        ran[stage] = {"skipped": True, "why": why}
                        _print_stats(stage, {"skipped": True, "why": why}, 0.0)
                        continue
                    start = time.time()
                    status = _run_stage_process(stage, args, Path(tmp) / f"{stage}.json")
                    ran[stage] = _read_stats(Path(tmp) / f"{stage}.json", time.time() - start)
                    if status != 0:
                        print(f"spar: stage '{stage}' failed (exit {status}); re-run to resume", file=sys.stderr)
                        return status
            from pipelines.summary import print_run_summary

            print_run_summary(cfg, ran, skipped_records(inputs_report))
        else:
            run_stages(cfg, [args.command], force=args.force)
    except SparError as exc:
        print(f"spar: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C: writers removed their temporaries (a resumable one keeps its parts)
        if not isinstance(exc, _StageInterrupted):  # a stage process of `spar run` has said it already
            print(INTERRUPTED, file=sys.stderr)
        interrupts.settle()  # or CPython may end the process by SIGINT (-2) all the same
        return 130
    except Exception as exc:  # a full disk surfaces from any library (OSError, pyarrow, safetensors, torch)
        full = no_space_left(exc)
        if full is None:
            raise
        where = f"{full.filename}: " if getattr(full, "filename", None) else ""
        print(f"spar: error: {where}no space left on device (the stage's temporary files were removed and finished "
              "work is kept: free space and re-run to resume)", file=sys.stderr)
        return 2
    finally:  # main() called in-process (a library user, a test): the next call starts clean
        release_output_lock(lock)
        if args.command == "run":
            _restore_env(RUN_COMMAND_ENV, previous_run_command)
    return 0


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


if __name__ == "__main__":
    sys.exit(main())
