"""Where the session's steps and annotations come from: the per-thread marker buffers the API fills,
the torch hooks, and the evidence that decides which source marks the steps."""
