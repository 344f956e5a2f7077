"""``spar search PATH "query text" [-k 10] [--mu M] [--model MODEL] [--backend B]``: top-k passages, published model.

``PATH`` is a published model directory (searching the index copied into it with ``publish.copy_index=true``, or the
index of the run it was published in), a run's ``index/`` directory (the run's published ``model/`` beside it, or
``--model``, encodes the query) or an index built by ``spar index --model`` (searched with that model). Logic:
:class:`spar.publish.search.SparSearcher`.

Batch search, as Pyserini's search CLIs: ``spar search PATH --topics FILE --output RUN.trec [-k 1000] [--run-tag T]
[--batch-size 64]`` reads the topics (BEIR ``queries.jsonl``, an ``id<TAB>text`` TSV, or a question-set file: JSONL
with answers, DPR's ``question<TAB>[answers]``) and writes a TREC run (``qid Q0 docid rank score tag``) that
``ir_measures`` and ``trec_eval`` read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: Characters of passage text shown per hit.
SNIPPET_CHARS = 200


#: Hits per topic of a batch search unless ``-k`` says otherwise (Pyserini's ``--hits`` default).
BATCH_HITS = 1000
#: Hits printed for one query unless ``-k`` says otherwise.
SHOWN_HITS = 10


def search_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from spar.core.errors import ConfigError
    from spar.publish.search import SparSearcher

    if args.topics is not None:
        if args.query:
            raise ConfigError("give a query or --topics FILE, not both")
        return batch_search(args)
    if args.output is not None:
        raise ConfigError("--output writes the run of a batch search: give --topics FILE too")
    if not args.query:
        raise ConfigError("nothing to search for: give a query, or --topics FILE --output RUN.trec")
    query = " ".join(args.query)
    searcher = SparSearcher.open(args.index_dir, model=args.model, backend=args.backend)
    mu = searcher.encoder.mu if args.mu is None else args.mu
    hits = searcher.search(query, k=SHOWN_HITS if args.k is None else args.k, mu=mu)
    console = Console(highlight=False)
    console.print(f"[bold]{escape(query)}[/bold]  μ={mu:g} ({searcher.encoder.variant}), "
                  f"{len(searcher.index):,} passages in {searcher.index_dir}, model {searcher.model_dir}")
    for hit in hits:
        text = " ".join(hit.text.split())
        text = text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rstrip() + "…"
        console.print(f"{hit.rank:>3}. [cyan]{escape(hit.id)}[/cyan]  {hit.score:.4f}  "
                      f"[bold]{escape(hit.title)}[/bold]",
                      soft_wrap=True)
        if text:
            console.print(f"     {escape(text)}", soft_wrap=True)
    if searcher.passages is None:
        console.print("[yellow]passages.arrow not found: showing ids only[/yellow]")
    return 0


def batch_search(args: argparse.Namespace) -> int:
    """``--topics FILE --output RUN``: every topic searched in batches, written as a TREC run (atomically: an
    interrupted search leaves no half run). Topics are read first, so a bad one is named (file, line) before the
    model loads."""
    from spar.core.artifacts import atomic_file
    from spar.core.console import progress_bar, verbosity
    from spar.core.errors import ConfigError
    from spar.data.readers import read_queries
    from spar.evaluate.metrics import trec_lines
    from spar.publish.search import SparSearcher

    if args.output is None:
        raise ConfigError("--topics needs --output RUN.trec (the TREC run to write)")
    if not args.run_tag or any(c.isspace() for c in args.run_tag):
        raise ConfigError(f"--run-tag must be one word (a TREC run's sixth column), got {args.run_tag!r}")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {args.batch_size}")
    topics = list(read_queries(args.topics))
    if not topics:
        raise ConfigError(f"{args.topics}: no topics to search")
    k = BATCH_HITS if args.k is None else args.k
    searcher = SparSearcher.open(args.index_dir, model=args.model, backend=args.backend)
    mu = searcher.encoder.mu if args.mu is None else args.mu
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with atomic_file(output) as tmp, tmp.open("w", encoding="utf-8") as fh:
        bar = progress_bar(total=len(topics), desc="searching", unit=" topics")
        for start in range(0, len(topics), args.batch_size):
            batch = topics[start:start + args.batch_size]
            found = searcher.search([t.text for t in batch], k=k, mu=mu)
            ranked = {topic.id: [(hit.id, hit.score) for hit in hits] for topic, hits in zip(batch, found)}
            fh.writelines(trec_lines(ranked, args.run_tag))  # ranks 1..n, as trec_eval expects
            written += sum(len(hits) for hits in found)
            bar.update(len(batch))
        bar.close()
    if verbosity() != "quiet":
        print(f"{len(topics):,} topics, {written:,} hits (k={k}, μ={mu:g}) -> {output} (run tag {args.run_tag})")
    return 0
