"""Write a seeded sample of a passage corpus as gzip JSONL (BEIR fields plus the corpus's own, e.g. the passage's
position in its article), for experiments that cannot encode the whole corpus on the machine at hand.

    python data/make_corpus_sample.py ../shared/datasets/enwiki-2015/corpus.jsonl.gz 45503 \
        runs/corpora/enwiki-2015-sample-45503.jsonl.gz --seed 42

A passage is kept when its id is among the ``size`` with the smallest SHA-256 of ``"<seed>:<id>"``: a seeded uniform
sample that does not depend on the file's order; the kept passages stay in the corpus's order. The corpus is read
through spar's own readers (gzip streamed, every record checked), so a bad line is an error naming file and line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import heapq
import json
import os
from pathlib import Path

from spar.data.readers import read_corpus


def sample_ids(corpus: Path, size: int, seed: int) -> set[str]:
    heap: list[tuple[bytes, str]] = []  # max-heap by negated hash: the `size` smallest hashes
    for passage in read_corpus(corpus):
        digest = hashlib.sha256(f"{seed}:{passage.id}".encode()).digest()
        key = bytes(255 - b for b in digest)
        if len(heap) < size:
            heapq.heappush(heap, (key, passage.id))
        elif key > heap[0][0]:
            heapq.heapreplace(heap, (key, passage.id))
    return {pid for _, pid in heap}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("size", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    keep = sample_ids(args.corpus, args.size, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + f".tmp-{os.getpid()}")
    written = 0
    with gzip.open(partial, "wt", encoding="utf-8") as out:
        for passage in read_corpus(args.corpus):
            if passage.id in keep:
                out.write(json.dumps({"_id": passage.id, "title": passage.title, "text": passage.text,
                                      **passage.extra}, ensure_ascii=False) + "\n")
                written += 1
    partial.replace(args.out)
    print(json.dumps({"corpus": str(args.corpus), "seed": args.seed, "passages": written, "out": str(args.out)}))


if __name__ == "__main__":
    main()
