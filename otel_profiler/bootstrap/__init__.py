"""Zero-code enabling. Three doors, one session (``otel_profiler.live.session.start_session``):

- ``OTEL_PROFILER_ENABLED=true``: the startup hook ``otel_profiler.pth`` that installing the package
  puts in site-packages (``setup.py``) calls :func:`from_environment` in every Python process; it
  reads only that variable and imports nothing when it is unset or false. Where the package is
  mounted rather than installed, ``site/`` on ``PYTHONPATH`` does the same through its
  ``sitecustomize.py`` (``otel-profiler run`` sets both up). The session itself starts when the
  process imports torch, TensorFlow, Keras or this package's API (:func:`when_framework_imported`):
  a process that never does (a shell tool, a compile worker) pays a few milliseconds;
- ``opentelemetry-instrument python train.py``: the ``opentelemetry_instrumentor`` entry point
  (:mod:`.instrumentor`) starts the session whatever ``OTEL_PROFILER_ENABLED`` says;
- ``otel-profiler run -- python train.py`` (``otel_profiler.commands.run``).
"""

from __future__ import annotations

import os
import sys

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
"""The folder whose ``sitecustomize.py`` bootstraps profiling; put it first on ``PYTHONPATH``."""


_done = False


def from_environment() -> None:
    """Start a session when ``OTEL_PROFILER_ENABLED`` is true. Never raises (one warning at most).
    Once per process (the startup hook and ``sitecustomize.py`` may both call it)."""
    global _done
    if _done or os.environ.get("_OTEL_PROFILER_EXPORTER_CHILD"):  # = live.wiring.EXPORTER_CHILD_ENV
        return  # our own exporter process: nothing to profile, nothing more to import
    _done = True
    try:
        # not false (``config.parsers.parse_bool``'s words): true, or a value the session warns about
        if os.environ.get("OTEL_PROFILER_ENABLED", "").strip().lower() not in ("0", "false", "no", "off", ""):
            if "--multiprocessing-fork" not in getattr(sys, "orig_argv", ()):  # = live.child_processes
                os.environ.pop("_OTEL_PROFILER_RUN", None)  # a new program: no run of an earlier job's
            when_framework_imported("env")  # settings are read then, in a process that uses torch
        else:
            _say_misspelt_switch()
    except Exception as exc:  # the bootstrap must never stop a program from starting
        _warn_failed(exc)


SAID_SWITCH_ENV = "_OTEL_PROFILER_SAID_SWITCH"
"""Set once the misspelt switch was named, so the job's child processes do not say it again."""


def _say_misspelt_switch() -> None:
    """``OTEL_PROFILER_ENABLE=true`` (or another near miss) and no ``OTEL_PROFILER_ENABLED``: one line
    says that profiling is off and names the switch, instead of recording nothing in silence."""
    if "OTEL_PROFILER_ENABLED" in os.environ or os.environ.get(SAID_SWITCH_ENV):
        return
    near = sorted(k for k in os.environ if k.startswith("OTEL_PROF") and "ENABL" in k)
    if near:
        os.environ[SAID_SWITCH_ENV] = "1"
        print(f"otel-profiler: warning: {near[0]} is not a setting of otel-profiler (did you mean "
              "OTEL_PROFILER_ENABLED?); profiling is off", file=sys.stderr)


FRAMEWORKS = ("torch", "tensorflow", "keras", "otel_profiler.api")
"""Importing any of these starts the session of a zero-code process (a framework, or this package's
own API: ``annotate`` and ``step`` used without torch)."""


def when_framework_imported(origin: str) -> None:
    """Start the session (``origin``) now if a framework is imported already, else right after the
    first of ``FRAMEWORKS`` finishes importing. Never raises."""
    import sys

    def start(_module: object = None) -> None:
        try:
            from ..live.session import start_session

            install_framework_hooks(start_session(origin=origin))
        except Exception as exc:  # the import that triggered it must go on
            _warn_failed(exc)

    if any(name in sys.modules for name in FRAMEWORKS):
        start()
        return
    if _is_compile_worker():
        return
    from ..live.import_hooks import when_imported

    started: list[object] = []

    def once(module: object) -> None:
        if not started:
            started.append(module)
            start(module)

    for name in FRAMEWORKS:
        when_imported(name, once)


def _is_compile_worker() -> bool:
    """An Inductor compile worker (``torch/_inductor/compile_worker``): it imports torch but runs no
    step of the job, so it gets no session at all."""
    import sys

    return any("compile_worker" in arg for arg in getattr(sys, "orig_argv", sys.argv)[:3])


def _warn_failed(exc: Exception) -> None:
    try:
        from ..profiler_warnings import warn

        warn(f"bootstrap failed ({type(exc).__name__}: {exc})")
    except Exception:
        import logging  # here, not at the top: every process of a profiled job imports this module

        logging.getLogger(__name__).debug("the bootstrap's own warning failed", exc_info=True)


def install_framework_hooks(session: object) -> None:
    """Zero-code Keras: once ``keras`` is imported, ``Model.fit/evaluate/predict`` get the profiler's
    callback (``otel_profiler.integrations.keras``). Only for a running session with
    ``OTEL_PROFILER_AUTO_STEPS`` on (torch's optimizer hook is installed by the session itself)."""
    if session is not None and session.settings.auto_steps:  # type: ignore[attr-defined]
        from ..integrations.keras import when_custom_loop, when_keras_imported

        when_keras_imported()
        when_custom_loop(session)
