"""TensorFlow (and JAX) profiler output, ``*.xplane.pb``, read into an ``EventBatch``.
"""
