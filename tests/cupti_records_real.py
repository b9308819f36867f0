"""Real cupti-python activity records for CPU tests, built with the module's own dtypes.

Each factory fills a zeroed NumPy record of the module's dtype (``activity_kernel10_dtype``, ...) and
wraps it with the record class's ``from_data`` (``ActivityKernel10``, ...): the objects are the
classes CUPTI's buffer callback delivers, reading memory laid out as CUPTI lays it out. Strings
(``name``, ``domain``) are C strings the record points to, as in a CUPTI buffer; a zero pointer reads
as ''. :func:`buffer` lays several records back to back in one byte array, as CUPTI does, each record
a view into it.

cupti-python imports without a GPU or driver (its calls then fail); where it is not installed, the
tests that build records skip. A record of cupti-python 13.0.1 built outside a CUPTI buffer reports a
``KeyError`` from its buffer manager when it is deallocated; records made here are kept for the whole
run and released at exit with that report silenced (:func:`quiet_record_release`); :func:`buffer`
records are released by the tests, which silence it the same way.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import sys
from typing import Any, Iterator

import pytest

from cuda_tracer.capture.cupti_records import ACTIVITY_KIND, MEMCPY_KIND, MEMORY_KIND, OBJECT_KIND

CONTEXT = 1
PID, TID = 4242, 140001
_KEPT: list = []  # C strings and records that must outlive the test that made them

# record kind -> (record class, dtype) as cupti-python 13.0 names them
CLASSES = {
    "kernel": ("ActivityKernel10", "activity_kernel10_dtype"),
    "memcpy": ("ActivityMemcpy6", "activity_memcpy6_dtype"),
    "memcpy_p2p": ("ActivityMemcpyPtoP4", "activity_memcpy_pto_p4_dtype"),
    "memset": ("ActivityMemset4", "activity_memset4_dtype"),
    "api": ("ActivityAPI", "activity_api_dtype"),
    "sync": ("ActivitySynchronization2", "activity_synchronization2_dtype"),
    "marker": ("ActivityMarker2", "activity_marker2_dtype"),
    "name": ("ActivityName", "activity_name_dtype"),
    "overhead": ("ActivityOverhead3", "activity_overhead3_dtype"),
}


@contextlib.contextmanager
def quiet_record_release() -> Iterator[None]:
    """Silences cupti-python's ``KeyError`` from the deallocation of records it did not allocate,
    which Cython reports through both ``sys.excepthook`` and ``sys.unraisablehook``; every other
    exception still reaches the hooks in place."""
    unraisable_hook, except_hook = sys.unraisablehook, sys.excepthook

    def ours(exc_value: BaseException | None, where: Any) -> bool:
        return isinstance(exc_value, KeyError) and str(where).startswith("cupti.cupti.")

    def on_unraisable(unraisable: Any) -> None:
        if not ours(unraisable.exc_value, unraisable.object):
            unraisable_hook(unraisable)

    def on_except(kind: type, value: BaseException, tb: Any) -> None:
        frames = []
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_filename)
            tb = tb.tb_next
        if not (isinstance(value, KeyError) and any("buffer_manager" in f for f in frames)):
            except_hook(kind, value, tb)

    sys.unraisablehook, sys.excepthook = on_unraisable, on_except
    try:
        yield
    finally:
        gc.collect()
        sys.unraisablehook, sys.excepthook = unraisable_hook, except_hook


def _release_kept() -> None:
    with quiet_record_release():
        _KEPT.clear()


atexit.register(_release_kept)


try:  # imported once, here: tests may put a stand-in under the same name in sys.modules later
    import cupti.cupti as _REAL
except ImportError:
    _REAL = None


def module() -> Any:
    """The real ``cupti.cupti`` module (the test skips where cupti-python is not installed)."""
    if _REAL is None:
        pytest.skip("cupti-python is not installed")
    return _REAL


def c_string(text: str | None) -> int:
    """The address of a NUL-terminated copy of ``text`` that lives for the whole run (0 for None)."""
    if text is None:
        return 0
    buf = ctypes.create_string_buffer(text.encode())
    _KEPT.append(buf)
    return ctypes.addressof(buf)


def fill(data: Any, fields: dict[str, Any]) -> None:
    """Set fields of a one-element structured array; dict values set sub-fields (object_id.pt...)."""
    for key, value in fields.items():
        if isinstance(value, dict):
            fill(data[key], value)
        elif isinstance(value, str) or value is None and key in ("name", "domain"):
            data[key] = c_string(value)
        else:
            data[key] = value


def make(kind: str, fields: dict[str, Any], data: Any = None) -> Any:
    """A record of ``kind`` (a key of :data:`CLASSES`) over ``data`` (a new array by default)."""
    import numpy as np

    cupti = module()
    class_name, dtype_name = CLASSES[kind]
    if data is None:
        data = np.zeros(1, getattr(cupti, dtype_name))
    fill(data, fields)
    record = getattr(cupti, class_name).from_data(data)
    return record


def keep(record: Any) -> Any:
    _KEPT.append(record)
    return record


# ---------------------------------------------------------------- field sets, one per record kind
def kernel_fields(corr: int, start: int, end: int, name: str = "_Z10vector_addPKfS0_Pfi", *,
                  device: int = 0, stream: int = 7, graph_id: int = 0, graph_node_id: int = 0,
                  kind: str = "CONCURRENT_KERNEL") -> dict:
    return dict(kind=ACTIVITY_KIND[kind], name=name, start=start, end=end, completed=end,
                device_id=device, context_id=CONTEXT, stream_id=stream, correlation_id=corr,
                grid_id=corr * 10, grid_x=8192, grid_y=1, grid_z=1, block_x=128, block_y=1,
                block_z=1, registers_per_thread=16, static_shared_memory=1024,
                dynamic_shared_memory=512, shared_memory_executed=32768, graph_id=graph_id,
                graph_node_id=graph_node_id, channel_id=1, channel_type=1)


def memcpy_fields(corr: int, start: int, end: int, copy_kind: str, src: str, dst: str, *,
                  nbytes: int = 4 << 20, stream: int = 7, flags: int = 1) -> dict:
    return dict(kind=ACTIVITY_KIND["MEMCPY"], copy_kind=MEMCPY_KIND[copy_kind],
                src_kind=MEMORY_KIND[src], dst_kind=MEMORY_KIND[dst], flags_=flags, bytes=nbytes,
                start=start, end=end, device_id=0, context_id=CONTEXT, stream_id=stream,
                correlation_id=corr, runtime_correlation_id=corr, channel_id=2, channel_type=2,
                copy_count=1)


def memset_fields(corr: int, start: int, end: int, *, nbytes: int = 1 << 20) -> dict:
    return dict(kind=ACTIVITY_KIND["MEMSET"], value=0, bytes=nbytes, start=start, end=end,
                device_id=0, context_id=CONTEXT, stream_id=7, correlation_id=corr, flags_=1,
                memory_kind=MEMORY_KIND["DEVICE"], channel_id=2, channel_type=2)


def api_fields(corr: int, start: int, end: int, cbid: int, *, driver: bool = False,
               return_value: int = 0) -> dict:
    return dict(kind=ACTIVITY_KIND["DRIVER" if driver else "RUNTIME"], cbid=cbid, start=start,
                end=end, process_id=PID, thread_id=TID, correlation_id=corr,
                return_value=return_value)


def thread_object() -> dict:
    """``object_id`` of a THREAD object: the ``pt`` view of the union (``dcs`` shares its bytes)."""
    return {"pt": {"process_id": PID, "thread_id": TID}}


# ---------------------------------------------------------------- records (kept for the whole run)
def kernel(*args: Any, **kwargs: Any) -> Any:
    """ActivityKernel10 (CONCURRENT_KERNEL, or KERNEL with ``kind="KERNEL"``)."""
    return keep(make("kernel", kernel_fields(*args, **kwargs)))


def memcpy(*args: Any, **kwargs: Any) -> Any:
    """ActivityMemcpy6 (MEMCPY)."""
    return keep(make("memcpy", memcpy_fields(*args, **kwargs)))


def memcpy_p2p(corr: int, start: int, end: int, *, src_device: int = 0, dst_device: int = 1) -> Any:
    """ActivityMemcpyPtoP4 (MEMCPY2)."""
    return keep(make("memcpy_p2p", dict(
        kind=ACTIVITY_KIND["MEMCPY2"], copy_kind=MEMCPY_KIND["PTOP"], src_kind=MEMORY_KIND["DEVICE"],
        dst_kind=MEMORY_KIND["DEVICE"], flags_=1, bytes=1 << 20, start=start, end=end,
        device_id=src_device, context_id=CONTEXT, stream_id=9, src_device_id=src_device,
        dst_device_id=dst_device, src_context_id=1, dst_context_id=2, correlation_id=corr,
        channel_id=3, channel_type=2)))


def memset(*args: Any, **kwargs: Any) -> Any:
    """ActivityMemset4 (MEMSET)."""
    return keep(make("memset", memset_fields(*args, **kwargs)))


def api(*args: Any, **kwargs: Any) -> Any:
    """ActivityAPI (RUNTIME and DRIVER)."""
    return keep(make("api", api_fields(*args, **kwargs)))


def sync(corr: int, start: int, end: int, sync_type: int, *, stream: int = 7,
         event: int = 0xFFFFFFFF) -> Any:
    """ActivitySynchronization2 (SYNCHRONIZATION); 0xFFFFFFFF is CUPTI's "invalid" for ids."""
    return keep(make("sync", dict(kind=ACTIVITY_KIND["SYNCHRONIZATION"], type=sync_type,
                                  start=start, end=end, correlation_id=corr, context_id=CONTEXT,
                                  stream_id=stream, cuda_event_id=event)))


def marker(marker_id: int, timestamp: int, flags: int, name: str | None = None,
           domain: str | None = None) -> Any:
    """ActivityMarker2 (MARKER): flags 1 = instantaneous, 2 = range start, 4 = range end. CUPTI
    leaves name and domain NULL on range ends, as the default here does."""
    return keep(make("marker", dict(kind=ACTIVITY_KIND["MARKER"], flags_=flags, timestamp=timestamp,
                                    id=marker_id, object_kind=OBJECT_KIND["THREAD"],
                                    object_id=thread_object(), name=name, domain=domain)))


def name_record(object_kind: str, name: str, **ids: int) -> Any:
    """ActivityName (NAME): ``process_id``/``thread_id`` for processes and threads, ``device_id``,
    ``context_id``, ``stream_id`` for the rest (the two views of one union)."""
    if object_kind in ("THREAD", "PROCESS"):
        oid = {"pt": {"process_id": ids.get("process_id", PID), "thread_id": ids.get("thread_id", TID)}}
    else:
        oid = {"dcs": {"device_id": ids.get("device_id", 0), "context_id": ids.get("context_id", 0),
                       "stream_id": ids.get("stream_id", 0)}}
    return keep(make("name", dict(kind=ACTIVITY_KIND["NAME"], object_kind=OBJECT_KIND[object_kind],
                                  object_id=oid, name=name)))


def overhead(start: int, end: int, overhead_kind: int) -> Any:
    """ActivityOverhead3 (OVERHEAD)."""
    return keep(make("overhead", dict(kind=ACTIVITY_KIND["OVERHEAD"], overhead_kind=overhead_kind,
                                      object_kind=OBJECT_KIND["THREAD"], object_id=thread_object(),
                                      start=start, end=end)))


# ---------------------------------------------------------------- a CUPTI-like buffer
def buffer(specs: list[tuple[str, dict]], size: int = 64 << 10) -> tuple[Any, list]:
    """``(bytes, records)``: records of ``(kind, fields)`` laid back to back (8-byte aligned) in one
    uint8 array, each a view into it, as CUPTI's buffer callback hands them over. The records keep
    the array alive, and nothing else does once the caller drops it: these records are not kept for
    the run, so tests using them must expect the buffer manager's ``KeyError`` at deallocation."""
    import numpy as np

    cupti = module()
    data = np.zeros(size, np.uint8)
    records, offset = [], 0
    for kind, fields in specs:
        dtype = getattr(cupti, CLASSES[kind][1])
        view = data[offset:offset + dtype.itemsize].view(dtype)
        records.append(make(kind, fields, view))
        offset += -(-dtype.itemsize // 8) * 8
    return data, records
