"""The index-type registry (spar/index/types/registry.py): every index type behind one contract, and a new type is
one module plus its registration.

The new type here is registered by this test only: inverted lists whose probed lists are found through an HNSW graph
of their centroids (FAISS ``IVF4_HNSW8``), scalar-quantized codes only, which ``index.type: auto`` chooses from 40
passages. It is built by the real ``index`` stage, folded, searched, refreshed with search-time settings, chosen by
auto, named by the config's errors and listed by the frontier, then unregistered.
"""

from __future__ import annotations

import ast
import itertools
import json
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest

from pipelines.frontier import point_stages
from spar.core.config import IndexSection, load_config
from spar.core.config_sections import EXHAUSTIVE_INDEX_TYPES, INDEX_TYPES
from spar.core.errors import ArtifactError, ConfigError
from spar.index.files import SEARCH_TIME
from spar.index.storage import factory_component
from spar.index.types.registry import (REGISTRY, IndexType, auto_type, index_type_names, register, registered_type,
                                       unregister)

from test_tune import sample_experiment  # noqa: F401

NLIST = 4


class IvfHnswIndex(IndexType):
    """The test's type: ``index.type: ivfhnsw``."""

    name = "ivfhnsw"
    description = "ivfhnsw (inverted lists found through an HNSW graph of their centroids)"
    label = "IVF-HNSW"
    search_time = ("nprobe", "hnsw_ef_search")
    auto = {"storage": "sq8", "nprobe": 2}

    def accepts(self, storage: str) -> bool:
        return storage in ("float32", "float16", "sq8", "sq6", "sq4")

    def make(self, dim: int, n: int, storage: str, options: Any) -> Any:
        import faiss

        component = factory_component(storage, options.pq_m, options.pq_nbits, dim)
        index = faiss.index_factory(dim, f"IVF{NLIST}_HNSW8,{component}", faiss.METRIC_INNER_PRODUCT)
        self.set_search_params(index, {"nprobe": options.nprobe, "hnsw_ef_search": options.hnsw_ef_search})
        return index

    def set_search_params(self, index: Any, values: Mapping[str, Any]) -> None:
        import faiss

        ivf = faiss.extract_index_ivf(index)
        if values.get("nprobe") is not None:
            ivf.nprobe = int(min(values["nprobe"], ivf.nlist))
        if values.get("hnsw_ef_search") is not None:
            faiss.downcast_index(ivf.quantizer).hnsw.efSearch = int(values["hnsw_ef_search"])

    def auto_from(self, section: Any) -> int | None:
        return 40


@pytest.fixture
def ivfhnsw():
    """IvfHnswIndex registered for one test (the registry and the config's names restored afterwards)."""
    registry_before, names_before = dict(REGISTRY), list(INDEX_TYPES)
    register(IvfHnswIndex)
    yield IvfHnswIndex
    unregister(IvfHnswIndex.name)
    assert REGISTRY == registry_before and INDEX_TYPES == names_before


@pytest.fixture(scope="module")
def encoded(tmp_path_factory, sample_dir):
    """48 SciFact passages and 6 queries, base and Λ both MiniLM (mean / CLS pooling)."""
    from spar.data.readers import read_corpus, read_queries
    from spar.model.embeddings import EncodeOptions, encode_passages, encode_queries
    from spar.model.encoders import BiEncoder

    root = tmp_path_factory.mktemp("emb")
    passages = list(itertools.islice(read_corpus(sample_dir / "corpus.jsonl"), 48))
    queries = dict(itertools.islice(((q.id, q.text) for q in read_queries(sample_dir / "queries.jsonl")), 6))
    quiet = EncodeOptions(batch_size=16, show_progress=False, precision="32")
    for name, pooling in (("base", "mean"), ("lambda", "cls")):
        enc = BiEncoder.from_pretrained("all-MiniLM-L6-v2", pooling=pooling, normalize=name == "base",
                                        passage_max_length=64)
        encode_passages(enc, passages, root / name / "passages", encoder_name=name, weights_fingerprint=name,
                        shard_size=20, options=quiet)
        encode_queries(enc, queries, root / name / "queries-test", encoder_name=name, weights_fingerprint=name,
                       options=quiet)
    return root


def test_every_registered_type_is_a_class_of_its_name():
    assert index_type_names() == tuple(INDEX_TYPES) == ("flat", "hnsw", "ivf", "ivfpq") and set(REGISTRY) == set(
        INDEX_TYPES)
    fields = IndexSection.model_fields
    for name in INDEX_TYPES:
        kind = registered_type(name)
        assert kind.name == name and kind.description.startswith(name) and kind.label
        assert kind.approximate == (name not in EXHAUSTIVE_INDEX_TYPES)
        assert set(kind.search_time) <= set(SEARCH_TIME) and set(kind.auto) <= set(fields)
        assert kind.accepts("float32") and kind.holds(kind.served_storage("float32"))
    section = IndexSection(type="auto")  # the measured rule: a flat scan below auto_flat_below, HNSW from it
    assert [auto_type(section, n).name for n in (0, 299_999, 300_000)] == ["flat", "flat", "hnsw"]
    assert not registered_type("hnsw").accepts("fs4") and registered_type("ivfpq").served_storage("sq8") == "pq"


def test_an_unregistered_type_fails_in_one_line():
    with pytest.raises(ConfigError, match=r"index.type='ivfhnsw': use one of flat, hnsw, ivf, ivfpq, or auto"):
        load_config(None, ["index.type=ivfhnsw"])
    with pytest.raises(ConfigError, match=r"index.type='ivfhnsw' is not a registered index type \(use one of flat, "):
        registered_type("ivfhnsw")


def test_the_errors_and_the_frontier_name_a_registered_type(ivfhnsw):
    import pipelines.frontier as frontier_stage
    from spar.sweep.frontier import can_hold
    from spar.sweep.report import FrontierPoint, FrontierReport
    from spar.index.spar_index import SparIndex

    with pytest.raises(ConfigError, match=r"use one of flat, hnsw, ivf, ivfpq, ivfhnsw, or auto"):
        load_config(None, ["index.type=nothing"])
    assert load_config(None, ["index.type=ivfhnsw", "index.refine=2"]).index.type == "ivfhnsw"  # approximate
    vectors = np.random.default_rng(0).standard_normal((200, 8), dtype=np.float32)
    with pytest.raises(ArtifactError, match=r"^index.storage=pq with index.type=ivfhnsw: ivfhnsw cannot store it"):
        SparIndex.build(vectors, vectors, index_type="ivfhnsw", storage="pq", pq_m=4)
    # The frontier's index types are the registry's: accepted by `spar frontier --indexes`, timed where they hold
    # the point's storage, and a column of the report under the type's label.
    cfg = load_config(None)
    assert frontier_stage.check_arguments(cfg, None, (64,), (0,), ("sq8",), ("flat", "ivfhnsw"))[-1] == (
        "flat", "ivfhnsw")
    assert can_hold("ivfhnsw", "sq8") and not can_hold("ivfhnsw", "fs4")
    timed = {"single_ms": 1.0, "vs_hybrid": {"single_ms": 0.5}, "vs_base": {"single_ms": 2.0}}
    point = FrontierPoint(kind="projection", dim=64, seed=0, mu=0.1, dev_spar=0.7, spar={"nDCG@10": 0.7, "R@100": 0.9},
                          lambda_alone={"nDCG@10": 0.5}, rbo=0.5, bytes_per_passage=72, train_seconds=0.0,
                          storage="sq8", latency={"flat": timed, "ivfhnsw": timed},
                          approximate={"ivfhnsw": {"nDCG@10": 0.69, "R@100": 0.9, "loss": 0.01, "overlap@10": 0.9}})
    refs = {name: {"nDCG@10": 0.6, "R@100": 0.8} for name in ("base", "hybrid", "bm25")}
    table = FrontierReport("toy", [point], refs).markdown()
    assert "| flat 1-query ms | IVF-HNSW nDCG@10 (vs flat); 1-query ms |" in table and "| 0.690 (-0.010); 1.00" in table


@pytest.mark.parametrize("fold", ["auto", "never"])
def test_a_type_registered_in_a_test_runs_through_the_frontier(ivfhnsw, sample_experiment, tmp_path,  # noqa: F811
                                                              monkeypatch, fold):
    """The frontier builds a point's indexes as the index stage does: by SparIndex.build with the run's options, an
    approximate type folded by μ (index.fold: auto) and the exhaustive one never; the test's type is timed, scored
    against the exact scan and listed without the frontier knowing its name."""
    from spar.core.artifacts import artifact_dir
    from spar.index.spar_index import SparIndex
    from spar.sweep.frontier import run_frontier
    from test_tune import experiment_config

    built: list[tuple[str, float, str, int]] = []
    build = SparIndex.build.__func__  # type: ignore[attr-defined]

    def recorded(cls, base_p, lambda_p, *args, **kwargs):
        index = build(cls, base_p, lambda_p, *args, **kwargs)
        built.append((index.info["type"], float(index.info.get("fold", 1.0)), index.storage,
                      int(index.info["options"]["nprobe"])))
        return index

    monkeypatch.setattr(SparIndex, "build", classmethod(recorded))
    root = tmp_path / "run"
    root.mkdir()
    for name in ("queries", "teacher_index", "embeddings"):
        (root / name).symlink_to(artifact_dir(sample_experiment, name), target_is_directory=True)
    cfg = experiment_config(root, root / "results", "index.nprobe=3", f"index.fold={fold}")
    report = run_frontier(cfg, point_stages(), ("projection",), (16,), (0,), ("sq8",), progress=lambda _: None,
                          index_types=("flat", "ivfhnsw"))
    point = report.points[0]
    assert built == [("flat", 1.0, "sq8", 3), ("ivfhnsw", point.mu if fold == "auto" else 1.0, "sq8", 3)]
    assert set(point.latency) == {"flat", "ivfhnsw"} and set(point.approximate) == {"ivfhnsw"}
    scored = point.approximate["ivfhnsw"]
    assert scored["loss"] == pytest.approx(point.spar["nDCG@10"] - scored["nDCG@10"], abs=1e-5)
    assert report.details["index_types"] == ["flat", "ivfhnsw"] and "IVF-HNSW nDCG@10 (vs flat)" in report.markdown()


def test_a_type_registered_in_a_test_is_built_and_searched_through_the_index_stage(ivfhnsw, encoded, tmp_path):
    import faiss

    import pipelines.index as stage
    from spar.core.stage import Unit, run_unit
    from spar.experiment.inputs import resolved_index
    from spar.index.approximate import FoldedRows
    from spar.index.served import served_passage_vectors
    from spar.index.spar_index import IndexOptions, SparIndex
    from spar.model.stored_vectors import load_embeddings

    out = tmp_path / "run"
    for name in ("base", "lambda"):
        shutil.copytree(encoded / name / "passages", out / "embeddings" / name / "passages")
    run_unit(Unit(out / "tune", kind="tune", config={}, inputs={}),
             lambda w: (w.path / "tune.json").write_text(json.dumps({"variant": "concat", "mu": 0.3})) and {})
    overrides = [f"experiment.output_dir={out}", "encode.precision=32", "index.type=ivfhnsw", "index.storage=sq8",
                 "index.nprobe=4"]
    result = stage.run(load_config(None, overrides))
    assert (result["type"], result["storage"], result["passages"]) == ("ivfhnsw", "sq8", "48")
    index = SparIndex.load(out / "index")
    assert index.info["type"] == "ivfhnsw" and index.info["fold"] == 0.3  # approximate: μ₀ folded in
    ivf = faiss.extract_index_ivf(index.index)
    assert (ivf.nlist, ivf.nprobe) == (NLIST, 4) and faiss.downcast_index(ivf.quantizer).hnsw.efSearch == 256

    # Searched with every list probed, it ranks as the exact scan of its sq8 codes does (at any μ: folded).
    bp, lp = (load_embeddings(out / "embeddings" / name / "passages") for name in ("base", "lambda"))
    bq, lq = (load_embeddings(encoded / name / "queries-test") for name in ("base", "lambda"))
    served = served_passage_vectors(bp.vectors, FoldedRows(lp.vectors, 0.3)[:], "concat", "ivfhnsw",
                                    IndexOptions(storage="sq8", nprobe=4, seed=42))  # the codes of [P, 0.3·PΛ]
    for mu in (0.3, 1.0):
        exact = bq.vectors @ served[0].T + mu / 0.3 * (lq.vectors @ served[1].T)
        scores, ids = index.search(bq, lq, k=5, mu=mu)
        assert [row[0] for row in ids] == [bp.ids[j] for j in exact.argmax(axis=1)]
        np.testing.assert_allclose(scores[:, 0], exact.max(axis=1), rtol=1e-4, atol=1e-4)

    # Its search-time settings are refreshed in index.json without re-indexing, and applied when it is loaded.
    again = stage.run(load_config(None, [*overrides[:-1], "index.nprobe=1", "index.hnsw_ef_search=16"]))
    assert again["skipped"] and "nprobe 4 -> 1" in again["updated"] and "hnsw_ef_search 256 -> 16" in again["updated"]
    loaded = SparIndex.load(out / "index")  # held: the IVF part below is a view into it
    ivf = faiss.extract_index_ivf(loaded.index)
    assert ivf.nprobe == 1 and faiss.downcast_index(ivf.quantizer).hnsw.efSearch == 16

    # index.type: auto chooses it from 40 passages (below HNSW's 300,000), with its storage and settings.
    concrete = resolved_index(load_config(None, [*overrides[:2], "index.type=auto"])).index
    assert (concrete.type, concrete.storage, concrete.nprobe, concrete.refine) == ("ivfhnsw", "sq8", 2, 0)


# ----------------------------------------------------------------------------------------------------------------
# Nothing outside the types asks a type by name
# ----------------------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
#: Where the type names are written: the types' own modules, and the config's names (``INDEX_TYPES``).
NAMED_IN = ("spar/index/types/", "spar/core/config_sections.py")


def type_name_comparisons(text: str, names: tuple[str, ...]) -> list[str]:
    """The lines of ``text`` that compare something against an index-type name written as a string:
    ``t == "flat"``, ``"ivf" != kind``, ``t in ("hnsw", "ivf")``, ``t not in {"flat"}``."""
    lines = text.splitlines()

    def names_a_type(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
        return False

    found = {node.lineno - 1 for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Compare)
             and any(names_a_type(operand) for operand in [node.left, *node.comparators])}
    return [lines[i].strip() for i in sorted(found)]


@pytest.mark.parametrize("line", ['if t == "flat": pass', 'ok = "ivf" != kind', 'x = t in ("hnsw", "ivf")',
                                  'y = info.get("type") not in {"flat"}', 'z = [t for t in ts if t != "ivfpq"]'])
def test_the_scan_sees_a_comparison_with_a_type_name(line):
    assert type_name_comparisons(line, index_type_names()) == [line]


@pytest.mark.parametrize("line", ['index = build(base, None, "sum", "flat")', 'kind = info.get("type", "flat")',
                                  'ok = kind.approximate', 'def f():\n    """Not "flat" == x."""',
                                  'ok = t == scan.name'])
def test_the_scan_passes_what_compares_no_type_name(line):
    assert type_name_comparisons(line, index_type_names()) == []


def test_no_code_outside_the_types_compares_against_a_type_name():
    """What differs by type is asked of its class (the registry): nothing in spar/ outside spar/index/types/ and the
    config's names (``INDEX_TYPES``) compares against a type's name, as nothing outside spar/lexical/ names a Λ kind
    (tests/test_contract.py). The frontier (spar/sweep/) names none at all, not even as a default."""
    found = {}
    for path in sorted((ROOT / "spar").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(NAMED_IN):
            continue
        lines = type_name_comparisons(path.read_text(encoding="utf-8"), index_type_names())
        if lines:
            found[relative] = lines
    assert not found, found
    named = {}
    for path in sorted((ROOT / "spar" / "sweep").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(getattr(node, "body", None), list) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        strings = sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                          and node.value in index_type_names() and id(node) not in docstrings})
        if strings:
            named[path.name] = strings
    assert not named, named
