"""The test groups of tests/conftest.py: the fast loop leaves out every slow group (including tests
that use the TensorFlow environment from another module), and in CI a browser or Prometheus test that
skips fails instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import MODULE_MARKERS, REPO


def _pytest(*args: str, cwd=REPO, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env={**base, **env}, capture_output=True, text=True, timeout=300)


def _module(line: str) -> str:
    """The test module of a collected test id, ``tests/<folder>/<module>.py::<test>``."""
    return Path(line.split("::")[0]).stem


def test_fast_loop_leaves_out_every_slow_group():
    out = _pytest("--collect-only", "-q", "-m", "not slow_env")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    collected = [line for line in out.stdout.splitlines() if "::" in line]
    assert len(collected) > 100
    for module in MODULE_MARKERS:
        assert not any(_module(line) == module for line in collected), module
    # By fixture (the TensorFlow environment) and by function name, in modules that otherwise stay:
    assert any(_module(line) == "test_session_cupti" for line in collected)
    assert not any("test_keras_job_without_cupti" in line for line in collected)
    assert any(_module(line) == "test_otlp_spans" for line in collected)
    assert not any("test_cpu_ops_are_the_context_of_kept_launches" in line for line in collected)


def test_in_ci_a_skipped_browser_test_fails(tmp_path):
    (tmp_path / "test_report_browser.py").write_text(
        "import pytest\n\ndef test_needs_chromium():\n    pytest.skip('chromium and chromedriver are not installed')\n")
    args = ("-q", "-p", "conftest", "--rootdir", str(tmp_path), str(tmp_path / "test_report_browser.py"))
    tests_dir = str(REPO / "tests")
    local = _pytest(*args, cwd=tmp_path, PYTHONPATH=tests_dir)
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout[-2000:]
    ci = _pytest(*args, cwd=tmp_path, PYTHONPATH=tests_dir, CI="true")
    assert ci.returncode == 1 and "1 failed" in ci.stdout, ci.stdout[-2000:]
    assert "skipped in CI, where it must run: Skipped: chromium and chromedriver are not installed" in ci.stdout
