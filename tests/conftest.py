"""Shared test fixtures: paths to the real datasets beside the checkout and to the embedded sample."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("SPAR_DATASETS", REPO.parent / "shared" / "datasets"))
SAMPLE = REPO / "data" / "scifact-sample"

# Tests never reach a model hub: bundled weights only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not (DATASETS / "scifact" / "corpus.jsonl").exists():
        pytest.skip(f"real datasets not found at {DATASETS} (set SPAR_DATASETS)")
    return DATASETS


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE
