"""The /metrics endpoint, system samplers, OTLP metrics and bad input: one clear message, profiling goes on."""

from __future__ import annotations

import base64
import datetime
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler import config
from otel_profiler.metrics import points as m
from otel_profiler.metrics.publisher import MetricsService
from otel_profiler.metrics.system import NvmlSampler, SystemSampler

from conftest import REPO, trace
from prometheus_server import free_port

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"


def _service(**env: str) -> MetricsService:
    return MetricsService().start(config.load(env), {"ml.local_rank": 0}, run_id="run-e")


def _get(url: str, accept: str = "", auth: str = "", context: ssl.SSLContext | None = None):
    headers = {"Accept": accept} if accept else {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60, context=context) as r:
        return r.headers["Content-Type"], r.read().decode()


def _profiler_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "otel-profiler" in str(w.message)]


# ------------------------------------------------------------------------------ names and formats
def test_prometheus_names_follow_the_otel_translation() -> None:
    names = {s.name: s.prometheus for s in m.CATALOGUE}
    assert names["hw.gpu.utilization"] == "hw_gpu_utilization_ratio"
    assert names["hw.gpu.memory.usage"] == "hw_gpu_memory_usage_bytes"
    assert names["hw.power"] == "hw_power_watts"
    assert names["hw.energy"] == "hw_energy_joules_total"
    assert names["hw.temperature"] == "hw_temperature_celsius"
    assert names["process.cpu.utilization"] == "process_cpu_utilization_ratio"
    assert names["system.network.io"] == "system_network_io_bytes_total"
    assert names["otel_profiler.step.duration"] == "otel_profiler_step_duration_seconds"
    assert names["otel_profiler.gpu.stream.queue_depth"] == "otel_profiler_gpu_stream_queue_depth"
    assert names["otel_profiler.events.dropped"] == "otel_profiler_events_dropped_total"
    assert len(set(names.values())) == len(names)
    gpu = [s for s in m.CATALOGUE if s.source == "nvml"]
    assert all("hw.id" in s.labels for s in gpu)
    assert not any("name" in k and "hw.name" != k for s in m.CATALOGUE for k in s.labels)  # no kernel names


def test_docs_list_every_metric() -> None:
    section = (REPO / "docs" / "metrics.md").read_text()
    for spec in m.CATALOGUE:
        assert f"`{spec.name}`" in section and f"`{spec.prometheus}`" in section, spec.name


def test_text_and_openmetrics_with_exemplars() -> None:
    port = free_port()
    service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(port))
    try:
        rank = load_profile([str(trace(NCCL))]).ranks[0]
        service.observe_batch(rank.batch, rank.meta)
        ctype, text = _get(service.url)
        assert ctype.startswith("text/plain") and "# {trace_id=" not in text
        assert "process_cpu_utilization_ratio{cpu_mode=\"user\"}" in text
        assert "otel_profiler_gpu_busy_ratio{gpu_device_id=\"0\",otel_profiler_rank=\"0\"}" in text
        ctype, om = _get(service.url, OPENMETRICS)
        assert ctype.startswith("application/openmetrics-text") and om.rstrip().endswith("# EOF")
        assert '# {trace_id="' in om
    finally:
        service.close()


# ------------------------------------------------------------------------------ no NVML here
def test_no_nvml_means_no_gpu_metrics_and_no_line_on_a_machine_without_a_gpu(capfd) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("NVML works on this machine: tests/gpu covers it")
    except Exception:
        pass
    assert NvmlSampler.open() is None
    assert capfd.readouterr().err == ""  # no NVIDIA driver here: nothing to say (a broken one is said)


def test_a_broken_nvml_is_said_in_one_line_and_a_missing_one_is_not(capfd, monkeypatch) -> None:
    import pynvml

    def broken():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)  # a driver that answers, wrongly

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    assert NvmlSampler.open() is None
    err = capfd.readouterr().err
    assert err.count("no GPU metrics: NVML unavailable") == 1 and len(err.strip().splitlines()) == 1
    sampler = SystemSampler(1.0)
    sampler.tick()
    assert not sampler.has_gpu
    points = sampler.points()
    assert points and not [p for p in points if p.spec.source == "nvml"]
    assert {p.spec.name for p in points} >= {"system.cpu.utilization", "process.cpu.utilization",
                                             "process.memory.usage", "otel_profiler.cpu.core.utilization"}


def test_sampler_thread_ticks_and_stops() -> None:
    sampler = SystemSampler(0.05, gpu=False)
    sampler.start()
    deadline = time.monotonic() + 60  # how fast it ticks on a busy machine is not asserted
    while sampler.ticks < 4 and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    sampler.close()
    ticks = sampler.ticks
    assert ticks >= 4
    threading.Event().wait(0.3)
    assert sampler.ticks == ticks and not sampler._thread.is_alive()


# ------------------------------------------------------------------------------ bad input
def test_port_in_use_warns_once_and_profiling_goes_on() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(port))
        messages = _profiler_warnings(record)
        assert len(messages) == 1 and f"cannot listen on 127.0.0.1:{port}" in messages[0]
        assert service.endpoint is None and service.url is None
        rank = load_profile([str(trace(NCCL))]).ranks[0]
        service.observe_batch(rank.batch, rank.meta)  # no endpoint: a no-op, never raises
        service.close()
        service.close()


@pytest.mark.parametrize("which", ["missing", "garbage", "key_only"])
def test_bad_tls_files_warn_once_and_profiling_goes_on(tmp_path: Path, which: str) -> None:
    garbage = tmp_path / "bad.pem"
    garbage.write_text("not a certificate")
    files = {"missing": (str(tmp_path / "nope.pem"), str(tmp_path / "nope.key")),
             "garbage": (str(garbage), str(garbage)), "key_only": ("", str(garbage))}[which]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()),
                           OTEL_PROFILER_PROMETHEUS_CERT_FILE=files[0], OTEL_PROFILER_PROMETHEUS_KEY_FILE=files[1])
    messages = _profiler_warnings(record)
    assert len(messages) == 1 and "TLS certificate/key unusable" in messages[0]
    assert service.endpoint is None
    service.close()


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan"])
def test_bad_interval_is_one_warning_and_the_default(value: str) -> None:
    settings = config.load({"OTEL_PROFILER_METRICS_INTERVAL_S": value,
                            "OTEL_PROFILER_PROMETHEUS_PORT": str(free_port())})
    lines = [*settings.warnings, *settings.notices]  # a bad value warns; one out of range is a notice
    assert len(lines) == 1 and lines[0].startswith("OTEL_PROFILER_METRICS_INTERVAL_S=")
    assert settings.metrics_interval_s == 1.0
    service = MetricsService().start(settings, {"ml.local_rank": 0})
    try:
        assert service.sampler.interval_s == 1.0 and service.url
    finally:
        service.close()


def test_bad_basic_auth_value_is_one_warning() -> None:
    settings = config.load({"OTEL_PROFILER_PROMETHEUS_BASIC_AUTH": "no-colon-secret"})
    assert len(settings.warnings) == 1 and "<hidden>" in settings.warnings[0]
    assert "no-colon-secret" not in settings.warnings[0]


# ------------------------------------------------------------------------------ TLS, auth, ranks
def _self_signed(folder: Path) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_tls_and_basic_auth_work(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()), OTEL_PROFILER_PROMETHEUS_CERT_FILE=cert,
                       OTEL_PROFILER_PROMETHEUS_KEY_FILE=key, OTEL_PROFILER_PROMETHEUS_BASIC_AUTH="scraper:s3cret")
    try:
        assert service.url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=cert)
        _, body = _get(service.url, auth="scraper:s3cret", context=trusted)
        assert "system_cpu_utilization_ratio" in body
        for auth in ("", "scraper:wrong"):
            with pytest.raises(urllib.error.HTTPError) as err:
                _get(service.url, auth=auth, context=trusted)
            assert err.value.code == 401
        with pytest.raises(urllib.error.URLError):  # certificate not trusted by default
            _get(service.url, auth="scraper:s3cret")
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):  # no plain HTTP
            _get(service.url.replace("https://", "http://"), auth="scraper:s3cret")
    finally:
        service.close()


def test_a_stalled_tls_client_does_not_block_other_scrapers(tmp_path: Path) -> None:
    import socket

    cert, key = _self_signed(tmp_path)
    service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()), OTEL_PROFILER_PROMETHEUS_CERT_FILE=cert,
                       OTEL_PROFILER_PROMETHEUS_KEY_FILE=key)
    stalled = socket.create_connection(("127.0.0.1", service.endpoint.port))  # never says hello
    try:
        trusted = ssl.create_default_context(cafile=cert)
        _, body = _get(service.url, context=trusted)  # would time out if the stalled client blocked it
        assert "system_cpu_utilization_ratio" in body
    finally:
        stalled.close()
        service.close()


def _request_threads() -> int:
    return sum(t.name == "otel-profiler-prometheus-request" for t in threading.enumerate())


def _closed_by_server(conn: socket.socket) -> bool:
    """Whether the server has ended ``conn`` (end of stream or reset), without waiting. (A
    non-blocking read, not ``select``: that refuses descriptors numbered 1024 or more, which a long
    test session with hundreds of client sockets can reach.)"""
    try:
        return conn.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _scrape_soon(url: str, **kwargs) -> str:
    """The body of the first scrape the endpoint serves (a full endpoint closes new connections
    at once), polled for up to 120 s."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return _get(url, **kwargs)[1]
        except (OSError, http.client.HTTPException):
            assert time.monotonic() < deadline, "no scrape served"
            time.sleep(0.2)


def test_a_flood_of_idle_connections_holds_at_most_the_limit(monkeypatch) -> None:
    from otel_profiler.metrics import sockets

    monkeypatch.setattr(sockets, "REQUEST_DEADLINE_S", 0.5)
    service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()))
    idle, peak = [], 0
    try:
        for _ in range(300):
            idle.append(socket.create_connection(("127.0.0.1", service.endpoint.port)))
            peak = max(peak, _request_threads())
        deadline = time.monotonic() + 120
        while not all(_closed_by_server(c) for c in idle):  # each one ended by the server
            peak = max(peak, _request_threads())
            assert time.monotonic() < deadline, "idle connections left open"
            time.sleep(0.05)
        assert peak <= sockets.MAX_CONNECTIONS, peak
        assert service.endpoint.server.refused > 0  # closed on accept, not served
        while _request_threads() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _request_threads() == 0, "idle connections still hold threads"
        assert "system_cpu_utilization_ratio" in _scrape_soon(service.url)  # the flood still held
    finally:
        for conn in idle:
            conn.close()
        service.close()


def test_slow_drip_clients_are_cut_off_by_a_whole_request_deadline() -> None:
    """400 clients each sending one byte a second (never idle for the per-read timeout) of a
    request that would take minutes: each is ended after the deadline, none gets its request in,
    and they never hold more than the limit of threads.

    Timings on a busy machine: the deadline runs from the server's accept. The test used to count
    the bytes the served clients got in (at least 3 in their 5 s), dripping only once all 400 had
    connected; on a busy 2-core machine the server's accepts fall behind the connects, the listen
    backlog fills, a connect waits for a SYN retry (1 s, then 3 s), and opening all 400 took seconds
    of the served clients' 5 s: 2 bytes, a failure. Now the clients connect in a thread of their
    own while each one drips from the moment it is open; the test notes when the server accepted
    each connection (the server is in this process) and whether it served or refused it; and the
    promise is checked in time, not in bytes: every served client was ended no sooner than the
    deadline after its accept (load only makes that later), having dripped without a pause as long
    as the per-read timeout (so no read timeout ended it: the whole-request deadline did)."""
    from otel_profiler.metrics import sockets

    service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()),
                       OTEL_PROFILER_PROMETHEUS_BASIC_AUTH="scraper:s3cret")  # before authentication
    request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
    count, drip_s = 400, 1.0
    server = service.endpoint.server
    accepts: dict[int, tuple[float, bool]] = {}  # client port -> (when accepted, served)
    serve = server.process_request

    def noting_accepts(conn, client_address) -> None:  # on the server's thread: observes, changes nothing
        at, refused = time.monotonic(), server.refused
        serve(conn, client_address)
        accepts[client_address[1]] = (at, server.refused == refused)

    server.process_request = noting_accepts
    drips: list[socket.socket] = []
    connect_errors: list[BaseException] = []

    def connect_all() -> None:
        try:
            for _ in range(count):
                conn = socket.create_connection(("127.0.0.1", service.endpoint.port), timeout=120)
                conn.settimeout(None)  # blocking again: a socket with a timeout waits before each read
                drips.append(conn)
        except BaseException as exc:  # reported by the loop below
            connect_errors.append(exc)

    opener = threading.Thread(target=connect_all, name="slow-drip-connects", daemon=True)
    sends: dict[int, list[float]] = {}  # connection -> when each of its bytes went
    ended: dict[int, float] = {}  # connection -> when the server's end was noticed
    peak = 0
    try:
        opener.start()
        deadline = time.monotonic() + 600  # a request takes len(request) s of dripping: never reached
        while opener.is_alive() or len(ended) < len(drips):
            assert not connect_errors, connect_errors
            assert time.monotonic() < deadline, f"{len(drips) - len(ended)} drips not ended"
            for i, conn in enumerate(list(drips)):
                if i in ended:
                    continue
                if _closed_by_server(conn):
                    ended[i] = time.monotonic()
                    continue
                times = sends.setdefault(i, [])
                if times and time.monotonic() - times[-1] < drip_s:
                    continue
                assert len(times) < len(request), "a slow-drip client got its whole request in"
                try:
                    conn.send(request[len(times):len(times) + 1])
                    times.append(time.monotonic())
                except OSError:
                    ended[i] = time.monotonic()
            peak = max(peak, _request_threads())
            time.sleep(0.2)
        assert not connect_errors, connect_errors
        assert peak <= sockets.MAX_CONNECTIONS, peak
        ports = [conn.getsockname()[1] for conn in drips]
        assert len(drips) == count and set(ports) <= set(accepts), "a connection the server never accepted"
        served = [i for i, port in enumerate(ports) if accepts[port][1]]
        assert served and server.refused == count - len(served), (len(served), server.refused)
        for i in served:
            accepted = accepts[ports[i]][0]
            marks = [accepted, *(t for t in sends.get(i, []) if t > accepted), ended[i]]
            pauses = [b - a for a, b in zip(marks, marks[1:])]
            figures = f"served connection {i}: ended {ended[i] - accepted:.1f} s after its accept, " \
                      f"{len(sends.get(i, []))} bytes sent, pauses {[round(x, 1) for x in pauses]} s"
            assert ended[i] - accepted >= sockets.REQUEST_DEADLINE_S, figures  # not before the deadline
            assert max(pauses) < sockets.REQUEST_DEADLINE_S, figures  # dripping, never idle for a read timeout
        assert "system_cpu_utilization_ratio" in _scrape_soon(service.url, auth="scraper:s3cret")
    finally:
        opener.join(timeout=120)
        for conn in drips:
            conn.close()
        service.close()


@pytest.mark.parametrize("scheme", ["basic", "BASIC", "Basic"])
def test_the_basic_auth_scheme_name_is_case_insensitive(scheme: str) -> None:
    service = _service(OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()),
                       OTEL_PROFILER_PROMETHEUS_BASIC_AUTH="scraper:s3cret")
    try:
        token = base64.b64encode(b"scraper:s3cret").decode()
        request = urllib.request.Request(service.url, headers={"Authorization": f"{scheme} {token}"})
        with urllib.request.urlopen(request, timeout=60) as r:
            assert r.status == 200
        bad = urllib.request.Request(service.url, headers={"Authorization": f"{scheme}x {token}"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=60)
        assert err.value.code == 401
    finally:
        service.close()


def test_one_port_per_local_rank() -> None:
    base = free_port()
    services = [MetricsService().start(config.load({"OTEL_PROFILER_PROMETHEUS_PORT": str(base)}),
                                       {"ml.local_rank": r}) for r in (0, 1)]
    try:
        assert [s.endpoint.port for s in services if s.endpoint] == [base, base + 1]
    finally:
        for s in services:
            s.close()


def test_nothing_runs_without_an_output() -> None:
    service = MetricsService().start(config.load({}), {})
    assert not service.active and service.sampler is None
    service.observe_batch(None)
    service.close()


# ------------------------------------------------------------------------------ OTLP metrics
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_otlp_metrics_go_through_the_exporter_process(protocol: str) -> None:
    from otel_profiler.export.exporter import exporter_from_settings
    from otel_profiler.metrics.profile import step_trace_hex
    from otel_profiler.shared.ids import root_span_id, run_id_of
    from otlp_receiver import OtlpReceiver

    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint + "/v1/metrics"
        settings = config.load({  # metrics only: their own endpoint, no general one
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": protocol,
            "OTEL_METRIC_EXPORT_INTERVAL": "100000"})
        service = MetricsService().start(settings, {"service.name": "trainer", "ml.local_rank": 0}, run_id="run-o")
        exporter = exporter_from_settings(settings, default_service="trainer")
        assert exporter is not None and not exporter.config.has_span_sink
        service.attach_exporter(exporter)
        rank = load_profile([str(trace(NCCL))]).ranks[0]
        service.observe_batch(rank.batch, rank.meta)
        assert exporter.submit(rank.meta, rank.batch)  # spans are off: accepted, nothing queued
        sent = service.points()
        assert service.export_now()
        counters = exporter.close(timeout_s=10)
        service.close()
    assert (counters["metric_requests_sent"], counters["batches_received"]) == (1, 0)
    assert not receiver.collected.requests  # no traces endpoint: no spans
    (request,) = receiver.collected.metric_requests
    resource = {a.key: a.value.string_value for a in request.resource_metrics[0].resource.attributes}
    assert resource["service.name"] == "trainer"
    metrics = {name: ms[-1] for name, ms in receiver.collected.metrics().items()}
    assert {"process.cpu.utilization", "system.cpu.utilization", "otel_profiler.gpu.busy",
            "otel_profiler.gpu.kernel.time", "otel_profiler.step.duration"} <= set(metrics)
    # Every point arrives with its value: gauges as gauges, counters as cumulative monotonic sums.
    expected = {(p.spec.name, tuple(sorted(p.attributes.items()))): p.value for p in sent
                if p.spec.source == "profile" and p.spec.kind != m.HISTOGRAM}
    received = {}
    for metric in metrics.values():
        which = metric.WhichOneof("data")
        if which in ("gauge", "sum"):
            for dp in getattr(metric, which).data_points:
                attrs = tuple(sorted((a.key, getattr(a.value, a.value.WhichOneof("value"))) for a in dp.attributes))
                received[(metric.name, attrs)] = dp.as_double
    assert expected and all(received[k] == pytest.approx(v) for k, v in expected.items())
    kernel_time = metrics["otel_profiler.gpu.kernel.time"].sum
    assert kernel_time.is_monotonic and kernel_time.aggregation_temporality == 2  # CUMULATIVE
    (point,) = metrics["otel_profiler.step.duration"].histogram.data_points
    (step_point,) = [p for p in sent if p.spec is m.STEP_DURATION]
    assert list(point.bucket_counts) == step_point.value.counts and point.count == 3
    assert point.sum == pytest.approx(step_point.value.total) and metrics["otel_profiler.step.duration"].unit == "s"
    steps = [int(v) for v in rank.batch.extra("step").values()]
    step_traces = {step_trace_hex(run_id_of(rank.meta), 0, n) for n in steps}
    assert point.exemplars and {e.trace_id.hex() for e in point.exemplars} <= step_traces
    for e in point.exemplars:  # the exemplar points at the exported train.step (root) span
        trace_id = int(e.trace_id.hex(), 16)
        assert int(e.span_id.hex(), 16) == root_span_id(trace_id >> 64, trace_id & (2**64 - 1))


def test_a_metrics_endpoint_that_is_down_costs_one_warning(capfd) -> None:
    from otel_profiler.export.exporter import exporter_from_settings

    settings = config.load({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{free_port()}/v1/metrics",
                            "OTEL_METRIC_EXPORT_INTERVAL": "100000"})
    service = MetricsService().start(settings, {"service.name": "trainer"}, run_id="run-d")
    exporter = exporter_from_settings(settings, default_service="trainer")
    assert exporter is not None and exporter.config.target is None  # metrics only
    service.attach_exporter(exporter)
    for attempt in (1, 2):
        assert service.export_now()
        deadline = time.monotonic() + 120  # one snapshot in flight at a time: wait until it failed
        while exporter.counters()["metric_requests_failed"] < attempt and time.monotonic() < deadline:
            time.sleep(0.05)
        assert exporter.counters()["metric_requests_failed"] == attempt
    counters = exporter.close(timeout_s=10)
    service.close()
    assert counters["metric_requests_failed"] == 2 and counters["metric_requests_sent"] == 0
    err = capfd.readouterr().err
    assert err.count("metrics not delivered") == 1 and "Traceback" not in err
