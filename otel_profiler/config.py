"""Every ``OTEL_PROFILER_*`` environment variable, defined, documented and validated in one place.

Each variable is declared once with :func:`define` (name, default, parser, one-line doc). ``load``
reads them all from an environment mapping and never raises: a bad value yields one warning naming
the variable, the value and what is expected, and the profiler treats it as unusable (``ok`` is
False) so that profiling turns itself off instead of crashing the job. The README's variable table
is generated from this module (``python -m otel_profiler.config``).

Standard OpenTelemetry variables (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_SDK_DISABLED``, ``OTEL_EXPORTER_OTLP_*``) are declared here too, so one module knows every
variable the profiler reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping


class ConfigError(ValueError):
    pass


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


# ---------------------------------------------------------------------------------------- parsers
def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError("expected true or false")


def parse_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError("expected an integer") from None
        if minimum is not None and value < minimum:
            raise ConfigError(f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"must be at most {maximum}")
        return value
    return parse


def parse_float(minimum: float | None = None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ConfigError("expected a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError("expected a finite number")
        if minimum is not None and value < minimum:
            raise ConfigError(f"must be at least {minimum}")
        return value
    return parse


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ConfigError(f"expected one of {', '.join(choices)}")
        return value
    return parse


def parse_str(text: str) -> str:
    return text.strip()


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


# ------------------------------------------------------------------------------ the variables
# Standard OpenTelemetry SDK variables the profiler honours.
define("OTEL_SDK_DISABLED", False, parse_bool, "Standard OpenTelemetry switch: true turns the profiler off.")
define("OTEL_SERVICE_NAME", "", parse_str, "Service name of the resource (default: the script name).")
define("OTEL_RESOURCE_ATTRIBUTES", {}, parse_key_values,
       "Extra resource attributes, key=value pairs separated by commas.")

# The profiler's own switches.
define("OTEL_PROFILER_ENABLED", False, parse_bool,
       "Turn profiling on in any Python process that imports the sitecustomize bootstrap.")
define("OTEL_PROFILER_OUTPUT_DIR", "./otel-profile", parse_str,
       "Where profile folders are written (one sub-folder per run).")


# ---------------------------------------------------------------------------------- loading
@dataclass
class Settings:
    values: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.warnings

    def __getitem__(self, name: str) -> Any:
        return self.values[name]


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every defined variable. Never raises."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    warnings: list[str] = []
    for var in VARIABLES.values():
        raw = env.get(var.name)
        if raw is None:
            values[var.name] = var.default
            continue
        try:
            values[var.name] = var.parse(raw)
        except ConfigError as exc:
            shown = "<hidden>" if var.secret else repr(raw)
            warnings.append(f"{var.name}={shown}: {exc}")
            values[var.name] = var.default
    return Settings(values, warnings)


def markdown_table() -> str:
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for var in VARIABLES.values():
        default = var.default if var.default not in ("", {}, None) else "(unset)"
        lines.append(f"| `{var.name}` | `{default}` | {var.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
