"""``spar index --model MODEL --corpus FILE_OR_BEIR_DIR --output DIR``: index any corpus with a published model.

No run and no config: the model (a directory written by ``spar publish``, or its hub id) brings both encoders, μ and
its own ``index`` options (type, passage storage, seed), which ``--type``, ``--storage`` and ``index.key=value``
overrides change; ``encode.key=value`` sets batch size, devices and precision. Then ``spar search DIR "query"``.

    spar index --model runs/scifact/model --corpus ../shared/datasets/cranfield --output indexes/cranfield
    spar index --model me/spar-scifact --corpus passages.tsv --output indexes/mine --storage float16 --type hnsw
    spar search indexes/cranfield "boundary layer transition"

Logic: :mod:`spar.publish.corpus_index`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

#: The override sections that apply to a corpus index (the others describe a training run).
SECTIONS = ("index", "encode")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``spar index`` that index a corpus with a published model instead of a run's embeddings."""
    group = parser.add_argument_group(
        "index any corpus with a published model (no config: the model's own index options are the defaults)")
    group.add_argument("--model", default=None, help="a published SPAR model: its directory or hub id")
    group.add_argument("--corpus", default=None,
                       help="a BEIR directory (corpus.jsonl) or a corpus file: BEIR/JSONL, DPR TSV, MS MARCO TSV")
    group.add_argument("--output", default=None, help="the index directory to write (then: spar search DIR ...)")
    group.add_argument("--corpus-format", default="auto", choices=["auto", "beir", "dpr", "msmarco", "jsonl"],
                       help="corpus format (default: inferred from the file name and first line)")
    group.add_argument("--storage", default=None, help="passage storage (index.storage; default: the model's)")
    group.add_argument("--type", dest="index_type", default=None, help="index type (index.type; default: the model's)")


def wants_corpus_index(args: argparse.Namespace) -> bool:
    return any(getattr(args, name, None) for name in ("model", "corpus", "output"))


def _overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    from spar.core.config import parse_overrides
    from spar.core.errors import ConfigError

    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, value in parse_overrides(list(args.overrides)):
        section, _, option = key.partition(".")
        if section not in SECTIONS or not option or "." in option:
            raise ConfigError(f"override {key!r}: `spar index --model` takes index.* and encode.* options only (the "
                              "model brings everything else)")
        sections[section][option] = value
    if args.storage:
        sections["index"]["storage"] = args.storage
    if args.index_type:
        sections["index"]["type"] = args.index_type
    return sections["index"], sections["encode"]


def run_from_args(args: argparse.Namespace) -> dict:
    """Check the arguments, take the output's lock, index (see :func:`spar.publish.corpus_index.index_corpus`)."""
    from pydantic import ValidationError

    from spar.core.output_lock import hold_output_lock
    from spar.core.config import EncodeSection
    from spar.publish.corpus_index import index_corpus
    from spar.core.errors import ConfigError

    missing = [f"--{name}" for name in ("model", "corpus", "output") if not getattr(args, name)]
    if missing:
        raise ConfigError(f"spar index --model/--corpus/--output go together: {', '.join(missing)} missing")
    if args.config:
        raise ConfigError("spar index --model takes no --config: the model brings its settings (override them with "
                          "index.key=value)")
    index, encode = _overrides(args)
    try:
        encode_section = EncodeSection.model_validate(encode)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"encode.{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    output = Path(args.output)
    hold_output_lock(output.resolve().parent, f".{output.name}.spar.lock")  # one writer per index directory
    return index_corpus(args.model, args.corpus, output, index=index, encode=encode_section,
                        corpus_format=args.corpus_format, on_bad_record=args.on_bad_record or "fail",
                        force=args.force)
