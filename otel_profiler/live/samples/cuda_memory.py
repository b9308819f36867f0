"""CUDA memory of a live run, read from ``torch.cuda`` (never from a trace):

- **Per step** (``OTEL_PROFILER_ACTIVITIES`` with ``memory``, on a CUDA device): at each step end the
  current device's peak allocated / reserved bytes since the previous step end (one
  ``memory_stats`` read: the keys ``max_memory_allocated`` / ``max_memory_reserved`` return), then
  ``reset_peak_memory_stats``: two calls per step. Kept in the rank's metadata
  (``cuda_memory.steps``, the last ``MAX_STEPS``); the memory peak metrics show the latest.
- **Snapshot on request** (``OTEL_PROFILER_MEMORY_SNAPSHOT`` = N > 0): allocation history of the
  last N events (``torch.cuda.memory._record_memory_history``) and, at exit, the allocator's
  snapshot (``torch.cuda.memory._snapshot``) pickled into the profile folder as
  ``memory-snapshot.rank-<r>.exit.pickle``: the file https://pytorch.org/memory_viz reads.
- **Out of memory**: once CUDA is initialized, an out-of-memory observer of the allocator writes
  ``memory-snapshot.rank-<r>.oom.pickle`` when an allocation fails (caught or not), once per run.

Nothing here initializes CUDA (it waits for the job to do so), and nothing raises: a torch without
these APIs, or a failing call, turns the feature off with one warning.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
from collections import deque
from typing import Any, Callable

from cuda_tracer.private_files import make_private_dir, write_in_private_dir

from ...profiler_warnings import warn

log = logging.getLogger(__name__)

MAX_STEPS = 2000
SNAPSHOT_NAME = "memory-snapshot.rank-{rank}.{reason}.pickle"


class CudaMemory:
    def __init__(self, snapshot_path: Callable[[str], str], per_step: bool, history_entries: int) -> None:
        self.snapshot_path = snapshot_path  # reason ("exit", "oom") -> file (the rank may be learned late)
        self.per_step, self.history_entries = per_step, history_entries
        self.steps: deque[dict[str, int]] = deque(maxlen=MAX_STEPS)
        self.snapshots: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._armed = False  # observer attached / history started (once CUDA is initialized)
        self._off: set[str] = set()  # features turned off after a failure
        self._oom_written = False

    @staticmethod
    def _cuda() -> Any:
        """``torch.cuda`` when the job imported torch and initialized CUDA, else None."""
        torch = sys.modules.get("torch")
        try:
            return torch.cuda if torch is not None and torch.cuda.is_initialized() else None
        except Exception:
            log.debug("asking whether CUDA is initialized failed", exc_info=True)
            return None

    def _turn_off(self, feature: str, exc: BaseException) -> None:
        if feature not in self._off:
            self._off.add(feature)
            warn(f"CUDA memory {feature} is off ({type(exc).__name__}: {exc})")

    def step_end(self, number: int) -> None:
        """A step ended: arm the snapshot features once, read the step's peaks. Never raises."""
        cuda = self._cuda()
        if cuda is None:
            return
        if not self._armed:
            self._arm(cuda)
        if not self.per_step or "statistics" in self._off:
            return
        try:
            device = cuda.current_device()
            stats = cuda.memory_stats(device)  # one read (each max_memory_* call builds all of it)
            reading = {"step": number, "device": device,
                       "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
                       "peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
                       "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0))}
            cuda.reset_peak_memory_stats(device)
        except Exception as exc:
            self._turn_off("statistics", exc)
            return
        with self._lock:
            self.steps.append(reading)

    def _arm(self, cuda: Any) -> None:
        self._armed = True
        try:
            import torch

            torch._C._cuda_attach_out_of_memory_observer(self._on_oom)  # type: ignore[attr-defined]  # private, not in torch's stubs
        except Exception as exc:
            self._turn_off("snapshot on out-of-memory", exc)
        if self.history_entries > 0:
            try:
                cuda.memory._record_memory_history(max_entries=self.history_entries)
            except Exception as exc:
                self._turn_off("history", exc)

    def _on_oom(self, device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        """The allocator's out-of-memory observer (called before the error is raised)."""
        if self._oom_written:
            return
        self._oom_written = True
        self.write_snapshot("oom", {"device": device, "requested_bytes": alloc,
                                    "device_allocated_bytes": device_alloc, "device_free_bytes": device_free})

    def write_snapshot(self, reason: str, details: dict[str, Any] | None = None) -> str | None:
        """Pickle ``torch.cuda.memory._snapshot()`` into the profile folder; the path, or None."""
        if "snapshot" in self._off:
            return None
        try:
            import torch

            if not torch.cuda.is_available():  # a CUDA build on a machine without a GPU gives an empty one
                raise RuntimeError("no CUDA device")
            snapshot = torch.cuda.memory._snapshot()
            path = self.snapshot_path(reason)
            make_private_dir(os.path.dirname(path))
            write_in_private_dir(os.path.dirname(path), os.path.basename(path),
                                 lambda f: pickle.dump(snapshot, f), "wb")
        except Exception as exc:
            self._turn_off("snapshot", exc)
            return None
        self.snapshots.append({"reason": reason, "file": os.path.basename(path), **(details or {})})
        return path

    def close(self) -> None:
        """At the end of the run: the snapshot asked for, then history recording off. Never raises."""
        if self.history_entries <= 0 or self._cuda() is None or "history" in self._off:
            return
        self.write_snapshot("exit")
        try:
            import torch

            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            log.debug("turning CUDA memory history off failed", exc_info=True)

    def meta(self) -> dict[str, Any]:
        """``{steps: [{step, device, peak_allocated_bytes, peak_reserved_bytes, allocated_bytes}],
        snapshots: [{reason, file, ...}]}`` for the rank's metadata (empty when nothing was read)."""
        with self._lock:
            steps = list(self.steps)
        return {"steps": steps, "snapshots": list(self.snapshots)} if steps or self.snapshots else {}
