"""The machines a profile ran on: their compute resources and CPU over time (``compute``), and the CPU
utilization of a live run's ranks summed up (``cpu``)."""
