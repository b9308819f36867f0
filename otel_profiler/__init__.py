"""otel-profiler: GPU-kernel-level profiling of training jobs, shipped through OpenTelemetry.

Importing this package is cheap and never imports torch or TensorFlow.
"""

__version__ = "0.1.0"
