"""The parsers of the settings' values (``otel_profiler.config`` defines each variable with one),
and the errors they raise: ``ConfigError`` for a value that cannot be read (profiling turns itself
off), ``OutOfRange`` for a number outside its range (the default is kept), ``FeatureOff`` for a
value that turns one feature off. Each parser takes the variable's text and returns its value.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping


class ConfigError(ValueError):
    """A value that cannot be read: one warning, and profiling turns itself off."""


class OutOfRange(ConfigError):
    """A number outside its variable's range: ``load`` keeps the default, with one notice."""


class FeatureOff(ConfigError):
    """A bad value that turns one feature off (an OTLP endpoint: no export of that signal), not
    profiling: ``load`` reports it in ``Settings.notices`` and keeps ``off_value``."""

    def __init__(self, message: str, off_value: Any) -> None:
        super().__init__(message)
        self.off_value = off_value


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError("expected true or false")


def _bounded(parse: Callable[[str], Any], minimum: Any, maximum: Any) -> Callable[[str], Any]:
    parse.minimum, parse.maximum = minimum, maximum  # type: ignore[attr-defined]  # for bounds_table
    return parse


def parse_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError("expected an integer") from None
        if minimum is not None and value < minimum:
            raise OutOfRange(f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise OutOfRange(f"must be at most {maximum}")
        return value
    return _bounded(parse, minimum, maximum)


def parse_float(minimum: float | None = None, maximum: float | None = None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ConfigError("expected a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError("expected a finite number")
        if minimum is not None and value < minimum:
            raise OutOfRange(f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise OutOfRange(f"must be at most {maximum:g}")
        return value
    return _bounded(parse, minimum, maximum)


def parse_factor(maximum: float) -> Callable[[str], float]:
    """A factor that is 0 (off) or more than 1, at most ``maximum``."""
    number = parse_float(minimum=0.0, maximum=maximum)

    def parse(text: str) -> float:
        value = number(text)
        if 0 < value <= 1:
            raise OutOfRange("must be 0 (off) or more than 1")
        return value
    return _bounded(parse, 0.0, maximum)


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ConfigError(f"expected one of {', '.join(choices)}")
        return value
    return parse


parse_str: Callable[[str], str] = str.strip


def parse_or_default(default: str) -> Callable[[str], str]:
    """Text where empty means ``default`` (a folder, a host to bind: never "" by accident)."""
    return lambda text: text.strip() or default


def parse_endpoint(text: str) -> str:
    """An OTLP endpoint: empty (unset), an http(s):// URL with a host, or host:port for gRPC."""
    from ..shared.otlp_target import INVALID_ENDPOINT, endpoint_problem

    value = text.strip()
    problem = endpoint_problem(value) if value else None
    if problem:
        raise FeatureOff(f"{problem}; nothing is exported to it", INVALID_ENDPOINT)
    return value


def parse_key_values(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (W3C baggage style, as OTEL_RESOURCE_ATTRIBUTES and OTLP headers use)."""
    from urllib.parse import unquote

    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("expected comma-separated key=value pairs")
        out[unquote(key.strip())] = unquote(value.strip())
    return out


# ----------------------------------------------------------------- live capture (the session)
class StepRange(tuple):
    """``(start, stop)`` of a step range, shown as ``start:stop``."""

    def __str__(self) -> str:
        return f"{self[0]}:{self[1]}"


class Activities(frozenset):
    """A set of activity names, shown comma-separated (``gpu`` for the GPU group)."""

    def __str__(self) -> str:
        gpu = set(ACTIVITY_GROUPS["gpu"])
        rest = sorted(self - gpu) if gpu <= self else sorted(self)
        return ",".join((["gpu"] if gpu <= self else []) + rest) or "(none)"


def parse_step_range(text: str) -> StepRange | None:
    """``A:B`` means steps A to B-1; empty or ``off`` means no step range."""
    value = text.strip().lower()
    if value in ("", "off", "none"):
        return None
    first, sep, last = value.partition(":")
    try:
        a, b = int(first), int(last)
    except ValueError:
        raise ConfigError("expected START:STOP step numbers, e.g. 100:110") from None
    if not sep or a < 0 or b <= a:
        raise ConfigError("expected START:STOP with 0 <= START < STOP, e.g. 100:110")
    return StepRange((a, b))


ACTIVITY_GROUPS = {"gpu": ("kernel", "memcpy", "memset", "sync", "runtime", "driver")}
ACTIVITIES = ("kernel", "memcpy", "memset", "sync", "runtime", "driver", "cpu_op", "memory")


def parse_activities(text: str) -> Activities:
    out: set[str] = set()
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item in ACTIVITY_GROUPS:
            out.update(ACTIVITY_GROUPS[item])
        elif item in ACTIVITIES:
            out.add(item)
        else:
            raise ConfigError(f"unknown activity {item!r}; expected gpu or any of {', '.join(ACTIVITIES)}")
    return Activities(out)


# ------------------------------------------------------------------------------ OTLP and metrics
def parse_protocol(text: str) -> str:
    return parse_choice("grpc", "http/protobuf", "http/json")(text)


def parse_compression(text: str) -> str:
    return parse_choice("gzip", "none")(text)


def parse_basic_auth(text: str) -> str:
    value = text.strip()
    if value and (":" not in value or value.startswith(":")):
        raise ConfigError("expected USER:PASSWORD")
    return value


class Exporters(tuple):
    """The exporter names of ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` that the profiler
    knows (``unknown``: the others, each ignored with one warning, never an error)."""

    unknown: tuple[str, ...] = ()

    def __str__(self) -> str:
        return ",".join(self) or "none"


EXPORTER_NAMES = {"OTEL_TRACES_EXPORTER": ("otlp", "console", "none"),
                  "OTEL_METRICS_EXPORTER": ("otlp", "prometheus", "console", "none")}


def exporter_parser(known: tuple[str, ...]) -> Callable[[str], Exporters]:
    """The parser of a comma list of exporter names, ``known`` being those the profiler supports."""
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


parse_exporters = exporter_parser(EXPORTER_NAMES["OTEL_METRICS_EXPORTER"])
parse_traces_exporters = exporter_parser(EXPORTER_NAMES["OTEL_TRACES_EXPORTER"])


LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")
"""Where launchers put the local rank (torchrun, SLURM, Open MPI), first found wins."""


def local_rank(env: Mapping[str, str]) -> int:
    """The process's local rank as the launcher set it (0 when none is set or readable)."""
    for name in LOCAL_RANK_VARIABLES:
        try:
            return int(env[name])
        except (KeyError, ValueError):
            continue
    return 0
