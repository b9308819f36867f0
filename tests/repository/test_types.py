"""The type checker holds: mypy reports no error anywhere in ``otel_profiler`` and ``cuda_tracer``.

One mypy run (settings in ``mypy.ini``, its cache in a folder of the system's temporary directory, so
later runs take seconds) over both packages must find none. A probe file with one known error is
checked in the same run, so a mypy that checks nothing, or prints in a form this parser no longer
reads, fails instead of passing.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("otel_profiler", "cuda_tracer")
RUN_LIMIT_S = 1800  # a safety net only: a cold run took about a minute on a busy 2-core machine

PROBE_NAME = "otel_profiler_mypy_probe.py"
PROBE_SOURCE = 'NUMBER: int = "not a number"  # exactly one error, of kind [assignment]\n'
ERROR_LINE = re.compile(r"^(?P<path>[^:\n]+\.pyi?):\d+(?::\d+)?: error: ", re.MULTILINE)
CHECKED = re.compile(r"\(checked (\d+) source files?\)|^Success: no issues found in (\d+) source files?",
                     re.MULTILINE)


@dataclass(frozen=True)
class MypyRun:
    errors: dict[str, int]  # repository-relative posix path -> errors in it (files with none left out)
    checked_files: int
    output: str


def cache_dir() -> Path:
    """mypy's cache for this checkout, kept between runs outside the work tree."""
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"otel-profiler-mypy-cache-{checkout}"


def count_errors(output: str) -> dict[str, int]:
    """Errors per file in mypy's output (notes and the summary line are not errors)."""
    counts: dict[str, int] = {}
    for match in ERROR_LINE.finditer(output):
        path = match.group("path").replace("\\", "/")
        counts[path] = counts.get(path, 0) + 1
    return counts


def run_mypy() -> MypyRun:
    """mypy over the packages and a probe with one known error, in one process."""
    with tempfile.TemporaryDirectory(prefix="mypy-probe-") as probe_dir:
        probe = Path(probe_dir) / PROBE_NAME
        probe.write_text(PROBE_SOURCE)
        command = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(cache_dir()),
                   "--no-color-output", "--no-pretty", *PACKAGES, str(probe)]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=RUN_LIMIT_S)
        output = done.stdout + done.stderr
        if done.returncode not in (0, 1):
            raise RuntimeError(f"mypy failed (exit {done.returncode}):\n{output}")
        errors = count_errors(output)
        probe_errors = sum(n for path, n in errors.items() if path.endswith("/" + PROBE_NAME))
        if probe_errors != 1:
            raise RuntimeError(f"mypy found {probe_errors} errors in the probe, which has exactly one; "
                               f"its output is not read right:\n{output}")
    checked = CHECKED.search(output)
    if checked is None:
        raise RuntimeError(f"mypy's output has no count of checked files:\n{output}")
    package_errors = {path: n for path, n in errors.items() if path.split("/", 1)[0] in PACKAGES}
    return MypyRun(package_errors, int(checked.group(1) or checked.group(2)) - 1, output)


def source_files() -> list[str]:
    return sorted(str(path.relative_to(REPO).as_posix())
                  for package in PACKAGES for path in (REPO / package).rglob("*.py"))


def problems_of(errors: dict[str, int]) -> list[str]:
    """One line per file with errors (none: the packages are clean)."""
    return [f"{path}: {count} mypy error(s)" for path, count in sorted(errors.items()) if count]


# ---------------------------------------------------------------------------------------- tests
def test_mypy_finds_no_error_anywhere() -> None:
    run = run_mypy()
    assert run.checked_files >= len(source_files()), (
        f"mypy checked {run.checked_files} files, the packages hold {len(source_files())}:\n{run.output}")
    problems = problems_of(run.errors)
    errors = [line for line in run.output.splitlines()
              if ERROR_LINE.match(line) and PROBE_NAME not in line]
    assert not problems, "\n".join(problems) + "\n\nmypy's errors:\n" + "\n".join(errors)


def test_an_error_is_counted_where_mypy_reports_it() -> None:
    output = ("otel_profiler/a.py:3: error: Incompatible types  [assignment]\n"
              "otel_profiler/a.py:9:5: error: Name \"x\" is not defined  [name-defined]\n"
              "otel_profiler/a.py:9: note: see this\ncuda_tracer/b.py:1: error: no  [misc]\n"
              "Found 3 errors in 2 files (checked 2 source files)\n")
    assert count_errors(output) == {"otel_profiler/a.py": 2, "cuda_tracer/b.py": 1}
    assert problems_of(count_errors(output)) == ["cuda_tracer/b.py: 1 mypy error(s)",
                                                 "otel_profiler/a.py: 2 mypy error(s)"]
    assert problems_of({}) == []


if __name__ == "__main__":
    found = run_mypy()
    print("\n".join(problems_of(found.errors)) or f"no error in {found.checked_files} files")
    sys.exit(1 if found.errors else 0)
