"""otel-profiler: GPU-kernel-level profiling of training jobs, shipped through OpenTelemetry.

Importing this package is cheap and never imports torch or TensorFlow: the training API
(``Profiler``, ``annotate``, ``step``, ``step_context``) is loaded on first use.
"""

from .version import __version__

_API = ("Profiler", "annotate", "annotation_begin", "annotation_end", "step", "step_context")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    """Load the training API on first use and bind its names here, so later look-ups
    (``otel_profiler.annotate`` in a hot loop) are plain module attributes, not calls."""
    if name in _API:
        from . import api

        globals().update((n, getattr(api, n)) for n in _API)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
