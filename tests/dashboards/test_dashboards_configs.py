"""The deployment files under otel_profiler/stack/: they parse, reference only the ports and host names the
docs/stack.md documents, wire together (Collector pipelines, Grafana provisioning, compose mounts), give
every target the labels the dashboards filter on, and Prometheus accepts its config."""

from __future__ import annotations

import copy
import json
import re
import sys
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # dashboards/ is a folder of the repository, not an installed package

from dashboards import promql, variables
from otel_profiler.live.resource import attributes

D = REPO / "otel_profiler" / "stack"
YAML_FILES = ["docker-compose.yml", "prometheus.yml", "otel-collector.yaml", "otel-collector-node.yaml",
              "provisioning/datasources/datasources.yaml", "provisioning/dashboards/dashboards.yaml",
              "provisioning/tenants/datasources-tempo-tenants.yaml"]
COMPOSE_SERVICES = {"grafana", "prometheus", "jaeger", "otel-collector"}


def load(name: str) -> dict:
    """A YAML file under otel_profiler/stack/."""
    return yaml.safe_load((D / name).read_text())


def readme_section(title: str) -> str:
    """The text of docs/stack.md from ``## title`` to the next section."""
    text = (REPO / "docs" / "stack.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def documented_ports() -> set[int]:
    """The ports of the ports table in docs/stack.md."""
    section = readme_section("See it in Grafana and Jaeger")
    return {int(p) for p in re.findall(r"^\| (\d+) \|", section, re.M)}


def test_every_file_parses():
    for name in YAML_FILES:
        assert isinstance(load(name), dict), name
    for path in (D / "grafana").glob("*.json"):
        json.loads(path.read_text())


def test_configs_use_only_documented_ports_and_host_names():
    ports, hosts = documented_ports(), set()
    section = readme_section("See it in Grafana and Jaeger")
    assert {3000, 9090, 16686, 4317, 4318, 8889, 9464} <= ports
    for name in YAML_FILES:
        text = "\n".join(line.split("#")[0] for line in (D / name).read_text().splitlines())
        pairs = re.findall(r"([A-Za-z0-9_.][A-Za-z0-9_.\-]*):(\d{4,5})\b", text)
        pairs += [("", port) for port in re.findall(r"\bport: (\d+)", text)]
        assert pairs or name.startswith("provisioning/dashboards"), name
        for host, port in pairs:
            assert int(port) in ports, f"{name}: port {port} is not in the ports table of docs/stack.md"
            hosts.add(host)
    for host in {h for h in hosts if re.search("[a-z]", h)}:
        assert f"`{host}`" in section, f"host name {host} is not documented in docs/stack.md"
    compose = load("docker-compose.yml")
    for service in compose["services"].values():
        for mapping in service.get("ports", []):
            host_port, container_port = map(int, mapping.split(":"))
            assert host_port == container_port and host_port in ports


def test_compose_starts_the_four_services_with_files_that_exist():
    compose = load("docker-compose.yml")
    assert set(compose["services"]) == COMPOSE_SERVICES
    for service in compose["services"].values():
        assert ":" in service["image"] and not service["image"].endswith(":latest")
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (D / source).exists(), f"compose mounts missing {source}"
        for dependency in service.get("depends_on", []):
            assert dependency in compose["services"]
    grafana = compose["services"]["grafana"]
    provider = load("provisioning/dashboards/dashboards.yaml")["providers"][0]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounts[provider["options"]["path"]] == "./grafana"
    assert provider["folderUid"] and provider["folder"] and provider["disableDeletion"]
    assert "--enable-feature=exemplar-storage" in compose["services"]["prometheus"]["command"]


def test_grafana_data_sources_match_the_dashboards_and_link_exemplars_to_traces():
    sources = {s["uid"]: s for s in load("provisioning/datasources/datasources.yaml")["datasources"]}
    for plugin in ("prometheus", "jaeger"):
        uid = variables.DEFAULT_UIDS[plugin]
        assert sources[uid]["type"] == plugin
    (destination,) = sources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destination["name"] == "trace_id" and destination["datasourceUid"] in sources
    tenants = load("provisioning/tenants/datasources-tempo-tenants.yaml")["datasources"]
    for source in tenants:
        assert source["jsonData"]["httpHeaderName1"] == "X-Scope-OrgID" and source["secureJsonData"]["httpHeaderValue1"]


def _components(config: dict, kind: str) -> set[str]:
    return set(config.get(kind) or {})


@pytest.mark.parametrize("name", ["otel-collector.yaml", "otel-collector-node.yaml"])
def test_collector_pipelines_reference_defined_components(name):
    config = load(name)
    connectors = _components(config, "connectors")
    pipelines = config["service"]["pipelines"]
    for pipeline, spec in pipelines.items():
        assert pipeline.split("/")[0] in {"traces", "metrics", "logs"}
        assert set(spec["receivers"]) <= _components(config, "receivers") | connectors, pipeline
        assert set(spec.get("processors", [])) <= _components(config, "processors"), pipeline
        assert set(spec["exporters"]) <= _components(config, "exporters") | connectors, pipeline
    for connector, spec in (config.get("connectors") or {}).items():
        routes = set(spec["default_pipelines"]) | {p for row in spec["table"] for p in row["pipelines"]}
        assert routes <= set(pipelines)
        assert any(connector in p["exporters"] for p in pipelines.values())
        assert all(connector in pipelines[r]["receivers"] for r in routes)
    for exporter in (config.get("exporters") or {}).values():
        authenticator = (exporter.get("auth") or {}).get("authenticator")
        if authenticator:
            assert authenticator in config["service"]["extensions"]
    for protocol in config["receivers"]["otlp"]["protocols"].values():
        authenticator = (protocol.get("auth") or {}).get("authenticator")
        assert authenticator is None or authenticator in config["service"]["extensions"]


def test_collector_keeps_tenants_apart_by_x_scope_orgid_and_keeps_resource_labels():
    config = load("otel-collector.yaml")
    tenants = [name.split("/")[1] for name in config["receivers"] if name.startswith("otlp/")]
    assert tenants
    for tenant in tenants:
        check = config["extensions"][f"bearertokenauth/{tenant}"]
        assert check == {"header": "X-Scope-OrgID", "scheme": "", "token": tenant}
        for protocol in config["receivers"][f"otlp/{tenant}"]["protocols"].values():
            assert protocol["auth"]["authenticator"] == f"bearertokenauth/{tenant}"
        pipelines = [p for p in config["service"]["pipelines"].values() if f"otlp/{tenant}" in p["receivers"]]
        assert len(pipelines) == 2
        for pipeline in pipelines:
            assert pipeline["receivers"] == [f"otlp/{tenant}"]
            for exporter in pipeline["exporters"]:
                assert config["exporters"][exporter]["headers"] == {"X-Scope-OrgID": tenant}
    prom = config["exporters"]["prometheus"]
    assert prom["resource_to_telemetry_conversion"]["enabled"] and prom["enable_open_metrics"]


def test_every_scrape_job_gives_the_labels_the_dashboards_filter_on():
    jobs = {j["job_name"]: j for j in load("prometheus.yml")["scrape_configs"]}
    wanted = set(promql.TARGET_FILTERS.values()) - {"job"}
    assert set(jobs["otel-profiler"]["static_configs"][0]["labels"]) >= wanted
    relabeled = {r["target_label"] for r in jobs["otel-profiler-pods"]["relabel_configs"] if "target_label" in r}
    assert relabeled >= wanted | {"job"}
    assert jobs["otel-collector"]["honor_labels"] is True  # resource labels as the Collector sent them


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool missing (apt-get install prometheus)")
def test_promtool_accepts_the_prometheus_config(tmp_path):
    config = copy.deepcopy(load("prometheus.yml"))
    # Debian's Prometheus is built without Kubernetes discovery: check that job as a static one.
    for job in config["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["static_configs"] = [{"targets": ["pod:9464"]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_profiles_carry_user_and_team():
    env = {"USER": "alice"}
    from otel_profiler.config import load

    a = attributes(load({"OTEL_RESOURCE_ATTRIBUTES": "ml.team=vision"}), env)
    assert (a["enduser.id"], a["ml.team"]) == ("alice", "vision")
    b = attributes(load({"OTEL_RESOURCE_ATTRIBUTES": "enduser.id=bob"}), {"USER": "alice", "LOGNAME": "x"})
    assert b["enduser.id"] == "bob" and "ml.team" not in b
    assert "enduser.id" not in attributes(load({}), {})
