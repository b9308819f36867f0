"""A real Prometheus server for tests: Debian's ``/usr/bin/prometheus`` on a free loopback port, with a
generated config (scrape interval 1 s) and ``--enable-feature=exemplar-storage``.

Use ``prometheus_server(scrape_configs)`` as a context manager; it yields a :class:`Prometheus` whose
``query`` / ``query_exemplars`` call the HTTP API. Tests skip (with the reason) when the binary is
missing; ``scripts/test.sh`` installs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any, Iterator
from ports import free_port  # noqa: F401  (also for the modules importing it from here)

PROMETHEUS = os.environ.get("OTEL_PROFILER_TEST_PROMETHEUS", "/usr/bin/prometheus")


def available() -> bool:
    return os.path.isfile(PROMETHEUS) and os.access(PROMETHEUS, os.X_OK)


class Prometheus:
    def __init__(self, url: str, proc: subprocess.Popen, log_path: str) -> None:
        self.url, self.proc, self.log_path = url, proc, log_path

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """Instant vector: [{"metric": {...}, "value": [t, "v"]}]."""
        return self.api("/api/v1/query", query=expr)["result"]

    def query_exemplars(self, expr: str, start: float, end: float) -> list[dict]:
        return self.api("/api/v1/query_exemplars", query=expr, start=start, end=end)

    def targets(self) -> list[dict]:
        return self.api("/api/v1/targets")["activeTargets"]

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]


@contextlib.contextmanager
def prometheus_server(scrape_configs: list[dict]) -> Iterator[Prometheus]:
    """Start Prometheus scraping ``scrape_configs`` (Prometheus YAML as dicts; JSON is valid YAML)."""
    folder = tempfile.mkdtemp(prefix="otel-profiler-prom-")
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
              "scrape_configs": scrape_configs}
    config_path = os.path.join(folder, "prometheus.yml")
    with open(config_path, "w") as f:
        json.dump(config, f)
    port = free_port()
    log_path = os.path.join(folder, "prometheus.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config_path}", f"--storage.tsdb.path={folder}/data",
         f"--web.listen-address=127.0.0.1:{port}", "--enable-feature=exemplar-storage",
         "--storage.tsdb.retention.time=1h", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus did not start:\n{server.log()}")
            time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
