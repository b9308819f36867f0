"""Live GPU capture sources: torch.profiler (Kineto) read back without trace JSON, cupti-python for
other frameworks, and who owns CUPTI in this process.
"""
