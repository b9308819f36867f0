"""A small profiled CPU training job for the metrics integration test (run as a subprocess).

``python tests/metrics_job.py OUT_DIR SECONDS``: trains a tiny MLP with torch on CPU for about
SECONDS, records each step as the session does (``markers``), and every 0.3 s drains the steps
into an EventBatch that goes to ``MetricsService.observe_batch`` (the session's flush path) and is
saved under OUT_DIR (so the test can build the spans of the very same batches) and handed to an
exporter process writing OUT_DIR/spans.jsonl (so the exporter's health series exist). Metrics settings
come from the environment (``OTEL_PROFILER_PROMETHEUS_PORT``, ``OTEL_PROFILER_RUN_ID``, ...). It
writes OUT_DIR/ready (the endpoint URL) once serving and OUT_DIR/done after training, then keeps
serving until OUT_DIR/stop appears. Started with ``gate=True`` it waits for OUT_DIR/go before
training, so that a test can let Prometheus scrape the untrained job first; OUT_DIR/done holds the
number of steps trained.

Tests start it with :func:`running` and wait for its marker files with :func:`wait_for`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from time import perf_counter_ns
from typing import Iterator

from otel_profiler import config
from otel_profiler.live.steps import markers
from otel_profiler.export.exporter import exporter_from_settings
from otel_profiler.metrics.publisher import MetricsService
from otel_profiler.live.resource import attributes

REPO = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def running(out: Path, port: int, seconds: float, run_id: str, gate: bool = False) -> Iterator[subprocess.Popen]:
    """This job in a subprocess (rank 0, /metrics on ``port``, samples every 0.5 s, no OTLP), training
    for ``seconds`` (after OUT/go appears when ``gate``); on exit it is told to stop (OUT/stop) and
    waited for."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}",
           "OTEL_PROFILER_PROMETHEUS_PORT": str(port), "OTEL_PROFILER_RUN_ID": run_id,
           "OTEL_PROFILER_METRICS_INTERVAL_S": "0.5", "LOCAL_RANK": "0",
           "OTEL_PROFILER_OTLP_FILE": str(Path(out) / "spans.jsonl")}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if gate:
        env["METRICS_JOB_GATE"] = "1"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(out), str(seconds)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        (Path(out) / "stop").touch()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until the job writes ``path``; fail if it exits first or the timeout passes."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"job exited early: {proc.stdout.read()}")
        assert time.monotonic() < deadline, f"timed out waiting for {path.name}"
        time.sleep(0.05)


def main(out: str, seconds: float) -> None:
    import torch  # here, so that tests importing running() and wait_for() do not load torch

    settings = config.load()
    run_id = settings.run_id
    service = MetricsService().start(settings, attributes(settings), run_id=run_id)
    exporter = exporter_from_settings(settings, default_service="metrics_job")
    if exporter is not None:
        service.attach_exporter(exporter)
    _write_marker(os.path.join(out, "ready"), service.url or "")
    while os.environ.get("METRICS_JOB_GATE") and not os.path.exists(os.path.join(out, "go")):
        time.sleep(0.05)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))
    meta = {"rank": 0, "run_id": run_id, "source": "metrics_job"}
    end, last_flush, step, part = time.monotonic() + seconds, time.monotonic(), 0, 0
    while time.monotonic() < end:
        start = perf_counter_ns()
        for _ in range(3 if step % 7 else 30):  # every 7th step is slow
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        markers.local.events.append((markers.STEP, f"ProfilerStep#{step}", start, perf_counter_ns(), step))
        step += 1
        if time.monotonic() - last_flush > 0.3:
            flush(service, exporter, meta, out, part)
            part, last_flush = part + 1, time.monotonic()
    flush(service, exporter, meta, out, part)
    _write_marker(os.path.join(out, "done"), str(step))
    while not os.path.exists(os.path.join(out, "stop")):
        time.sleep(0.05)
    if exporter is not None:
        exporter.close(10)
    service.close()


def _write_marker(path: str, text: str) -> None:
    """``path`` holding ``text``, appearing whole (written aside, then renamed): a test reads it as
    soon as it exists."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def flush(service: MetricsService, exporter, meta: dict, out: str, part: int) -> None:
    batch = markers.drain(meta["rank"])
    if len(batch):
        service.observe_batch(batch, meta)
        batch.save(os.path.join(out, f"part-{part:04d}.batch.zip"))
        if exporter is not None:
            exporter.submit(meta, batch)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
