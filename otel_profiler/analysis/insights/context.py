"""What the insight rules share: the profile facts several rules read (``Context``, computed once, with
the run's ``Thresholds``) and the shape of one finding (``insight``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.correlate import Correlation, correlate
from cuda_tracer.model.events import EventBatch, Kind, kinds_in
from cuda_tracer.profile import Profile

from ..breakdown import merged_length
from ..summary_schema import Insight, Summary

if TYPE_CHECKING:
    from . import Thresholds


SCALAR_READ_OPS = ("aten::item", "aten::_local_scalar_dense")
LAUNCH_API = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
              "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel")
T = TypeVar("T")
CUDA_DEVICE_TYPE = 1  # Kineto's [memory] "Device Type": 0 CPU, 1 CUDA
HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION, Kind.RUNTIME, Kind.DRIVER,
              Kind.OTHER)
"""Host-side kinds: rules find their events by name among all of them, since one trace records as an
operator what another records as a user annotation or a Python function."""
_LOADER_FRAME = re.compile(r"utils/data/dataloader\.py\(\d+\): __next__")


def is_dataloader_next(name: str) -> bool:
    """A DataLoader ``__next__`` call: "DataLoader" and later "__next__" on one line of the name
    (``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``), or the Python frame
    ``torch/utils/data/dataloader.py(N): __next__``. Linear in the name's length (a regex
    ``DataLoader.*__next__`` retries from every "DataLoader": quadratic on long hostile names)."""
    if "__next__" not in name:  # (most names: one C-level search)
        return False
    for line in name.split("\n") if "\n" in name else (name,):
        first = line.find("DataLoader")
        if first >= 0 and line.find("__next__", first + len("DataLoader")) >= 0:
            return True
    return "__next__" in name and _LOADER_FRAME.search(name) is not None


class Context:
    """What several rules read, computed once: the batch, its correlation, step windows per rank."""

    def __init__(self, profile: Profile, summary: Summary, th: Thresholds, corr: Correlation | None = None
                 ) -> None:
        self.profile, self.summary, self.th = profile, summary, th
        self.batch: EventBatch = profile.batch()
        self._corr = corr
        self._kept: dict[Callable[[Context], Any], Any] = {}
        b = self.batch
        steps = np.flatnonzero(b.kind == Kind.STEP)
        self.step_rows = steps[np.lexsort((b.start_ns[steps], b.rank[steps]))]

    @property
    def corr(self) -> Correlation:
        if self._corr is None:
            self._corr = correlate(self.batch)
        return self._corr

    def once(self, compute: Callable[[Context], T]) -> T:
        """``compute(self)``, worked out at the first call and kept: what several rules read is
        computed once."""
        if compute not in self._kept:
            self._kept[compute] = compute(self)
        return self._kept[compute]

    def name_rows(self, names, kinds: tuple[Kind, ...] = HOST_KINDS) -> np.ndarray:
        """Rows of ``kinds`` whose name is in ``names`` (a collection, or a predicate on a name)."""
        b = self.batch
        match = names if callable(names) else frozenset(names).__contains__
        named = np.zeros(len(b.strings), bool)  # a table by name id: ``take``, not ``np.isin``
        named[[i for i, s in enumerate(b.strings) if match(s)]] = True
        return np.flatnonzero(named.take(b.name) & kinds_in(b.kind, kinds))

    def in_steps(self, rows: np.ndarray) -> np.ndarray:
        """The subset of ``rows`` whose start lies inside a step of the same rank."""
        b, steps = self.batch, self.step_rows
        if not len(steps) or not len(rows):
            return rows[:0]
        keep = np.zeros(len(rows), bool)
        for rank in distinct(b.rank[steps]).tolist():
            s = steps[b.rank[steps] == rank]
            lo, hi = b.start_ns[s], b.end_ns[s]
            mine = b.rank[rows] == rank
            t = b.start_ns[rows]
            i = np.searchsorted(lo, t, side="right") - 1
            ok = (i >= 0) & (t < hi[np.maximum(i, 0)])
            keep |= mine & ok
        return rows[keep]

    def step_time_ns(self) -> int:
        b = self.batch
        return int((b.end_ns[self.step_rows] - b.start_ns[self.step_rows]).sum())

    @cached_property
    def _loading(self) -> "Loading | None":
        b = self.batch
        rows = self.name_rows(is_dataloader_next)
        if not len(rows):
            return None
        loading = merged_length(b.start_ns[rows], b.end_ns[rows])
        steps = self.step_rows  # those that ran while calls were recorded (a live run's window)
        steps = steps[(b.end_ns[steps] > b.start_ns[rows].min()) & (b.start_ns[steps] < b.end_ns[rows].max())]
        step_ns = int((b.end_ns[steps] - b.start_ns[steps]).sum())
        whole = step_ns or int(b.end_ns.max() - b.start_ns.min())
        return Loading(calls=int(np.bincount(b.kind[rows]).max()), loading_ns=loading,
                       pct=100.0 * loading / whole if whole else 0.0,
                       of="step" if step_ns else "profiled",
                       single_process=any("SingleProcess" in b.strings[i] for i in set(b.name[rows].tolist())))

    def loading(self) -> "Loading | None":
        """The DataLoader ``__next__`` calls (found by name whatever their kind), or None; their
        share is of the steps that ran while they were recorded."""
        return self._loading


@dataclass(frozen=True)
class Loading:
    """DataLoader ``__next__`` calls: how many (of the most common kind: one call can be recorded as
    an operator and a Python function), their merged time, its share of step (or profiled) time,
    and whether the loader runs in the training process (``_SingleProcessDataLoaderIter``)."""

    calls: int
    loading_ns: int
    pct: float
    of: str
    single_process: bool


_STEP_MARKER = re.compile(r"ProfilerStep#(\d+)")


def step_label(name: str) -> str:
    """A step as a person reads it: ``ProfilerStep#12`` becomes ``step 12``."""
    return _STEP_MARKER.sub(r"step \1", name)


def insight(rule: str, severity: str, scope: str, title: str, evidence: str,
             recommendation: str, **metrics: Any) -> Insight:
    return {"rule": rule, "severity": severity, "scope": scope, "title": title,
            "evidence": evidence, "recommendation": recommendation, "metrics": metrics}


def device_label(key: str) -> str:
    return f"device {key}" if ":" not in key else "rank {} device {}".format(*key.split(":"))


