"""Module calls named by where they sit in the model: ``nn.Module: layer4.1.conv2 (Conv2d)`` rather
than torch's ``nn.Module: Conv2d_3``, for windows captured live.

torch's Python tracer names a module call ``nn.Module: <Class>_<k>``: the module is the k-th instance
of its class whose call the tracer observed in that profiling session (checked against the module
pointers of torch's event tree on torch 2.4, 2.13 and 2.15). While a window records module calls,
``ModuleCallOrder`` notes the same order with a global forward pre-hook; at the window's stop each
observed module is named by its attribute path (``named_modules``) under the outermost observed
module that holds it, with its class beside it, and an outermost module by its class alone (``Net``;
``Net_1`` for a second outermost ``Net``). Traces recorded elsewhere keep torch's names.

The hook exists only while such a window runs, and never once the job compiles (``remove_all``):
``torch.compile`` must not see a global module hook. It never raises into the job. A window in which
modules were called from more than one thread keeps torch's names: calls of another thread as the
window starts or stops could be seen by one of the two and not the other, and shift the numbers.
"""

from __future__ import annotations

import logging
import sys
from threading import get_ident
from types import FrameType
from typing import Any
from weakref import ref

log = logging.getLogger("otel_profiler." + __name__)

PREFIX = "nn.Module: "
MAX_FRAMES = 100  # torch's tracer takes the innermost 128 frames in progress at its start
_active: set["ModuleCallOrder"] = set()


class ModuleCallOrder:
    """The modules one window saw called, in the order torch numbers them."""

    def __init__(self) -> None:
        self._seen: dict[int, Any] = {}  # id(module) -> a weak reference to it, in the order first called
        self._order: dict[str, list[int]] = {}  # class name -> ids, in the order first called
        self._threads: set[int] = set()  # the threads that called modules
        self._complete = True  # the calls in progress at the start were read
        self._handle: Any = None

    def start(self) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        seen, order, threads = self._seen, self._order, self._threads

        def note(module: Any, args: Any) -> None:
            key = id(module)
            if key not in seen:  # torch keys its modules by address too: a reused one is the same
                seen[key] = ref(module)  # never kept alive: a module made per step can go
                order.setdefault(type(module).__name__, []).append(key)
                threads.add(get_ident())

        self._handle = register_module_forward_pre_hook(note)
        _active.add(self)
        try:
            in_progress = _calls_in_progress()
            if in_progress is None:
                self._complete = False
            else:
                for module in in_progress:  # torch's tracer observes these first, at its start
                    note(module, None)
        except Exception:  # the numbers could be shifted: this window keeps torch's names
            log.debug("the module calls in progress could not be read", exc_info=True)
            self._complete = False

    def remove(self) -> None:
        """Take the hook away (idempotent)."""
        handle, self._handle = self._handle, None
        _active.discard(self)
        if handle is not None:
            handle.remove()

    def stop(self) -> dict[str, str]:
        """torch's name of each module call seen -> ours; the hook and the modules let go."""
        self.remove()
        seen, order, self._seen, self._order = self._seen, self._order, {}, {}
        if len(self._threads) > 1 or not self._complete:
            return {}
        try:
            paths = _paths({key: module for key, weak in seen.items() if (module := weak()) is not None})
        except Exception:  # a module whose named_modules fails: torch's names stay
            log.debug("module paths could not be read; torch's module names are kept", exc_info=True)
            return {}
        return {f"{PREFIX}{cls}_{k}": f"{PREFIX}{paths[key]}" for cls, keys in order.items()
                for k, key in enumerate(keys) if key in paths}


def _calls_in_progress() -> list[Any] | None:
    """The modules whose calls this thread is inside (a window started at a safe point in a
    forward pass), outermost first: the frames of ``Module.__call__``, which torch's tracer takes
    for module calls. None for a stack deeper than torch's tracer reads at its start (it takes the
    innermost 128 frames): which of these it saw is not known."""
    import torch

    call = torch.nn.Module.__call__.__code__
    inside = []
    frame: FrameType | None = sys._getframe(2)
    depth = 0
    while frame is not None:
        depth += 1
        if depth > MAX_FRAMES:
            return None
        if frame.f_code is call and isinstance(module := frame.f_locals.get("self"), torch.nn.Module):
            inside.append(module)
        frame = frame.f_back
    return inside[::-1]


def _paths(seen: dict[int, Any]) -> dict[int, str]:
    """Per module seen: its attribute path and class, or its class for an outermost one."""
    inside: set[int] = set()
    for key, module in seen.items():
        inside.update(id(sub) for _, sub in module.named_modules() if id(sub) != key)
    roots = [m for key, m in seen.items() if key not in inside]
    count: dict[str, int] = {}
    for root in roots:
        count[type(root).__name__] = count.get(type(root).__name__, 0) + 1
    out: dict[int, str] = {}
    numbered: dict[str, int] = {}
    for root in roots:
        cls = type(root).__name__
        k = numbered[cls] = numbered.get(cls, -1) + 1
        out[id(root)] = cls if count[cls] == 1 else f"{cls}_{k}"
        for path, sub in root.named_modules():
            if path and id(sub) in seen and id(sub) not in out:
                out[id(sub)] = f"{path} ({type(sub).__name__})"
    return out


def start_order() -> ModuleCallOrder | None:
    """A started ``ModuleCallOrder``, or None when it could not start (torch's names stay)."""
    order = ModuleCallOrder()
    try:
        order.start()
    except Exception:
        log.debug("the module call order could not start; torch's module names are kept", exc_info=True)
        order.remove()
        return None
    return order


def remove_all() -> None:
    """The job compiles: no window's hook may stay (its windows keep torch's names)."""
    for order in list(_active):
        order.remove()


def renamed(strings: list[str], names: dict[str, str]) -> list[str]:
    """``strings`` with torch's module-call names replaced by ours (a new list)."""
    return [names.get(s, s) for s in strings] if names else strings
