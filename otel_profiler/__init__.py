"""otel-profiler: GPU-kernel-level profiling of training jobs, shipped through OpenTelemetry.

Importing this package is cheap and never imports torch or TensorFlow: the training API
(``Profiler``, ``annotate``, ``step``, ``step_context``) is loaded on first use.
"""

from .version import __version__

_API = ("Profiler", "annotate", "annotation_begin", "annotation_end", "step", "step_context")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
