"""Every ``OTEL_PROFILER_*`` environment variable, defined, documented and validated in one place.

Each variable is a typed field of the frozen :class:`Settings` (``settings``: its name, default,
parser from ``parsers``, one-line doc), read by attribute: ``settings.span_budget`` for
``OTEL_PROFILER_SPAN_BUDGET``, ``settings.otel_service_name`` for ``OTEL_SERVICE_NAME`` (the
naming rule: ``settings.attribute_name``). ``load``
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
from typing import Any, Mapping

from ..shared.otlp_target import resolve_target, safe_text
from ..shared.service_name import service_name
from .parsers import (  # noqa: F401  (the parsers and their errors are part of this module's interface)
    ACTIVITIES, ACTIVITY_GROUPS, EXPORTER_NAMES, Activities, ConfigError, Exporters, FeatureOff, OutOfRange,
    StepRange, exporter_warnings, local_rank, parse_activities, parse_basic_auth, parse_bool, parse_choice,
    parse_compression, parse_endpoint, parse_exporters, parse_factor, parse_float, parse_int, parse_key_values,
    parse_or_default, parse_protocol, parse_step_range, parse_str)
from .settings import (  # noqa: F401  (the settings object and its catalogue are this module's interface)
    ATTRIBUTES, DAY_S, DEFAULT_OUTPUT_DIR, VARIABLES, Settings, Variable, attribute_name)


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every defined variable, resolve the OTLP targets. Never raises."""
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
    return Settings(**{ATTRIBUTES[name]: value for name, value in values.items()},
                    warnings=tuple(warnings), notices=tuple(notices),
                    traces_target=resolve_target(values),
                    metrics_target=resolve_target(values, signal="metrics") if metrics else None,
                    service_name=service_name(values["OTEL_SERVICE_NAME"], values["OTEL_RESOURCE_ATTRIBUTES"],
                                              script_name()))


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
