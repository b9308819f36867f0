"""A small profiled CPU training job for the metrics integration test (run as a subprocess).

``python tests/metrics_job.py OUT_DIR SECONDS``: trains a tiny MLP with torch on CPU for about
SECONDS, records each step as the session does (``markers``), and every 0.3 s drains the steps
into an EventBatch that goes to ``MetricsService.observe_batch`` (the session's flush path) and is
saved under OUT_DIR (so the test can build the spans of the very same batches). Metrics settings
come from the environment (``OTEL_PROFILER_PROMETHEUS_PORT``, ``OTEL_PROFILER_RUN_ID``, ...). It
writes OUT_DIR/ready (the endpoint URL) once serving and OUT_DIR/done after training, then keeps
serving until OUT_DIR/stop appears.
"""

from __future__ import annotations

import os
import sys
import time
from time import perf_counter_ns

import torch

from otel_profiler import config, markers
from otel_profiler.metrics import MetricsService
from otel_profiler.resource import attributes


def main(out: str, seconds: float) -> None:
    settings = config.load()
    run_id = settings["OTEL_PROFILER_RUN_ID"]
    service = MetricsService().start(settings, attributes(settings.values), run_id=run_id)
    with open(os.path.join(out, "ready"), "w") as f:
        f.write(service.url or "")
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
            flush(service, meta, out, part)
            part, last_flush = part + 1, time.monotonic()
    flush(service, meta, out, part)
    open(os.path.join(out, "done"), "w").close()
    while not os.path.exists(os.path.join(out, "stop")):
        time.sleep(0.05)
    service.close()


def flush(service: MetricsService, meta: dict, out: str, part: int) -> None:
    batch = markers.drain(meta["rank"])
    if len(batch):
        service.observe_batch(batch, meta)
        batch.save(os.path.join(out, f"part-{part:04d}.batch.zip"))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
