"""The test suite itself: a missing real dataset fails the tests that need it (it must not skip them)."""

from __future__ import annotations

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
