"""Dependencies as values (issue #49 item 1): the stage runner derives each artifact's check, input fingerprints and
lineage from what it is made from, instead of a driver writing the three side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from spar.core.artifacts import ArtifactWriter, manifest_fingerprint
from spar.core.dependency import artifact, computed, file, file_set, resolve
from spar.core.errors import ArtifactError
from spar.core.fingerprint import file_fingerprint
from spar.core.stage import Declared, Unit, run_unit


def _artifact(root: Path, name: str, kind: str, content: bytes = b"rows") -> Path:
    with ArtifactWriter(root / name, kind=kind, config={"name": name, "content": content.decode()}, inputs={}) as w:
        (w.path / "part-00000.arrow").write_bytes(content)
    return root / name


def test_a_unit_of_dependencies_has_the_fingerprint_and_lineage_of_the_hand_built_one(tmp_path: Path):
    queries = _artifact(tmp_path, "queries", "queries")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "1", "text": "a"}\n')
    by_hand = Unit(tmp_path / "labels", kind="labels", config={"k": 1},
                   inputs={"queries": manifest_fingerprint(queries), "corpus": file_fingerprint(corpus), "seed": "1"})
    declared = Declared(tmp_path / "labels", "labels", {"k": 1}, [artifact("queries", queries, "queries"),
                                                                  file("corpus", corpus)], {"seed": "1"}).unit()
    assert declared.writer().fingerprint == by_hand.writer().fingerprint
    assert declared.inputs == by_hand.inputs
    assert [(Path(s["path"]), s["of"]) for s in declared.sources] == [(queries.absolute(), "artifact"),
                                                                       (corpus.absolute(), "file")]
    assert declared.sources[0]["fingerprint"] == manifest_fingerprint(queries)
    assert run_unit(declared, lambda w: {"wrote": True}) == {"wrote": True}
    assert run_unit(declared, lambda w: {"wrote": True}) == {"skipped": True}
    _artifact(tmp_path, "queries", "queries", b"other rows")  # sample re-ran otherwise: the labels are stale
    assert run_unit(Declared(tmp_path / "labels", "labels", {"k": 1}, [artifact("queries", queries, "queries"),
                                                                      file("corpus", corpus)], {"seed": "1"}).unit(),
                    lambda w: {"wrote": "again"}) == {"wrote": "again"}


def test_a_missing_stale_or_edited_input_is_refused_naming_the_stage_to_rerun(tmp_path: Path):
    with pytest.raises(ArtifactError, match=r"labels: the labels artifact is missing or incomplete: run `spar label`$"):
        Unit(tmp_path / "lambda", kind="lambda", config={}, needs=[artifact("labels", tmp_path / "labels", "labels")])
    index = _artifact(tmp_path, "index", "index")
    with pytest.raises(ArtifactError, match="expected a 'queries' artifact, found 'index'"):
        resolve([artifact("queries", index, "queries")])
    queries = _artifact(tmp_path, "queries", "queries")
    (queries / "part-00000.arrow").write_bytes(b"ROWS")  # same size, other content
    resolve([artifact("queries", queries, "queries")])  # sizes only: accepted
    with pytest.raises(ArtifactError, match=r"part-00000.arrow: content changed since `spar sample` wrote it; "
                                            r"re-run `spar sample --force`"):
        resolve([artifact("queries", queries, "queries", unchanged=True)])
    with pytest.raises(ArtifactError, match="^embeddings are missing$"):
        resolve([artifact("base", tmp_path / "nowhere", "embeddings", missing="embeddings are missing")])


def test_an_optional_input_counts_only_when_it_is_there_and_keys_are_never_given_twice(tmp_path: Path):
    tune = artifact("tune", tmp_path / "tune", "tune", optional=True)
    assert resolve([tune]) == ({}, [])
    _artifact(tmp_path, "tune", "tune")
    inputs, sources = resolve([tune])
    assert inputs == {"tune": manifest_fingerprint(tmp_path / "tune")} and len(sources) == 1
    with pytest.raises(ValueError, match="'tune'"):
        resolve([tune, tune])
    with pytest.raises(ValueError, match=r"\['tune'\]"):
        Unit(tmp_path / "index", kind="index", config={}, inputs={"tune": "x"}, needs=[tune])


def test_an_optional_file_not_there_counts_for_nothing_even_when_it_records_nothing(tmp_path: Path):
    """publish's card quotes the results file when there: missing, its fingerprint crashed the plan (FileNotFoundError
    under `spar publish` before evaluate had run), since a dependency with its own records counted as present."""
    from spar.core.dependency import Dependency

    results = Dependency("results", tmp_path / "results.md", "file", optional=True, records=lambda: [])
    assert resolve([results]) == ({}, [])
    (tmp_path / "results.md").write_text("| system |\n")
    assert resolve([results]) == ({"results": file_fingerprint(tmp_path / "results.md")}, [])


def test_a_file_set_and_a_computed_source_give_their_own_fingerprint_and_records(tmp_path: Path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (corpus / name).write_text(name)
    files = file_set("corpus", corpus, "f00d", sorted(corpus.iterdir()))
    inputs, sources = resolve([files, artifact(None, _artifact(tmp_path, "tune", "tune"), "tune"),
                               computed("lambda", tmp_path / "lambda", lambda: "beef", lambda: [{"path": "x"}])])
    assert inputs == {"corpus": "f00d", "lambda": "beef"}  # a lineage-only input adds no key
    assert [Path(s["path"]).name for s in sources] == ["a.jsonl", "b.jsonl", "tune", "x"]
    assert sources[0]["fingerprint"] == file_fingerprint(corpus / "a.jsonl")
