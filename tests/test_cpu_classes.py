"""The suite on every CPU class (issue #45): the class is pinned for the session and its subprocesses, a test can ask
for another one, and a test that compares vectors after `precision: auto` was resolved without saying which
precision it expects fails on every machine, not only on the one whose class differs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spar.core.errors import ConfigError
from spar.model import engines

CONFTEST = Path(__file__).with_name("conftest.py")


def test_the_class_is_pinned_for_the_session_and_its_subprocesses():
    pinned = os.environ.get("SPAR_TEST_CPU_CLASS", "none")
    if pinned == "real":
        pytest.fail("this test checks the pin; run it without SPAR_TEST_CPU_CLASS=real")
    assert os.environ["SPAR_CPU_CLASS"] == pinned
    expected = "32" if pinned == "none" else "bf16-mixed"
    assert engines.resolve_precision("cpu", "auto") == expected
    child = subprocess.run([sys.executable, "-c", "from spar.model.engines import resolve_precision as r; "
                            "print(r('cpu', 'auto'))"], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == expected


@pytest.mark.cpu_class("amx_bf16")
def test_a_test_can_run_as_on_another_class():
    assert engines.cpu_bf16_support() == "amx_bf16" and engines.resolve_precision("cpu", "auto") == "bf16-mixed"
    assert "SPAR_CPU_CLASS=amx_bf16 overrides it" in engines.cpu_report()
    assert "auto -> bf16-mixed (bf16 autocast)" in engines.cpu_report()


@pytest.mark.cpu_class("none")
def test_the_report_names_the_cpu_and_the_resolution():
    report = engines.cpu_report()
    assert report.startswith("CPU: ") and "native bf16: " in report and "auto -> 32 (fp32)" in report


def test_an_unknown_class_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("SPAR_CPU_CLASS", "avx512")
    with pytest.raises(ConfigError, match=r"\$SPAR_CPU_CLASS='avx512': expected one of none, amx_bf16, avx512_bf16"):
        engines.resolve_precision("cpu", "auto")


def test_the_guard_fails_an_undeclared_vector_comparison(tmp_path):
    """The guard in tests/conftest.py, run on a suite of its own: a comparison after `auto` (in the test or in a
    fixture) is an error naming the test; a pinned precision, a declared class or a stated reason pass."""
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "test_inner.py").write_text(textwrap.dedent('''
        import numpy as np
        import pytest
        from spar.model.engines import resolve_precision

        @pytest.fixture(scope="module")
        def vectors_made_under_auto():
            resolve_precision("cpu", "auto")
            return np.ones(3)

        def test_undeclared():
            resolve_precision("cpu", "auto")
            np.testing.assert_allclose([1.0], [1.0])

        def test_through_a_fixture(vectors_made_under_auto):
            np.testing.assert_allclose(vectors_made_under_auto, np.ones(3))

        def test_pinned():
            resolve_precision("cpu", "32")
            np.testing.assert_allclose([1.0], [1.0])

        def test_no_comparison():
            resolve_precision("cpu", "auto")

        @pytest.mark.precision_independent("compares a vector with itself")
        def test_declared():
            resolve_precision("cpu", "auto")
            np.testing.assert_allclose([1.0], [1.0])

        @pytest.mark.cpu_class("avx512_bf16")
        def test_on_a_named_class():
            assert resolve_precision("cpu", "auto") == "bf16-mixed"
            np.testing.assert_allclose([1.0], [1.0])
    '''))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rE", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path)
    out = done.stdout
    assert done.returncode == 1, out
    assert "6 passed, 2 errors" in out, out  # an error in teardown follows a pass
    assert "ERROR test_inner.py::test_undeclared" in out and "ERROR test_inner.py::test_through_a_fixture" in out
    assert "after fixture vectors_made_under_auto resolved `precision: auto`" in out
    assert "after the test resolved `precision: auto`" in out
