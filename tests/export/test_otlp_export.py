"""The exporter process, sinks, spool and the export/replay commands against a real OTLP receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from conftest import REPO, trace
from cuda_tracer.model.events import GPU_OP_KINDS
from cuda_tracer.loading import load_profile
from otel_profiler import config
from otel_profiler.cli import main
from otel_profiler.export.exporter import Exporter, exporter_from_settings
from otel_profiler.spans.options import options_from_settings
from otel_profiler.spans.build import build_spans
from otlp_receiver import OtlpReceiver, free_port, proto_span, table_spans

TRACE = "hta/trace_filter/sampled_rank-0.json.gz"


@pytest.fixture(scope="module")
def rank():
    return load_profile([str(trace(TRACE))]).ranks[0]


@pytest.fixture
def receiver():
    with OtlpReceiver() as r:
        yield r


def _settings(tmp_path, **env):
    base = {"OTEL_PROFILER_SPOOL_DIR": str(tmp_path / "spool"), "OTEL_SERVICE_NAME": "trainer",
            "OTEL_PROFILER_RUN_ID": "run-1"}
    base.update(env)
    return config.load(base)


def _gpu_op_count(batch) -> int:
    return int(sum((batch.kind == k).sum() for k in GPU_OP_KINDS))


def _received_gpu_ops(spans) -> int:
    """GPU ops in received spans: individual spans plus the counts of aggregate spans."""
    n = 0
    for s in spans:
        if s["attrs"]["otel_profiler.kind"] in ("kernel", "memcpy", "memset"):
            n += s["attrs"].get("otel_profiler.aggregate.count", 1)
    return n


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_every_span_arrives_once_with_parent_link_times_attrs(tmp_path, receiver, rank, protocol):
    endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
    settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
                         OTEL_PROFILER_SPAN_BUDGET="400")
    exporter = exporter_from_settings(settings)
    assert exporter.submit(rank.meta, rank.batch)
    counters = exporter.close(20)
    got = [proto_span(s) for _, s in receiver.collected.spans()]
    expected = table_spans(build_spans(rank.meta, rank.batch, options_from_settings(settings)))
    assert counters["spans_exported"] == len(expected) == len(got)
    assert {s["span"]: s for s in got} == {s["span"]: s for s in expected}
    assert _received_gpu_ops(got) == _gpu_op_count(rank.batch)
    res = receiver.collected.spans()[0][0]
    assert res["service.name"].string_value == "trainer"
    assert res["otel_profiler.run.id"].string_value == "run-1"


def test_a_partial_success_counts_the_rejected_spans_and_warns_once(tmp_path, rank, capfd):
    with OtlpReceiver(reject_spans=3) as receiver:
        settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.grpc_endpoint,
                             OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_PROFILER_SPAN_BUDGET="400")
        exporter = exporter_from_settings(settings)
        assert exporter.submit(rank.meta, rank.batch)
        counters = exporter.close(20)
    received = len(receiver.collected.spans())
    requests = counters["requests_sent"]
    assert received > 0 and requests > 0 and counters["spans_dropped"] == 0
    assert counters["spans_rejected"] == 3 * requests
    assert counters["spans_exported"] == received - 3 * requests
    warnings = [line for line in capfd.readouterr().err.splitlines() if "rejected" in line]
    assert len(warnings) == 1 and "receiver rejected 3 spans" in warnings[0], warnings


def test_gzip_and_headers_from_traces_variables(tmp_path, rank):
    with OtlpReceiver(required_headers={"authorization": "Bearer s3cret"}) as receiver:
        settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.http_endpoint + "/v1/traces",
                             OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:1",  # the TRACES_ variant wins
                             OTEL_EXPORTER_OTLP_TRACES_HEADERS="Authorization=Bearer%20s3cret",
                             OTEL_EXPORTER_OTLP_COMPRESSION="gzip")
        exporter = exporter_from_settings(settings)
        exporter.submit(rank.meta, rank.batch)
        counters = exporter.close(20)
        assert counters["spans_dropped"] == 0 and counters["spans_exported"] > 0
        assert len(receiver.collected.spans()) == counters["spans_exported"]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_wrong_credentials_warn_without_leaking_and_do_not_hang(tmp_path, rank, capfd, protocol):
    with OtlpReceiver(required_headers={"authorization": "right"}) as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint
        settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
                             OTEL_EXPORTER_OTLP_HEADERS="authorization=wrong-s3cret-value")
        exporter = exporter_from_settings(settings)
        exporter.submit(rank.meta, rank.batch)
        counters = exporter.close(20)  # final refusals are not retried: nothing waits out the timeout
    err = capfd.readouterr().err
    assert "refused spans" in err and ("UNAUTHENTICATED" in err or "401" in err)
    assert "wrong-s3cret-value" not in err
    assert counters["spans_dropped"] > 0 and counters["spans_exported"] == 0
    assert not receiver.collected.requests


def test_malformed_headers_variable_is_reported_without_its_value():
    settings = config.load({"OTEL_EXPORTER_OTLP_HEADERS": "token-only-s3cret"})
    assert len(settings.warnings) == 1
    assert "OTEL_EXPORTER_OTLP_HEADERS" in settings.warnings[0] and "s3cret" not in settings.warnings[0]


def test_receiver_down_spool_then_replay_loses_nothing(tmp_path, rank):
    port = free_port()
    settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                         OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_PROFILER_EXPORT_RETRY_S="0.5",
                         OTEL_PROFILER_SPAN_BUDGET="300")
    exporter = exporter_from_settings(settings)
    ranks = load_profile([str(trace("hta/trace_filter"))]).ranks
    for r in ranks:
        assert exporter.submit(r.meta, r.batch)
    counters = exporter.close(15)
    assert counters["spans_exported"] == 0 and counters["spans_dropped"] == 0
    assert counters["spans_spooled"] == counters["spans_built"] > 0
    spool = tmp_path / "spool"
    assert list(spool.glob("*.pb"))
    # The health metrics say so: the spool holds those requests, no batch waits in the queue.
    from otel_profiler.metrics import points as m
    from otel_profiler.metrics.sources import exporter_points

    health = {p.spec: p.value for p in exporter_points(counters) if p.spec in (m.SPOOL_SIZE, m.EXPORTER_QUEUE)}
    assert health == {m.SPOOL_SIZE: sum(p.stat().st_size for p in spool.glob("*.pb")), m.EXPORTER_QUEUE: 0}
    # Later, the receiver is up on that port: replay sends everything and empties the spool.
    with OtlpReceiver() as receiver:
        code = main(["replay", str(spool), "--endpoint", receiver.grpc_endpoint, "--protocol", "grpc"])
        assert code == 0
        got = [proto_span(s) for _, s in receiver.collected.spans()]
    assert len(got) == counters["spans_built"] == len({s["span"] for s in got})
    assert _received_gpu_ops(got) == sum(_gpu_op_count(r.batch) for r in ranks)
    assert not list(spool.glob("*.pb"))


def test_spool_limit_and_unwritable_spool_count_drops(tmp_path, rank, capfd):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    for spool_env in ({"OTEL_PROFILER_SPOOL_MAX_MB": "0"}, {"OTEL_PROFILER_SPOOL_DIR": str(blocker / "spool")}):
        settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{free_port()}",
                             OTEL_PROFILER_EXPORT_RETRY_S="0", **spool_env)
        exporter = exporter_from_settings(settings)
        exporter.submit(rank.meta, rank.batch)
        counters = exporter.close(10)
        assert counters["spans_dropped"] == counters["spans_built"] > 0
    assert "cannot write OTLP spool" in capfd.readouterr().err


def test_a_full_queue_holds_batches_for_later_and_drops_only_past_the_limit(tmp_path, rank, monkeypatch):
    from otel_profiler.export import exporter as exporter_mod

    with OtlpReceiver(delay_s=1.0) as receiver:
        settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
                             OTEL_PROFILER_EXPORT_QUEUE="1")
        exporter = exporter_from_settings(settings)
        # The receiver takes 1 s per request: the queue of one fills at once, later batches are
        # held and merged, none waited for and none dropped.
        assert all(exporter.submit(rank.meta, rank.batch) for _ in range(5))
        counters = exporter.close(60)
        assert counters["batches_dropped_queue_full"] == 0 and counters["spans_dropped"] == 0
        assert counters["batches_received"] == counters["batches_submitted"] < 5  # merged
        assert counters["spans_exported"] + counters["spans_spooled"] == counters["spans_built"] > 0
        # Past HOLD_ROWS held events, a batch is dropped and counted.
        monkeypatch.setattr(exporter_mod, "HOLD_ROWS", len(rank.batch))
        exporter = exporter_from_settings(settings)
        refused = sum(not exporter.submit(rank.meta, rank.batch) for _ in range(6))
        counters = exporter.close(60)
    assert refused > 0 and counters["batches_dropped_queue_full"] >= refused


def test_batches_left_unread_at_close_are_counted_and_wait_no_more(tmp_path, rank, capfd):
    from otel_profiler.metrics import points as m
    from otel_profiler.metrics.sources import exporter_points

    with OtlpReceiver(delay_s=1.0) as receiver:  # the first request holds the exporter for 1 s
        exporter = exporter_from_settings(_settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint))
        for _ in range(6):
            assert exporter.submit(rank.meta, rank.batch)
        exporter._proc.kill()  # as the OOM killer would: what is still queued is never read
        exporter._proc.join(10)
        counters = exporter.close(1.0)
    unread = counters["batches_submitted"] - counters["batches_received"]
    assert unread > 0 and counters["batches_dropped_unread"] == unread
    points = {(p.spec, p.attributes.get("otel_profiler.reason")): p.value for p in exporter_points(counters)}
    assert points[(m.EXPORTER_QUEUE, None)] == 0
    assert points[(m.DROPPED, "export_batches_dropped_unread")] == unread
    assert f"{unread} batches never read" in capfd.readouterr().err


def test_exporter_from_settings_none_without_sink_and_json_file_sink(tmp_path, rank):
    assert exporter_from_settings(config.load({})) is None
    assert exporter_from_settings(config.load({"OTEL_SDK_DISABLED": "true",
                                          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"})) is None
    out = tmp_path / "spans.jsonl"
    exporter = exporter_from_settings(_settings(tmp_path, OTEL_PROFILER_OTLP_FILE=str(out)))
    exporter.submit(rank.meta, rank.batch)
    counters = exporter.close(20)
    lines = out.read_bytes().splitlines()
    n = sum(len(ss["spans"]) for line in lines for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"])
    assert n == counters["spans_built"] > 0


def test_a_silent_metrics_endpoint_never_holds_up_spans(tmp_path, receiver, rank):
    import socket

    from otel_profiler.metrics.publisher import MetricsService

    silent = socket.socket()  # accepts connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
                             OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"http://127.0.0.1:{silent.getsockname()[1]}/v1/metrics",
                             OTEL_METRIC_EXPORT_INTERVAL="100000")
        exporter = exporter_from_settings(settings)
        service = MetricsService().start(settings, {"service.name": "trainer"}, run_id="run-1")
        service.attach_exporter(exporter)
        service.observe_batch(rank.batch, rank.meta)
        sent = [service.export_now()]
        assert exporter.submit(rank.meta, rank.batch)
        deadline = time.monotonic() + 20
        while exporter.counters()["metric_snapshots_received"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        sent += [service.export_now() for _ in range(3)]  # one in flight at a time: some refused
        assert exporter.submit(rank.meta, rank.batch)
        sent.append(service.export_now(last=True))  # the last one is queued even so
        assert sent[-1]
        counters = exporter.close(20)
        service.close()
    finally:
        silent.close()
    assert sent[0] and counters["metric_requests_sent"] == 0
    assert counters["metric_snapshots_received"] == sum(sent) == counters["metric_requests_failed"]
    assert counters["spans_exported"] == counters["spans_built"] > 0  # both batches, all spans
    assert counters["batches_received"] == 2


def test_a_broken_metrics_setting_costs_the_metrics_not_the_spans(tmp_path):
    from otel_profiler.export.export_config import export_config_from_settings as config_from_settings
    from otel_profiler.export.pipeline import Counters, Pipeline

    settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318",
                         OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="https://127.0.0.1:4318/v1/metrics",
                         OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE=str(tmp_path / "missing.pem"))
    warnings = []
    pipeline = Pipeline(config_from_settings(settings), Counters(), warn=warnings.append)
    assert pipeline.sink is not None and pipeline.metrics_sink is None
    assert len(warnings) == 1 and "OTLP metrics are off" in warnings[0]
    pipeline.close()
    off = config_from_settings(_settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318",
                                         OTEL_PROFILER_METRICS="false"))
    assert off.metrics_target is None and off.target is not None


def test_endpoint_descriptions_hide_credentials_in_the_url():
    from otel_profiler.shared.otlp_target import OtlpTarget

    text = OtlpTarget("https://user:s3cret@collector:4318/v1/traces?token=t0ken",
                      headers={"authorization": "Bearer abc"}).describe()
    assert "collector:4318/v1/traces" in text and "authorization" in text
    assert not any(secret in text for secret in ("s3cret", "user", "t0ken", "Bearer", "abc"))


def test_training_side_imports_no_protobuf_or_grpc():
    code = ("import sys, otel_profiler.export.exporter, otel_profiler.spans.build, otel_profiler.config,"
            " otel_profiler.metrics.publisher;"
            "bad = [m for m in sys.modules if m.startswith(('grpc', 'google.protobuf', 'opentelemetry'))];"
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_export_command_to_endpoint_and_files(tmp_path, receiver, capsys):
    folder = str(trace("hta/trace_filter"))
    assert main(["export", folder, "--endpoint", receiver.grpc_endpoint, "--protocol", "grpc",
                 "--span-budget", "300"]) == 0
    got = [proto_span(s) for _, s in receiver.collected.spans()]
    ranks = load_profile([folder]).ranks
    assert _received_gpu_ops(got) == sum(_gpu_op_count(r.batch) for r in ranks)
    ranks_seen = Counter(s["trace"][-8:] for s in got)
    assert set(ranks_seen) == {f"{r.rank:08x}" for r in ranks}
    # Both ranks' traces of a step share the run/step part of the trace id.
    roots = [s for s in got if not s["parent"]]
    by_step: dict[int, set] = {}
    for s in roots:
        by_step.setdefault(s["attrs"]["otel_profiler.step"], set()).add(s["trace"][:24])
    assert all(len(prefixes) == 1 for prefixes in by_step.values())
    out = tmp_path / "out.jsonl"
    assert main(["export", folder, "--output", str(out), "--span-budget", "300"]) == 0
    n = sum(len(ss["spans"]) for line in out.read_bytes().splitlines()
            for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"])
    assert n == len(got)
    pb = tmp_path / "out.pb"
    assert main(["export", folder, "--output", str(pb), "--span-budget", "300"]) == 0
    with OtlpReceiver() as again:
        assert main(["replay", str(pb), "--endpoint", again.http_endpoint]) == 0
        assert len(again.collected.spans()) == len(got)
    assert "exported" in capsys.readouterr().err


def test_export_command_bad_usage_and_unreachable_endpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert main(["export", str(trace(TRACE))]) == 2
    assert main(["export", str(trace(TRACE)), "--output", str(tmp_path / "x.txt")]) == 2
    assert main(["export", str(tmp_path / "missing.json")]) == 2
    monkeypatch.setenv("OTEL_PROFILER_EXPORT_RETRY_S", "0.3")
    assert main(["export", str(trace(TRACE)), "--endpoint", f"http://127.0.0.1:{free_port()}"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach" in err and "connection refused" in err  # said before reading the input


def test_spawned_exporter_does_not_rerun_the_main_script(tmp_path, receiver):
    script = tmp_path / "train.py"
    marker = tmp_path / "ran"
    script.write_text(
        "import os, sys\n"
        f"open({str(marker)!r}, 'a').write('x')\n"  # no __main__ guard, like many training scripts
        f"sys.path.insert(0, {str(REPO)!r}); sys.path.insert(0, {str(REPO / 'tests')!r})\n"
        "from otel_profiler import config\n"
        "from otel_profiler.export.exporter import exporter_from_settings\n"
        "from cuda_tracer.loading import load_profile\n"
        "from conftest import trace\n"
        f"r = load_profile([str(trace({TRACE!r}))]).ranks[0]\n"
        "e = exporter_from_settings(config.load())\n"
        "assert e.submit(r.meta, r.batch)\n"
        "print(e.close(20)['spans_exported'])\n")
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
               OTEL_PROFILER_SPOOL_DIR=str(tmp_path / "spool"))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) > 0
    assert marker.read_text() == "x"
    assert receiver.collected.spans()[0][0]["service.name"].string_value == "train"


def test_tls_errors_warn_and_never_hang(tmp_path, receiver, rank, capfd):
    # HTTPS against a plaintext receiver: a TLS error, final (dropped, counted), reported once.
    settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"https://127.0.0.1:{receiver.http_port}")
    exporter = exporter_from_settings(settings)
    exporter.submit(rank.meta, rank.batch)
    counters = exporter.close(10)
    assert counters["spans_dropped"] == counters["spans_built"] > 0
    # A certificate file that does not exist: the exporter reports it and drops, never crashes.
    settings = _settings(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"https://127.0.0.1:{receiver.http_port}",
                         OTEL_EXPORTER_OTLP_CERTIFICATE=str(tmp_path / "missing.pem"))
    exporter = exporter_from_settings(settings)
    exporter.submit(rank.meta, rank.batch)
    counters = exporter.close(10)
    assert counters["batches_failed"] == 1
    err = capfd.readouterr().err
    assert "TLS error" in err and "span exporter cannot start" in err
    assert not receiver.collected.requests


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_live_cpu_torch_run_delivers_steps_annotations_and_metrics(tmp_path, receiver, monkeypatch, protocol):
    torch = pytest.importorskip("torch")
    from otel_profiler import api

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT",
                       receiver.grpc_endpoint if protocol == "grpc" else receiver.http_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_PROFILER_SPOOL_DIR", str(tmp_path / "spool"))
    # A generous close: on a busy machine the exporter process may still be starting at exit (the
    # default close spools what it has not sent by then; the fault tests check that path).
    from otel_profiler.live import session

    monkeypatch.setattr(session, "CLOSE_NETWORK_S", 120.0)
    submitted = []  # what goes to the exporter process, which must not need torch to unpickle it
    real_submit = Exporter.submit
    monkeypatch.setattr(Exporter, "submit",
                        lambda self, meta, batch: submitted.append(meta) or real_submit(self, meta, batch))
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with api.Profiler(profile_dir=str(tmp_path / "prof"), summary_at_exit=False, auto_steps=False,
                      signal=False, steps="0:3"):
        for i in range(4):
            with api.step_context(i):
                with api.annotate("forward"):
                    loss = model(torch.randn(8, 16)).sum()
                with api.annotate("backward"):
                    loss.backward()
                opt.step()
                opt.zero_grad()
    spans = [proto_span(s) for _, s in receiver.collected.spans()]
    roots = {s["span"]: s for s in spans if s["name"] == "train.step"}
    assert sorted(s["attrs"]["otel_profiler.step"] for s in roots.values()) == [0, 1, 2, 3]
    for name in ("forward", "backward"):
        children = [s for s in spans if s["name"] == name]
        assert len(children) == 4
        assert all(roots[s["parent"]]["trace"] == s["trace"] for s in children)
    # Metrics went through the same exporter process; each step's exemplar names its step span.
    (step_metric,) = receiver.collected.metrics()["otel_profiler.step.duration"]
    (point,) = step_metric.histogram.data_points
    assert point.count == 4 and point.exemplars
    exported_roots = {(s["trace"], s["span"]) for s in roots.values()}
    assert {(e.trace_id.hex(), e.span_id.hex()) for e in point.exemplars} <= exported_roots
    assert submitted and all(_plain_values(meta) for meta in submitted)
    assert submitted[-1]["versions"]["torch"] == torch.__version__


def _plain_values(value: object) -> bool:
    """Only JSON's own types, not subclasses (torch's TorchVersion is a str whose pickle imports torch:
    the exporter process would load torch, 2 s and 500 MiB, to read the rank's metadata)."""
    if type(value) is dict:
        return all(type(k) is str and _plain_values(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return all(_plain_values(v) for v in value)
    return type(value) in (str, int, float, bool, type(None))


def test_spool_drains_by_itself_when_the_endpoint_comes_back(tmp_path, rank):
    from otel_profiler.export.exporter import ExportConfig, Exporter
    from otel_profiler.shared.otlp_target import OtlpTarget

    port = free_port()
    config = ExportConfig(target=OtlpTarget(f"http://127.0.0.1:{port}", "grpc", timeout_s=2),
                          spool_dir=str(tmp_path / "spool"), retry_s=0, probe_s=0.2,
                          span_options=options_from_settings(_settings(tmp_path)))
    exporter = Exporter(config)
    spool = tmp_path / "spool"
    assert exporter.submit(rank.meta, rank.batch)  # endpoint down: spooled
    deadline = time.monotonic() + 120  # generous: a busy machine is slow, the wait ends on the condition
    while exporter.counters()["requests_spooled"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    with OtlpReceiver(grpc_port=port) as receiver:  # back up: the next successful send drains the spool
        time.sleep(0.3)
        exporter.submit(dict(rank.meta, run_id="second"), rank.batch)
        deadline = time.monotonic() + 120
        while (exporter.counters()["spool_requests_delivered"] == 0 or list(spool.glob("*.pb"))) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        counters = exporter.close(10)
        n = len(receiver.collected.spans())
    assert counters["spool_requests_delivered"] >= 1 and counters["spans_dropped"] == 0
    assert n == counters["spans_spooled"] + counters["spans_exported"]
    assert not list(spool.glob("*.pb"))


def test_batches_held_while_the_queue_is_full_keep_each_steps_user_span_links(tmp_path, rank):
    import queue

    class FullOnce:
        """The exporter's queue, full for the first put only."""
        def __init__(self) -> None:
            self.items: list = []

        def put_nowait(self, item) -> None:
            if not self.items and not getattr(self, "refused", False):
                self.refused = True
                raise queue.Full
            self.items.append(item)

    exporter = exporter_from_settings(_settings(tmp_path, OTEL_PROFILER_OTLP_FILE=str(tmp_path / "spans.jsonl")))
    real, exporter._queue = exporter._queue, FullOnce()
    try:
        assert exporter.submit({**rank.meta, "user_spans": {1: ["a" * 32 + "b" * 16]}}, rank.batch)
        assert exporter.submit({**rank.meta, "user_spans": {2: ["c" * 32 + "d" * 16]}}, rank.batch)
        (meta, _), = exporter._queue.items
    finally:
        exporter._queue = real
        exporter.close(10)
    assert sorted(meta["user_spans"]) == [1, 2]
