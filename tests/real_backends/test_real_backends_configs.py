"""The built backends and the shipped Collector configs: ``scripts/backends.sh`` prints its two lines
(and one line naming what failed), the Collector has exactly the components the shipped configs use, and
every Collector config that ``otel-profiler stack --output DIR`` writes passes the real Collector's
``validate`` and starts with only its addresses replaced."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
import yaml

from real_backends import REPO, Gateway, Jaeger, NodeAgent, binaries, free_port, write_stack

SCRIPT = str(REPO / "scripts" / "backends.sh")
CONFIGS = ("otel-collector.yaml", "otel-collector-node.yaml")
KINDS = ("receivers", "processors", "exporters", "extensions", "connectors")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    return write_stack(tmp_path_factory.mktemp("stack"))


def test_backends_script_prints_one_line_per_binary():
    paths = binaries()
    out = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"jaeger {paths['jaeger']}", f"otelcol {paths['otelcol']}"]
    assert out.stderr == ""  # built already: nothing is rebuilt, nothing said


def test_backends_script_check_names_what_is_missing(tmp_path):
    out = subprocess.run(["bash", SCRIPT, "--check"], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "OTEL_PROFILER_BACKENDS_DIR": str(tmp_path)})
    assert out.returncode == 1 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("backends.sh: jaeger v1.75.0 is not built in ") and "scripts/backends.sh" in line


def test_backends_script_without_go_fails_with_one_line(tmp_path):
    tools = tmp_path / "bin"  # the script's tools, and no go
    tools.mkdir()
    for tool in ("cat", "cut", "grep", "mkdir", "sha256sum", "flock"):
        (tools / tool).symlink_to(shutil.which(tool))
    out = subprocess.run([shutil.which("bash"), SCRIPT], capture_output=True, text=True, timeout=60,
                         env={"PATH": str(tools), "OTEL_PROFILER_BACKENDS_DIR": str(tmp_path / "cache")})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == ["backends.sh: go is not installed (Go 1.25 or newer builds Jaeger and "
                                       "the Collector)"]


def _used(config: dict) -> dict[str, set[str]]:
    """Component types a config uses (``otlp/jaeger`` is of type ``otlp``)."""
    return {kind: {name.split("/")[0] for name in config.get(kind) or {}} for kind in KINDS}


def test_the_collector_has_exactly_the_components_of_the_shipped_configs(stack):
    out = subprocess.run([binaries()["otelcol"], "components"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = yaml.safe_load(out.stdout)
    have = {kind: {c["name"] for c in built.get(kind) or []} for kind in KINDS}
    want: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for name in CONFIGS:
        for kind, names in _used(yaml.safe_load((stack / name).read_text())).items():
            want[kind] |= names
    assert have == want


def test_each_shipped_collector_config_validates_and_starts(stack, tmp_path):
    jaeger = Jaeger(tmp_path / "jaeger")
    gateway = Gateway(tmp_path, stack, jaeger=jaeger.otlp_grpc)
    agent = NodeAgent(tmp_path, stack, gateway=gateway.otlp_grpc)
    for collector in (gateway, agent):
        result = collector.validate()
        assert result.returncode == 0, result.stdout + result.stderr
    try:
        gateway.start()
        agent.start()
        health = gateway.config_path.read_text().split("health_check:")[1].split("endpoint: ")[1].split()[0]
        with urllib.request.urlopen(f"http://{health}/", timeout=10) as r:
            assert r.status == 200
        for collector in (gateway, agent):
            assert collector.proc.poll() is None, collector.log.read_text()[-3000:]
    finally:
        agent.stop()
        gateway.stop()
    for collector in (gateway, agent):
        assert collector.proc.returncode == 0, collector.log.read_text()[-3000:]  # a clean shutdown


def test_validate_names_a_typo_in_a_component(stack, tmp_path):
    """The check above can fail: a misspelt exporter is refused by the same command."""
    config = (stack / "otel-collector-node.yaml").read_text().replace("exporters: [otlp_grpc/gateway]",
                                                                        "exporters: [otlp_grpc/gatway]")
    path = tmp_path / "typo.yaml"
    path.write_text(config.replace("127.0.0.1:4317", f"127.0.0.1:{free_port()}")
                    .replace("127.0.0.1:4318", f"127.0.0.1:{free_port()}"))
    result = subprocess.run([binaries()["otelcol"], "validate", "--config", str(path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0
    assert "otlp_grpc/gatway" in result.stdout + result.stderr
