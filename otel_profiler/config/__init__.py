"""Every ``OTEL_PROFILER_*`` environment variable, defined, documented and validated in one place.

Each variable is declared once with :func:`define` (name, default, parser from ``parsers``, one-line
doc). ``load``
reads them all from an environment mapping and never raises. A number out of its range keeps the
variable's default, with one notice saying so (``Settings.notices``); so does a port that is out of
range once the process's local rank is added to it (that feature is off instead when it has no
usable default). A value that cannot be read at all (not a number, an unknown word) yields one
warning naming the variable, the value and what is expected, and the profiler treats the settings as
unusable (``ok`` is False) so that profiling turns itself off instead of guessing. The README's
variable table is generated from this module (``python -m otel_profiler.config``).

Standard OpenTelemetry variables (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_SDK_DISABLED``, ``OTEL_EXPORTER_OTLP_*``) are declared here too, so one module knows every
variable the profiler reads.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ..shared.span_defaults import DEFAULT_SPAN_BUDGET, DEFAULT_WINDOW_NS
from .parsers import (  # noqa: F401  (the parsers and their errors are part of this module's interface)
    ACTIVITIES, ACTIVITY_GROUPS, Activities, ConfigError, FeatureOff, OutOfRange, StepRange,
    local_rank, parse_activities, parse_basic_auth, parse_bool, parse_choice, parse_compression,
    parse_endpoint, parse_factor, parse_float, parse_int, parse_key_values, parse_or_default,
    parse_protocol, parse_step_range, parse_str)


DAY_S = 86400.0


@dataclass(frozen=True)
class Variable:
    name: str
    default: Any
    parse: Callable[[str], Any]
    doc: str
    secret: bool = False  # never echo the value (OTLP headers carry credentials)


VARIABLES: dict[str, Variable] = {}


def define(name: str, default: Any, parse: Callable[[str], Any], doc: str,
           secret: bool = False) -> Variable:
    if name in VARIABLES:
        raise RuntimeError(f"{name} defined twice")
    VARIABLES[name] = var = Variable(name, default, parse, doc, secret)
    return var


# ------------------------------------------------------------------------------ the variables
# Standard OpenTelemetry SDK variables the profiler honours.
define("OTEL_SDK_DISABLED", False, parse_bool, "Standard OpenTelemetry switch: true turns the profiler off.")
define("OTEL_SERVICE_NAME", "", parse_str, "Service name of the resource (default: the script name).")
define("OTEL_RESOURCE_ATTRIBUTES", {}, parse_key_values,
       "Extra resource attributes, key=value pairs separated by commas.")
define("TRACEPARENT", "", parse_str,
       "W3C trace context of a parent process (a pipeline's span): each rank's run span becomes its "
       "child and every step trace links to the run span; malformed values are ignored with one warning.")
define("TRACESTATE", "", parse_str, "W3C trace state passed on with TRACEPARENT.")

# The profiler's own switches.
define("OTEL_PROFILER_ENABLED", False, parse_bool,
       "Turn profiling on in any Python process that imports the sitecustomize bootstrap.")
DEFAULT_OUTPUT_DIR = "./otel-profile"
define("OTEL_PROFILER_OUTPUT_DIR", DEFAULT_OUTPUT_DIR, parse_or_default(DEFAULT_OUTPUT_DIR),
       "Where profile folders are written (one sub-folder per run).")


# ----------------------------------------------------------------- live capture (the session)
define("OTEL_PROFILER_PROFILE_DIR", "", parse_str,
       "Exact profile folder for this run (default: OTEL_PROFILER_OUTPUT_DIR/<run id>).")
define("OTEL_PROFILER_RUN_ID", "", parse_str,
       "Run id shared by every process and rank of a job (default: torchrun/SLURM ids, else generated).")
define("OTEL_PROFILER_ACTIVITIES", Activities(ACTIVITY_GROUPS["gpu"]), parse_activities,
       "What detailed windows capture: gpu (kernel,memcpy,memset,sync,runtime,driver), cpu_op, "
       "memory (the allocator's [memory] events in windows, torch.cuda memory peaks per step).")
define("OTEL_PROFILER_MEMORY_SNAPSHOT", 0, parse_int(minimum=0, maximum=10_000_000),
       "Record the last N CUDA allocation events and write a memory snapshot at exit (0: off).")
define("OTEL_PROFILER_CPU_SAMPLE_S", 1.0, parse_float(minimum=0.0, maximum=3600.0),
       "Seconds between the CPU utilization samples kept in the profile folder (0: off).")
define("OTEL_PROFILER_STEPS", StepRange((1, 11)), parse_step_range,
       "Detailed capture for steps START:STOP (STOP excluded); off for none.")
define("OTEL_PROFILER_EVERY_STEPS", 0, parse_int(minimum=0, maximum=10_000_000),
       "Also capture a window every N steps (0: off).")
define("OTEL_PROFILER_WINDOW_STEPS", 5, parse_int(minimum=1, maximum=100_000),
       "Length in steps of windows opened by EVERY_STEPS, a signal, the trigger port or a slow step.")
define("OTEL_PROFILER_WINDOW_PART_STEPS", 100, parse_int(minimum=1, maximum=100_000),
       "A detailed window is handed over in parts of this many steps, so long windows stay bounded.")
define("OTEL_PROFILER_DURATION_S", 0.0, parse_float(minimum=0.0, maximum=1e9),
       "Also capture the first N seconds of the run in detail (0: off).")
define("OTEL_PROFILER_SLOW_STEP_FACTOR", 3.0, parse_factor(maximum=1000.0),
       "Capture the next steps when one step takes this many times the recent median (more than 1; "
       "0: off).")
define("OTEL_PROFILER_SIGNAL", True, parse_bool,
       "SIGUSR2 opens a detailed window on a running job (only if the program has no SIGUSR2 handler).")
define("OTEL_PROFILER_TRIGGER_PORT", 0, parse_int(minimum=0, maximum=65535),
       "Trigger port (plus LOCAL_RANK): a datagram from the same user to the job's trigger socket opens a detailed window, one per 5 s (0: off).")
define("OTEL_PROFILER_AUTO_STEPS", True, parse_bool,
       "Find training steps without code: optimizer steps, else backward passes, else a time window "
       "(off when the code calls step()).")
define("OTEL_PROFILER_NVTX", False, parse_bool,
       "Also emit annotate() ranges as NVTX ranges (Nsight Systems) when torch sees a GPU.")
define("OTEL_PROFILER_FLUSH_EVENTS", 200_000, parse_int(minimum=1000, maximum=100_000_000),
       "Write a part to the profile folder once this many annotation/step events are buffered.")
define("OTEL_PROFILER_FLUSH_INTERVAL_S", 60.0, parse_float(minimum=0.1, maximum=DAY_S),
       "Write buffered events to the profile folder at least this often.")
define("OTEL_PROFILER_UPLOAD", "", parse_str,
       "URL of a Profiler app (`otel-profiler serve`): each profiled process uploads its profile folder "
       "there after the job, spooled and retried, never delaying or failing the job (needs the token).")
define("OTEL_PROFILER_UPLOAD_TOKEN", "", parse_str,
       "API token for OTEL_PROFILER_UPLOAD (`otel-profiler users token`); never logged.", secret=True)
define("OTEL_PROFILER_SCHEDULER", "", parse_str,
       "Dask scheduler address (tcp://HOST:PORT) for the multi-rank commands (summary, report, diff, "
       "export of a folder of ranks); needs the cluster extra (default: local processes).")
define("OTEL_PROFILER_PURE_PYTHON", False, parse_bool,
       "Read Kineto JSON with the Python scanner instead of the compiled one (same results, slower).")
define("OTEL_PROFILER_LOG", "off", parse_choice("off", "debug", "info"),
       "debug: the `otel_profiler` logger writes to stderr every failure the profiler handled "
       "quietly, with its cause (for a degradation you want explained); info: less; off: nothing.")
define("OTEL_PROFILER_SUMMARY_AT_EXIT", True, parse_bool,
       "At exit, each profiled process names its folder, and summary.json is written after the job "
       "by one detached low-priority process per folder (`run` turns this off in the job and "
       "summarizes once, after it).")

# ------------------------------------------------------------ exporter switches (standard)
class Exporters(tuple):
    """The exporter names of ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` that the profiler
    knows (``unknown``: the others, each ignored with one warning, never an error)."""

    unknown: tuple[str, ...] = ()

    def __str__(self) -> str:
        return ",".join(self) or "none"


EXPORTER_NAMES = {"OTEL_TRACES_EXPORTER": ("otlp", "console", "none"),
                  "OTEL_METRICS_EXPORTER": ("otlp", "prometheus", "console", "none")}


def _exporter_parser(known: tuple[str, ...]) -> Callable[[str], Exporters]:
    def parse(text: str) -> Exporters:
        names = [n.strip().lower() for n in text.split(",") if n.strip()]
        out = Exporters(n for n in dict.fromkeys(names) if n in known and n != "none")
        out.unknown = tuple(n for n in dict.fromkeys(names) if n not in known)
        return out
    return parse


def exporter_warnings(values: Mapping[str, Any]) -> list[str]:
    """One line per exporter name the profiler ignores (it turns off only what it names)."""
    out = []
    for name, known in EXPORTER_NAMES.items():
        for unknown in getattr(values.get(name), "unknown", ()):
            out.append(f"{name}: exporter {unknown!r} is not supported here (supported: "
                       f"{', '.join(known)}); it is ignored, the other settings still apply")
    return out


parse_exporters = _exporter_parser(EXPORTER_NAMES["OTEL_METRICS_EXPORTER"])
define("OTEL_TRACES_EXPORTER", Exporters(("otlp",)), _exporter_parser(EXPORTER_NAMES["OTEL_TRACES_EXPORTER"]),
       "Standard OpenTelemetry switch, comma list of otlp (spans to the OTLP endpoint, when one is "
       "set), console (OTLP JSON lines on stdout) or none; others are ignored with one warning.")


# ------------------------------------------------------------ OTLP export (the exporter, export, replay)
# Standard OTLP exporter variables first: a signal's own variant (TRACES_, METRICS_) wins over the
# general one; unset signal variants default to None (= use the general one).
for _prefix, _what in (("OTEL_EXPORTER_OTLP_", "all signals"), ("OTEL_EXPORTER_OTLP_TRACES_", "traces"),
                       ("OTEL_EXPORTER_OTLP_METRICS_", "metrics")):
    _general = _prefix == "OTEL_EXPORTER_OTLP_"
    define(f"{_prefix}ENDPOINT", "" if _general else None, parse_endpoint,
           f"OTLP endpoint for {_what} (URL; set it to turn export on). "
           + ("HTTP appends /v1/traces or /v1/metrics." if _general else "Used as is."))
    define(f"{_prefix}PROTOCOL", "http/protobuf" if _general else None, parse_protocol,
           f"OTLP protocol for {_what}: grpc, http/protobuf or http/json.")
    define(f"{_prefix}HEADERS", {} if _general else None, parse_key_values,
           f"Request headers for {_what}, key=value pairs separated by commas (values never logged).",
           secret=True)
    define(f"{_prefix}TIMEOUT", 10000 if _general else None, parse_int(minimum=1, maximum=600_000),
           f"Timeout of one OTLP export request for {_what}, in milliseconds.")
    define(f"{_prefix}COMPRESSION", "none" if _general else None, parse_compression,
           f"Compression of OTLP requests for {_what}: gzip or none.")
    define(f"{_prefix}CERTIFICATE", "" if _general else None, parse_str,
           f"PEM file of trusted certificates to verify the server for {_what} (TLS).")
    define(f"{_prefix}CLIENT_KEY", "" if _general else None, parse_str,
           f"PEM private key of the client for mutual TLS ({_what}).", secret=True)
    define(f"{_prefix}CLIENT_CERTIFICATE", "" if _general else None, parse_str,
           f"PEM client certificate chain for mutual TLS ({_what}).")
    define(f"{_prefix}INSECURE", False if _general else None, parse_bool,
           f"gRPC without TLS for {_what} when the endpoint has no http/https scheme.")

# The profiler's own export switches.
define("OTEL_PROFILER_PROFILES_EXPORTER", "none", parse_choice("none", "otlp"),
       "otlp: also send GPU and CPU time by call stack as OpenTelemetry profiles (an alpha signal; the "
       "Collector needs --feature-gates=service.profilesSupport) to the OTLP endpoint; none: off.")
define("OTEL_PROFILER_MARK_USER_SPANS", False, parse_bool,
       "When the job's own OpenTelemetry span is current as a step begins, add the step's trace id to "
       "it as the event otel_profiler.step (the step root links to that span either way).")
define("OTEL_PROFILER_OTLP_FILE", "", parse_str,
       "Also write spans as OTLP JSON lines (Collector file-exporter format) to this file.")
define("OTEL_PROFILER_SPAN_BUDGET", DEFAULT_SPAN_BUDGET, parse_int(minimum=10, maximum=1_000_000),
       "Spans per trace (step): the costliest GPU ops are spans, the rest aggregated per kernel name.")
define("OTEL_PROFILER_SPAN_WINDOW_S", DEFAULT_WINDOW_NS / 1e9, parse_float(minimum=0.001, maximum=DAY_S),
       "Events outside every step are grouped into traces of windows this long (seconds).")
define("OTEL_PROFILER_EXPORT_QUEUE", 64, parse_int(minimum=1, maximum=10_000),
       "Batches the exporter process may have queued; more are dropped (and counted), never waited for.")
define("OTEL_PROFILER_SPOOL_DIR", "", parse_str,
       "Where undeliverable OTLP requests are spooled (default: OTEL_PROFILER_OUTPUT_DIR/otlp-spool).")
define("OTEL_PROFILER_SPOOL_MAX_MB", 1024, parse_int(minimum=0, maximum=1 << 20),
       "Size limit of the spool in MiB; requests beyond it are dropped (and counted).")
define("OTEL_PROFILER_EXPORT_RETRY_S", 30.0, parse_float(minimum=0.0, maximum=DAY_S),
       "How long one request is retried (exponential backoff) before it is spooled.")


# ------------------------------------------------------------------------ metrics (the publisher)
define("OTEL_PROFILER_METRICS", True, parse_bool,
       "Compute metrics (system samplers, profile-derived) when a Prometheus port or an OTLP endpoint is set.")
define("OTEL_PROFILER_METRICS_INTERVAL_S", 1.0, parse_float(minimum=0.05, maximum=3600.0),
       "Seconds between two samples of GPU (NVML) and CPU (psutil) metrics.")
define("OTEL_PROFILER_PROMETHEUS_PORT", 0, parse_int(minimum=0, maximum=65535),
       "Serve /metrics on this port plus LOCAL_RANK (0: no Prometheus endpoint).")
define("OTEL_PROFILER_PROMETHEUS_HOST", "127.0.0.1", parse_or_default("127.0.0.1"),
       "Address the /metrics endpoint binds (0.0.0.0 to let other hosts scrape).")
define("OTEL_PROFILER_PROMETHEUS_CERT_FILE", "", parse_str,
       "PEM certificate (chain) file: serve /metrics over HTTPS (needs the key file too).")
define("OTEL_PROFILER_PROMETHEUS_KEY_FILE", "", parse_str,
       "PEM private key file of the /metrics HTTPS certificate.", secret=True)
define("OTEL_PROFILER_PROMETHEUS_BASIC_AUTH", "", parse_basic_auth,
       "USER:PASSWORD required from scrapers (HTTP basic auth; use with TLS).", secret=True)
define("OTEL_METRICS_EXPORTER", Exporters(("otlp",)), parse_exporters,
       "Standard OpenTelemetry switch, comma list of otlp (when an OTLP endpoint is set), prometheus "
       "(/metrics on OTEL_EXPORTER_PROMETHEUS_HOST:PORT), console (stdout) or none; others are ignored "
       "with one warning.")
define("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost", parse_or_default("localhost"),
       "Address of the /metrics endpoint OTEL_METRICS_EXPORTER=prometheus serves (when "
       "OTEL_PROFILER_PROMETHEUS_PORT is 0).")
define("OTEL_EXPORTER_PROMETHEUS_PORT", 9464, parse_int(minimum=1, maximum=65535),
       "Port (plus LOCAL_RANK) of the /metrics endpoint OTEL_METRICS_EXPORTER=prometheus serves.")
define("OTEL_METRIC_EXPORT_INTERVAL", 60000, parse_int(minimum=100, maximum=86_400_000),
       "Milliseconds between two OTLP metric exports (each sends the cumulative values so far).")


# ---------------------------------------------------------------------------------- loading
@dataclass(frozen=True)
class Settings:
    """Every setting, read and validated once by :func:`load`, never changed, passed to the session, exporter,
    metrics and commands. ``settings["OTEL_PROFILER_STEPS"]`` is a value (its ``define`` default when unset).
    Resolved once: each signal's OTLP target (``None``: not sent over OTLP) and the service name."""

    values: Mapping[str, Any]
    warnings: tuple[str, ...] = ()  # unusable: profiling turns itself off
    notices: tuple[str, ...] = ()  # one feature off, or a name not known
    traces_target: Any = None  # export.sinks.OtlpTarget | None
    metrics_target: Any = None  # export.sinks.OtlpTarget | None (also None when metrics are off)
    service_name: str = "python"  # OTEL_SERVICE_NAME, else service.name of the resource, else the script

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))  # read-only

    @property
    def ok(self) -> bool:
        return not self.warnings

    def __getitem__(self, name: str) -> Any:
        return self.values[name]


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every defined variable, resolve the OTLP targets. Never raises."""
    from ..shared.otlp_target import resolve_target

    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    warnings: list[str] = []
    notices: list[str] = []
    for var in VARIABLES.values():
        raw = env.get(var.name)
        if raw is None:
            values[var.name] = var.default
            continue
        try:
            values[var.name] = var.parse(raw)
        except OutOfRange as exc:
            notices.append(f"{var.name}={_shown(raw)}: {exc}; the default {_number(var.default)} is kept")
            values[var.name] = var.default
        except ConfigError as exc:
            shown = "<hidden>" if var.secret else _shown(raw)
            (notices if isinstance(exc, FeatureOff) else warnings).append(f"{var.name}={shown}: {exc}")
            values[var.name] = exc.off_value if isinstance(exc, FeatureOff) else var.default
    notices += _ports_with_rank(values, env)
    notices += unknown_names(env)
    metrics = values["OTEL_PROFILER_METRICS"] and not values["OTEL_SDK_DISABLED"]
    return Settings(values, tuple(warnings), tuple(notices),
                    traces_target=resolve_target(values),
                    metrics_target=resolve_target(values, signal="metrics") if metrics else None,
                    service_name=values["OTEL_SERVICE_NAME"]
                    or values["OTEL_RESOURCE_ATTRIBUTES"].get("service.name") or script_name())


def _ports_with_rank(values: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """Each local rank listens on a port plus its local rank: one notice per port that this
    puts past 65535 (or below 1), and that feature off (the trigger port, the profiler's
    /metrics port, or ``prometheus`` in ``OTEL_METRICS_EXPORTER``), never an error later."""
    rank = local_rank(env)
    if not rank:
        return []
    out = []
    for name in ("OTEL_PROFILER_TRIGGER_PORT", "OTEL_PROFILER_PROMETHEUS_PORT", "OTEL_EXPORTER_PROMETHEUS_PORT"):
        port = values[name]
        if not port or 1 <= port + rank <= 65535:
            continue
        if name == "OTEL_EXPORTER_PROMETHEUS_PORT":
            exporters = values["OTEL_METRICS_EXPORTER"]
            if "prometheus" not in exporters or values["OTEL_PROFILER_PROMETHEUS_PORT"]:
                continue  # not used
            kept = Exporters(n for n in exporters if n != "prometheus")
            kept.unknown = exporters.unknown
            values["OTEL_METRICS_EXPORTER"] = kept
            off = "the prometheus metrics exporter is off"
        else:
            values[name] = 0
            off = "the trigger port is off" if name == "OTEL_PROFILER_TRIGGER_PORT" else \
                "the /metrics endpoint is off"
        out.append(f"{name}={port} plus local rank {rank} is {port + rank}, not a port (1-65535); {off}")
    return out


def flag_value(name: str, flag: str, text: str) -> Any:
    """A command-line flag standing for variable ``name``, parsed and bounded as the variable is; a
    bad one raises ``ConfigError``, one line naming the flag (``--span-budget '1': must be at least 10``)."""
    try:
        return VARIABLES[name].parse(text)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {_shown(text)}: {exc}") from None


def script_name() -> str:
    """The default service name: the script's file name without ``.py`` (``python`` when none)."""
    name = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "")
    return (name[:-3] if name.endswith(".py") else name) or "python"


def _shown(raw: str) -> str:
    """A value as a warning may show it: quoted, printable, short."""
    from ..shared.otlp_target import safe_text

    return repr(safe_text(raw, 80))


def unknown_names(env: Mapping[str, str]) -> list[str]:
    """One notice per ``OTEL_PROFILER_*`` variable that is set but not defined (a typo is
    otherwise silently ignored), with the closest defined name."""
    import difflib

    prefix = "OTEL_PROFILER_"
    known = [n[len(prefix):] for n in VARIABLES if n.startswith(prefix)]  # the shared prefix says nothing
    out = []
    for name in sorted(env):
        if name.startswith(prefix) and name not in VARIABLES and not name.startswith(IGNORED_PREFIX):
            close = difflib.get_close_matches(name[len(prefix):], known, n=1, cutoff=0.6)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            out.append(f"{name} is not a known setting{hint}; it is ignored")
    return out


def _number(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


IGNORED_PREFIX = "OTEL_PROFILER_TEST_"  # the project's own test runs (where the test traces are)


def bounds_table() -> str:
    """The numeric settings with their accepted range, as a Markdown table."""
    lines = ["| Variable | Default | At least | At most |", "|---|---|---|---|"]
    for var in VARIABLES.values():
        low, high = getattr(var.parse, "minimum", None), getattr(var.parse, "maximum", None)
        if high is not None:
            default = var.default if var.default is not None else "(general setting)"
            lines.append(f"| `{var.name}` | `{default}` | `{_number(low)}` | `{_number(high)}` |")
    return "\n".join(lines)


def markdown_table() -> str:
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for var in VARIABLES.values():
        default = var.default if var.default not in ("", {}, None) else "(unset)"
        lines.append(f"| `{var.name}` | `{default}` | {var.doc} |")
    return "\n".join(lines)
