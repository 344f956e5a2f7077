"""``spar search PATH "query text" [-k 10] [--mu M] [--model MODEL] [--backend B]``: top-k passages, published model.

``PATH`` is a published model directory (searching the index copied into it with ``publish.copy_index=true``, or the
index of the run it was published in), a run's ``index/`` directory (the run's published ``model/`` beside it, or
``--model``, encodes the query) or an index built by ``spar index --model`` (searched with that model). Logic:
:class:`spar.publish.search.SparSearcher`.
"""

from __future__ import annotations

import argparse

#: Characters of passage text shown per hit.
SNIPPET_CHARS = 200


def search_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from spar.publish.search import SparSearcher

    query = " ".join(args.query)
    searcher = SparSearcher.open(args.index_dir, model=args.model, backend=args.backend)
    mu = searcher.encoder.mu if args.mu is None else args.mu
    hits = searcher.search([query], k=args.k, mu=mu)[0]
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
