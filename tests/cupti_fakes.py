"""A stand-in for what cupti-python cannot do without a GPU: its CUPTI calls and buffer callbacks.

The records it hands over are real cupti-python records (tests/cupti_records_real.py) and its enums
are the real module's where cupti-python is installed; only the calls that need a running GPU are
modelled: registering the buffer callbacks, enabling kinds, flushing (completed buffers at
``activity_flush_all(0)``, every buffer at a forced ``activity_flush_all(1)``, each one requested
with the size the source asks for), the dropped-records counter, the clock and callback names.
That the real calls behave so on a GPU is what tests/gpu checks.
"""

from __future__ import annotations

import ctypes
import os
from types import SimpleNamespace as NS

import pytest

from cuda_tracer.capture import subscriber
from cuda_tracer.capture.cupti_records import ACTIVITY_KIND

T0 = 5_000_000_000


class FakeCuptiError(Exception):
    """Shaped like cupti-python's ``cuptiError``: the CUptiResult code in ``status`` (an int)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


def _real_enums() -> dict:
    try:
        import cupti.cupti as real
    except ImportError:
        return {"ActivityKind": NS(**ACTIVITY_KIND), "CallbackDomain": NS(RUNTIME_API=2, DRIVER_API=1)}
    return {name: getattr(real, name) for name in ("ActivityKind", "CallbackDomain",
                                                   "ActivityOverheadKind")}


class FakeCupti:
    """The cupti.cupti functions CuptiSource calls, with the real signatures (see module docstring)."""

    def __init__(self, refuse: dict[str, int] | None = None, register_status: int | None = None):
        self.__dict__.update(_real_enums())
        self.refuse = refuse or {}
        self.register_status = register_status
        self.enabled: set[int] = set()
        self.callbacks = None
        self.flushes: list[int] = []
        self.buffers: list[tuple[list, bool]] = []  # (records, complete) not yet handed over
        self.requested_sizes: list[int] = []
        self.dropped = 0
        self.now = T0

    # ------------------------------------------------------------ what CUPTI does on its own
    def fill(self, records: list, complete: bool = True) -> None:
        """CUPTI writes ``records`` into one buffer; ``complete``: the buffer is full."""
        self.buffers.append((records, complete))

    # ------------------------------------------------------------ the module's functions
    def activity_register_callbacks(self, requested, completed):
        if self.register_status is not None:
            raise FakeCuptiError(self.register_status)
        self.callbacks = (requested, completed)

    def activity_enable(self, kind):
        for name, status in self.refuse.items():
            if ACTIVITY_KIND[name] == kind:
                raise FakeCuptiError(status)
        self.enabled.add(int(kind))

    def activity_disable(self, kind):
        self.enabled.discard(int(kind))

    def activity_flush_all(self, flag):
        self.flushes.append(flag)
        keep = []
        for records, complete in self.buffers:
            if (complete or flag == 1) and self.callbacks is not None:
                size, max_records = self.callbacks[0]()
                self.requested_sizes.append(size)
                assert max_records == 0
                self.callbacks[1](records)
            else:
                keep.append((records, complete))
        self.buffers = keep

    def activity_get_num_dropped_records(self, context, stream_id, dropped):
        ctypes.c_size_t.from_address(dropped).value = self.dropped
        self.dropped = 0  # CUPTI resets the count on read

    def get_timestamp(self):
        return self.now

    def get_callback_name(self, domain, cbid):
        return "cudaLaunchKernel_v7000" if (int(domain), cbid) == (2, 211) else "cuOther_v2000"


@pytest.fixture(autouse=True)
def isolated_from_other_profilers(monkeypatch):
    """No Nsight variables and no earlier back-off warning leak into a test (autouse where imported)."""
    for var in [k for k in os.environ if k.startswith("NSYS_")]:
        monkeypatch.delenv(var)
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    subscriber._reset_warnings_for_tests()
