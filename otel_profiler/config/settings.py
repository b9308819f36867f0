"""The settings as one typed, frozen object: each variable is a field of :class:`Settings`, declared
once with :func:`setting` (its variable's name, default, parser from ``parsers`` and one-line doc,
kept in the field's metadata as a :class:`Variable`). ``VARIABLES`` (every variable by name, in
declaration order: the order of docs/configuration.md) is read from these fields.

Naming rule: a field is its variable's name in lower case, without the ``OTEL_PROFILER_`` prefix
for the profiler's own variables (``OTEL_PROFILER_SPAN_BUDGET`` -> ``settings.span_budget``) and
whole for every other variable (``OTEL_SERVICE_NAME`` -> ``settings.otel_service_name``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` -> ``settings.otel_exporter_otlp_traces_endpoint``,
``TRACEPARENT`` -> ``settings.traceparent``); :func:`attribute_name` states it. What ``load``
resolves from several variables has its own name: ``service_name``, ``traces_target``,
``metrics_target``; a command's ``--endpoint``/``--protocol`` flags resolve theirs with
``traces_target_with``. ``settings.values`` is the read-only mapping of every value by variable name,
read by the rules that take a variable's name (the OTLP target resolution, the exporter names'
warnings) and by nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType
from typing import Any, Callable, Mapping, TypeVar

from ..shared.otlp_target import OtlpTarget, resolve_target
from ..shared.span_defaults import DEFAULT_SPAN_BUDGET, DEFAULT_WINDOW_NS
from .parsers import (
    ACTIVITY_GROUPS, Activities, Exporters, StepRange, parse_activities, parse_basic_auth, parse_bool,
    parse_choice, parse_compression, parse_endpoint, parse_exporters, parse_factor, parse_float, parse_int,
    parse_key_values, parse_or_default, parse_protocol, parse_step_range, parse_str, parse_traces_exporters)

T = TypeVar("T")
DAY_S = 86400.0
DEFAULT_OUTPUT_DIR = "./otel-profile"
DEFAULT_STEPS: StepRange | None = StepRange((1, 11))  # None: no step range
PROFILER_PREFIX = "OTEL_PROFILER_"


@dataclass(frozen=True)
class Variable:
    name: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    secret: bool = False  # never echo the value (OTLP headers carry credentials)


def setting(name: str, default: T, parse: Callable[[str], T], doc: str, secret: bool = False) -> T:
    """The field of :class:`Settings` standing for variable ``name`` (typed as its value)."""
    variable = Variable(name, default, parse, doc, secret)
    if isinstance(default, dict):  # the one default shared, as read-only as the settings
        return field(default_factory=lambda: default, metadata={"variable": variable})
    return field(default=default, metadata={"variable": variable})


def attribute_name(variable: str) -> str:
    """The field of ``variable`` (the naming rule above)."""
    return variable[len(PROFILER_PREFIX):].lower() if variable.startswith(PROFILER_PREFIX) else variable.lower()


@dataclass(frozen=True, repr=False, eq=False)  # never shown (secrets), compared as objects; and
class Settings:                                 # a quarter off the import of every command and job
    """Every setting, read and validated once by ``config.load``, never changed, passed to the session,
    exporter, metrics and commands: one field per variable (its value; its default when unset), then
    what ``load`` found and resolved: ``warnings`` (unusable: profiling turns itself off), ``notices``
    (one feature off, or a name not known), each signal's OTLP target (``None``: not sent over OTLP)
    and the service name."""

    # Standard OpenTelemetry SDK variables the profiler honours.
    otel_sdk_disabled: bool = setting(
        "OTEL_SDK_DISABLED", False, parse_bool,
        "Standard OpenTelemetry switch: true turns the profiler off.")
    otel_service_name: str = setting(
        "OTEL_SERVICE_NAME", "", parse_str,
        "Service name of the resource (default: the script name).")
    otel_resource_attributes: Mapping[str, str] = setting(
        "OTEL_RESOURCE_ATTRIBUTES", {}, parse_key_values,
        "Extra resource attributes, key=value pairs separated by commas.")
    traceparent: str = setting(
        "TRACEPARENT", "", parse_str,
        "W3C trace context of a parent process (a pipeline's span): each rank's run span becomes its "
        "child and every step trace links to the run span; malformed values are ignored with one warning.")
    tracestate: str = setting(
        "TRACESTATE", "", parse_str,
        "W3C trace state passed on with TRACEPARENT.")

    # The profiler's own switches.
    enabled: bool = setting(
        "OTEL_PROFILER_ENABLED", False, parse_bool,
        "Turn profiling on in any Python process that imports the sitecustomize bootstrap.")
    output_dir: str = setting(
        "OTEL_PROFILER_OUTPUT_DIR", DEFAULT_OUTPUT_DIR, parse_or_default(DEFAULT_OUTPUT_DIR),
        "Where profile folders are written (one sub-folder per run).")

    # ------------------------------------------------------------- live capture (the session)
    profile_dir: str = setting(
        "OTEL_PROFILER_PROFILE_DIR", "", parse_str,
        "Exact profile folder for this run (default: OTEL_PROFILER_OUTPUT_DIR/<run id>).")
    run_id: str = setting(
        "OTEL_PROFILER_RUN_ID", "", parse_str,
        "Run id shared by every process and rank of a job (default: torchrun/SLURM ids, else generated).")
    activities: Activities = setting(
        "OTEL_PROFILER_ACTIVITIES", Activities(ACTIVITY_GROUPS["gpu"]), parse_activities,
        "What detailed windows capture: gpu (kernel,memcpy,memset,sync,runtime,driver), cpu_op, "
        "memory (the allocator's [memory] events in windows, torch.cuda memory peaks per step).")
    memory_snapshot: int = setting(
        "OTEL_PROFILER_MEMORY_SNAPSHOT", 0, parse_int(minimum=0, maximum=10_000_000),
        "Record the last N CUDA allocation events and write a memory snapshot at exit (0: off).")
    cpu_sample_s: float = setting(
        "OTEL_PROFILER_CPU_SAMPLE_S", 1.0, parse_float(minimum=0.0, maximum=3600.0),
        "Seconds between the CPU utilization samples kept in the profile folder (0: off).")
    steps: StepRange | None = setting(
        "OTEL_PROFILER_STEPS", DEFAULT_STEPS, parse_step_range,
        "Detailed capture for steps START:STOP (STOP excluded); off for none.")
    every_steps: int = setting(
        "OTEL_PROFILER_EVERY_STEPS", 0, parse_int(minimum=0, maximum=10_000_000),
        "Also capture a window every N steps (0: off).")
    window_steps: int = setting(
        "OTEL_PROFILER_WINDOW_STEPS", 5, parse_int(minimum=1, maximum=100_000),
        "Length in steps of windows opened by EVERY_STEPS, a signal, the trigger port or a slow step.")
    window_part_steps: int = setting(
        "OTEL_PROFILER_WINDOW_PART_STEPS", 100, parse_int(minimum=1, maximum=100_000),
        "A detailed window is handed over in parts of this many steps, so long windows stay bounded.")
    duration_s: float = setting(
        "OTEL_PROFILER_DURATION_S", 0.0, parse_float(minimum=0.0, maximum=1e9),
        "Also capture the first N seconds of the run in detail (0: off).")
    slow_step_factor: float = setting(
        "OTEL_PROFILER_SLOW_STEP_FACTOR", 3.0, parse_factor(maximum=1000.0),
        "Capture the next steps when one step takes this many times the recent median (more than 1; "
        "0: off).")
    signal: bool = setting(
        "OTEL_PROFILER_SIGNAL", True, parse_bool,
        "SIGUSR2 opens a detailed window on a running job (only if the program has no SIGUSR2 handler).")
    trigger_port: int = setting(
        "OTEL_PROFILER_TRIGGER_PORT", 0, parse_int(minimum=0, maximum=65535),
        "Trigger port (plus LOCAL_RANK): a datagram from the same user to the job's trigger socket opens "
        "a detailed window, one per 5 s (0: off).")
    remote_poll_s: float = setting(
        "OTEL_PROFILER_REMOTE_POLL_S", 5.0, parse_float(minimum=0.0, maximum=3600.0),
        "With OTEL_PROFILER_UPLOAD: each rank reports its step to the app this often and hears of capture "
        "requests for its run (`otel-profiler trigger --run`), from a thread of its own (0: off).")
    auto_steps: bool = setting(
        "OTEL_PROFILER_AUTO_STEPS", True, parse_bool,
        "Find training steps without code: optimizer steps, else backward passes, else a time window "
        "(off when the code calls step()).")
    nvtx: bool = setting(
        "OTEL_PROFILER_NVTX", False, parse_bool,
        "Also emit annotate() ranges as NVTX ranges (Nsight Systems) when torch sees a GPU.")
    flush_events: int = setting(
        "OTEL_PROFILER_FLUSH_EVENTS", 200_000, parse_int(minimum=1000, maximum=100_000_000),
        "Write a part to the profile folder once this many annotation/step events are buffered.")
    flush_interval_s: float = setting(
        "OTEL_PROFILER_FLUSH_INTERVAL_S", 60.0, parse_float(minimum=0.1, maximum=DAY_S),
        "Write buffered events to the profile folder at least this often.")
    upload: str = setting(
        "OTEL_PROFILER_UPLOAD", "", parse_str,
        "URL of a Profiler app (`otel-profiler serve`): each profiled process uploads its profile folder "
        "there after the job, spooled and retried, never delaying or failing the job (needs the token).")
    upload_token: str = setting(
        "OTEL_PROFILER_UPLOAD_TOKEN", "", parse_str,
        "API token for OTEL_PROFILER_UPLOAD (`otel-profiler users token`); never logged.", secret=True)
    scheduler: str = setting(
        "OTEL_PROFILER_SCHEDULER", "", parse_str,
        "Dask scheduler address (tcp://HOST:PORT) for the multi-rank commands (summary, report, diff, "
        "export of a folder of ranks); needs the cluster extra (default: local processes).")
    pure_python: bool = setting(
        "OTEL_PROFILER_PURE_PYTHON", False, parse_bool,
        "Read and analyse traces without the compiled extensions (the Kineto JSON scanner, the operator "
        "nesting): the same results, slower.")
    log: str = setting(
        "OTEL_PROFILER_LOG", "off", parse_choice("off", "debug", "info"),
        "debug: the `otel_profiler` logger writes to stderr every failure the profiler handled "
        "quietly, with its cause (for a degradation you want explained); info: less; off: nothing.")
    peak_tflops: float = setting(
        "OTEL_PROFILER_PEAK_TFLOPS", 0.0, parse_float(minimum=0.0, maximum=1e7),
        "Peak dense TFLOP/s of one device for MFU and the roofline (0: from the table of known "
        "devices, by the trace's device name and the data type that did most of the work).")
    peak_tb_per_s: float = setting(
        "OTEL_PROFILER_PEAK_TB_PER_S", 0.0, parse_float(minimum=0.0, maximum=1e4),
        "Peak memory bandwidth of one device in TB/s for the roofline (0: from the table of known devices).")
    summary_at_exit: bool = setting(
        "OTEL_PROFILER_SUMMARY_AT_EXIT", True, parse_bool,
        "At exit, each profiled process names its folder, and summary.json is written after the job "
        "by one detached low-priority process per folder (`run` turns this off in the job and "
        "summarizes once, after it).")

    # --------------------------------------------------------- exporter switches (standard)
    otel_traces_exporter: Exporters = setting(
        "OTEL_TRACES_EXPORTER", Exporters(("otlp",)), parse_traces_exporters,
        "Standard OpenTelemetry switch, comma list of otlp (spans to the OTLP endpoint, when one is "
        "set), console (OTLP JSON lines on stdout) or none; others are ignored with one warning.")

    # ------------------------------------------ OTLP export (the exporter, export, replay)
    # Standard OTLP exporter variables first: a signal's own variant (TRACES_, METRICS_) wins over the
    # general one; unset signal variants are None (= use the general one).
    otel_exporter_otlp_endpoint: str = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT", '', parse_endpoint,
        "OTLP endpoint for all signals (URL; set it to turn export on). HTTP appends /v1/traces or /v1/metrics.")
    otel_exporter_otlp_protocol: str = setting(
        "OTEL_EXPORTER_OTLP_PROTOCOL", 'http/protobuf', parse_protocol,
        "OTLP protocol for all signals: grpc, http/protobuf or http/json.")
    otel_exporter_otlp_headers: Mapping[str, str] = setting(
        "OTEL_EXPORTER_OTLP_HEADERS", {}, parse_key_values,
        "Request headers for all signals, key=value pairs separated by commas (values never logged).", secret=True)
    otel_exporter_otlp_timeout: int = setting(
        "OTEL_EXPORTER_OTLP_TIMEOUT", 10000, parse_int(minimum=1, maximum=600_000),
        "Timeout of one OTLP export request for all signals, in milliseconds.")
    otel_exporter_otlp_compression: str = setting(
        "OTEL_EXPORTER_OTLP_COMPRESSION", 'none', parse_compression,
        "Compression of OTLP requests for all signals: gzip or none.")
    otel_exporter_otlp_certificate: str = setting(
        "OTEL_EXPORTER_OTLP_CERTIFICATE", '', parse_str,
        "PEM file of trusted certificates to verify the server for all signals (TLS).")
    otel_exporter_otlp_client_key: str = setting(
        "OTEL_EXPORTER_OTLP_CLIENT_KEY", '', parse_str,
        "PEM private key of the client for mutual TLS (all signals).", secret=True)
    otel_exporter_otlp_client_certificate: str = setting(
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", '', parse_str,
        "PEM client certificate chain for mutual TLS (all signals).")
    otel_exporter_otlp_insecure: bool = setting(
        "OTEL_EXPORTER_OTLP_INSECURE", False, parse_bool,
        "gRPC without TLS for all signals when the endpoint has no http/https scheme.")
    otel_exporter_otlp_traces_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None, parse_endpoint,
        "OTLP endpoint for traces (URL; set it to turn export on). Used as is.")
    otel_exporter_otlp_traces_protocol: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", None, parse_protocol,
        "OTLP protocol for traces: grpc, http/protobuf or http/json.")
    otel_exporter_otlp_traces_headers: Mapping[str, str] | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS", None, parse_key_values,
        "Request headers for traces, key=value pairs separated by commas (values never logged).", secret=True)
    otel_exporter_otlp_traces_timeout: int | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", None, parse_int(minimum=1, maximum=600_000),
        "Timeout of one OTLP export request for traces, in milliseconds.")
    otel_exporter_otlp_traces_compression: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", None, parse_compression,
        "Compression of OTLP requests for traces: gzip or none.")
    otel_exporter_otlp_traces_certificate: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", None, parse_str,
        "PEM file of trusted certificates to verify the server for traces (TLS).")
    otel_exporter_otlp_traces_client_key: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", None, parse_str,
        "PEM private key of the client for mutual TLS (traces).", secret=True)
    otel_exporter_otlp_traces_client_certificate: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", None, parse_str,
        "PEM client certificate chain for mutual TLS (traces).")
    otel_exporter_otlp_traces_insecure: bool | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_INSECURE", None, parse_bool,
        "gRPC without TLS for traces when the endpoint has no http/https scheme.")
    otel_exporter_otlp_metrics_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", None, parse_endpoint,
        "OTLP endpoint for metrics (URL; set it to turn export on). Used as is.")
    otel_exporter_otlp_metrics_protocol: str | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", None, parse_protocol,
        "OTLP protocol for metrics: grpc, http/protobuf or http/json.")
    otel_exporter_otlp_metrics_headers: Mapping[str, str] | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS", None, parse_key_values,
        "Request headers for metrics, key=value pairs separated by commas (values never logged).", secret=True)
    otel_exporter_otlp_metrics_timeout: int | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", None, parse_int(minimum=1, maximum=600_000),
        "Timeout of one OTLP export request for metrics, in milliseconds.")
    otel_exporter_otlp_metrics_compression: str | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", None, parse_compression,
        "Compression of OTLP requests for metrics: gzip or none.")
    otel_exporter_otlp_metrics_certificate: str | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", None, parse_str,
        "PEM file of trusted certificates to verify the server for metrics (TLS).")
    otel_exporter_otlp_metrics_client_key: str | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", None, parse_str,
        "PEM private key of the client for mutual TLS (metrics).", secret=True)
    otel_exporter_otlp_metrics_client_certificate: str | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE", None, parse_str,
        "PEM client certificate chain for mutual TLS (metrics).")
    otel_exporter_otlp_metrics_insecure: bool | None = setting(
        "OTEL_EXPORTER_OTLP_METRICS_INSECURE", None, parse_bool,
        "gRPC without TLS for metrics when the endpoint has no http/https scheme.")

    # The profiler's own export switches.
    profiles_exporter: str = setting(
        "OTEL_PROFILER_PROFILES_EXPORTER", "none", parse_choice("none", "otlp"),
        "otlp: also send GPU and CPU time by call stack as OpenTelemetry profiles (an alpha signal; the "
        "Collector needs --feature-gates=service.profilesSupport) to the OTLP endpoint; none: off.")
    mark_user_spans: bool = setting(
        "OTEL_PROFILER_MARK_USER_SPANS", False, parse_bool,
        "When the job's own OpenTelemetry span is current as a step begins, add the step's trace id to "
        "it as the event otel_profiler.step (the step root links to that span either way).")
    otlp_file: str = setting(
        "OTEL_PROFILER_OTLP_FILE", "", parse_str,
        "Also write spans as OTLP JSON lines (Collector file-exporter format) to this file.")
    span_budget: int = setting(
        "OTEL_PROFILER_SPAN_BUDGET", DEFAULT_SPAN_BUDGET, parse_int(minimum=10, maximum=1_000_000),
        "Spans per trace (step): the costliest GPU ops are spans, the rest aggregated per kernel name.")
    span_window_s: float = setting(
        "OTEL_PROFILER_SPAN_WINDOW_S", DEFAULT_WINDOW_NS / 1e9, parse_float(minimum=0.001, maximum=DAY_S),
        "Events outside every step are grouped into traces of windows this long (seconds).")
    export_queue: int = setting(
        "OTEL_PROFILER_EXPORT_QUEUE", 64, parse_int(minimum=1, maximum=10_000),
        "Batches the exporter process may have queued; more are dropped (and counted), never waited for.")
    spool_dir: str = setting(
        "OTEL_PROFILER_SPOOL_DIR", "", parse_str,
        "Where undeliverable OTLP requests are spooled (default: OTEL_PROFILER_OUTPUT_DIR/otlp-spool).")
    spool_max_mb: int = setting(
        "OTEL_PROFILER_SPOOL_MAX_MB", 1024, parse_int(minimum=0, maximum=1 << 20),
        "Size limit of the spool in MiB; requests beyond it are dropped (and counted).")
    export_retry_s: float = setting(
        "OTEL_PROFILER_EXPORT_RETRY_S", 30.0, parse_float(minimum=0.0, maximum=DAY_S),
        "How long one request is retried (exponential backoff) before it is spooled.")

    # ----------------------------------------------------------------- metrics (the publisher)
    metrics: bool = setting(
        "OTEL_PROFILER_METRICS", True, parse_bool,
        "Compute metrics (system samplers, profile-derived) when a Prometheus port or an OTLP endpoint is set.")
    metrics_interval_s: float = setting(
        "OTEL_PROFILER_METRICS_INTERVAL_S", 1.0, parse_float(minimum=0.05, maximum=3600.0),
        "Seconds between two samples of GPU (NVML) and CPU (psutil) metrics.")
    prometheus_port: int = setting(
        "OTEL_PROFILER_PROMETHEUS_PORT", 0, parse_int(minimum=0, maximum=65535),
        "Serve /metrics on this port plus LOCAL_RANK (0: no Prometheus endpoint).")
    prometheus_host: str = setting(
        "OTEL_PROFILER_PROMETHEUS_HOST", "127.0.0.1", parse_or_default("127.0.0.1"),
        "Address the /metrics endpoint binds (0.0.0.0 to let other hosts scrape).")
    prometheus_cert_file: str = setting(
        "OTEL_PROFILER_PROMETHEUS_CERT_FILE", "", parse_str,
        "PEM certificate (chain) file: serve /metrics over HTTPS (needs the key file too).")
    prometheus_key_file: str = setting(
        "OTEL_PROFILER_PROMETHEUS_KEY_FILE", "", parse_str,
        "PEM private key file of the /metrics HTTPS certificate.", secret=True)
    prometheus_basic_auth: str = setting(
        "OTEL_PROFILER_PROMETHEUS_BASIC_AUTH", "", parse_basic_auth,
        "USER:PASSWORD required from scrapers (HTTP basic auth; use with TLS).", secret=True)
    otel_metrics_exporter: Exporters = setting(
        "OTEL_METRICS_EXPORTER", Exporters(("otlp",)), parse_exporters,
        "Standard OpenTelemetry switch, comma list of otlp (when an OTLP endpoint is set), prometheus "
        "(/metrics on OTEL_EXPORTER_PROMETHEUS_HOST:PORT), console (stdout) or none; others are ignored "
        "with one warning.")
    otel_exporter_prometheus_host: str = setting(
        "OTEL_EXPORTER_PROMETHEUS_HOST", "localhost", parse_or_default("localhost"),
        "Address of the /metrics endpoint OTEL_METRICS_EXPORTER=prometheus serves (when "
        "OTEL_PROFILER_PROMETHEUS_PORT is 0).")
    otel_exporter_prometheus_port: int = setting(
        "OTEL_EXPORTER_PROMETHEUS_PORT", 9464, parse_int(minimum=1, maximum=65535),
        "Port (plus LOCAL_RANK) of the /metrics endpoint OTEL_METRICS_EXPORTER=prometheus serves.")
    otel_metric_export_interval: int = setting(
        "OTEL_METRIC_EXPORT_INTERVAL", 60000, parse_int(minimum=100, maximum=86_400_000),
        "Milliseconds between two OTLP metric exports (each sends the cumulative values so far).")

    # ------------------------------------------------------------ what load found and resolved
    warnings: tuple[str, ...] = ()  # unusable: profiling turns itself off
    notices: tuple[str, ...] = ()  # one feature off, or a name not known
    traces_target: OtlpTarget | None = None
    metrics_target: OtlpTarget | None = None  # also None when metrics are off
    service_name: str = "python"  # OTEL_SERVICE_NAME, else service.name of the resource, else the script

    @property
    def ok(self) -> bool:
        return not self.warnings

    def traces_target_with(self, endpoint: str | None, protocol: str | None) -> OtlpTarget | None:
        """The traces target when a command's flags give the endpoint or the protocol (they
        override the variables: ``shared.otlp_target.resolve_target``)."""
        return resolve_target(self.values, endpoint, protocol)

    def exporter_warnings(self) -> list[str]:
        """One line per exporter name of ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` that is
        ignored here."""
        from .parsers import exporter_warnings

        return exporter_warnings(self.values)

    @cached_property
    def values(self) -> Mapping[str, Any]:
        """Every variable's value by variable name (read-only)."""
        return MappingProxyType({name: getattr(self, attribute) for name, attribute in ATTRIBUTES.items()})


VARIABLES: dict[str, Variable] = {f.metadata["variable"].name: f.metadata["variable"]
                                  for f in fields(Settings) if "variable" in f.metadata}
"""Every variable by name, in declaration order."""
ATTRIBUTES: dict[str, str] = {f.metadata["variable"].name: f.name
                              for f in fields(Settings) if "variable" in f.metadata}
"""The field of each variable, by variable name."""
