"""Time given to whoever caused it: nesting by time on a thread (``time_nesting``), the operator view
(``operators``) with its Python call stacks (``python_stacks``), the ``nn.Module`` view (``modules``),
and the stack model behind the flame graph and pprof (``stacks``)."""
