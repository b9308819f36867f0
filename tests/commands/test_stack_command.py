"""``otel-profiler stack --output DIR`` writes the repository's stack folder byte for byte and refuses
unusable output folders with one line and exit 2."""

from __future__ import annotations

from conftest import REPO
from otel_profiler.cli import main
from otel_profiler.commands.stack import stack_files

STACK = REPO / "otel_profiler" / "stack"


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_stack_output_is_byte_identical_to_the_repository(tmp_path, capsys):
    out = tmp_path / "new" / "stack"
    assert main(["stack", "--output", str(out)]) == 0
    assert _tree(out) == _tree(STACK)
    assert {"docker-compose.yml", "prometheus.yml", "otel-collector.yaml",
            "provisioning/datasources/datasources.yaml", "grafana/otel-profiler-overview.json"} <= set(_tree(out))
    assert "docker compose -f" in capsys.readouterr().out


def test_stack_files_are_all_the_shipped_files():
    assert stack_files() == _tree(STACK)


def test_existing_files_are_kept_unless_forced(tmp_path, capsys):
    assert main(["stack", "-o", str(tmp_path)]) == 0
    (tmp_path / "prometheus.yml").write_text("mine")
    capsys.readouterr()
    assert main(["stack", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already there" in err and "--force" in err
    assert (tmp_path / "prometheus.yml").read_text() == "mine"
    assert main(["stack", "-o", str(tmp_path), "--force"]) == 0
    assert _tree(tmp_path) == _tree(STACK)


def test_unusable_output_is_one_line_and_exit_2(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["stack", "--output", str(a_file)]) == 2
    assert main(["stack", "--output", str(a_file / "below")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("otel-profiler: error: --output ") for line in err)
    assert "not a folder" in err[0] and "cannot write" in err[1]
