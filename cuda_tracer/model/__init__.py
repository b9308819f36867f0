"""The event model every source produces and every analysis reads (``EventBatch``), the GPU→CPU
correlation derived on it, and batches cut into pieces of whole steps.
"""
