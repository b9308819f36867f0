"""The ground floor every stage may import: rules and defaults that the settings (``config``) and the
stages share, with no imports of their own beyond the standard library. ``otlp_target``: the OTLP
exporter specification's rules for where a signal goes; ``span_defaults``: the span model's defaults
(also the defaults of their variables); ``service_name``: the one rule for a service's name."""
