"""Rebuild the embedded default sample ``data/scifact-sample/`` from the BEIR release of SciFact.

    python data/make_scifact_sample.py ../shared/datasets/scifact data/scifact-sample

Keeps every document judged for a seeded subset of train and test queries, plus seeded random distractor
documents, so that the sample is a small but real retrieval task (qrels stay valid).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

N_TRAIN_QUERIES, N_TEST_QUERIES, N_DOCS, SEED = 120, 80, 600, 13


def main(src: Path, dst: Path) -> None:
    rng = random.Random(SEED)
    corpus = [json.loads(line) for line in (src / "corpus.jsonl").open()]
    queries = {json.loads(line)["_id"]: json.loads(line) for line in (src / "queries.jsonl").open()}

    def qrels(split: str) -> dict[str, list[tuple[str, str]]]:
        out: dict[str, list[tuple[str, str]]] = {}
        for line in list((src / "qrels" / f"{split}.tsv").open())[1:]:
            q, d, s = line.split()
            out.setdefault(q, []).append((d, s))
        return out

    chosen = {}
    for split, n in (("train", N_TRAIN_QUERIES), ("test", N_TEST_QUERIES)):
        judged = qrels(split)
        chosen[split] = {q: judged[q] for q in rng.sample(sorted(judged), n)}
    keep = {d for split in chosen.values() for pairs in split.values() for d, _ in pairs}
    others = [doc["_id"] for doc in corpus if doc["_id"] not in keep]
    keep |= set(rng.sample(others, N_DOCS - len(keep)))

    (dst / "qrels").mkdir(parents=True, exist_ok=True)
    with (dst / "corpus.jsonl").open("w") as fh:
        for doc in corpus:
            if doc["_id"] in keep:
                fh.write(json.dumps(doc) + "\n")
    with (dst / "queries.jsonl").open("w") as fh:
        for split in chosen.values():
            for q in split:
                fh.write(json.dumps(queries[q]) + "\n")
    for split, judged in chosen.items():
        with (dst / "qrels" / f"{split}.tsv").open("w") as fh:
            fh.write("query-id\tcorpus-id\tscore\n")
            for q, pairs in judged.items():
                for d, s in pairs:
                    fh.write(f"{q}\t{d}\t{s}\n")
    print(f"{len(keep)} documents, {sum(len(v) for v in chosen.values())} queries written to {dst}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
