"""Λ encoding speed on CPU: a static Λ (term bags) against the transformer Λ (MiniLM) on the same passages.

Both encode the same SciFact passages (title + text) in one process, best of ``--repeats``, with the same thread
count. The static Λ is built the way ``spar train`` builds it (BM25 statistics fitted on the passages, a 384-d
table; its vectors do not depend on whether the table was trained, so an untrained table is timed). The
transformer Λ is all-MiniLM-L6-v2 with CLS pooling at 256 tokens, as the configs' ``train.encoder``. Target
(issue #13): static ≥ 50× faster.

    python -m bench.lexical_encode                 # 2 threads, 400 passages
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from bench._common import REPO, command_line, machine, write_result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = REPO.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"
    ap.add_argument("--corpus", type=Path, default=shared if shared.exists() else
                    REPO / "data" / "scifact-sample" / "corpus.jsonl")
    ap.add_argument("--passages", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "lexical_encode.json")
    args = ap.parse_args(argv)

    import torch

    from spar.lexical.projection import ProjectionLambda
    from spar.lexical.static import StaticLambda
    from spar.lexical.transformer import TransformerLambda
    from spar.data.readers import read_corpus

    torch.set_num_threads(args.threads)
    passages = [(p.title, p.text) for p in itertools.islice(read_corpus(args.corpus), args.passages)]
    static = StaticLambda.from_projection(ProjectionLambda.fit(passages, dim=args.dim, seed=0))
    transformer = TransformerLambda.from_pretrained("all-MiniLM-L6-v2", pooling="cls", normalize=False,
                                                    passage_max_length=256)

    def best(encode) -> float:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            encode(passages)
            times.append(time.perf_counter() - start)
        return min(times)

    static_s, transformer_s = best(static.encode_passage), best(lambda p: transformer.encode_passage(p, 32))
    result = {
        "benchmark": "lexical_encode", "machine": machine(args.threads), "command": command_line(__file__, argv),
        "passages": len(passages), "dim": args.dim,
        "spar": round(len(passages) / static_s, 1), "peer": round(len(passages) / transformer_s, 1),
        "unit": "passages/s (static Λ vs MiniLM transformer Λ)",
        "ratio": round(transformer_s / static_s, 1), "target": ">= 50x", "met": transformer_s / static_s >= 50,
    }
    return write_result(result, args.out)


if __name__ == "__main__":
    from bench._common import run_cli

    run_cli(main)
