"""OTEL_PROFILER_LOG: the profiler's quietly handled failures, explained on stderr when asked.

A real zero-code training job (``OTEL_PROFILER_ENABLED=1``) imports a ``keras`` the profiler's
integration does not understand (a module with no ``Model``): the integration's import hook fails
and the profiler goes on without it. With ``OTEL_PROFILER_LOG=debug`` stderr shows a debug line naming
the failure with its cause; with the variable unset (or off) stderr is the same as without the
logging, byte for byte. And the command line turns it on the same way.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAINING = REPO / "tests" / "scripts" / "manual_sgd.py"
TIMEOUT = 600  # a generous deadline for a busy 2-core machine, not a budget

JOB = """import sys
import keras  # noqa: F401  (the unknown keras next to this script)
import runpy
sys.argv = [sys.argv[1], "5"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_ENABLED="1", OTEL_PROFILER_SIGNAL="false", OTEL_METRICS_EXPORTER="none",
               OTEL_TRACES_EXPORTER="none", OTEL_PROFILER_SUMMARY_AT_EXIT="false",
               OTEL_PROFILER_OUTPUT_DIR=str(tmp_path / "profiles"))
    env.update(extra)
    return env


def _run_job(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "keras.py").write_text('"""A keras the profiler does not know: no Model."""\n')
    (tmp_path / "job.py").write_text(JOB)
    return subprocess.run([sys.executable, str(tmp_path / "job.py"), str(TRAINING)], cwd=tmp_path,
                          env=_env(tmp_path, **extra), capture_output=True, timeout=TIMEOUT)


def test_debug_names_the_swallowed_failure_with_its_cause(tmp_path):
    out = _run_job(tmp_path, OTEL_PROFILER_LOG="debug")
    assert out.returncode == 0, out.stderr.decode()
    text = out.stderr.decode()
    assert "otel-profiler: DEBUG otel_profiler.live.import_hooks: the hook on importing keras failed" in text
    assert "AttributeError" in text and "'Model'" in text  # the cause


def test_unset_or_off_prints_nothing_new(tmp_path):
    unset = _run_job(tmp_path)
    off = _run_job(tmp_path, OTEL_PROFILER_LOG="off")
    assert unset.returncode == off.returncode == 0, unset.stderr.decode()
    assert unset.stderr == off.stderr
    assert b"DEBUG" not in unset.stderr and b"Traceback" not in unset.stderr
    assert b"keras" not in unset.stderr  # the failure stays quiet, as before


def test_cli_turns_it_on_too(tmp_path):
    """The command line's main attaches the same handler: a debug record after it shows, or not."""
    code = ("import logging\n"
            "from otel_profiler import cli\n"
            "try:\n"
            "    cli.main(['--version'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "logging.getLogger('otel_profiler.commands').debug('a probe record')\n")
    on = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path, OTEL_PROFILER_LOG="debug"),
                        capture_output=True, timeout=TIMEOUT)
    off = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True,
                         timeout=TIMEOUT)
    assert on.returncode == off.returncode == 0, on.stderr.decode()
    assert b"otel-profiler: DEBUG otel_profiler.commands: a probe record\n" in on.stderr
    assert off.stderr == b""


# --------------------------------------------------------------------------- every swallowed failure
BROAD = {"Exception", "BaseException"}
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}
WARNERS = {"say_once", "note"}
NOT_LOGGED = "# not logged:"
CODE_ROOTS = ("otel_profiler", "cuda_tracer")


def _catches_everything(kind: ast.expr | None) -> bool:
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(n is None or (isinstance(n, ast.Name) and n.id in BROAD)
               or (isinstance(n, ast.Attribute) and n.attr in BROAD) for n in names)


def _accounts_for_failure(handler: ast.ExceptHandler, lines: list[str]) -> bool:
    """The block re-raises, warns, logs, hands the caught exception on, or says why it is not logged."""
    for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Name) and handler.name and node.id == handler.name:
            return True  # returned, stored or passed to whoever reports it
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in LOG_METHODS and isinstance(func, ast.Attribute):
                return True
            if "warn" in name.lower() or name in WARNERS:
                return True
    block = lines[handler.lineno - 1:handler.body[-1].end_lineno]
    return any(NOT_LOGGED in line for line in block)


def silent_blocks(files: list[Path]) -> list[str]:
    """``path:line`` of every ``except Exception``/``BaseException`` block that swallows the failure."""
    found = []
    for path in files:
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source, str(path))):
            if (isinstance(node, ast.ExceptHandler) and _catches_everything(node.type)
                    and not _accounts_for_failure(node, lines)):
                found.append(f"{path}:{node.lineno}")
    return found


def test_every_swallowed_exception_is_logged():
    files = sorted(f for root in CODE_ROOTS for f in (REPO / root).rglob("*.py"))
    assert len(files) > 100
    broad = sum(source.count("except Exception") + source.count("except BaseException")
                for source in (f.read_text() for f in files))
    assert broad > 100  # the scan sees the real code
    assert silent_blocks(files) == []


def test_the_check_catches_a_planted_silent_block(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import logging\n"
        "log = logging.getLogger(__name__)\n"
        "def quiet():\n"
        "    try:\n"
        "        1 / 0\n"
        "    except Exception:\n"                     # line 6: silent
        "        pass\n"
        "    try:\n"
        "        1 / 0\n"
        "    except (ValueError, BaseException):\n"   # line 10: silent, a fallback value
        "        return None\n"
        "    try:\n"
        "        1 / 0\n"
        "    except Exception:\n"
        "        log.debug('division failed', exc_info=True)\n"
        "    try:\n"
        "        1 / 0\n"
        "    except Exception as exc:\n"
        "        return str(exc)\n"
        "    try:\n"
        "        1 / 0\n"
        "    except Exception:\n"
        "        pass  # not logged: a planted reason\n"
        "    try:\n"
        "        1 / 0\n"
        "    except ValueError:\n"
        "        pass\n")
    assert silent_blocks([planted]) == [f"{planted}:6", f"{planted}:10"]
