"""The teacher registry (spar/teacher/registry.py): every teacher behind one contract, and a new teacher is one module
plus its registration.

The new teacher here is registered by this test only: an exact BM25 computed by brute force in Python over a
handful of passages (its "index" one JSON file of term counts), which labels through the real ``sample`` and
``label`` stages with no JVM and no Lucene.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spar.core.config import load_config
from spar.core.config_sections import TEACHERS
from spar.core.errors import ConfigError
from spar.teacher import registry
from spar.teacher.registry import REGISTRY, SparseTeacher, choose_engine, register, teacher_class, teacher_for

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "scifact-sample"
N_PASSAGES = 12


def _terms(text: str) -> list[str]:
    return [t for t in "".join(c.lower() if c.isalnum() else " " for c in text).split() if len(t) > 1]


class ExactSearcher:
    """Okapi BM25 (k1, b) of every passage, ties broken by passage id."""

    def __init__(self, index: dict[str, Any], k1: float, b: float):
        self.docs = {pid: Counter(terms) for pid, terms in index["docs"].items()}
        self.lengths = {pid: len(terms) for pid, terms in index["docs"].items()}
        self.avgdl = sum(self.lengths.values()) / len(self.lengths)
        df = Counter(t for counts in self.docs.values() for t in counts)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b, self.num_docs = k1, b, n

    def score(self, query: str, pid: str) -> float:
        counts, norm = self.docs[pid], self.k1 * (1 - self.b + self.b * self.lengths[pid] / self.avgdl)
        return sum(self.idf.get(t, 0.0) * counts[t] * (self.k1 + 1) / (counts[t] + norm) for t in _terms(query))

    def search(self, queries, k: int):
        out = {}
        for qid, text in queries:
            scored = sorted(((self.score(text, pid), pid) for pid in self.docs), key=lambda s: (-s[0], s[1]))
            out[qid] = [(pid, score) for score, pid in scored[:k] if score > 0]
        return out


class ExactBM25(SparseTeacher):
    """The test's teacher: BM25 by brute force (label.teacher: exact, label.engine: brute)."""

    name, engine = "exact", "brute"
    term_weighting = None

    def index_settings(self) -> dict[str, Any]:
        return {"teacher": self.name, "fields": list(self.section.fields)}

    def label_settings(self) -> dict[str, Any]:
        s = self.section
        return {"teacher": self.name, "k": s.k, "k1": s.k1, "b": s.b, "n_positives": s.n_positives,
                "n_negatives": s.n_negatives}

    def describe(self) -> str:
        return f"exact BM25 by brute force, k1={self.section.k1}, b={self.section.b}"

    def build_index(self, passages_arrow: Path, index_dir: Path) -> dict[str, Any]:
        from spar.data.passages import PassagesTable

        table = PassagesTable(passages_arrow)
        docs = {pid: _terms(" ".join(parts)) for pid, *parts in zip(table.ids, *(table.table.column(f).to_pylist()
                                                                               for f in self.section.fields))}
        (index_dir / "exact.json").write_text(json.dumps({"docs": docs}), encoding="utf-8")
        return {"teacher": self.name, "terms": sum(len(t) for t in docs.values())}

    def open(self, index_dir, passages_arrow=None, threads=None, progress=False) -> ExactSearcher:
        index = json.loads((Path(index_dir) / "exact.json").read_text(encoding="utf-8"))
        return ExactSearcher(index, self.section.k1, self.section.b)


@pytest.fixture
def exact_teacher():
    """ExactBM25 registered for one test (the registry and the config's names restored afterwards)."""
    registry_before, teachers_before = dict(REGISTRY), dict(TEACHERS)
    register(ExactBM25)
    yield ExactBM25
    REGISTRY.clear(), REGISTRY.update(registry_before)
    TEACHERS.clear(), TEACHERS.update(teachers_before)


def test_every_registered_teacher_is_a_class_of_its_names():
    assert {(name, engine) for name, engines in TEACHERS.items() for engine in engines} == set(REGISTRY)
    for (name, engine) in REGISTRY:
        cls = teacher_class(name, engine)
        assert issubclass(cls, SparseTeacher) and (cls.name, cls.engine) == (name, engine)
    assert teacher_class("bm25").engine == "lucene"  # the first engine is the default
    # engines of one teacher share its index: the same index settings
    section = load_config(None).label
    assert teacher_for(section, "memory").index_settings() == teacher_for(section, "lucene").index_settings()
    assert teacher_class("bm25").bm25_index and not teacher_class("impact").bm25_index


def test_teacher_settings_are_the_label_sections():
    bm25 = teacher_for(load_config(None, ["label.k1=1.2"]).label)
    assert bm25.label_settings()["k1"] == 1.2 and not any(k.startswith("impact_") for k in bm25.label_settings())
    assert bm25.models() == {}
    impact = teacher_for(load_config(None, ["label.teacher=impact"]).label)
    assert "k1" not in impact.label_settings() and impact.models() == {"label.impact_model": "splade-tiny"}
    assert impact.index_settings()["quantization"] == 100 and impact.describe() == "impact index of splade-tiny"


def test_unregistered_names_fail_in_one_line(exact_teacher):
    with pytest.raises(ConfigError, match="label.teacher='brute'"):
        load_config(None, ["label.teacher=brute"])
    with pytest.raises(ConfigError, match="label.engine='lucene' does not run the exact teacher: use brute"):
        load_config(None, ["label.teacher=exact", "label.engine=lucene"])
    with pytest.raises(ConfigError, match="not a registered teacher"):
        registry.engines("nothing")


def test_a_teacher_registered_in_a_test_labels_through_the_label_stage(exact_teacher, tmp_path):
    import pipelines.label
    import pipelines.sample
    from spar.core import schemas
    from spar.core.artifacts import read_manifest

    corpus = tmp_path / "corpus.jsonl"
    with (SAMPLE / "corpus.jsonl").open(encoding="utf-8") as fin:
        corpus.write_text("".join(line for _, line in zip(range(N_PASSAGES), fin)), encoding="utf-8")
    out = tmp_path / "run"
    cfg = load_config(None, [f"data.corpus={corpus}", f"experiment.output_dir={out}", "sample.strategy=all",
                             "sample.dev_fraction=0.2", "label.teacher=exact", "label.k=6", "label.n_positives=2",
                             "label.n_negatives=2", "label.shard_size=40", "label.batch_size=16"])
    pipelines.sample.run(cfg)
    result = pipelines.label.run(cfg)
    assert result["engine"] == "brute (the exact teacher runs on brute only)"

    index = read_manifest(out / "teacher_index")
    assert (out / "teacher_index" / "exact.json").is_file()
    assert index["config"] == {"teacher": "exact", "fields": ["title", "text"]}
    assert index["stats"]["teacher"] == "exact" and index["stats"]["terms"] > 100
    labels_manifest = read_manifest(out / "labels")
    assert labels_manifest["config"] == ExactBM25(cfg.label).label_settings()
    assert labels_manifest["stats"]["teacher"] == "exact"

    labels = schemas.read_shards(out / "labels", "labels").to_pylist()
    queries = schemas.read_shards(out / "queries", "queries").to_pylist()
    assert len(labels) > 20 and {r["split"] for r in labels} == {"train", "dev"}
    searcher = ExactBM25(cfg.label).open(out / "teacher_index")
    for record in labels:
        hits = searcher.search([(record["query_id"], record["query"])], 6)[record["query_id"]]
        n_p = 1 if record["split"] == "dev" else 2
        assert record["positive_ids"] == [pid for pid, _ in hits[:n_p]]
        assert record["positive_scores"] == pytest.approx([s for _, s in hits[:n_p]], rel=1e-6)
        assert record["negative_ids"] == [pid for pid, _ in hits[-2:]]
    # a sampled sentence mostly finds the passage it was taken from first
    source = {q["query_id"]: q["source_passage_id"] for q in queries}
    own_first = sum(record["positive_ids"][0] == source[record["query_id"]] for record in labels)
    assert own_first >= 0.8 * len(labels)
    # a second run finds the labels up to date; auto runs the teacher's one engine
    assert pipelines.label.run(cfg).get("skipped")
    assert choose_engine(cfg.label, out / "queries" / "passages.arrow")[0] == "brute"
