"""The exporter -> Collector -> Jaeger chain, hop by hop, with the real OpenTelemetry Collector and
Jaeger v2 binaries (``scripts/backends.sh`` builds them; ``tests/real_backends.py`` starts them).

``otel-profiler export TRACE --endpoint ... --protocol grpc`` of ``large_trace.py``'s trace, as a
user runs it (a fresh process, interpreter start to exit), sends into each of, side by side:

- ``receiver``: a local OTLP gRPC receiver in this process that only counts spans;
- ``collector``: the shipped node-agent config (``otel-collector-node.yaml``, only its addresses
  replaced and its own metrics served on a free port), forwarding to a counting receiver;
- ``collector+jaeger``: the same node agent forwarding to Jaeger (in-memory store);
- ``jaeger``: Jaeger's OTLP receiver directly.

Per hop: spans sent (the exporter's closing line), the time until the end of the chain holds
them all (the counting receiver; the Collector's ``otelcol_exporter_sent_spans`` for the chain
into Jaeger; the exporter's exit for Jaeger alone), spans per second over that time, and the CPU
seconds of each process over it (the exporter's tree, this process with its receiver, the
Collector, Jaeger; ``psutil`` / ``getrusage``). Loss: the distinct (trace, span) ids of the first
``receiver`` run that did not reach the end (Jaeger is counted through its query API, polled until
the count stops growing, after the CPU readings; it restarts empty after each run). Medians of
``--repeat`` interleaved runs.

    python benchmarks/chain_rate.py [--events 1000000] [--repeat 3] [--span-budget 1000000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack, redirect_stdout
from pathlib import Path
from typing import Any, Callable

import msgspec
import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from large_import import LAST_WAIT, run_measured  # noqa: E402
from large_trace import large_trace  # noqa: E402
from otlp_receiver import Collected, OtlpReceiver  # noqa: E402
from ports import free_port  # noqa: E402
from real_backends import Jaeger, NodeAgent, Service, write_stack  # noqa: E402

HOPS = ("receiver", "collector", "collector+jaeger", "jaeger")
SERVICE = "chain-rate"
END_DEADLINE_S = 300.0  # the longest wait for the end of the chain after the exporter exits
SENT = re.compile(r"exported (\d+) spans .*?; (\d+) delivered")
Ids = set[tuple[bytes, bytes]]


class Counted(Collected):
    """Counts spans and keeps their (trace, span) ids, not the requests."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.ids: Ids = set()

    def add(self, request: Any, headers: dict[str, str]) -> None:
        ids = [(s.trace_id, s.span_id) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        with self._lock:
            self.count += len(ids)
            self.ids.update(ids)


def counting_receiver() -> OtlpReceiver:
    receiver = OtlpReceiver().start()
    receiver.collected = Counted()
    return receiver


class _Span(msgspec.Struct):
    spanID: str  # noqa: N815 (Jaeger's name)


class _Trace(msgspec.Struct):
    traceID: str  # noqa: N815
    spans: list[_Span]


class _Found(msgspec.Struct):
    data: list[_Trace] | None = None


def jaeger_ids(jaeger: Jaeger) -> Ids:
    """The distinct (trace, span) ids Jaeger's query API returns for ``SERVICE`` (every trace, at any
    time; a search of half a million spans takes Jaeger tens of seconds, hence the long timeout)."""
    url = (f"{jaeger.url}/api/traces?service={SERVICE}&limit=100000&start=1"
           f"&end={int(time.time() * 1e6) + 60_000_000}")
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            found = msgspec.json.decode(r.read(), type=_Found)
    except OSError:
        return set()
    return {(bytes.fromhex(t.traceID.rjust(32, "0")), bytes.fromhex(s.spanID.rjust(16, "0")))
            for t in found.data or [] for s in t.spans}


def settled(count: Callable[[], Ids], want: int) -> Ids:
    """Poll ``count`` until it holds ``want`` ids or stops growing (two equal counts 5 s apart), or
    until the deadline."""
    end, last = time.monotonic() + END_DEADLINE_S, None
    while True:
        ids = count()
        if len(ids) >= want or (last is not None and len(ids) == last) or time.monotonic() > end:
            return ids
        last = len(ids)
        time.sleep(5)


def metric(port: int, name: str) -> int:
    """The sum of a Collector's own metric ``name`` (every label set), from its Prometheus endpoint."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return 0
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines() if line.startswith(name))


def node_agent(stack: ExitStack, folder: Path, layout: Path, gateway: str) -> tuple[NodeAgent, int]:
    """The shipped node-agent config forwarding to ``gateway``, its own metrics on a free port
    (otherwise on the default 8888, which another Collector may hold); started, stopped with ``stack``."""
    agent = NodeAgent(folder, layout, gateway)
    stack.callback(agent.stop)
    port = free_port()
    telemetry = folder / "telemetry.yaml"  # a second --config, merged over the shipped one (JSON is YAML)
    telemetry.write_text(json.dumps({"service": {"telemetry": {"metrics": {"readers": [
        {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": port}}}}]}}}}))
    agent.args += ["--config", str(telemetry)]
    agent.start()
    return agent, port


def cpu(service: Service | None) -> float:
    """User + system CPU seconds of ``service``'s process (0 without one)."""
    if service is None or service.proc is None:
        return 0.0
    t = psutil.Process(service.proc.pid).cpu_times()
    return float(t.user + t.system)


def own_cpu() -> float:
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def wait_until(done: Callable[[], bool], every_s: float) -> None:
    """Poll ``done`` until it is true or the deadline passes."""
    end = time.monotonic() + END_DEADLINE_S
    while not done() and time.monotonic() < end:
        time.sleep(every_s)


class Chain:
    """The servers of every hop, started once; :meth:`run` sends the trace through one hop."""

    def __init__(self, stack: ExitStack, folder: Path, trace: str, budget: int) -> None:
        self.trace, self.budget = trace, budget
        self.direct = counting_receiver()
        stack.callback(self.direct.stop)
        self.behind = counting_receiver()
        stack.callback(self.behind.stop)
        self.jaeger = Jaeger(folder / "jaeger")
        stack.callback(self.jaeger.stop)
        self.jaeger.start()
        with redirect_stdout(io.StringIO()):  # its "wrote N files" line
            layout = write_stack(folder / "stack")
        self.to_receiver, _ = node_agent(stack, folder / "agent-receiver", layout,
                                         f"127.0.0.1:{self.behind.grpc_port}")
        self.to_jaeger, self.jaeger_metrics = node_agent(stack, folder / "agent-jaeger", layout,
                                                         self.jaeger.otlp_grpc)
        self.expected: Ids = set()

    def export(self, endpoint: str) -> tuple[float, float, int, int, str]:
        """One ``otel-profiler export`` (its stderr into its stdout): wall, CPU, spans built,
        spans delivered, the closing line."""
        cmd = ["sh", "-c", 'exec "$@" 2>&1', "sh", sys.executable, "-m", "otel_profiler", "export", self.trace,
               "--endpoint", endpoint, "--protocol", "grpc", "--service-name", SERVICE,
               "--span-budget", str(self.budget)]
        wall, _, out, cpu_s = run_measured(cmd)
        found = SENT.search(out)
        if not found:
            sys.exit(f"otel-profiler export printed no closing line:\n{out[-2000:]}")
        return wall, cpu_s, int(found[1]), int(found[2]), found[0]

    def run(self, hop: str) -> dict[str, float]:
        agent = {"collector": self.to_receiver, "collector+jaeger": self.to_jaeger}.get(hop)
        jaeger = self.jaeger if "jaeger" in hop else None
        receiver = {"receiver": self.direct, "collector": self.behind}.get(hop)
        if receiver is not None:
            receiver.collected = Counted()
        endpoint = (self.direct.grpc_endpoint if hop == "receiver" else agent.endpoint("grpc") if agent
                    else f"http://{self.jaeger.otlp_grpc}")
        sent_before = metric(self.jaeger_metrics, "otelcol_exporter_sent_spans") if hop == "collector+jaeger" else 0
        before = (own_cpu(), cpu(agent), cpu(jaeger))
        started = time.monotonic()
        wall, export_cpu, built, delivered, line = self.export(endpoint)
        waited = LAST_WAIT[0]
        if receiver is not None:
            counted = receiver.collected
            assert isinstance(counted, Counted)
            wait_until(lambda: counted.count >= delivered, 0.02)
        elif hop == "collector+jaeger":
            wait_until(lambda: metric(self.jaeger_metrics, "otelcol_exporter_sent_spans") - sent_before >= delivered,
                       0.1)
        took = time.monotonic() - started
        after = (own_cpu(), cpu(agent), cpu(jaeger))
        if receiver is not None:
            assert isinstance(receiver.collected, Counted)
            got = receiver.collected.ids
        else:
            got = settled(lambda: jaeger_ids(self.jaeger), len(self.expected))
            self.jaeger.stop()  # an empty store (and its memory back) for the next run
            self.jaeger.start()
        if hop == "receiver" and not self.expected:
            self.expected = set(got)
        lost = len(self.expected - got)
        print(f"  {hop:17} {line}; {len(got):,} distinct ids at the end, {lost} lost, {took:.1f} s; CPU s: "
              f"exporter {export_cpu:.1f}, this process {after[0] - before[0]:.1f}, Collector "
              f"{after[1] - before[1]:.1f}, Jaeger {after[2] - before[2]:.1f}", flush=True)
        return {"sent": delivered, "dropped": built - delivered, "distinct": len(got), "lost": lost,
                "wall": wall, "end": took, "rate": delivered / took, "exporter": export_cpu,
                "this": after[0] - before[0], "collector": after[1] - before[1], "jaeger": after[2] - before[2],
                "waited": waited}


class OtherWork:
    """Samples, every second, the cores busy with processes other than this one and its children
    (the shared machine's other work) while it runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _busy() -> tuple[float, float]:
        t = psutil.cpu_times()
        me = psutil.Process()
        own = me.cpu_times()
        ours = own.user + own.system + own.children_user + own.children_system
        for child in me.children(recursive=True):
            try:
                c = child.cpu_times()
                ours += c.user + c.system
            except psutil.Error:
                pass
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0), ours

    def _sample(self) -> None:
        last = self._busy()
        while not self._stop.wait(1.0):
            now = self._busy()
            self.samples.append(max(0.0, (now[0] - last[0]) - (now[1] - last[1])))
            last = now

    def __enter__(self) -> "OtherWork":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--span-budget", type=int, default=1_000_000,
                        help="spans per trace (default: the most, so every operation is a span)")
    parser.add_argument("--hops", default=",".join(HOPS), help=f"a comma-separated subset of {', '.join(HOPS)}")
    args = parser.parse_args()
    hops = [h for h in HOPS if h in args.hops.split(",")]
    if "receiver" not in hops:
        sys.exit("--hops needs receiver: its first run gives the ids every other hop must deliver")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # the servers are stopped on the way out
    for key in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[key]  # only the command line's settings
    trace = large_trace(args.events)
    runs: dict[str, list[dict[str, float]]] = {hop: [] for hop in hops}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        chain = Chain(stack, Path(tmp), trace, args.span_budget)
        with OtherWork() as other:
            for i in range(args.repeat):
                print(f"run {i + 1} of {args.repeat}", flush=True)
                for hop in hops:
                    runs[hop].append(chain.run(hop))
    print(f"\n{os.path.basename(trace)}, --span-budget {args.span_budget}; medians of {args.repeat} interleaved "
          f"runs; {psutil.cpu_count()} cores, other work on them {statistics.median(other.samples or [0]):.2f} "
          "cores (median of 1 s samples)")
    print("| hop | spans sent | distinct at the end | lost (all runs) | exporter wall (s) | to the end (s) | spans/s "
          "| CPU s: exporter | this process (receiver) | Collector | Jaeger | exporter waited for a core (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for hop, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        lost = sum(int(r["lost"]) + int(r["dropped"]) for r in rows)
        cells = [hop, f"{med['sent']:,.0f}", f"{med['distinct']:,.0f}", str(lost), f"{med['wall']:.2f}",
                 f"{med['end']:.2f}", f"{med['rate']:,.0f}", f"{med['exporter']:.2f}", f"{med['this']:.2f}",
                 f"{med['collector']:.2f}" if "collector" in hop else "-",
                 f"{med['jaeger']:.2f}" if "jaeger" in hop else "-", f"{med['waited']:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print(f"distinct (trace, span) ids expected: {len(chain.expected):,} (the trace repeats its steps' ids, "
          "so spans sent can exceed it); lost counts ids missing at the end plus spans the exporter dropped")


if __name__ == "__main__":
    main()
