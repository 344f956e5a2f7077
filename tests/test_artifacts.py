"""Artifacts: atomic publication, manifests, fingerprints, and refusal to mix artifacts up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spar.core.artifacts import (ArtifactWriter, check_files, check_unchanged, ensure_writable, is_complete,
                                 read_manifest, require, stage_fingerprint)
from spar.core.errors import ArtifactError


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


def test_manifest_records_sizes_and_checksums_of_every_file(tmp_path: Path):
    """#22 items 5 and 8: a deleted or truncated file makes the artifact incomplete; rewritten content (a reordered
    vocab.txt, same size) is found by the content check, naming the file."""
    import hashlib

    out = tmp_path / "lambda"
    with ArtifactWriter(out, kind="lambda", config={}, inputs={}) as w:
        (w.path / "vocab.txt").write_text("alpha\nbeta\n")
        (w.path / "sub").mkdir()
        (w.path / "sub" / "weights.bin").write_bytes(b"0123")
    checksums = read_manifest(out)["checksums"]
    assert checksums["vocab.txt"] == {"bytes": 11, "sha256": hashlib.sha256(b"alpha\nbeta\n").hexdigest()}
    assert set(checksums) == {"vocab.txt", "sub/weights.bin"}
    assert is_complete(out) and is_complete(out, content=True)
    check_unchanged(out, "train")

    (out / "vocab.txt").write_text("beta\nalpha\n")  # reordered: same size
    assert is_complete(out) and not is_complete(out, content=True)
    with pytest.raises(ArtifactError, match=r"lambda/vocab.txt: content changed since `spar train` wrote it; re-run "
                                            r"`spar train --force`$"):
        check_unchanged(out, "train")
    (out / "sub" / "weights.bin").write_bytes(b"01")
    assert not is_complete(out)
    (out / "sub" / "weights.bin").unlink()
    assert not is_complete(out)
    with pytest.raises(ArtifactError, match=r"lambda/sub/weights.bin: missing since `spar train` wrote it and 1 more"):
        check_unchanged(out, "train")


def _disk_full(path: Path):
    import errno

    return OSError(errno.ENOSPC, "No space left on device", str(path))


@pytest.mark.parametrize("resumable", [False, True])
def test_a_full_disk_is_one_line_naming_the_artifact_and_leaves_no_temporary(tmp_path: Path, resumable: bool):
    """#22 item 14: a full disk during publish or label gave a traceback; now one line saying "no space left",
    with the half-written file removed (a resumable stage keeps its finished parts to resume)."""
    from spar.core.artifacts import atomic_file

    out = tmp_path / "labels"
    with pytest.raises(ArtifactError) as error:
        with ArtifactWriter(out, kind="labels", config={}, inputs={}, resumable=resumable) as w:
            (w.path / "labels-00000.arrow").write_bytes(b"finished")
            with atomic_file(w.path / "labels-00001.arrow") as tmp:
                tmp.write_bytes(b"half")
                raise _disk_full(tmp)
    message = str(error.value)
    assert message.startswith(f"{out}: no space left on device while writing the labels artifact")
    assert "\n" not in message
    assert not out.exists()
    if resumable:
        assert sorted(p.name for p in (tmp_path / "labels.partial").iterdir()) == [".fingerprint", "labels-00000.arrow"]
        assert "finished parts are kept in" in message
    else:
        assert list(tmp_path.iterdir()) == [] and "temporary directory was removed" in message


def test_the_cli_reports_a_full_disk_in_one_line(tmp_path: Path, monkeypatch, capsys):
    """Outside an artifact writer too (a library writing its own files), a full disk is one line, exit 2."""
    import pipelines.sample
    from pipelines.cli import main

    import dataclasses

    def full(cfg, force=False):
        raise RuntimeError("the writer failed") from _disk_full(tmp_path / "queries.tmp-1" / "part.arrow")

    monkeypatch.setattr(pipelines.sample, "STAGE", dataclasses.replace(pipelines.sample.STAGE, plan=full))
    assert main(["sample", f"experiment.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spar: error: {tmp_path}/queries.tmp-1/part.arrow: no space left on device") and \
        err.count("\n") == 1


def test_a_really_full_file_system(tmp_path: Path):
    """The real thing where this machine lets us mount a small tmpfs (CI runs as root): an artifact written into a full
    file system fails in one line and leaves nothing there."""
    import subprocess
    import sys

    full = tmp_path / "full"
    full.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root); the injected-failure tests above cover the path")
    try:
        repo = Path(__file__).resolve().parents[1]
        code = ("import sys; from spar.core.artifacts import ArtifactWriter\n"
                "with ArtifactWriter(sys.argv[1], kind='model', config={}, inputs={}) as w:\n"
                "    (w.path / 'model.safetensors').write_bytes(b'0' * (1 << 20))\n")
        done = subprocess.run([sys.executable, "-c", code, str(full / "model")], cwd=repo, capture_output=True,
                              text=True)
        assert done.returncode == 1 and f"ArtifactError: {full / 'model'}: no space left on device" in done.stderr
        assert list(full.iterdir()) == []
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_an_artifact_is_replaced_in_place_and_only_with_what_its_manifest_lists(tmp_path: Path):
    """#31 items 1 and 5: the directory itself is kept (a mount point cannot be removed; an empty directory keeps its
    owner and mode), the earlier artifact's files go, files it does not list stop the replacement."""
    out = tmp_path / "model"
    out.mkdir()
    inode = out.stat().st_ino
    with ArtifactWriter(out, kind="model", config={"v": 1}, inputs={}) as w:
        (w.path / "old.bin").write_bytes(b"old")
        (w.path / "sub").mkdir()
        (w.path / "sub" / "weights.bin").write_bytes(b"1")
    with ArtifactWriter(out, kind="model", config={"v": 2}, inputs={}) as w:
        (w.path / "sub").mkdir()
        (w.path / "sub" / "weights.bin").write_bytes(b"2")
    assert out.stat().st_ino == inode
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["manifest.json", "sub", "sub/weights.bin"]
    assert (out / "sub" / "weights.bin").read_bytes() == b"2" and read_manifest(out)["config"] == {"v": 2}

    (out / "sub" / "mine.txt").write_text("mine")
    with pytest.raises(ArtifactError, match=rf"^{out}: holds files its earlier model artifact does not list "
                                            r"\(sub/mine.txt\); spar replaces only what it wrote and never deletes "
                                            r"the rest: move them out, or choose another directory$"):
        with ArtifactWriter(out, kind="model", config={"v": 3}, inputs={}) as w:
            (w.path / "x").write_bytes(b"")
    assert (out / "sub" / "mine.txt").read_text() == "mine" and read_manifest(out)["config"] == {"v": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


REPLACE_AND_DIE = """
import os, shutil, signal, sys
from spar.core.artifacts import ArtifactWriter
moved = []
real = shutil.move
def move(src, dst):
    real(src, dst)
    moved.append(dst)
    if len(moved) == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
shutil.move = move
with ArtifactWriter(sys.argv[1], kind="model", config={"v": 2}, inputs={}) as w:
    for name in ("a.bin", "b.bin", "c.bin"):
        (w.path / name).write_bytes(name.encode())
"""


@pytest.mark.parametrize("killed_after", [1, 3])
def test_a_replacement_killed_part_way_is_finished_by_the_next_run(tmp_path: Path, killed_after: int):
    """Replacing in place is not one rename: a kill -9 part-way leaves a directory without a manifest (so it does not
    look complete), whose every file spar can still account for (its journal), so the next run replaces it."""
    import subprocess
    import sys

    out = tmp_path / "model"
    with ArtifactWriter(out, kind="model", config={"v": 1}, inputs={}) as w:
        (w.path / "old.bin").write_bytes(b"old")
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", REPLACE_AND_DIE, str(out), str(killed_after)], cwd=repo,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    assert done.returncode == -9, done.stderr
    assert not is_complete(out) and (out / ".spar-replacing.json").exists()
    with ArtifactWriter(out, kind="model", config={"v": 3}, inputs={}) as w:
        (w.path / "d.bin").write_bytes(b"d")
    assert sorted(p.name for p in out.iterdir()) == ["d.bin", "manifest.json"] and read_manifest(out)["config"] == {
        "v": 3}


def test_a_really_full_file_system_while_encoding(tmp_path: Path):
    """#31 item 8: NumPy's short write on a full disk is an OSError without errno ("N requested and M written"), so
    it escaped the "no space left" translation as a traceback. A real tmpfs where the machine lets us mount one."""
    import subprocess

    from spar.model.embeddings import encode_passages
    from spar.lexical.projection import ProjectionLambda

    full = tmp_path / "full"
    full.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(full)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root); tests/test_reliability.py injects a short write")
    try:
        texts = [f"passage number {i} about retrieval" for i in range(200)]
        lam = ProjectionLambda.fit(texts, dim=256)
        with pytest.raises(ArtifactError) as error:
            encode_passages(lam, [(str(i), "", t) for i, t in enumerate(texts)], full / "passages",
                            shard_size=50, inputs={"corpus": "x"})
        message = str(error.value)
        assert message.startswith(f"{full / 'passages'}: no space left on device while writing the embeddings "
                                  "artifact (finished parts are kept in") and "\n" not in message
        assert not [p for p in (full / "passages.partial").iterdir() if ".tmp-" in p.name]  # no half-written shard
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_manifests_record_time_and_peak_memory_and_the_results_read_them_per_stage(tmp_path):
    """Each manifest records its stage's seconds and the process's peak RSS; the costs table of the results reads
    them back per stage, an encoder's query splits summed, over this run and the run it carries Λ from."""
    from spar.experiment.costs import costs_markdown, stage_costs

    ballast = bytearray(300 << 20)  # the peak is at least this process's 300 MB
    ballast[::4096] = b"x" * len(ballast[::4096])
    carried, run = tmp_path / "wiki", tmp_path / "wiki-200k"
    for directory, kind in ((carried / "labels", "labels"), (run / "embeddings" / "base" / "passages", "embeddings"),
                            (run / "embeddings" / "base" / "queries-test-nq", "embeddings"),
                            (run / "embeddings" / "base" / "queries-test-wq", "embeddings"), (run / "tune", "tune")):
        with ArtifactWriter(directory, kind=kind, config={}, inputs={}) as w:
            (w.path / "x.txt").write_text("x")
    manifest = read_manifest(run / "tune")
    assert manifest["peak_rss_bytes"] >= len(ballast) and manifest["seconds"] >= 0
    (carried / "tune").mkdir()  # not complete: not a cost
    rows = stage_costs([run, carried, run])
    assert [(r["stage"], r["artifact"], r["run"]) for r in rows] == [
        ("encode", "embeddings/base/passages", "wiki-200k"), ("encode", "embeddings/base/queries-*", "wiki-200k"),
        ("tune", "tune", "wiki-200k"), ("label", "labels", "wiki")]  # the run's name: no machine path (#47)
    queries = [read_manifest(run / "embeddings" / "base" / split)["seconds"]
               for split in ("queries-test-nq", "queries-test-wq")]
    assert rows[1]["seconds"] == pytest.approx(sum(queries), abs=2e-3)
    assert all(r["peak_rss_gb"] >= 0.3 for r in rows)
    assert "| tune | tune | wiki-200k |" in costs_markdown(rows) and str(tmp_path) not in costs_markdown(rows)
