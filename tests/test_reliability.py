"""Reliability findings of the CLI attack (issue #16), each with a test that fails without its fix: inputs checked
up front, qrels naming unknown passages, empty corpora, damaged Arrow files, ids with whitespace, one run per
output directory, stage processes dying with their parent, and stale temporaries of killed runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spar.core.config import load_config
from spar.core.errors import ArtifactError, BadRecordError, SparError
from re import escape as re_escape

#: The experiment's one question set (data.queries & co. before spar 0.2).
QS = "data.question_sets.default"

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "scifact-sample"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
ENV.pop("SPAR_OUTPUT_LOCK", None)
SPAR = [sys.executable, "-m", "pipelines.cli"]


def _small_inputs(root: Path, n_docs: int = 30) -> dict[str, Path]:
    """The first ``n_docs`` abstracts of the embedded sample, all its queries and the qrels of those abstracts."""
    root.mkdir(parents=True, exist_ok=True)
    lines = (SAMPLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:n_docs]
    ids = {json.loads(line)["_id"] for line in lines}
    (root / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    shutil.copy(SAMPLE / "queries.jsonl", root / "queries.jsonl")
    for split in ("train", "test"):
        rows = (SAMPLE / "qrels" / f"{split}.tsv").read_text().splitlines()
        kept = [rows[0]] + [r for r in rows[1:] if r.split("\t")[1] in ids]
        (root / f"{split}.tsv").write_text("\n".join(kept) + "\n")
    return {"corpus": root / "corpus.jsonl", "queries": root / "queries.jsonl", "dev": root / "train.tsv",
            "test": root / "test.tsv"}


def _config(files: dict[str, Path], out: Path, *extra: str):
    return load_config(None, [*_data(files), f"experiment.output_dir={out}", *extra])


def _data(files: dict[str, Path]) -> list[str]:
    return [f"data.corpus={files['corpus']}", f"{QS}.dev={files['queries']}", f"{QS}.test={files['queries']}",
            f"{QS}.qrels_dev={files['dev']}", f"{QS}.qrels_test={files['test']}"]


# ----------------------------------------------------------------------------------------------------------------
# 3. Inputs checked up front; qrels naming unknown passages
# ----------------------------------------------------------------------------------------------------------------


def test_preflight_names_the_qrels_line_of_an_unknown_passage(tmp_path):
    from spar.experiment.preflight import check_inputs

    files = _small_inputs(tmp_path / "in")
    report = check_inputs(_config(files, tmp_path / "run"))
    assert report["corpus"]["passages"] == 30 and report[f"{QS}.qrels_test"]["skipped"] == {}

    known_query = files["test"].read_text().splitlines()[1].split("\t")[0]
    with files["test"].open("a") as fh:
        fh.write(f"{known_query}\tno-such-passage\t1\n")
    n = len(files["test"].read_text().splitlines())
    with pytest.raises(BadRecordError, match=rf"^{files['test']}:{n}: unknown passage: 'no-such-passage' is not in "
                                             "the corpus$"):
        check_inputs(_config(files, tmp_path / "run"))
    # on_bad_record=skip: counted, and reported by file and reason.
    skipped = check_inputs(_config(files, tmp_path / "run", "experiment.on_bad_record=skip"))
    assert skipped[f"{QS}.qrels_test"]["skipped"] == {"unknown passage": 1}


def test_preflight_refuses_missing_files_and_an_empty_corpus(tmp_path):
    from spar.experiment.preflight import check_inputs

    files = _small_inputs(tmp_path / "in")
    files["queries"].unlink()
    with pytest.raises(BadRecordError, match=r"queries\.jsonl: file not found \(data\.question_sets\.default\.dev\)$"):
        check_inputs(_config(files, tmp_path / "run"))
    files = _small_inputs(tmp_path / "in2")
    files["corpus"].write_text("")
    with pytest.raises(BadRecordError, match=r"corpus\.jsonl: the corpus holds no passage$"):
        check_inputs(_config(files, tmp_path / "run"))



@pytest.mark.parametrize("make, words", [
    (lambda p: p.mkdir(), "a directory, not a file"),
    (lambda p: (p.symlink_to(p.with_name("loop-b")), p.with_name("loop-b").symlink_to(p)),
     "a loop of symbolic links, not a file"),
    (lambda p: p.symlink_to("/dev/null"), r"not a regular file \(a device, pipe or socket\)"),
    (lambda p: p.symlink_to(p.with_name("gone.jsonl")), r"a symbolic link to a missing file \(.*gone\.jsonl\)"),
])
def test_a_corpus_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path, make, words):
    """#22 item 15: a directory, a link loop or /dev/null as the corpus was reported as "file not found"."""
    from spar.experiment.preflight import check_inputs
    from spar.data.readers import read_corpus

    files = _small_inputs(tmp_path / "in")
    corpus = tmp_path / "odd" / "corpus.jsonl"
    corpus.parent.mkdir()
    make(corpus)
    cfg = _config({**files, "corpus": corpus}, tmp_path / "run")
    with pytest.raises(BadRecordError, match=rf"^{corpus}: {words} \(data\.corpus\)$"):
        check_inputs(cfg)
    with pytest.raises(BadRecordError, match=rf"^{corpus}: {words}$"):
        list(read_corpus(corpus))


def test_preflight_refuses_a_model_path_that_does_not_exist(tmp_path):
    from spar.experiment.preflight import check_inputs

    files = _small_inputs(tmp_path / "in")
    with pytest.raises(SparError, match=r"^train\.encoder\.model: model path not found: /no/such/model$"):
        check_inputs(_config(files, tmp_path / "run", "train.encoder.model=/no/such/model"))


def test_a_truncated_model_is_refused_in_one_line_before_any_stage(tmp_path):
    """#22 item 10: a truncated model.safetensors (base or Λ init) gave a traceback once a stage loaded it; preflight
    (and every load) now names the file in one line, and the CLI exits 2."""
    from spar.model.resolve import resolve_model
    from spar.experiment.preflight import check_inputs

    model = tmp_path / "minilm"
    shutil.copytree(resolve_model("all-MiniLM-L6-v2"), model)
    weights = model / "model.safetensors"
    with weights.open("r+b") as fh:
        fh.truncate(weights.stat().st_size // 2)
    files = _small_inputs(tmp_path / "in")
    with pytest.raises(SparError, match=rf"^encode\.base\.model: {weights}: truncated safetensors file "):
        check_inputs(_config(files, tmp_path / "run", f"encode.base.model={model}"))
    done = subprocess.run([*SPAR, "run", *_data(files), f"experiment.output_dir={tmp_path / 'run'}",
                           f"train.encoder.model={model}"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"train.encoder.model: {weights}: truncated safetensors file" in done.stderr
    assert not (tmp_path / "run" / "queries").exists()  # refused before the first stage


def test_skip_mode_drops_judgments_of_unknown_passages_from_evaluation(tmp_path):
    """`--on-bad-record skip` applies to qrels: a judgment of a passage outside the corpus does not count as a miss."""
    import pipelines.sample
    from spar.experiment.plan import split_queries

    files = _small_inputs(tmp_path / "in")
    cfg = _config(files, tmp_path / "run", "sample.max_queries=20")
    pipelines.sample.run(cfg)
    clean = split_queries(cfg, "test")
    first = clean.ids[0]
    with files["test"].open("a") as fh:
        fh.write(f"{first}\tno-such-passage\t1\n")
    with pytest.raises(BadRecordError, match=r"test\.tsv:\d+: unknown passage: 'no-such-passage'"):
        split_queries(cfg, "test")
    skipping = split_queries(_config(files, tmp_path / "run", "experiment.on_bad_record=skip"), "test")
    assert skipping.qrels == clean.qrels


def test_on_bad_record_does_not_invalidate_the_sample(tmp_path):
    import pipelines.sample

    files = _small_inputs(tmp_path / "in")
    assert "skipped" not in pipelines.sample.run(_config(files, tmp_path / "run", "sample.max_queries=20"))
    again = pipelines.sample.run(_config(files, tmp_path / "run", "sample.max_queries=20",
                                         "experiment.on_bad_record=skip"))
    assert again == {"skipped": True}


# ----------------------------------------------------------------------------------------------------------------
# 5. One-line errors: empty corpus at sample, damaged Arrow file
# ----------------------------------------------------------------------------------------------------------------


def test_sample_refuses_an_empty_corpus(tmp_path):
    import pipelines.sample

    files = _small_inputs(tmp_path / "in")
    files["corpus"].write_text('{"_id": "1", "text": ""}\n')  # its only record is skipped as empty
    with pytest.raises(BadRecordError, match=r"corpus\.jsonl: the corpus holds no passage \(0 records read, 1 "
                                             r"skipped \(1 empty text and title\)\): nothing to sample$"):
        pipelines.sample.run(_config(files, tmp_path / "run", "experiment.on_bad_record=skip"))
    assert not (tmp_path / "run" / "queries").exists()


def test_truncated_arrow_file_is_named(tmp_path):
    import pyarrow as pa

    from spar.data.passages import PassagesTable
    from spar.core.schemas import read_table, write_table

    path = tmp_path / "passages.arrow"
    write_table(path, pa.table({"id": [str(i) for i in range(1000)]}))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    for read in (read_table, PassagesTable.open):
        with pytest.raises(ArtifactError, match=rf"^{path}: damaged Arrow file \(.*\); delete it and re-run"):
            read(path)


# ----------------------------------------------------------------------------------------------------------------
# 7. Ids with whitespace are refused where they are read
# ----------------------------------------------------------------------------------------------------------------


def test_ids_with_whitespace_are_refused_with_file_and_line(tmp_path):
    from spar.data.readers import read_corpus, read_qrels, read_queries

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "x"}\n{"_id": "b c", "text": "y"}\n')
    with pytest.raises(BadRecordError, match=r"corpus\.jsonl:2: whitespace in id: passage id 'b c'"):
        list(read_corpus(corpus))
    queries = tmp_path / "queries.tsv"
    queries.write_text("q 1\twhat is it\n")
    with pytest.raises(BadRecordError, match=r"queries\.tsv:1: whitespace in id: query id 'q 1'"):
        list(read_queries(queries))
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td\u00a01\t1\n")
    with pytest.raises(BadRecordError, match=r"qrels\.tsv:2: whitespace in id: passage id"):
        read_qrels(qrels)


# ----------------------------------------------------------------------------------------------------------------
# 6. One run per output directory; stages die with their parent; a rerun after kill -9 works
# ----------------------------------------------------------------------------------------------------------------

HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from spar.core.output_lock import output_lock
    with output_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(60)
""")


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_lock_refuses_a_second_run_and_takes_over_a_stale_one(tmp_path):
    import socket

    from spar.core.output_lock import LOCK_FILE, output_lock

    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**ENV, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ArtifactError, match=rf"^{tmp_path}: another spar run \(pid {holder.pid} on "):
            with output_lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    # The holder was killed (-9): its lock is stale and taken over; released on exit.
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid
    with output_lock(tmp_path) as lock:
        assert json.loads(lock.read_text()) | {"pid": os.getpid(), "host": socket.gethostname()} == json.loads(
            lock.read_text())
        with output_lock(tmp_path) as nested:  # the same process again (in-process stages): shared
            assert nested is None
    assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.parametrize("content", ["", "{\"pi"])
def test_an_empty_or_garbled_lock_file_does_not_block_later_runs(tmp_path, content):
    """#22 item 15: a lock file left empty (its writer died, or the disk was full) blocked every later run until
    deleted by hand; one that stays unreadable for seconds is stale and taken over."""
    from spar.core.output_lock import LOCK_FILE, output_lock

    (tmp_path / LOCK_FILE).write_text(content)  # just written: not yet stale
    with output_lock(tmp_path) as lock:
        assert lock is not None and json.loads(lock.read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_FILE).exists()


def test_cli_refuses_a_concurrent_run_and_reruns_after_kill_9(tmp_path):
    from spar.core.output_lock import LOCK_FILE

    files = _small_inputs(tmp_path / "in")
    out = tmp_path / "run"
    args = [f"data.corpus={files['corpus']}", f"experiment.output_dir={out}", "sample.max_queries=20"]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdout=subprocess.PIPE, text=True,
                              env={**ENV, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        busy = subprocess.run(SPAR + ["sample", *args], env=ENV, capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert busy.returncode == 2, busy.stderr
    assert busy.stderr.strip().splitlines() == [
        f"spar: error: {out}: another spar run (pid {holder.pid} on " + busy.stderr.split(" on ", 1)[1].strip()]
    # kill -9 left the lock behind: the rerun takes it over and runs.
    assert (out / LOCK_FILE).exists()
    done = subprocess.run(SPAR + ["sample", *args], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "queries" / "manifest.json").exists() and not (out / LOCK_FILE).exists()


# `spar run` holds the lock and starts each stage as a process that shares it (as pipelines/cli.py does).
def test_parts_of_a_multi_machine_label_lock_only_their_part(tmp_path):
    from spar.core.output_lock import LOCK_FILE, output_lock, run_lock_name

    def parts(i):
        return load_config(None, ["label.num_shards=2", f"label.shard_index={i}"])

    assert run_lock_name("label", parts(0)) != run_lock_name("label", parts(1))
    assert run_lock_name("train", parts(0)) == run_lock_name("label", load_config(None, [])) == LOCK_FILE
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK.replace("output_lock(sys.argv[1])",
                                                                      "output_lock(sys.argv[1], sys.argv[2])"),
                               str(tmp_path), run_lock_name("label", parts(0))],
                              stdout=subprocess.PIPE, text=True, env={**ENV, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with output_lock(tmp_path, run_lock_name("label", parts(1))) as lock:  # the other part runs beside it
            assert lock is not None
        with pytest.raises(ArtifactError, match="another spar run"):
            with output_lock(tmp_path, run_lock_name("label", parts(0))):
                pass
    finally:
        holder.kill()
        holder.wait()


PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from spar.core.output_lock import hold_output_lock
    hold_output_lock(sys.argv[1])
    stage = ("import sys, time; from spar.core.output_lock import acquire_output_lock; "
             "assert acquire_output_lock(sys.argv[1]) is None; print('shared', flush=True); time.sleep(120)")
    child = subprocess.Popen([sys.executable, "-c", stage, sys.argv[1]], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "shared"
    print(child.pid, flush=True)
    time.sleep(120)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_stage_processes_die_with_their_parent(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**ENV, "PYTHONPATH": str(REPO)})
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    from spar.core.artifacts import pid_alive

    deadline = time.time() + 10
    while time.time() < deadline and pid_alive(child) and not _is_zombie(child):
        time.sleep(0.05)
    assert not pid_alive(child) or _is_zombie(child), "the stage process outlived its parent"


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


def test_label_removes_what_killed_runs_left_behind(tmp_path):
    from spar.core.artifacts import remove_stale_temporaries

    dead, alive = _dead_pid(), os.getpid()
    stale = [tmp_path / f"teacher_index.tmp-{dead}", tmp_path / f".teacher_index.tmp-{dead}-collection-x1y2"]
    for d in stale:
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "part-000.jsonl").write_text("{}\n")
    (tmp_path / f".manifest.json.tmp-{dead}").write_text("{}")
    kept = [tmp_path / f"teacher_index.tmp-{alive}", tmp_path / "teacher_index", tmp_path / "labels.partial"]
    for d in kept:
        d.mkdir()
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted([p.name for p in stale] + [f".manifest.json.tmp-{dead}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in kept)


# ----------------------------------------------------------------------------------------------------------------
# #31: a short write is a full disk; a Λ without its manifest is checked; evaluate counts skipped records
# ----------------------------------------------------------------------------------------------------------------


def test_numpys_short_write_is_a_full_disk_in_one_line(tmp_path, monkeypatch):
    """#31 item 8 (injected; tests/test_artifacts.py fills a real tmpfs): NumPy reports a short write as an OSError
    without errno ("N requested and M written"), which escaped the "no space left" translation as a traceback."""
    import numpy as np

    from spar.model.embeddings import encode_passages
    from spar.core.errors import no_space_left
    from spar.lexical.projection import ProjectionLambda

    assert no_space_left(OSError("393216 requested and 262144 written")) is not None
    assert no_space_left(OSError("something else")) is None and no_space_left(ValueError("1 requested and 0 written")) \
        is None

    def short_write(fh, array, **kwargs):
        fh.write(b"\x93NUMPY")
        raise OSError(f"{array.nbytes} requested and 6 written")

    monkeypatch.setattr(np, "save", short_write)
    texts = [f"passage {i} about sparse retrieval" for i in range(20)]
    out = tmp_path / "embeddings" / "lambda" / "passages"
    with pytest.raises(ArtifactError) as error:
        encode_passages(ProjectionLambda.fit(texts, dim=16), [(str(i), "", t) for i, t in enumerate(texts)], out,
                        inputs={"corpus": "x"})
    assert str(error.value).startswith(f"{out}: no space left on device while writing the embeddings artifact")
    assert "\n" not in str(error.value)
    assert not [p for p in out.with_name("passages.partial").iterdir() if ".tmp-" in p.name]


def test_a_lambda_without_its_manifest_is_checked_by_its_own_checksums(tmp_path):
    """#31 item 9: a Λ directory that travelled without manifest.json was used unchecked: two swapped vocabulary lines
    (same size) made another, silently wrong Λ. spar_lambda.json now records the size and SHA-256 of the Λ's files
    (written last by save); a Λ with neither is refused."""
    import json as _json

    from spar.experiment.lambda_source import resolve_lambda
    from spar.lexical.projection import ProjectionLambda
    from spar.lexical.static import StaticLambda

    lam = tmp_path / "copied"
    StaticLambda.from_projection(ProjectionLambda.fit(["sparse retrieval with bm25", "dense retrieval"], dim=8)
                                 ).save(lam)
    assert not (lam / "manifest.json").exists()
    assert resolve_lambda(str(lam), tmp_path).kind == "static"
    vocab = lam / "vocab.txt"
    terms = vocab.read_text().splitlines()
    vocab.write_text("\n".join([terms[1], terms[0], *terms[2:]]) + "\n")
    with pytest.raises(ArtifactError, match=rf"^{vocab}: content changed since the Λ was saved \(by "
                                            rf"{lam / 'spar_lambda.json'}\); train or copy it again$"):
        resolve_lambda(str(lam), tmp_path)
    config = _json.loads((lam / "spar_lambda.json").read_text())
    del config["checksums"]  # as written before #31, or by hand
    (lam / "spar_lambda.json").write_text(_json.dumps(config))
    with pytest.raises(ArtifactError, match=rf"^{lam}: no manifest.json and no checksums in spar_lambda.json, so "
                                            r"its files cannot be checked"):
        resolve_lambda(str(lam), tmp_path)


# ----------------------------------------------------------------------------------------------------------------
# #37: answers checked at preflight with their line (regex answers compiled there; a question without answers)
# ----------------------------------------------------------------------------------------------------------------


def _question_set_config(files: dict[str, Path], out: Path, questions: Path, *extra: str, **set_options: str):
    """Set ``qa``: ``questions`` as its dev split, and a copy of them as its test split."""
    test = questions.with_name(f"test-{questions.name}")
    shutil.copy(questions, test)
    options = ", ".join(f"{k}: {v}" for k, v in {"dev": questions, "test": test, **set_options}.items())
    return load_config(None, [f"data.corpus={files['corpus']}", "data.queries=null", "data.qrels_dev=null",
                              "data.qrels_test=null", f"data.question_sets={{qa: {{{options}}}}}",
                              f"experiment.output_dir={out}", *extra])


def _questions(path: Path, answers: list) -> Path:
    """One question per answer list (``None``: the question carries no ``answers`` key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"_id": f"q{i}", "question": f"question {i}",
                                        **({"answers": a} if a is not None else {})}) + "\n"
                            for i, a in enumerate(answers)))
    return path


@pytest.mark.parametrize("pattern", ["(unclosed", "[z-a]"])
def test_a_regex_answer_that_does_not_compile_is_named_at_preflight(tmp_path, pattern):
    """#37 item 2: such an answer never matched (Pyserini swallows the error), silently: preflight passed and every
    system's Acc@k counted the question as a miss. Now preflight names its file and line; with on_bad_record=skip it
    is counted, and the stages leave the same question out."""
    from spar.experiment.plan import set_split
    from spar.experiment.preflight import check_inputs, skipped_records

    files = _small_inputs(tmp_path / "in")
    questions = _questions(tmp_path / "qa.jsonl", [["vitamin c"], ["scurv(y|ies)", pattern], ["zinc"]])
    with pytest.raises(BadRecordError, match=rf"^{questions}:2: invalid regex answer: {re_escape(repr(pattern))} "):
        check_inputs(_question_set_config(files, tmp_path / "run", questions, answer_match="regex"))
    assert check_inputs(_question_set_config(files, tmp_path / "run", questions))  # string matching: an answer
    cfg = _question_set_config(files, tmp_path / "run", questions, "experiment.on_bad_record=skip",
                               answer_match="regex")
    assert skipped_records(check_inputs(cfg)) == {"data.question_sets.qa.dev": {"invalid regex answer": 1},
                                                  "data.question_sets.qa.test": {"invalid regex answer": 1}}
    assert set_split(cfg, "qa", "test").ids == ["q0", "q2"]
    with pytest.raises(BadRecordError, match=rf"^{questions}:2: invalid regex answer"):
        set_split(_question_set_config(files, tmp_path / "run", questions, answer_match="regex"), "qa", "dev")


def test_a_regex_answer_in_an_answers_file_is_named_at_preflight(tmp_path):
    from spar.experiment.preflight import check_inputs, skipped_records

    files = _small_inputs(tmp_path / "in")
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"_id": "q0", "answers": ["a"]}\n\n{"_id": "q1", "answers": ["[z-a]"]}\n')
    questions = _questions(tmp_path / "qa.jsonl", [None, None])
    with pytest.raises(BadRecordError, match=rf"^{answers}:3: invalid regex answer: '\[z-a\]' .*query 'q1'$"):
        check_inputs(_question_set_config(files, tmp_path / "run", questions, answers=str(answers),
                                          answer_match="regex"))
    # The unnamed set's evaluate.answers, with evaluate.answer_match=regex.
    with pytest.raises(BadRecordError, match=rf"^{answers}:3: invalid regex answer"):
        check_inputs(_config(files, tmp_path / "run", f"evaluate.answers={answers}", "evaluate.answer_match=regex"))
    report = check_inputs(_config(files, tmp_path / "run", f"evaluate.answers={answers}",
                                  "evaluate.answer_match=regex", "experiment.on_bad_record=skip"))
    # evaluate.answers is the default set's answers file since spar 0.2 (counted under its new name).
    assert skipped_records(report) == {"data.question_sets.default.answers": {"invalid regex answer": 1}}


def test_a_valid_regex_answer_that_python_warns_about_is_judged_quietly(tmp_path, recwarn):
    """A pattern such as ``[[a]b]`` compiles, with Python's "FutureWarning: Possible nested set" (a valid answer,
    nothing the user can act on): preflight kept it quiet, but Acc@k's matching (Pyserini's ``has_answers``, which
    compiles every answer) printed it once per new pattern, from a Pyserini file, in the middle of evaluate."""
    import re
    import warnings

    from spar.data.answers import answer_problem, has_answer

    warnings.simplefilter("always")
    re.purge()  # the warning comes with a pattern's first compilation in the process
    assert has_answer(["scurv[[y]]"], "Scurvy is a disease.", "regex") is False
    assert has_answer(["[[s]curvy"], "Scurvy is a disease.", "regex") is True
    assert answer_problem("[[q]r]", "regex") is None
    assert not [w for w in recwarn.list if "nested set" in str(w.message)], [str(w.message) for w in recwarn.list]


@pytest.mark.parametrize("address", ["127.0.0.1:0", "127.0.0.1:65536", "head:99999", "ray://head:70000",
                                     "notahost.invalid:123456"])
def test_a_ray_address_with_a_port_out_of_range_is_refused_in_one_line(address):
    """Refused before any look-up or connection (``notahost.invalid`` is never resolved), naming the port."""
    from spar.core.errors import ConfigError
    from spar.core.executor import check_address

    port = address.rpartition(":")[2]
    started = time.time()
    with pytest.raises(ConfigError, match=rf"^executor\.address={re_escape(repr(address))}: port {port} is out of "
                                          r"range \(1-65535\)$"):
        check_address(address, seconds=30)
    assert time.time() - started < 1


def test_a_question_without_answers_is_named_at_preflight(tmp_path):
    """#37 item 12: a question without ``answers`` among questions with them passed preflight and was refused one
    stage later (at encode), without its line."""
    from spar.experiment.plan import set_split
    from spar.experiment.preflight import check_inputs, skipped_records

    files = _small_inputs(tmp_path / "in")
    questions = _questions(tmp_path / "qa.jsonl", [["vitamin c"], ["zinc"], None, ["iron"]])
    with pytest.raises(BadRecordError, match=rf"^{questions}:3: no answers: question 'q2' carries none"):
        check_inputs(_question_set_config(files, tmp_path / "run", questions))
    with pytest.raises(BadRecordError, match=rf"^{questions}:3: no answers: question 'q2'"):
        set_split(_question_set_config(files, tmp_path / "run", questions), "qa", "dev")
    cfg = _question_set_config(files, tmp_path / "run", questions, "experiment.on_bad_record=skip")
    report = check_inputs(cfg)
    assert skipped_records(report)["data.question_sets.qa.dev"] == {"no answers": 1}
    assert report["data.question_sets.qa.dev"]["questions"] == 3
    assert set_split(cfg, "qa", "dev").ids == ["q0", "q1", "q3"]
    # No question carries answers and no qrels: refused at preflight too, not one stage later.
    none = _questions(tmp_path / "none.jsonl", [None, None])
    with pytest.raises(SparError, match="carry no answers and no qrels_dev is set"):
        check_inputs(_question_set_config(files, tmp_path / "run", none))


def test_a_preflight_refusal_leaves_no_empty_run_directory(tmp_path, capsys):
    """#48 item 7: `spar run` refused a missing corpus and left an empty runs/<name>/ behind (the lock's directory).
    What existed before stays, and so does a run directory that holds anything."""
    from pipelines import cli

    out = tmp_path / "runs" / "fresh"
    assert cli.main(["run", f"experiment.output_dir={out}", f"data.corpus={tmp_path / 'missing.jsonl'}"]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither runs/ nor runs/fresh/
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine\n")
    assert cli.main(["run", f"experiment.output_dir={kept}", f"data.corpus={tmp_path / 'missing.jsonl'}"]) == 2
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]
