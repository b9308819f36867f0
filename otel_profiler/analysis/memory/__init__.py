"""GPU memory: the allocator's ``[memory]`` events of a trace (``allocator``) and the CUDA memory
snapshots of a profile folder (``snapshots``)."""
