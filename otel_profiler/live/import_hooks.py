"""Run a callback once a module has been imported, without importing it ourselves.

The zero-code bootstrap runs before the training script imports torch, and importing
``otel_profiler`` must never import torch. ``when_imported("torch.optim", install)`` calls ``install``
right away if the module is already loaded, else right after it finishes loading, through a
``sys.meta_path`` finder that wraps the real loader (the post-import-hook pattern of wrapt).
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import importlib.abc
    import importlib.machinery
# Neither logging nor importlib.abc is imported here: every process of a profiled job imports this
# module at start-up (``bootstrap.when_framework_imported``), most of them never use it.

_callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
_lock = threading.Lock()


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    module = sys.modules.get(name)
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False) is False:
        _safe_call(callback, module)
        return
    with _lock:
        _callbacks.setdefault(name, []).append(callback)
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())


def _safe_call(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:  # a hook must never break the user's import
        import logging

        logging.getLogger(__name__).debug("the hook on importing %s failed", getattr(module, "__name__", "?"),
                                          exc_info=True)


class _Finder:
    """A ``sys.meta_path`` finder (the protocol of ``importlib.abc.MetaPathFinder``)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _Loader(loader, fullname)  # type: ignore[assignment]  # the Loader protocol, duck-typed
        return spec


class _Loader:
    """Wraps the real loader (the protocol of ``importlib.abc.Loader``)."""

    def __init__(self, inner: importlib.abc.Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        while True:  # a callback may ask for this module again (it is still initializing then)
            with _lock:
                callbacks = _callbacks.pop(self._name, [])
            if not callbacks:
                break
            for callback in callbacks:
                _safe_call(callback, module)

    def __getattr__(self, name: str) -> Any:  # is_package, get_source, ... of the real loader
        return getattr(self._inner, name)
