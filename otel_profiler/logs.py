"""The ``otel_profiler`` logger's one switch: ``OTEL_PROFILER_LOG`` (off|debug|info).

Every failure the profiler handles quietly is logged at debug, with its cause, on a logger under
``otel_profiler`` (``cuda_tracer`` logs on ``otel_profiler.cuda_tracer``). ``enable_from_env``
attaches one stderr handler (lines start ``otel-profiler: ``) when the variable is debug or info.
Off (the default): no handler, nothing changed, and since the records are below WARNING, Python's
last-resort handler never prints them either.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

log = logging.getLogger(__name__)

__all__ = ["LOGGER_NAME", "enable_from_env"]

LOGGER_NAME = "otel_profiler"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO}
_handler: logging.Handler | None = None


def enable_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Attach the stderr handler once if ``OTEL_PROFILER_LOG`` is debug or info; never raises.
    An unknown value counts as off (the settings name it in their own warning)."""
    global _handler
    try:
        env = os.environ if environ is None else environ
        level = _LEVELS.get(env.get("OTEL_PROFILER_LOG", "off").strip().lower())
        if level is None:
            return False
        logger = logging.getLogger(LOGGER_NAME)
        if _handler is None:
            _handler = logging.StreamHandler(sys.stderr)
            _handler.setFormatter(logging.Formatter("otel-profiler: %(levelname)s %(name)s: %(message)s"))
            logger.addHandler(_handler)
        logger.setLevel(level)
        return True
    except Exception:  # never into the job
        log.debug("turning on the otel_profiler log handler failed", exc_info=True)
        return False
