"""GPU memory: the allocator's ``[memory]`` events of a trace (``allocator``)."""
