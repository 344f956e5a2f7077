"""The test suite itself: a missing real dataset fails the tests that need it (it must not skip them)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_missing_datasets_fail_instead_of_skipping(tmp_path: Path):
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_needs_data.py").write_text("def test_needs_data(datasets_dir):\n    assert datasets_dir\n")
    env_datasets = tmp_path / "no-datasets"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-c", "/dev/null", str(tmp_path)],
                          env={"PATH": "/usr/bin:/bin", "SPAR_DATASETS": str(env_datasets)},
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "1 error" in output and "skipped" not in output, output
    assert f"real datasets missing under {env_datasets}: scifact/corpus.jsonl" in output, output


def _pip_installs(text: str) -> list[str]:
    """The package arguments of each ``pip install`` in ``text``, in order, without quiet flags, index options and
    shell variables (``-q``, ``--index-url URL``, ``"${TORCH_INDEX[@]}"``); commented-out lines are left out."""
    import shlex

    installs = []
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        for part in code.split("&&"):
            if not part.strip().startswith("pip install "):
                continue
            words = [w for w in shlex.split(part.strip()[len("pip install "):]) if w != "-q" and not w.startswith("$")]
            while "--index-url" in words:
                i = words.index("--index-url")
                del words[i:i + 2]
            if words and words != ["--upgrade", "pip"]:
                installs.append(" ".join(words))
    return installs


def test_readme_install_and_ci_install_agree():
    """The README's install block and .ci/run install the same packages in the same order: torch, spar, then
    Pyserini last with --no-deps (so pip prints no resolver error); the README's torch line is the CPU index."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    expected = ["torch==2.13.0", "-e .[test,ray]", "--no-deps pyserini==1.6.0"]
    assert _pip_installs(block) == expected
    assert _pip_installs(ci) == expected
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in block


def test_ci_says_where_it_ran_and_how_long_each_phase_took():
    """Issue #45 item 2: the CPU, its class and what `precision: auto` resolves to are printed before the tests;
    issue #49 item 5: each phase's duration is printed."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    report = ci.index('python -c "from spar.model.engines import cpu_report; print(cpu_report())"')
    first_tests = ci.index("\nrun_tests\n")
    assert report < first_tests
    for name in ("install", "lint and types", "CPU class", "tests (README: Tests)", "non-editable install"):
        assert f'phase "{name}' in ci, name
    assert ci.rstrip().endswith('echo "== .ci/run took $((SECONDS / 60))m$((SECONDS % 60))s"')


def test_the_costliest_test_files_are_handed_out_first(request):
    """#49 item 5: xdist hands out whole files in collection order (its re-sort by number of tests is off), so the
    session's files come from the costliest down by this suite's own costs (tests/file_costs.json; an unlisted file
    as one of median cost) and each file's tests stay in order."""
    from file_costs import load_costs, longest_first

    assert longest_first(["a.py", "b.py", "c.py", "d.py"], {"a.py": 1.0, "b.py": 9.0, "c.py": 5.0}) == \
        ["b.py", "c.py", "d.py", "a.py"]
    # pytest-xdist's --loadscope-reorder (on by default) would hand the files out by number of tests instead
    assert getattr(request.config.option, "loadscopereorder", False) is False
    files = list(dict.fromkeys(item.path.name for item in request.session.items))
    costs = load_costs(request.config.option.markexpr)
    assert "test_lineage.py" in load_costs("not slow") and {"test_ray.py", "test_kinds.py"} <= set(load_costs("slow"))
    if len(files) > 1:  # the whole suite, not one file picked out
        assert files == longest_first(sorted(files), costs), files
    own = [item.name for item in request.session.items if item.path.name == "test_ci.py"]
    written = re.findall(r"^def (test_\w+)", Path(__file__).read_text(), flags=re.M)
    assert own == [name for name in written if name in own]  # a file's tests in the order they are written


def test_xdist_hands_out_the_files_in_the_order_of_their_costs(tmp_path: Path):
    """Run for real on a scratch suite with tests/conftest.py: one worker, a costly file of one test and a cheap one
    of five. pytest-xdist's default re-sort by number of tests would run the five first (as it ran the slow suite's
    longest file, test_kinds.py, after every many-test file); the costs' order runs the costly one first."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(REPO / "tests" / "file_costs.py", tmp_path / "file_costs.py")
    (tmp_path / "file_costs.json").write_text('{"default": {"test_costly.py": 600.0, "test_cheap.py": 5.0}}')
    ran = tmp_path / "ran.txt"
    record = f"def test_{{n}}():\n    open({str(ran)!r}, 'a').write('{{name}}\\n')\n"
    (tmp_path / "test_costly.py").write_text(record.format(n=0, name="costly"))
    (tmp_path / "test_cheap.py").write_text("".join(record.format(n=n, name="cheap") for n in range(5)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-c", "/dev/null", "-n", "1", "--dist", "loadfile", str(tmp_path)],
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert ran.read_text().split() == ["costly"] + ["cheap"] * 5


def test_each_suite_is_ordered_by_its_own_costs(tmp_path, monkeypatch):
    """A file's default and slow tests cost different amounts: `-m slow` reads the slow table, the default suite
    (`-m "not slow"`, pyproject's addopts) the default one, any other selection both added up."""
    import file_costs

    table = tmp_path / "file_costs.json"
    table.write_text('{"default": {"a.py": 600.0, "b.py": 5.0, "d.py": 50.0}, "slow": {"b.py": 900.0, "c.py": 30.0}}')
    monkeypatch.setattr(file_costs, "TABLE", table)
    assert file_costs.load_costs("slow") == {"b.py": 900.0, "c.py": 30.0}
    assert file_costs.load_costs("not slow") == {"a.py": 600.0, "b.py": 5.0, "d.py": 50.0}
    assert file_costs.load_costs("slow or not slow") == {"a.py": 600.0, "b.py": 905.0, "c.py": 30.0, "d.py": 50.0}
    assert file_costs.longest_first(["c.py", "b.py"], file_costs.load_costs("slow")) == ["b.py", "c.py"]
    # c.py, not in the default table, counts as its median (d.py's 50 s)
    assert file_costs.longest_first(["b.py", "c.py", "a.py"], file_costs.load_costs("not slow")) == \
        ["a.py", "c.py", "b.py"]
