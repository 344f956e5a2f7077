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
# No W&B run unless a test is about W&B (it unsets this): every stage that works logs one (spar.core.tracking), and
# starting W&B costs seconds per run. W&B's own switch, which spar honours over experiment.wandb_mode.
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Parallel workers (pytest-xdist; pyproject's addopts run the suite on every core): each worker gets its share of the
# cores, for torch in the worker and for every subprocess it starts, so that two workers on two cores do not run four
# compute threads. Set before torch or FAISS is imported: both read these once.
XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if XDIST_WORKERS > 1:
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, str(max(1, (os.cpu_count() or 1) // XDIST_WORKERS)))

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


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): one worker per core, at most 4 (each may hold a JVM and a torch model)."""
    return max(1, min(4, os.cpu_count() or 1))


def pytest_collection_modifyitems(session, config, items) -> None:
    """The costliest test files of this suite first, each file's tests in their order: xdist hands out whole files in
    this order (pytest_configure), and a long file handed out last would keep one worker busy while the others wait
    (tests/file_costs.py)."""
    try:
        from file_costs import load_costs, longest_first
    except ModuleNotFoundError:  # this conftest copied alone (tests that run pytest on a scratch suite)
        return
    order = longest_first(list(dict.fromkeys(item.path.name for item in items)), load_costs(config.option.markexpr))
    rank = {name: position for position, name in enumerate(order)}
    items.sort(key=lambda item: rank[item.path.name])  # stable


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


# ---- The precision guard (issue #45 item 3) ------------------------------------------------------------------------
# A test that compares vectors (numpy.testing.assert_allclose) after spar resolved `precision: auto` on the CPU, in the
# test or in a fixture it uses, passes on one CPU class and fails on another: it must say which precision it expects
# (pin precision=32, or mark it cpu_class(...) / precision_independent("why")). Resolving `auto` (or bf16) on the CPU
# is the one call of spar.model.engines.cpu_bf16_support; in-process only (a subprocess's vectors are not seen).
_AUTO_RESOLUTIONS = [0]
_AUTO_FIXTURES: set[str] = set()


def pytest_configure(config):
    # pytest-xdist's loadfile re-sorts the files by their number of tests before handing them out (its
    # --loadscope-reorder, on by default), which undid the costliest-first order above: the slow suite's longest
    # test, alone in its file, started last. Its --no-loadscope-reorder, set here where the order is made.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.addinivalue_line("markers", "cpu_class(name): run the test as on a CPU of that class (none, avx512_bf16, "
                            "amx_bf16)")
    config.addinivalue_line("markers", "precision_independent(why): compares vectors after `precision: auto` was "
                            "resolved, and holds on every CPU class")
    from spar.model import engines

    detect = engines.cpu_bf16_support
    if getattr(detect, "counted", False):
        return

    def counted() -> str | None:
        _AUTO_RESOLUTIONS[0] += 1
        return detect()

    counted.counted = True  # type: ignore[attr-defined]
    engines.cpu_bf16_support = counted


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    before = _AUTO_RESOLUTIONS[0]
    yield
    if _AUTO_RESOLUTIONS[0] != before:
        _AUTO_FIXTURES.add(fixturedef.argname)


@pytest.fixture(autouse=True)
def _precision_guard(request, monkeypatch):
    import numpy as np

    declared = any(request.node.get_closest_marker(m) for m in ("cpu_class", "precision_independent"))
    compared = [0]
    real_allclose = np.testing.assert_allclose

    def allclose(*args, **kwargs):
        compared[0] += 1
        return real_allclose(*args, **kwargs)

    monkeypatch.setattr(np.testing, "assert_allclose", allclose)
    before = _AUTO_RESOLUTIONS[0]
    yield
    auto_fixtures = sorted(_AUTO_FIXTURES & set(request.fixturenames))
    if compared[0] and not declared and (_AUTO_RESOLUTIONS[0] != before or auto_fixtures):
        where = f"fixture {', '.join(auto_fixtures)}" if auto_fixtures else "the test"
        pytest.fail(f"{request.node.nodeid} compares vectors after {where} resolved `precision: auto` on the CPU: "
                    "its vectors differ by CPU class (bf16 on AMX / AVX-512 BF16 CPUs). Pin precision=32, or mark "
                    "it @pytest.mark.cpu_class(...) or @pytest.mark.precision_independent('why')", pytrace=False)


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


@pytest.fixture(scope="session")
def one_layer_minilm(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 cut to its first transformer layer (its tokenizer, embeddings and pooling as they are): for
    tests of how training is wired (mixed precision, resuming, DDP, dataloader workers), not of what it learns; on the
    CPU each of its steps and validations costs a fraction of the six-layer model's, in emulated fp16 above all."""
    from transformers import AutoModel, AutoTokenizer

    from spar.model.resolve import resolve_model

    source = str(resolve_model("all-MiniLM-L6-v2"))
    model = AutoModel.from_pretrained(source, use_safetensors=True)
    model.encoder.layer = model.encoder.layer[:1]
    model.config.num_hidden_layers = 1
    out = tmp_path_factory.mktemp("minilm-one-layer")
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out
