"""The package as a user gets it: a wheel built from this tree, installed WITHOUT extras into a fresh
virtual environment, outside the repository. There, ``pip check`` is clean, ``summary`` gives the same
JSON as this environment, ``export`` delivers the same spans over OTLP/HTTP and gRPC to a real
receiver, and ``stack --output`` writes the repository's stack files byte for byte.

Needs the package index for the runtime dependencies (``pip install`` of the wheel); marked
``fresh_venv`` (left out of the fast loop).
"""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, trace
from otel_profiler.cli import main
from otlp_receiver import OtlpReceiver, proto_span

STACK = REPO / "otel_profiler" / "stack"
TRACE = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
FOLDER = "hta/trace_filter"  # two ranks
EXTRAS_ONLY = ("torch", "tensorflow", "cupti-python", "opentelemetry-instrumentation", "pytest",
               "opentelemetry-exporter-otlp", "HolisticTraceAnalysis")
TIMEOUT = 900


def _run(cmd: list, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=TIMEOUT)
    assert out.returncode == 0, f"{cmd[:4]} exited {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"))}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", out, REPO], cwd=out)
    (built,) = out.glob("otel_profiler-*.whl")
    return built


@pytest.fixture(scope="module")
def runtime(wheel, tmp_path_factory) -> Path:
    """The ``bin/`` folder of a fresh venv with only the wheel and its runtime dependencies."""
    home = tmp_path_factory.mktemp("runtime")
    venv.EnvBuilder(with_pip=True, clear=True).create(home / "venv")
    bin_ = home / "venv" / "bin"
    _run([bin_ / "python", "-m", "pip", "install", "--quiet", wheel], cwd=home, env=_clean_env())
    return bin_


def test_the_wheel_carries_the_stack_the_licence_and_an_spdx_licence(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for path in sorted(p for p in STACK.rglob("*") if p.is_file()):
            name = "otel_profiler/stack/" + path.relative_to(STACK).as_posix()
            assert name in names, name
            assert z.read(name) == path.read_bytes(), name
        meta = email.message_from_bytes(z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
        licence = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert z.read(licence) == (REPO / "LICENSE").read_bytes()
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text() and "Version 2.0" in (REPO / "LICENSE").read_text()
    required = " ".join(meta.get_all("Requires-Dist"))
    for runtime_import in ("opentelemetry-proto", "protobuf", "grpcio", "numpy", "msgspec", "psutil",
                           "cpp-demangle", "prometheus-client", "nvidia-ml-py"):
        assert runtime_import in required, runtime_import


def test_runtime_install_has_no_extras_and_pip_check_is_clean(runtime, tmp_path):
    listed = _run([runtime / "python", "-m", "pip", "list", "--format", "json"], tmp_path).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert "otel-profiler" in installed
    assert not installed & {e.lower() for e in EXTRAS_ONLY}, installed & {e.lower() for e in EXTRAS_ONLY}
    _run([runtime / "python", "-m", "pip", "check"], tmp_path)


def test_runtime_summary_equals_this_environments(runtime, tmp_path, capsys):
    out = _run([runtime / "otel-profiler", "summary", trace(TRACE), "--format", "json"], tmp_path,
               _clean_env()).stdout
    assert main(["summary", str(trace(TRACE)), "--format", "json"]) == 0
    here = capsys.readouterr().out
    assert json.loads(out) == json.loads(here)
    assert json.loads(out)["kernels"]["count"] > 0


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_runtime_export_delivers_the_same_spans(runtime, tmp_path, protocol, capsys):
    args = ["export", str(trace(FOLDER)), "--protocol", protocol, "--span-budget", "300"]

    def received(run) -> list[tuple]:
        with OtlpReceiver() as receiver:
            endpoint = receiver.http_endpoint if protocol == "http/protobuf" else receiver.grpc_endpoint
            run(["--endpoint", endpoint])
            spans = [proto_span(s) for _, s in receiver.collected.spans()]
        return sorted((s["name"], s["start"], s["end"], bool(s["parent"])) for s in spans)

    fresh = received(lambda extra: _run([runtime / "otel-profiler", *args, *extra], tmp_path, _clean_env()))
    here = received(lambda extra: main([*args, *extra]))
    capsys.readouterr()
    assert fresh and fresh == here


def test_runtime_stack_output_is_the_repositorys_stack(runtime, tmp_path):
    out = tmp_path / "stack"
    _run([runtime / "otel-profiler", "stack", "--output", out], tmp_path, _clean_env())
    written = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    repo = {p.relative_to(STACK).as_posix(): p.read_bytes() for p in STACK.rglob("*") if p.is_file()}
    assert written == repo
