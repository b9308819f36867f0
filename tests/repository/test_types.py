"""The type checker's ratchet: mypy's error count over ``otel_profiler`` and ``cuda_tracer`` may only fall.

One mypy run (settings in ``mypy.ini``, its cache in a folder of the system's temporary directory, so
later runs take seconds) is compared with ``tests/data/mypy_baseline.json``, the errors per file
recorded in the repository:

- the total may not rise above the baseline's total;
- a file the baseline does not list (a clean file, a new file, a moved file) may have no error.

When the counts fall, record them (the baseline only ever goes down)::

    python tests/repository/test_types.py --update

``--accept-rise`` records counts that went up as well (the one way to raise the baseline; say why in
the commit). A probe file with one known error is checked in the same run, so a mypy that checks
nothing, or prints in a form this parser no longer reads, fails instead of passing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASELINE = REPO / "tests" / "data" / "mypy_baseline.json"
PACKAGES = ("otel_profiler", "cuda_tracer")
UPDATE_COMMAND = "python tests/repository/test_types.py --update"
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


def load_baseline() -> dict[str, int]:
    return dict(json.loads(BASELINE.read_text())["files"])


def write_baseline(errors: dict[str, int]) -> None:
    files = {path: errors[path] for path in sorted(errors) if errors[path]}
    document = {
        "about": "mypy errors per file over otel_profiler and cuda_tracer (tests/repository/test_types.py). "
                 "A file not listed must have none; the total may only fall. Record lower counts with: "
                 + UPDATE_COMMAND,
        "total": sum(files.values()),
        "files": files,
    }
    BASELINE.write_text(json.dumps(document, indent=2) + "\n")


def ratchet_problems(baseline: dict[str, int], current: dict[str, int]) -> list[str]:
    """What breaks the ratchet: a total above the baseline's, or an error in a file the baseline lists as clean."""
    problems = [f"{path}: {count} mypy error(s) in a file that must stay clean (the baseline lists none)"
                for path, count in sorted(current.items()) if count and not baseline.get(path)]
    total, allowed = sum(current.values()), sum(baseline.values())
    if total > allowed:
        risen = ", ".join(f"{path} {baseline.get(path, 0)} -> {count}"
                          for path, count in sorted(current.items()) if count > baseline.get(path, 0))
        problems.append(f"{total} mypy errors, more than the baseline's {allowed} (risen: {risen})")
    return problems


def risen_files(baseline: dict[str, int], current: dict[str, int]) -> set[str]:
    return {path for path, count in current.items() if count > baseline.get(path, 0)}


def errors_in(output: str, paths: set[str]) -> list[str]:
    return [line for line in output.splitlines()
            if (match := ERROR_LINE.match(line)) and match.group("path").replace("\\", "/") in paths]


def fallen(baseline: dict[str, int], current: dict[str, int]) -> bool:
    return any(current.get(path, 0) < count for path, count in baseline.items())


# ---------------------------------------------------------------------------------------- tests
def test_mypy_errors_only_fall() -> None:
    run = run_mypy()
    assert run.checked_files >= len(source_files()), (
        f"mypy checked {run.checked_files} files, the packages hold {len(source_files())}:\n{run.output}")
    baseline = load_baseline()
    problems = ratchet_problems(baseline, run.errors)
    assert not problems, ("\n".join(problems) + "\n\nmypy's errors in those files:\n"
                          + "\n".join(errors_in(run.output, risen_files(baseline, run.errors)))
                          + "\nFix the new errors (the baseline only goes down; " + UPDATE_COMMAND + ").")
    if fallen(baseline, run.errors):
        warnings.warn(f"mypy errors fell to {sum(run.errors.values())} (baseline {sum(baseline.values())}); "
                      f"record the lower counts with: {UPDATE_COMMAND}", stacklevel=1)


def test_the_baseline_names_only_files_that_exist() -> None:
    missing = sorted(set(load_baseline()) - set(source_files()))
    assert not missing, f"the baseline names files that are gone: {missing}; run {UPDATE_COMMAND}"


def test_the_ratchet_fails_a_rise_and_a_dirtied_clean_file() -> None:
    baseline = {"a.py": 3, "b.py": 1}
    assert ratchet_problems(baseline, {"a.py": 3, "b.py": 1}) == []
    assert ratchet_problems(baseline, {"a.py": 2}) == []
    assert ratchet_problems(baseline, {"a.py": 2, "b.py": 2}) == []  # a listed file may trade within the total
    assert "more than the baseline's 4" in ratchet_problems(baseline, {"a.py": 4, "b.py": 1})[0]
    assert "c.py: 1 mypy error(s)" in ratchet_problems(baseline, {"a.py": 1, "c.py": 1})[0]
    assert fallen(baseline, {"a.py": 3}) and not fallen(baseline, {"a.py": 3, "b.py": 1})


# ------------------------------------------------------------------------------ the update command
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record mypy's error counts as the new baseline.")
    parser.add_argument("--update", action="store_true", required=True, help="write tests/data/mypy_baseline.json")
    parser.add_argument("--accept-rise", action="store_true",
                        help="record counts that rose too (otherwise a rise is refused)")
    args = parser.parse_args(argv)
    run = run_mypy()
    baseline = load_baseline() if BASELINE.exists() else {}
    problems = ratchet_problems(baseline, run.errors) if baseline else []
    if problems and not args.accept_rise:
        print("\n".join(problems), file=sys.stderr)
        print("not recorded: the baseline only goes down (--accept-rise records it anyway)", file=sys.stderr)
        return 1
    write_baseline(run.errors)
    print(f"{BASELINE.relative_to(REPO)}: {sum(run.errors.values())} errors in {len(run.errors)} files "
          f"(was {sum(baseline.values())} in {len(baseline)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
