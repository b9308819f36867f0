"""The project's CUPTI code against the real cupti-python module, on a machine without a GPU.

cupti-python imports without a driver; its calls then fail. What can be proven here:

- the enums and the record classes/fields the converter relies on are the real module's;
- records are views into their buffer (not copies), the conversion copies what it needs, and the
  source drops the records (so the buffer can be released) once they are converted or dropped;
- the real module's failures (no driver; a driver that cannot serve CUPTI) give one warning, never
  an exception, and the callback names fall back to stable ones;
- which libcupti file cupti-python loaded (the one ``NVTX_INJECTION64_PATH`` must name), checked in
  a child process that loads a stub ``libcuda`` built here with gcc (cuInit, cuDriverGetVersion).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest

import cupti_records_real as f
from cuda_tracer.capture.cupti import CuptiSource, api_namer
from cuda_tracer.capture.cupti_records import (ACTIVITY_KIND, FLAG_MARKER_END, RecordConverter,
                                       enum_mismatches, overhead_names_from)
from cuda_tracer.model.events import Kind
from cupti_fakes import T0, FakeCupti
from cupti_fakes import isolated_from_other_profilers  # noqa: F401 (autouse fixture)

REPO = Path(__file__).resolve().parents[2]
cupti = pytest.importorskip("cupti.cupti", reason="cupti-python is not installed")
STUB_DRIVER = """
int cuInit(unsigned int flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
"""

# The fields the converter reads, per record class (cuda_tracer/capture/cupti_records.py).
READS = {
    "kernel": {"kind", "name", "start", "end", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
               "block_z", "registers_per_thread", "static_shared_memory", "dynamic_shared_memory",
               "device_id", "context_id", "stream_id", "correlation_id", "graph_id", "graph_node_id"},
    "memcpy": {"kind", "copy_kind", "src_kind", "dst_kind", "bytes", "start", "end", "flags_",
               "device_id", "context_id", "stream_id", "correlation_id", "graph_id", "graph_node_id"},
    "memcpy_p2p": {"kind", "copy_kind", "src_kind", "dst_kind", "bytes", "start", "end", "flags_",
                   "device_id", "context_id", "stream_id", "correlation_id", "src_device_id",
                   "dst_device_id", "graph_id", "graph_node_id"},
    "memset": {"kind", "memory_kind", "value", "bytes", "start", "end", "device_id", "context_id",
               "stream_id", "correlation_id", "graph_id", "graph_node_id"},
    "api": {"kind", "cbid", "start", "end", "process_id", "thread_id", "correlation_id",
            "return_value"},
    "sync": {"kind", "type", "start", "end", "context_id", "stream_id", "correlation_id",
             "cuda_event_id"},
    "marker": {"kind", "flags_", "timestamp", "id", "object_kind", "object_id", "name", "domain"},
    "name": {"kind", "object_kind", "object_id", "name"},
    "overhead": {"kind", "overhead_kind", "object_kind", "object_id", "start", "end",
                 "correlation_id"},
}


def test_enums_match_the_real_module():
    assert enum_mismatches(cupti) == []
    # cupti-python 13.0 has no MARKER_END (hence the neighbours check); a later one must agree on it
    assert int(getattr(cupti.ActivityFlag, "MARKER_END", FLAG_MARKER_END)) == FLAG_MARKER_END
    assert int(cupti.ActivityFlag.MARKER_START) << 1 == FLAG_MARKER_END
    for name, value in ACTIVITY_KIND.items():
        assert int(getattr(cupti.ActivityKind, name)) == value


@pytest.mark.parametrize("kind", sorted(READS))
def test_record_classes_carry_the_fields_the_converter_reads(kind):
    class_name, dtype_name = f.CLASSES[kind]
    dtype = getattr(cupti, dtype_name)
    assert READS[kind] <= set(dtype.names), READS[kind] - set(dtype.names)
    record_type = getattr(cupti, class_name)
    assert all(hasattr(record_type, field) for field in READS[kind])


def test_object_id_is_a_union_of_pt_and_dcs():
    fields = cupti.activity_object_kind_id_dtype.fields
    assert fields["pt"][1] == fields["dcs"][1] == 0  # both views start at byte 0
    assert set(fields["dcs"][0].names) == {"device_id", "context_id", "stream_id"}


def test_range_end_markers_have_no_name_and_still_close_their_range():
    end = f.marker(9, T0 + 50, FLAG_MARKER_END)  # CUPTI leaves name and domain NULL
    assert (end.name, end.domain) == ("", "")
    batch = RecordConverter().convert([f.marker(9, T0, 2, "step 0", "train"), end])
    assert batch.names() == ["step 0"] and batch.extras_of(0)["domain"] == "train"


def step_buffer():
    return f.buffer([("api", f.api_fields(1, T0, T0 + 3_000, 211)),
                     ("kernel", f.kernel_fields(1, T0 + 5_000, T0 + 9_000)),
                     ("memcpy", f.memcpy_fields(2, T0 + 9_500, T0 + 12_000, "DTOH", "DEVICE",
                                                "PINNED", nbytes=4096)),
                     ("memset", f.memset_fields(3, T0 + 12_500, T0 + 13_000, nbytes=512))])


def test_records_are_views_of_their_buffer_and_the_conversion_copies():
    with f.quiet_record_release():
        data, records = step_buffer()
        batch = RecordConverter().convert(records)
        assert batch.kind.tolist() == [Kind.RUNTIME, Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]
        assert batch.bytes.tolist()[2:] == [4096, 512]
        data[:] = 0  # CUPTI reuses the buffer
        assert records[2].bytes == 0 and records[1].end == 0  # the records saw it: views
        assert batch.bytes.tolist()[2:] == [4096, 512]  # the batch did not: copies
        assert batch.end_ns[1] == T0 + 9_000
        del records


def test_source_holds_a_buffer_until_its_records_are_converted():
    with f.quiet_record_release():
        mod = FakeCupti()
        src = CuptiSource(module=mod)
        assert src.start()
        data, records = step_buffer()
        freed = weakref.ref(data)
        mod.fill(records)
        del data, records
        mod.activity_flush_all(0)  # handed over: the source's queue now holds the only references
        assert freed() is not None
        assert len(src.collect()) == 4
        assert freed() is None  # converted and dropped: cupti-python may release the buffer
        src.stop()


def test_a_dropped_buffer_is_released_at_once():
    with f.quiet_record_release():
        mod = FakeCupti()
        src = CuptiSource(module=mod, max_pending_buffers=0)
        assert src.start()
        data, records = step_buffer()
        freed = weakref.ref(data)
        mod.fill(records)
        del data, records
        mod.activity_flush_all(0)
        assert freed() is None and src.stats()["lost_records"] == 4
        src.stop()


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="a CUDA driver is present")
def test_without_a_driver_the_real_module_gives_one_warning():
    with pytest.warns(RuntimeWarning, match="CUDA driver is not found") as caught:
        src = CuptiSource(module=cupti)
        assert not src.start()
    assert len(caught) == 1 and "\n" not in src.reason
    assert len(src.collect()) == 0 and len(src.stop()) == 0
    assert api_namer(cupti)(ACTIVITY_KIND["RUNTIME"], 211) == "cuda_cbid_211"
    names = overhead_names_from(cupti)
    assert names[int(cupti.ActivityOverheadKind.RUNTIME_TRIGGERED_MODULE_LOADING)] == \
        "Runtime Triggered Module Loading"


CHILD = """
import json, os, shutil, sys, warnings
import cupti.cupti as cupti
from cuda_tracer.capture.cupti import CuptiSource, libcupti_path, loaded_libcupti
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    src = CuptiSource(module=cupti)
    started = src.start()
library = libcupti_path(cupti)
os.environ["NVTX_INJECTION64_PATH"] = library
same = src.stats()
other = os.path.join(sys.argv[1], os.path.basename(library))
shutil.copy(library, other)
os.environ["NVTX_INJECTION64_PATH"] = other
print(json.dumps({"started": started, "reason": src.reason, "warnings": [str(w.message) for w in caught],
                  "library": library, "mapped": loaded_libcupti(), "same": same,
                  "other": src.stats()}))
"""


@pytest.fixture(scope="module")
def stub_driver(tmp_path_factory) -> Path:
    """A folder holding a stub ``libcuda.so.1`` (two exported functions, no GPU behind them)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: no stub libcuda can be built")
    folder = tmp_path_factory.mktemp("stub_driver")
    (folder / "stub.c").write_text(STUB_DRIVER)
    subprocess.run([gcc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    str(folder / "libcuda.so.1"), str(folder / "stub.c")], check=True, timeout=120)
    return folder


def test_which_libcupti_cupti_python_loaded_and_nvtx_injection(stub_driver, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NSYS_", "CUDA_INJECTION64", "NVTX_INJECTION64"))}
    env["LD_LIBRARY_PATH"] = str(stub_driver) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # A driver that cannot serve CUPTI: one line naming CUPTI's answer, no exception.
    assert not got["started"] and got["reason"].startswith("CUPTI refused to start: ")
    assert len(got["warnings"]) == 1 and got["reason"] in got["warnings"][0]
    library = Path(got["library"])
    assert library.name.startswith("libcupti.so") and library.is_file()
    assert got["mapped"] == [got["library"]]  # one copy loaded, the one named
    assert got["same"]["libcupti"] == got["library"]
    assert got["same"]["nvtx_injection"] and got["same"]["nvtx_injection_is_libcupti"] is True
    assert got["other"]["nvtx_injection"] and got["other"]["nvtx_injection_is_libcupti"] is False
