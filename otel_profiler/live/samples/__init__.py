"""What the session samples about this process and its machine: identity (``resource``), compute
resources, host CPU samples and CUDA memory."""
