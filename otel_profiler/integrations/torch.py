"""Automatic training steps for PyTorch: a step ends each time the optimizer steps.

Uses ``torch.optim.optimizer.register_optimizer_step_post_hook`` (a global hook on every
``Optimizer.step``). With several optimizers only the first one seen stepping counts, so a GAN's two
optimizers give one step per iteration. Installed through ``import_hooks.when_imported`` so the
bootstrap never imports torch itself.
"""

from __future__ import annotations

import weakref
from types import ModuleType
from typing import Any, Callable


def install_step_hook(on_step: Callable[[], None]) -> Callable[[], None]:
    """Call ``on_step()`` after each step of the leading optimizer; returns a function that removes it."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    leader: list[Any] = [None]  # weakref to the optimizer whose steps count

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            current = leader[0]() if leader[0] is not None else None
            if current is None:
                leader[0] = weakref.ref(optimizer)
            elif current is not optimizer:
                return
            on_step()
        except Exception:
            pass

    return register_optimizer_step_post_hook(hook).remove


def when_torch_imported(on_step: Callable[[], None], installed: Callable[[Callable[[], None]], None]) -> None:
    """Install the hook as soon as ``torch.optim`` is loaded; hand the remover to ``installed``."""
    from ..import_hooks import when_imported

    def install(_module: ModuleType) -> None:
        installed(install_step_hook(on_step))

    when_imported("torch.optim", install)
