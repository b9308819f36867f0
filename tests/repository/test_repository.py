"""The repository stands on its own: the test traces are inside it with their sources and licences,
nothing refers to a folder beside it, the README is short and links every docs page, every relative
link resolves, the generated tables are current, and CI runs the README's test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO, SHARED_TRACES

DOCS = REPO / "docs"
README = REPO / "README.md"
TRACES = REPO / "tests" / "data" / "traces"
# Pages written alongside this set (the GPU checks, delivery, zero-code): linked, maybe not here yet.
LINKED_ELSEWHERE = {"gpu-checks.md", "delivery.md", "zero-code.md"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".sh", ".yml", ".yaml", ".txt", ".cfg", ".ini", ""}
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist", "otel-profile"}


def _repo_text_files() -> list[Path]:
    """The repository's text files: git's list of tracked and untracked-not-ignored files, else a walk."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True)
    candidates = ([REPO / line for line in listed.stdout.splitlines()] if listed.returncode == 0
                  else list(REPO.rglob("*")))
    out = []
    for path in candidates:
        rel = path.relative_to(REPO)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") or part.startswith(".venv")
               for part in rel.parts):
            continue
        if path.is_file() and path.suffix in TEXT_SUFFIXES and path.stat().st_size < 2_000_000:
            out.append(path)
    return out


def test_the_test_traces_live_in_the_repository_with_sources_and_licences():
    files = sorted(TRACES.rglob("*.json.gz"))
    assert len(files) == 17
    sources = (TRACES / "SOURCES.md").read_text()
    for path in files:
        rel = path.relative_to(TRACES).as_posix()
        row = next((line for line in sources.splitlines() if line.startswith(f"| `{rel}` |")), None)
        assert row, f"{rel} is not in SOURCES.md"
        assert f"| {path.stat().st_size:,} |" in row, f"{rel}: size differs from SOURCES.md"
    licences = {p.name: p.read_text() for p in (TRACES / "LICENSES").iterdir()}
    assert sorted(licences) == ["HolisticTraceAnalysis-MIT.txt", "Kineto-BSD-3-Clause.txt", "TraceLens-MIT.txt"]
    for name, text in licences.items():
        assert f"`LICENSES/{name}`" in sources
        assert "Copyright (c)" in text and "AS IS" in text and "WARRANTIES" in text.upper()


def test_conftest_reads_the_repository_traces_by_default():
    import os
    if not os.environ.get("OTEL_PROFILER_TEST_TRACES"):
        assert SHARED_TRACES == TRACES


def test_nothing_refers_to_a_folder_beside_the_repository():
    pattern = re.compile(r"\.\./shared|[\"']shared[\"']\s*/\s*[\"']data[\"']|parent\s*/\s*[\"']shared[\"']")
    hits = [f"{p.relative_to(REPO)}:{n}" for p in _repo_text_files() if p.name != "test_repository.py"
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_readme_is_short_and_every_docs_page_is_reachable():
    readme = README.read_text()
    assert len(readme.encode()) < 16 * 1024
    index = (DOCS / "index.md").read_text()
    assert "docs/index.md" in readme
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "index.md":
            assert f"({page.name})" in index, f"docs/index.md does not link {page.name}"
    for name in LINKED_ELSEWHERE | {"architecture.md", "configuration.md", "metrics.md", "spans.md",
                                    "hta-differences.md", "benchmarks.md", "security.md", "testing.md"}:
        assert f"(docs/{name})" in readme, f"README does not link docs/{name}"


def test_every_relative_link_resolves():
    broken = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists() and path.name not in LINKED_ELSEWHERE:
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, broken


def test_readme_quick_start_names_files_that_exist():
    readme = README.read_text()
    named = re.findall(r"(?:tests/data/traces|examples)/[\w./-]+\.(?:gz|py)", readme)
    assert any(n.startswith("tests/data/traces/") for n in named) and any(n.startswith("examples/") for n in named)
    for rel in named:
        assert (REPO / rel).is_file(), rel


def test_ci_runs_the_readme_test_command():
    command = "bash scripts/test.sh"
    assert f"\n{command}\n" in README.read_text()
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == command


def test_generated_doc_tables_are_current():
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
