"""The ``opentelemetry_instrumentor`` entry point: ``opentelemetry-instrument python train.py`` profiles.

``opentelemetry-instrument`` loads every installed instrumentor and calls ``instrument()``; ours
starts the profiling session (the same one ``OTEL_PROFILER_ENABLED`` and ``otel-profiler run``
start), honouring ``OTEL_SDK_DISABLED`` and the ``OTEL_PROFILER_*`` settings. It declares no
library dependency: steps come from torch when the program imports it, annotations from any code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection


class _PlainInstrumentor:
    """The interface ``opentelemetry-instrumentation``'s ``BaseInstrumentor`` gives its subclasses,
    for when that package (optional) is not installed; the type checker reads this one."""

    def instrument(self, **kwargs: Any) -> None:
        kwargs.pop("skip_dep_check", None)
        self._instrument(**kwargs)

    def uninstrument(self, **kwargs: Any) -> None:
        self._uninstrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        raise NotImplementedError

    def _uninstrument(self, **kwargs: Any) -> None:
        raise NotImplementedError


if TYPE_CHECKING:
    BaseInstrumentor = _PlainInstrumentor
else:
    try:
        from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
    except ImportError:  # opentelemetry-instrumentation is optional: keep the same interface
        BaseInstrumentor = _PlainInstrumentor


class ProfilerInstrumentor(BaseInstrumentor):
    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        from ..live.session import start_session
        from . import install_framework_hooks

        install_framework_hooks(start_session(origin="opentelemetry-instrument"))

    def _uninstrument(self, **kwargs: Any) -> None:
        from ..live.session import current

        session = current()
        if session is not None:
            session.close()
