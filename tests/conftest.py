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

# The CPU class is pinned for the whole session, subprocesses included (issue #45): `encode.precision: auto` encodes
# in bf16 on CPUs with native bf16 and in fp32 elsewhere, so an unpinned suite would test other vectors on other
# machines. `SPAR_TEST_CPU_CLASS` picks the class (`none`: fp32, the default; `avx512_bf16` or `amx_bf16`: bf16 under
# `auto`, emulated by torch where the CPU lacks it; `real`: the CPU's own flags). A test of one class's behaviour
# says so with `@pytest.mark.cpu_class(...)`.
TEST_CPU_CLASS = os.environ.get("SPAR_TEST_CPU_CLASS", "none")
if TEST_CPU_CLASS == "real":
    os.environ.pop("SPAR_CPU_CLASS", None)
else:
    os.environ["SPAR_CPU_CLASS"] = TEST_CPU_CLASS


def pytest_report_header(config) -> list[str]:
    from spar.model.engines import cpu_report

    return [f"spar: {cpu_report()} (SPAR_TEST_CPU_CLASS={TEST_CPU_CLASS})"]


@pytest.fixture(autouse=True)
def _cpu_class(request, monkeypatch):
    """Runs a test marked ``cpu_class(NAME)`` as if on a CPU of that class (its subprocesses too)."""
    marker = request.node.get_closest_marker("cpu_class")
    if marker is not None:
        monkeypatch.setenv("SPAR_CPU_CLASS", marker.args[0])
    yield


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
