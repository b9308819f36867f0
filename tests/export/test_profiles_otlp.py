"""OpenTelemetry profiles through the real Collector (``scripts/backends.sh``'s, started with
``--feature-gates=service.profilesSupport``): its OTLP receiver takes the profiles of
``otel-profiler export --format otlp-profiles`` and of a live zero-code job
(``OTEL_PROFILER_PROFILES_EXPORTER=otlp``) and its OTLP exporter forwards them to a gRPC
``ProfilesService`` here, which records them. The forwarded samples equal the ones written to a
file, their totals equal a plain recount of the trace's GPU operations, and their links name the
step traces and root spans the span pipeline sent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from concurrent import futures
from pathlib import Path

import numpy as np
import pytest

from conftest import trace
from real_backends import Collector, binaries, free_port, poll

grpc = pytest.importorskip("grpc")
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as profiles_pb  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_pb  # noqa: E402

STEPS_TRACE = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
JOB = Path(__file__).resolve().parents[1] / "scripts" / "exporter_job.py"


class Receiver:
    """A gRPC server taking ``ProfilesService`` and ``TraceService`` exports, kept as messages."""

    def __init__(self) -> None:
        self.profiles: list = []
        self.traces: list = []
        self._lock = threading.Lock()
        self.port = free_port()
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        for service, kind, keep, response in (
                ("opentelemetry.proto.collector.profiles.v1development.ProfilesService",
                 profiles_pb.ExportProfilesServiceRequest, self.profiles, profiles_pb.ExportProfilesServiceResponse),
                ("opentelemetry.proto.collector.trace.v1.TraceService",
                 trace_pb.ExportTraceServiceRequest, self.traces, trace_pb.ExportTraceServiceResponse)):
            self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {
                "Export": grpc.unary_unary_rpc_method_handler(
                    self._recorder(keep, response), request_deserializer=kind.FromString,
                    response_serializer=lambda m: m.SerializeToString())}),))
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")

    def _recorder(self, keep: list, response):
        def export(request, context):
            with self._lock:
                keep.append(request)
            return response()
        return export


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """(the recording receiver, the Collector's OTLP gRPC and HTTP addresses)."""
    binaries()
    receiver = Receiver()
    receiver.server.start()
    grpc_port, http_port = free_port(), free_port()
    exporter = {"endpoint": f"127.0.0.1:{receiver.port}", "tls": {"insecure": True}}
    config = {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{grpc_port}"},
                                             "http": {"endpoint": f"127.0.0.1:{http_port}"}}}},
        "exporters": {"otlp_grpc": exporter},
        "service": {"telemetry": {"metrics": {"level": "none"}},
                    "pipelines": {"profiles": {"receivers": ["otlp"], "exporters": ["otlp_grpc"]},
                                  "traces": {"receivers": ["otlp"], "exporters": ["otlp_grpc"]}}},
    }
    collector = Collector(tmp_path_factory.mktemp("collector"), "profiles", config, ready_port=http_port)
    collector.args.append("--feature-gates=service.profilesSupport")
    try:
        collector.start()
        yield receiver, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}", collector
    finally:
        collector.stop()
        receiver.server.stop(0)


def resolved(requests) -> Counter:
    """Every sample as (sample type, frames innermost first, attributes, link, value): comparable
    across requests whatever their dictionaries' order."""
    out: Counter = Counter()
    for r in requests:
        d = r.dictionary
        s = d.string_table

        def frames(stack_index: int) -> tuple:
            return tuple(s[d.function_table[d.location_table[i].lines[0].function_index].system_name_strindex]
                         for i in d.stack_table[stack_index].location_indices)

        for rp in r.resource_profiles:
            for sp in rp.scope_profiles:
                for p in sp.profiles:
                    for x in p.samples:
                        attrs = tuple(sorted((s[d.attribute_table[a].key_strindex],
                                              d.attribute_table[a].value.string_value) for a in x.attribute_indices))
                        link = d.link_table[x.link_index]
                        out[(s[p.sample_type.type_strindex], frames(x.stack_index), attrs,
                             link.trace_id.hex(), link.span_id.hex(), tuple(x.values))] += 1
    return out


def resource_value(request, key: str) -> str:
    """A string attribute of the first resource; the Collector writes keys and values as indices
    into the dictionary's string table."""
    table = request.dictionary.string_table
    for a in request.resource_profiles[0].resource.attributes:
        if (a.key or table[a.key_strindex]) == key:
            return a.value.string_value or table[a.value.string_value_strindex]
    return ""


def totals(samples: Counter) -> dict[str, int]:
    out: dict[str, int] = Counter()
    for (type_, *_, values), n in samples.items():
        out[type_] += values[0] * n
    return out


def step_roots(requests) -> dict[str, str]:
    """Trace id -> span id of each root span named ``train.step``."""
    return {s.trace_id.hex(): s.span_id.hex() for r in requests for rs in r.resource_spans
            for ss in rs.scope_spans for s in ss.spans if not s.parent_span_id and s.name == "train.step"}


def links(samples: Counter) -> set[tuple[str, str]]:
    return {(key[3], key[4]) for key in samples if key[3] != "0" * 32 and key[3]}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def test_export_sends_profiles_through_the_collector(pipeline, tmp_path):
    receiver, _, http, _ = pipeline
    path = str(trace(STEPS_TRACE))
    written = tmp_path / "profiles.pb"
    done = cli("export", path, "--format", "otlp-profiles", "--endpoint", http, "-o", str(written))
    assert done.returncode == 0, done.stderr
    assert "delivered" in done.stderr and "not delivered" not in done.stderr

    from otel_profiler.export.sinks.files import read_requests

    sent = resolved(profiles_pb.ExportProfilesServiceRequest.FromString(r) for r in read_requests(str(written)))
    forwarded = poll(lambda: (lambda got: got if sum(got.values()) >= sum(sent.values()) else None)(
        resolved(list(receiver.profiles))), "the profiles forwarded by the Collector")
    assert forwarded == sent

    from cuda_tracer.model.events import Kind
    from cuda_tracer.loading import load_profile

    batch = load_profile([path]).batch()
    gpu = np.isin(batch.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC])
    assert totals(forwarded)["gpu_time"] == int(batch.duration_ns[gpu].sum())
    assert totals(forwarded)["launches"] == int(gpu.sum())
    assert totals(forwarded)["cpu_time"] > 0

    assert cli("export", path, "-o", str(written.with_suffix(".spans.pb"))).returncode == 0
    from otel_profiler.export.sinks.files import read_requests as read

    roots = step_roots(trace_pb.ExportTraceServiceRequest.FromString(r)
                       for r in read(str(written.with_suffix(".spans.pb"))))
    linked = links(forwarded)
    assert linked and roots
    assert {t: s for t, s in linked} == {t: roots[t] for t, _ in linked}  # each link: a step trace and its root


def test_live_job_sends_profiles_linked_to_its_steps(pipeline, tmp_path):
    from real_backends import job_environment

    receiver, _, http, collector = pipeline
    before = len(receiver.profiles)
    hold = tmp_path / "release"  # the job waits for it: the profiles of its flushes are sent meanwhile
    # operators recorded: on a CPU machine they are a window's CPU samples (a step is no work of its own)
    env = job_environment(tmp_path, http, "profiles-run", "profiles-job", OTEL_PROFILER_PROFILES_EXPORTER="otlp",
                          OTEL_PROFILER_FLUSH_INTERVAL_S="0.5", JOB_HOLD_FILE=str(hold),
                          OTEL_PROFILER_ACTIVITIES="cpu_op")
    job = subprocess.Popen([sys.executable, str(JOB), "300"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        def arrived():
            mine = [r for r in receiver.profiles[before:]
                    if resource_value(r, "service.name") == "profiles-job"]
            return mine if sum(p.samples.__len__() for r in mine for rp in r.resource_profiles
                               for sp in rp.scope_profiles for p in sp.profiles) else None

        requests = poll(arrived, "the live job's profiles forwarded by the Collector", log=collector.log)
    finally:
        hold.touch()
        _, err = job.communicate(timeout=600)
    assert job.returncode == 0, err[-3000:]
    assert "profiles export" not in err, err[-3000:]
    live = resolved(requests)
    assert totals(live)["cpu_time"] > 0 and totals(live)["launches"] == 0  # a CPU job: operators only
    linked = links(live)
    assert linked, "no sample links to a step"
    roots = poll(lambda: (lambda r: r if all(t in r for t, _ in linked) else None)(step_roots(receiver.traces)),
                 "the job's step traces", log=collector.log)
    assert {t: s for t, s in linked} == {t: roots[t] for t, _ in linked}  # each link: a step trace and its root

    # Everything the job sent equals its profile folder exported afterwards, sample for sample.
    written = tmp_path / "after.pb"
    env_cli = {k: v for k, v in env.items() if k not in ("OTEL_PROFILER_ENABLED", "PYTHONPATH", "JOB_HOLD_FILE")}
    done = cli("export", str(tmp_path / "prof"), "--format", "otlp-profiles", "-o", str(written), env=env_cli)
    assert done.returncode == 0, done.stderr
    from otel_profiler.export.sinks.files import read_requests

    after = totals(resolved(profiles_pb.ExportProfilesServiceRequest.FromString(r)
                            for r in read_requests(str(written))))
    poll(lambda: totals(resolved(arrived() or [])) == after, "every sample of the job", log=collector.log)


def test_profiles_are_off_by_default(pipeline, tmp_path):
    from real_backends import job_environment

    receiver, _, http, collector = pipeline
    hold = tmp_path / "release"
    env = job_environment(tmp_path, http, "quiet-run", "no-profiles-job", OTEL_PROFILER_FLUSH_INTERVAL_S="0.5",
                          JOB_HOLD_FILE=str(hold))
    job = subprocess.Popen([sys.executable, str(JOB), "300"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        def spans_arrived():
            return [r for r in list(receiver.traces) for rs in r.resource_spans
                    if any(a.key == "service.name" and a.value.string_value == "no-profiles-job"
                           for a in rs.resource.attributes)]
        poll(spans_arrived, "the job's spans", log=collector.log)
    finally:
        hold.touch()
        _, err = job.communicate(timeout=600)
    assert job.returncode == 0, err[-3000:]
    assert not [r for r in list(receiver.profiles) if resource_value(r, "service.name") == "no-profiles-job"]


@pytest.mark.parametrize("args, code, said", [
    (["-o", "profiles.txt"], 2, "give a file name ending in .pb"),
    ([], 2, "give --endpoint or --output"),
    (["--endpoint", "http://127.0.0.1:{closed}"], 1, "cannot reach"),
    (["-o", "out.pb", "--missing--"], 2, "no-such-trace.json: no such file"),
])
def test_bad_input_is_one_line(tmp_path, args, code, said):
    args = [a.format(closed=free_port()) for a in args]
    inputs = [] if "--missing--" in args else [str(trace(STEPS_TRACE))]
    args = [str(tmp_path / "no-such-trace.json") if a == "--missing--" else
            (str(tmp_path / a) if a.startswith(("profiles.", "out.")) else a) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = cli("export", *inputs, *args, "--format", "otlp-profiles", env=env)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in done.stderr
