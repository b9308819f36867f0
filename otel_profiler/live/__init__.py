"""Inside the training process: the session (capture windows, flushing, outputs), markers, step
evidence and triggers, CUDA memory statistics, CPU samples and the compute resources."""
