"""The ground floor every stage may import: rules and defaults that the settings (``config``) and the
stages share, importing nothing of this package (only the standard library, numpy and ``cuda_tracer``).
``otlp_target``: the OTLP exporter specification's rules for where a signal goes; ``span_defaults``:
the span model's defaults (also the defaults of their variables); ``service_name``: the one rule for
a service's name; ``ids``: the run, trace and span id rules; ``upload``: the Profiler app's upload
client and spool."""
