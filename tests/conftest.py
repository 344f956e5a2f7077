"""Shared test fixtures: paths to the real datasets beside the checkout and to the embedded sample."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("SPAR_DATASETS", REPO.parent / "shared" / "datasets"))
SAMPLE = REPO / "data" / "scifact-sample"

#: Every file of ../shared/datasets that a test reads.
REQUIRED_DATASET_FILES = [
    "scifact/corpus.jsonl", "scifact/queries.jsonl", "scifact/qrels/train.tsv", "scifact/qrels/test.tsv",
    "cranfield/corpus.jsonl", "cranfield/qrels/test.tsv", "wiki-vital/corpus.jsonl",
]

# Tests never reach a model hub: bundled weights only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    # A missing dataset fails the test instead of skipping it: a skip would let CI pass without running the sample,
    # label and train tests at all.
    missing = [name for name in REQUIRED_DATASET_FILES if not (DATASETS / name).is_file()]
    if missing:
        pytest.fail(f"real datasets missing under {DATASETS}: {', '.join(missing)} (put them there or set "
                    "SPAR_DATASETS)", pytrace=False)
    return DATASETS


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE
