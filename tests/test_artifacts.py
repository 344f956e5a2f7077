"""Artifacts: atomic publication, manifests, fingerprints, and refusal to mix artifacts up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spar.artifacts import (ArtifactWriter, check_files, ensure_writable, is_complete, read_manifest, require,
                            stage_fingerprint)
from spar.errors import ArtifactError


def test_writer_renames_into_place_with_manifest(tmp_path: Path):
    out = tmp_path / "labels"
    with ArtifactWriter(out, kind="labels", config={"k": 50}, inputs={"queries": "abc"}) as w:
        (w.path / "labels-00000.arrow").write_bytes(b"x")
        assert not out.exists()
        w.stats["queries"] = 1
    manifest = read_manifest(out)
    assert manifest["kind"] == "labels" and manifest["files"] == ["labels-00000.arrow"]
    assert manifest["fingerprint"] == stage_fingerprint("labels", {"k": 50}, {"queries": "abc"})
    assert is_complete(out, manifest["fingerprint"]) and not is_complete(out, "other")


def test_failed_stage_leaves_nothing_that_looks_complete(tmp_path: Path):
    out = tmp_path / "labels"
    with pytest.raises(RuntimeError):
        with ArtifactWriter(out, kind="labels", config={}, inputs={}) as w:
            (w.path / "half").write_bytes(b"")
            raise RuntimeError("killed")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_resumable_partial_survives_only_for_the_same_fingerprint(tmp_path: Path):
    out = tmp_path / "labels"
    with pytest.raises(RuntimeError):
        with ArtifactWriter(out, kind="labels", config={"k": 1}, inputs={}, resumable=True) as w:
            (w.path / "shard-0").write_bytes(b"done")
            raise RuntimeError("killed")
    with ArtifactWriter(out, kind="labels", config={"k": 1}, inputs={}, resumable=True) as w:
        assert (w.path / "shard-0").exists()  # same config: reuse finished work
    with ArtifactWriter(out, kind="labels", config={"k": 2}, inputs={}, resumable=True) as w:
        assert not (w.path / "shard-0").exists()  # other config: start clean


def test_kind_and_missing_files_are_checked(tmp_path: Path):
    out = tmp_path / "index"
    with ArtifactWriter(out, kind="index", config={}, inputs={}) as w:
        (w.path / "index.faiss").write_bytes(b"")
    with pytest.raises(ArtifactError, match="expected a 'labels' artifact, found 'index'"):
        require(out, "labels")
    with pytest.raises(ArtifactError, match="missing file 'ids.arrow'"):
        check_files(out, ["index.faiss", "ids.arrow"])
    with pytest.raises(ArtifactError, match="no manifest.json"):
        require(tmp_path / "nothing", "labels")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output_dir_is_named(tmp_path: Path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(ArtifactError, match="cannot write to output directory"):
        ensure_writable(ro / "x")


def test_unwritable_output_dir_is_named_even_as_root(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ArtifactError, match=f"cannot write to output directory {blocker}/sub"):
        ensure_writable(blocker / "sub")


def test_writer_replaces_only_its_own_kind_of_artifact(tmp_path: Path):
    """The one place spar replaces a directory refuses anything it did not write (#22 items 1, 2)."""
    out = tmp_path / "tune"
    with ArtifactWriter(out, kind="tune", config={}, inputs={}) as w:
        (w.path / "tune.json").write_text("{}")
    with ArtifactWriter(out, kind="tune", config={"a": 1}, inputs={}) as w:  # its own kind: replaced
        (w.path / "tune.json").write_text('{"a": 1}')
    assert (out / "tune.json").read_text() == '{"a": 1}'
    with pytest.raises(ArtifactError, match=r"tune: not empty and a spar 'tune' artifact"):
        ArtifactWriter(out, kind="index", config={}, inputs={}).__enter__()
    user = tmp_path / "user"
    user.mkdir()
    (user / "thesis.tex").write_text("x")
    with pytest.raises(ArtifactError, match=r"user: not empty and not a spar artifact .*never deletes what it did "
                                            r"not write"):
        with ArtifactWriter(user, kind="model", config={}, inputs={}):
            pass
    assert (user / "thesis.tex").read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["tune", "user"]
