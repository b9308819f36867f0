"""Inside the training process: the session and its parts (capture windows, flushing, outputs, process
hygiene), markers, step evidence and triggers, CUDA memory statistics, CPU samples and the compute
resources."""
