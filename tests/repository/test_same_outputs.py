"""Before/after comparison: every repository trace gives byte-for-byte the outputs it gave before.

Restructuring (moving modules into rooms, typing, renaming fields between reader and span) must
change no output. For each real trace under ``tests/data/traces`` (and the two-rank folder), four
commands run in this process exactly as a user types them — ``summary --format json``, ``export -o
spans.jsonl``, ``report --format perfetto`` and ``report`` (HTML) — and a SHA-256 of each output
is compared with ``tests/data/outputs_baseline.json``, recorded before the change (a command that
refuses an input is recorded by its exit status).

An intended change of output is recorded, and named in its commit, with::

    python tests/repository/test_same_outputs.py --update
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "data" / "traces"
BASELINE = REPO / "tests" / "data" / "outputs_baseline.json"
UPDATE_COMMAND = "python tests/repository/test_same_outputs.py --update"
GENERATED_AT = re.compile(rb'"generated": ?"[^"]*"')  # when an HTML report was written

OUTPUTS = {  # output name -> the command's arguments before the input ({out}: the output file)
    "summary.json": ["summary", "--format", "json", "-o", "{out}"],
    "spans.jsonl": ["export", "-o", "{out}"],
    "perfetto.json": ["report", "--format", "perfetto", "-o", "{out}"],
    "report.html": ["report", "-o", "{out}"],
}


def repository_inputs() -> list[str]:
    """Each trace file, and each folder holding several ranks, relative to the traces folder."""
    files = sorted(p for p in TRACES.rglob("*.json.gz") if "LICENSES" not in p.parts)
    folders = sorted({p.parent for p in files if len(list(p.parent.glob("*.json.gz"))) > 1})
    return [p.relative_to(TRACES).as_posix() for p in files + folders]


def output_digests(relative_input: str, work: Path) -> dict[str, str]:
    """The SHA-256 of each output of one input, read from a copy under ``work``.

    The copy keeps the input's own name (run ids derive from names) and the commands run in
    ``work`` with relative paths, so the digests do not depend on where the repository lies.
    """
    from otel_profiler.cli import main

    source = TRACES / relative_input
    copy = work / "input" / source.name
    if copy.exists():
        shutil.rmtree(copy) if copy.is_dir() else copy.unlink()
    copy.parent.mkdir(parents=True, exist_ok=True)
    (shutil.copytree if source.is_dir() else shutil.copyfile)(source, copy)
    digests = {}
    for name, arguments in OUTPUTS.items():
        out = work / name
        argv = [a.replace("{out}", name) for a in arguments] + [f"input/{source.name}"]
        with (contextlib.chdir(work), contextlib.redirect_stdout(io.StringIO()),
              contextlib.redirect_stderr(io.StringIO())):
            code = main(argv)
        if code != 0:  # a refusal is an output too (a folder of traces from different jobs)
            digests[name] = f"exit {code}"
            continue
        text = GENERATED_AT.sub(b'"generated":"-"', out.read_bytes())  # the one field that is the clock
        digests[name] = hashlib.sha256(text).hexdigest()
        out.unlink()
    return digests


def recorded() -> dict[str, dict[str, str]]:
    return json.loads(BASELINE.read_text())["inputs"]


@pytest.mark.parametrize("relative_input", repository_inputs())
def test_outputs_are_unchanged(relative_input: str, tmp_path: Path) -> None:
    baseline = recorded()
    assert relative_input in baseline, f"{relative_input} has no recorded outputs; run {UPDATE_COMMAND}"
    now = output_digests(relative_input, tmp_path)
    changed = [name for name in OUTPUTS if now[name] != baseline[relative_input].get(name)]
    assert not changed, (f"{relative_input}: {', '.join(changed)} changed; if intended, run "
                         f"{UPDATE_COMMAND} and say why in the commit")


def test_every_recorded_input_still_exists() -> None:
    assert sorted(recorded()) == sorted(repository_inputs())


def update() -> None:
    with tempfile.TemporaryDirectory() as work:
        inputs = {name: output_digests(name, Path(work)) for name in repository_inputs()}
    about = ("SHA-256 of each command's output on each repository trace (tests/repository/test_same_outputs.py); "
             f"record an intended change with: {UPDATE_COMMAND}")
    BASELINE.write_text(json.dumps({"about": about, "inputs": inputs}, indent=2) + "\n")
    print(f"recorded {len(inputs)} inputs x {len(OUTPUTS)} outputs in {BASELINE.relative_to(REPO)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="record the outputs of the code as it is now")
    if parser.parse_args().update:
        update()
    else:
        sys.exit(pytest.main([__file__, "-q"]))
