"""A small CPU training job for the fault-injection tests and ``benchmarks/delivery.py``.

Profiled without code changes (the caller sets ``OTEL_PROFILER_ENABLED`` and the bootstrap on
``PYTHONPATH``) or, with ``--api-misuse``, through ``otel_profiler.Profiler`` called wrongly on purpose.
Steps come from the optimizer-step hook; ``forward``/``backward`` are annotations. Options add the
stress a fault test needs: threads annotating concurrently, fork-heavy work (a ``multiprocessing``
pool per few steps, DataLoader workers), an annotation left open at exit. ``--stats FILE`` writes the
median step time (warm-up excluded) and per-thread annotation counts as JSON.

    python tests/fault_job.py [--steps N (0: forever)] [--ready K] [--threads T] [--pool P]
                              [--loader-workers W] [--leave-open] [--kill-exporter-at K]
                              [--api-misuse DIR] [--stats FILE] [--exit-code N] [--until FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time

import torch
from torch import nn

from otel_profiler import Profiler, annotate, annotation_begin


def _square(x: int) -> int:
    return x * x


def _batches(width: int, workers: int):
    """Endless (input, target) batches, from a DataLoader with worker processes when asked."""
    x, y = torch.randn(1024, width), torch.randn(1024, 1)
    if not workers:
        while True:
            yield x[:64], y[:64]
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(x, y), batch_size=64, num_workers=workers)
    while True:
        yield from loader


def _annotating_thread(index: int, stop: threading.Event, counts: dict[str, int]) -> None:
    name, n = f"thread-{index}", 0
    while not stop.is_set():
        with annotate(name, i=n):
            sum(range(200))
        n += 1
        time.sleep(0.0005)
    counts[name] = n


def _kill_exporter() -> None:
    """SIGKILL the span exporter process (a ``multiprocessing`` child of this one)."""
    import signal

    victims = [p for p in mp.active_children() if p.name == "otel-profiler-exporter"]
    assert victims, "no exporter process to kill"
    for p in victims:
        os.kill(p.pid, signal.SIGKILL)
        p.join(5)
    print("killed exporter", flush=True)


def train(args: argparse.Namespace) -> list[float]:
    """The loop; returns step times in seconds."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = _batches(args.width, args.loader_workers)
    times: list[float] = []
    i = 0
    while args.steps == 0 or i < args.steps:
        t = time.perf_counter()
        inputs, targets = next(data)
        with annotate("forward", step=i):
            loss = (model(inputs) - targets).pow(2).mean()
        with annotate("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        optimizer.step()
        if args.pool and i % 5 == 0:
            with mp.get_context("fork").Pool(args.pool) as pool:
                assert pool.map(_square, range(8)) == [x * x for x in range(8)]
        if args.step_sleep:
            time.sleep(args.step_sleep)
        times.append(time.perf_counter() - t)
        i += 1
        if i == args.ready:
            print("ready", flush=True)
        if i == args.kill_exporter_at:
            _kill_exporter()
        if args.until and os.path.exists(args.until):
            break
    return times


def api_misuse(folder: str) -> dict:
    """stop() before start(), start() twice, stop() twice: none may raise; one folder results."""
    profiler = Profiler(profile_dir=folder, summary_at_exit=False, signal=False)
    before = profiler.stop()
    profiler.start()
    profiler.start()
    with annotate("misuse"):
        pass
    first, second = profiler.stop(), profiler.stop()
    return {"stop_before_start": before, "first_stop": first, "second_stop": second}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="0: run until killed")
    ap.add_argument("--ready", type=int, default=0, help='print "ready" after this many steps')
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="threads annotating concurrently")
    ap.add_argument("--pool", type=int, default=0, help="fork a Pool of this size every 5 steps")
    ap.add_argument("--loader-workers", type=int, default=0)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--kill-exporter-at", type=int, default=-1, help="SIGKILL the exporter after this step")
    ap.add_argument("--leave-open", action="store_true", help="leave an annotation open at exit")
    ap.add_argument("--api-misuse", metavar="DIR")
    ap.add_argument("--stats", metavar="FILE")
    ap.add_argument("--exit-code", type=int, default=0, help="end with this exit status")
    ap.add_argument("--until", metavar="FILE", help="with --steps 0: stop once FILE exists")
    args = ap.parse_args()
    if args.api_misuse:
        print(json.dumps(api_misuse(args.api_misuse)))
        return
    stop, counts = threading.Event(), {}
    threads = [threading.Thread(target=_annotating_thread, args=(k, stop, counts)) for k in range(args.threads)]
    for t in threads:
        t.start()
    times = train(args)
    stop.set()
    for t in threads:
        t.join()
    if args.leave_open:
        annotation_begin("left-open")
        threading.Thread(target=lambda: annotate("open-in-daemon").__enter__() and time.sleep(3600),
                         daemon=True).start()
    warm = times[len(times) // 10:] or times
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump({"median_step_s": statistics.median(warm), "steps": len(times), "threads": counts}, f)
    sys.stdout.flush()
    if args.exit_code:
        sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
