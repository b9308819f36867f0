"""Real trace backends for tests: the Jaeger v2 and OpenTelemetry Collector binaries that
``scripts/backends.sh`` builds, run as processes on free 127.0.0.1 ports.

- :func:`binaries`: their paths, from ``TEST_JAEGER_BINARY`` / ``TEST_OTELCOL_BINARY`` (set by
  ``scripts/test.sh``) or ``scripts/backends.sh --check``; the test skips, naming the script, when they
  are not built (in CI a skip of the ``backends`` group fails).
- :class:`Jaeger`: an in-memory Jaeger with its OTLP receiver and query API (``/api/services``,
  ``/api/traces``), restartable on the same ports (a restart starts with an empty store).
- :func:`stack_config`: a shipped Collector config (``otel-profiler stack --output``) with only its
  listening addresses and its backends' hosts and ports replaced; :class:`Collector` validates and runs
  it. Every process is ended by :meth:`stop` (tests call it in ``finally`` blocks or fixtures).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from ports import free_port

REPO = Path(__file__).resolve().parent.parent
DEADLINE_S = 120  # every poll gives a busy machine this long
ADDRESS = re.compile(r"(?:https?://)?[A-Za-z0-9_.\-]+:\d+(?:/.*)?")


def binaries() -> dict[str, str]:
    """``{"jaeger": path, "otelcol": path}``; skips the test when they are not built."""
    paths = {"jaeger": os.environ.get("TEST_JAEGER_BINARY", ""),
             "otelcol": os.environ.get("TEST_OTELCOL_BINARY", "")}
    if not all(paths.values()):
        out = subprocess.run(["bash", str(REPO / "scripts" / "backends.sh"), "--check"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            pytest.skip(out.stderr.strip() or "scripts/backends.sh --check failed")
        paths = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    for name, path in paths.items():
        if not os.access(path, os.X_OK):
            pytest.skip(f"{name} binary {path!r} is not executable (run bash scripts/backends.sh)")
    return paths


def poll(condition, what: str, deadline_s: float = DEADLINE_S, proc: subprocess.Popen | None = None,
         log: Path | None = None):
    """Call ``condition`` until it returns something true; fail naming ``what`` at the deadline or
    when ``proc`` ends first (with the end of ``log``)."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end or (proc is not None and proc.poll() is not None):
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            pytest.fail(f"never saw {what}" + (f"; log:\n{tail}" if tail else ""))
        time.sleep(0.3)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Service:
    """A backend process in its own session, its output in ``log``; :meth:`stop` ends it."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args, self.log, self.env = args, log, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(self.env or {})}, start_new_session=True)

    def stop(self, kill: bool = False) -> None:
        """SIGTERM (a clean shutdown) or SIGKILL (a crash); always reaped."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Jaeger(Service):
    """Jaeger v2 (``cmd/jaeger``) with in-memory storage: OTLP in, query API out."""

    def __init__(self, folder: Path, name: str = "jaeger") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.otlp_grpc_port, self.otlp_http_port = free_port(), free_port()
        self.query_port, query_grpc = free_port(), free_port()
        config = {
            "service": {"extensions": ["jaeger_storage", "jaeger_query"],
                        "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["jaeger_storage_exporter"]}},
                        "telemetry": {"metrics": {"level": "none"}}},
            "extensions": {
                "jaeger_query": {"storage": {"traces": "memstore"}, "enable_tracing": False,
                                 "http": {"endpoint": f"127.0.0.1:{self.query_port}"},
                                 "grpc": {"endpoint": f"127.0.0.1:{query_grpc}"}},
                "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}}},
            "receivers": {"otlp": {"protocols": {
                "grpc": {"endpoint": f"127.0.0.1:{self.otlp_grpc_port}"},
                "http": {"endpoint": f"127.0.0.1:{self.otlp_http_port}"}}}},
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
        }
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        super().__init__([binaries()["jaeger"], "--config", str(path)], folder / f"{name}.log")
        self.url = f"http://127.0.0.1:{self.query_port}"

    @property
    def otlp_grpc(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc_port}"

    def start(self) -> "Jaeger":
        super().start()
        poll(lambda: self._get("/api/services") is not None and _port_open(self.otlp_grpc_port),
             "Jaeger's query API and OTLP port", proc=self.proc, log=self.log)
        return self

    def _get(self, path: str, **params: Any) -> Any:
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return {"data": []}
            return None
        except OSError:
            return None

    def services(self) -> list[str]:
        return (self._get("/api/services") or {}).get("data") or []

    def traces(self, service: str, tags: dict[str, str] | None = None, **params: Any) -> list[dict]:
        """Jaeger's trace search (the UI's): every trace of ``service`` matching, whenever it ran (trace
        files keep their own times)."""
        params = {"service": service, "limit": 100000, "start": 1, "end": int(time.time() * 1e6) + 60_000_000,
                  **params}
        if tags:
            params["tags"] = json.dumps(tags)
        return (self._get("/api/traces", **params) or {}).get("data") or []

    def trace(self, trace_id: str) -> dict | None:
        data = (self._get(f"/api/traces/{trace_id}") or {}).get("data") or []
        return data[0] if data else None

    def span_ids(self, service: str) -> dict[str, set[str]]:
        """Trace id -> the ids of its spans, for every trace of ``service``."""
        return {t["traceID"]: {s["spanID"] for s in t["spans"]} for t in self.traces(service)}


def stack_config(folder: Path, name: str, addresses: dict[tuple[str, ...], str]) -> dict:
    """The Collector config ``name`` as ``otel-profiler stack --output folder`` wrote it, with the
    values at ``addresses`` (key paths) replaced. Only addresses may change: each old value must be a
    ``host:port`` (or URL), and no listening address of the original may be left unreplaced."""
    config = yaml.safe_load((folder / name).read_text())
    for path, new in addresses.items():
        node = config
        for key in path[:-1]:
            node = node[key]
        old = node[path[-1]]
        assert isinstance(old, (str, int)) and (isinstance(old, int) or ADDRESS.fullmatch(old) or
                                                old in ("0.0.0.0",)), f"{name}: {path} is not an address: {old!r}"
        node[path[-1]] = new
    left = [v for v in _strings(config) if v.startswith("0.0.0.0:") or re.fullmatch(r"127\.0\.0\.1:43\d\d", v)]
    assert not left, f"{name}: listening addresses not replaced: {left}"
    return config


def _strings(node: Any):
    if isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


class Collector(Service):
    """The built Collector running a config (a dict, written as YAML into ``folder``)."""

    def __init__(self, folder: Path, name: str, config: dict, ready_port: int,
                 env: dict[str, str] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.config_path = folder / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.ready_port = ready_port
        self.storage = folder / f"{name}-queue"
        env = {"OTEL_FILE_STORAGE_DIR": str(self.storage), **(env or {})}
        super().__init__([binaries()["otelcol"], "--config", str(self.config_path)], folder / f"{name}.log", env)

    def validate(self) -> subprocess.CompletedProcess:
        return subprocess.run([self.args[0], "validate", "--config", str(self.config_path)],
                              env={**os.environ, **(self.env or {})}, capture_output=True, text=True,
                              timeout=DEADLINE_S)

    def start(self) -> "Collector":
        super().start()
        poll(lambda: _port_open(self.ready_port), f"the Collector {self.config_path.name} listening",
             proc=self.proc, log=self.log)
        return self


def write_stack(folder: Path) -> Path:
    """``otel-profiler stack --output folder``, as a user runs it."""
    from otel_profiler.cli import main

    assert main(["stack", "--output", str(folder)]) == 0
    return folder


class Gateway(Collector):
    """``otel-collector.yaml`` on free ports: shared traces to ``jaeger`` (host:port), each tenant's to
    ``tenants[name]`` (default: a closed port), metrics on :attr:`prometheus_port`."""

    TENANTS = ("vision", "nlp")

    def __init__(self, folder: Path, stack: Path, jaeger: str, tenants: dict[str, str] | None = None) -> None:
        p = {k: free_port() for k in ("grpc", "http", "health", "prometheus", "telemetry", "closed")}
        closed = f"127.0.0.1:{p['closed']}"
        self.grpc_port, self.http_port, self.prometheus_port = p["grpc"], p["http"], p["prometheus"]
        self.tenant_ports: dict[str, dict[str, int]] = {}
        reader = ("service", "telemetry", "metrics", "readers", 0, "pull", "exporter", "prometheus")
        addresses: dict[tuple, Any] = {
            ("extensions", "health_check", "endpoint"): f"127.0.0.1:{p['health']}",
            ("receivers", "otlp", "protocols", "grpc", "endpoint"): f"127.0.0.1:{p['grpc']}",
            ("receivers", "otlp", "protocols", "http", "endpoint"): f"127.0.0.1:{p['http']}",
            ("exporters", "otlp_grpc/jaeger", "endpoint"): jaeger,
            ("exporters", "prometheus", "endpoint"): f"127.0.0.1:{p['prometheus']}",
            reader + ("host",): "127.0.0.1", reader + ("port",): p["telemetry"]}
        for tenant in self.TENANTS:
            ports = self.tenant_ports[tenant] = {"grpc": free_port(), "http": free_port()}
            for protocol, port in ports.items():
                addresses[("receivers", f"otlp/{tenant}", "protocols", protocol, "endpoint")] = f"127.0.0.1:{port}"
            addresses[("exporters", f"otlp_grpc/tempo-{tenant}", "endpoint")] = (tenants or {}).get(tenant, closed)
            addresses[("exporters", f"prometheus_remote_write/mimir-{tenant}", "endpoint")] = \
                f"http://{closed}/api/v1/push"
        config = stack_config(stack, "otel-collector.yaml", addresses)
        super().__init__(folder, "gateway", config, ready_port=p["http"])
        self.telemetry_port = p["telemetry"]

    def accepted_spans(self) -> int:
        """Spans the gateway's receivers have acknowledged since it started (its own metrics)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.telemetry_port}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:
            return 0
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                   if line.startswith("otelcol_receiver_accepted_spans"))

    @property
    def otlp_grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def endpoint(self, tenant: str = "", protocol: str = "http") -> str:
        """The OTLP URL a job sends to: the shared ports, or a tenant's."""
        port = self.tenant_ports[tenant][protocol] if tenant else \
            (self.grpc_port if protocol == "grpc" else self.http_port)
        return f"http://127.0.0.1:{port}"


class NodeAgent(Collector):
    """``otel-collector-node.yaml`` on free ports, forwarding to ``gateway`` (host:port)."""

    def __init__(self, folder: Path, stack: Path, gateway: str, tenant: str = "") -> None:
        self.grpc_port, self.http_port = free_port(), free_port()
        config = stack_config(stack, "otel-collector-node.yaml", {
            ("receivers", "otlp", "protocols", "grpc", "endpoint"): f"127.0.0.1:{self.grpc_port}",
            ("receivers", "otlp", "protocols", "http", "endpoint"): f"127.0.0.1:{self.http_port}"})
        # The shipped file leaves the agent's own metrics at the Collector's default, localhost:8888:
        # two agents at once (tests in two workers) would both bind it. One address more, a free port.
        assert "telemetry" not in config["service"], "the node agent's telemetry: replace its port instead"
        config["service"]["telemetry"] = {"metrics": {"readers": [{"pull": {"exporter": {"prometheus": {
            "host": "127.0.0.1", "port": free_port()}}}}]}}
        super().__init__(folder, "node-agent", config, ready_port=self.http_port,
                         env={"OTEL_GATEWAY_ENDPOINT": gateway, "OTEL_GATEWAY_TENANT": tenant})

    def endpoint(self, protocol: str = "http") -> str:
        return f"http://127.0.0.1:{self.http_port if protocol != 'grpc' else self.grpc_port}"


def exported(inputs: list[Path], out: Path, run_id: str) -> list:
    """The OTLP requests ``otel-profiler export INPUT... --output out`` makes of profile folders or
    traces with ``run_id`` (what a profile says was sent, after the span budget)."""
    from fault_kit import pb_requests

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_PROFILER_RUN_ID"] = run_id
    done = subprocess.run([sys.executable, "-m", "otel_profiler", "export", *map(str, inputs), "--output", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(pb_requests(out))


def spans_by_trace(requests) -> dict[str, set[str]]:
    """Trace id -> span ids (hex, as Jaeger writes them) of some ``ExportTraceServiceRequest``."""
    out: dict[str, set[str]] = {}
    for r in requests:
        for rs in r.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.setdefault(s.trace_id.hex(), set()).add(s.span_id.hex())
    return out


def roots(requests) -> dict[str, dict[str, str]]:
    """Trace id -> its root span's name (``"name"``) and string attributes."""
    out: dict[str, dict[str, str]] = {}
    for r in requests:
        for rs in r.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    if not s.parent_span_id:
                        out[s.trace_id.hex()] = {"name": s.name, **{a.key: a.value.string_value for a in s.attributes
                                                                   if a.value.HasField("string_value")}}
    return out


def step_traces(requests) -> set[str]:
    """The ids of the step traces (root span ``train.step``)."""
    return {t for t, root in roots(requests).items() if root["name"] == "train.step"}


def job_environment(folder: Path, endpoint: str, run_id: str, service: str, **extra: str) -> dict:
    """A zero-code job's settings: OTLP to ``endpoint`` with default export settings; the profile is
    written once, at the end (the default flush interval outlasts these jobs)."""
    from fault_kit import job_env, otlp_env

    env = job_env(folder / "prof", **otlp_env(endpoint, "http/protobuf", folder / "spool"),
                  OTEL_SERVICE_NAME=service, OTEL_PROFILER_RUN_ID=run_id)
    env.pop("OTEL_PROFILER_FLUSH_INTERVAL_S")
    env.update(extra)
    return env


def wait_for_traces(jaeger: Jaeger, service: str, expected: dict[str, set[str]]) -> dict[str, set[str]]:
    """Poll Jaeger until every expected span of ``service`` has arrived; returns what it holds."""
    def arrived():
        got = jaeger.span_ids(service)
        return got if all(got.get(t, set()) >= spans for t, spans in expected.items()) else None

    return poll(arrived, f"every span of {service} in Jaeger", log=jaeger.log)


def replay_spool(folder: Path, env: dict[str, str]) -> int:
    """What a job could not hand over within its close timeout (a busy machine) waits in its spool
    (``folder/spool``): send it with ``otel-profiler replay`` and the job's OTLP settings (``env``:
    endpoint, protocol, headers), as the job's warning says. Returns the number of spans replayed."""
    from fault_kit import pb_requests, span_ids

    spool = folder / "spool"
    spooled = len(span_ids(pb_requests(spool)))
    if spooled:
        env = {k: v for k, v in env.items() if k not in ("OTEL_PROFILER_ENABLED", "PYTHONPATH")}  # not profiled
        done = subprocess.run([sys.executable, "-m", "otel_profiler", "replay", str(spool)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert not list(spool.glob("*.pb"))
    return spooled
