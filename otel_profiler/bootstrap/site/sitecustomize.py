"""Bootstraps otel-profiler in every Python process that has this folder on ``PYTHONPATH``.

Starts profiling when ``OTEL_PROFILER_ENABLED`` is true, then runs the ``sitecustomize`` this file
shadows (the next one on ``sys.path``), so an existing site customization keeps working.
"""


def _chain_next_sitecustomize() -> None:
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find("sitecustomize", rest)
        except Exception:
            import logging  # here, not at the top: every Python process runs this module

            logging.getLogger(__name__).debug("looking for a further sitecustomize failed", exc_info=True)
            continue
        if spec is not None and spec.origin and os.path.dirname(os.path.abspath(spec.origin)) != here:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


try:
    from otel_profiler.bootstrap import from_environment

    from_environment()
except ImportError:
    pass
_chain_next_sitecustomize()
del _chain_next_sitecustomize
