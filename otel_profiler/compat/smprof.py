"""SageMaker Profiler (``smprof`` / ``smppy``) compatibility: existing code runs by changing one import.

    import otel_profiler.compat.smprof as smprof   # was: import smprof

    SMProf = smprof.SMProfiler.instance()
    config = smprof.Config()
    config.profiler = {"EnableCuda": "1"}
    SMProf.configure(config)
    SMProf.start_profiling()
    with smprof.annotate("step_" + str(i)):
        with smprof.annotate("Forward"): ...
    h = smprof.annotation_begin("Backward"); ...; smprof.annotation_end(h)
    SMProf.stop_profiling()

As in SageMaker Profiler, everything between ``start_profiling`` and ``stop_profiling`` is captured
in detail, and annotations named ``step_<i>`` are training steps. ``EnableCuda: "0"`` turns GPU
capture off; the other (undocumented) smprof keys are accepted and ignored.
"""

from __future__ import annotations

import re
from typing import Any

from .. import api

_STEP = re.compile(r"^step_(\d+)$")
_WHOLE_RUN_S = 1e9  # a "duration" window longer than any job: capture from start to stop


class Config:
    """smprof's configuration object: ``profiler`` is a dict of string to string."""

    def __init__(self) -> None:
        self.profiler: dict[str, str] = {}


class SMProfiler:
    """The process-wide profiler singleton (``SMProfiler.instance()``)."""

    _instance: "SMProfiler | None" = None

    def __init__(self) -> None:
        self._config = Config()
        self._profiler: api.Profiler | None = None

    @classmethod
    def instance(cls) -> "SMProfiler":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def configure(self, config: Config) -> None:
        self._config = config

    def start_profiling(self) -> None:
        if self._profiler is not None:
            return
        options: dict[str, Any] = {"duration_s": _WHOLE_RUN_S}
        settings = getattr(self._config, "profiler", None) or {}
        if str(settings.get("EnableCuda", "1")).strip() == "0":
            options["activities"] = ""
        self._profiler = api.Profiler(**options).start()

    def stop_profiling(self) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            profiler.stop()


def annotate(name: str) -> Any:
    """A range (``with smprof.annotate("Forward"):``); ``step_<i>`` names mark training step i."""
    match = _STEP.match(name)
    if match:
        return api.step_context(int(match.group(1)))
    return api.annotate(name)


def annotation_begin(name: str) -> Any:
    return api.annotation_begin(name)


def annotation_end(handle: Any) -> None:
    api.annotation_end(handle)
