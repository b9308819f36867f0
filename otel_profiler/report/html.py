"""Builds the self-contained HTML report: one file holding the data (JSON, timeline columns as base64
typed arrays) and the inlined CSS and JavaScript from ``assets/`` (``report.js``: helpers, dashboard,
tables, insights; ``operators.js``: the operator view; ``memory.js``: GPU memory; ``roofline.js``:
FLOPs, MFU and the roofline; ``host.js``: CPU
utilization over time and the compute resources; ``timeline.js``: the canvas timeline; ``flame.js``:
the flame graph of call stacks (data: ``flame``); ``page.js``: tabs); it needs no network to open.

Untrusted names (kernels, annotations) travel only inside the JSON data block, with every ``<``
escaped, and the script puts them on the page with ``textContent`` or canvas ``fillText`` only.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import re
from importlib import resources
from typing import Any

import numpy as np

from cuda_tracer.model.events import Kind
from cuda_tracer.profile import Profile

from ..analysis.activity import annotation_durations, cpu_active, precision_times, utilization_over_time
from ..analysis.document import SummaryDocument
from ..analysis.host.compute import cpu_timelines
from ..analysis.insights import Thresholds, thresholds_doc
from ..analysis.insights.context import step_label
from ..analysis.memory.allocator import memory_timeline
from ..analysis.windows import SUMMARY_REASONS
from ..names import demangle, short_names
from .flame import flame_data
from .timeline_budget import left_out_note, thin
from .tracks import Tracks, assign_tracks


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def timeline_data(profile: Profile) -> dict[str, Any]:
    """The timeline as columns: per event track, start (ns from ``t0_ns``), duration, name, kind.

    Names: ``strings`` as a person reads them (demangled), ``short`` their short forms (drawn on the
    events), ``raw`` the recorded name where it differs (else null)."""
    t = assign_tracks(profile)
    b = t.batch
    rows, track, flow_src, flow_dst, left_out, note = _within_budget(t)
    t0 = int(b.start_ns[rows].min()) if len(rows) else 0
    dur = b.end_ns[rows] - b.start_ns[rows]
    wide = len(dur) and int(dur.max()) >= 2**32
    name_ids, name_index = np.unique(b.name[rows], return_inverse=True)
    raw = [b.strings[i] for i in name_ids.tolist()]
    readable = [demangle(n) for n in raw]
    return {
        "t0_ns": t0, "count": int(len(rows)), "total": int(len(t.rows)), "left_out_note": note,
        "initial_view": initial_view(b, rows, t0),
        "windows": window_bands(b, t0),
        "strings": readable,
        "short": [step_label(n) for n in short_names(raw)],
        "raw": [r if r != n else None for r, n in zip(raw, readable)],
        "kinds": {int(k): k.name.lower() for k in Kind},
        "tracks": [{"group": tr.group, "label": tr.label, "kind": tr.kind, "collapsed": tr.collapsed,
                    "left_out": left} for tr, left in zip(t.tracks, left_out)],
        "dur_type": "f64" if wide else "u32",
        "columns": {
            "track": _b64(track.astype("<u4")),
            "start": _b64((b.start_ns[rows] - t0).astype("<f8")),
            "dur": _b64(dur.astype("<f8" if wide else "<u4")),
            "name": _b64(name_index.reshape(-1).astype("<u4")),
            "kind": _b64(b.kind[rows].astype("u1")),
            "flow_src": _b64(flow_src.astype("<u4")),
            "flow_dst": _b64(flow_dst.astype("<u4")),
        },
    }


_GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
WINDOW_EVENT = "otel-profiler window"  # the PROFILER event of a live run's detailed window


def window_bands(b, t0: int) -> list[dict[str, Any]]:
    """A live run's detailed windows (ns from ``t0``), which the timeline shades above its axis:
    steps captured with operators and kernels, and the step after each that holds closing it."""
    rows = np.flatnonzero(b.kind == Kind.PROFILER)
    if not len(rows):
        return []
    reasons, firsts, lasts = b.extra("reason"), b.extra("first_step"), b.extra("last_step")
    out = []
    for r in rows.tolist():
        if b.strings[b.name[r]] != WINDOW_EVENT:
            continue
        reason = str(reasons.get(r, ""))
        out.append({"t0": float(b.start_ns[r] - t0), "t1": float(b.end_ns[r] - t0), "rank": int(b.rank[r]),
                    "label": f"window: steps {firsts.get(r, '?')}-{lasts.get(r, '?')} "
                             f"({SUMMARY_REASONS.get(reason, reason)})"})
    return out


def initial_view(b, rows: np.ndarray, t0: int) -> dict[str, Any]:
    """Where the timeline opens (ns from ``t0``): the first step with GPU work, else the busiest
    second of GPU work when the profile is longer than two seconds, else everything. ``reason``
    says which, for the page to show; "zoom to all" is one click away."""
    kinds = b.kind[rows]
    gpu = rows[np.isin(kinds, _GPU_KINDS)]
    end = float(b.end_ns[rows].max() - t0) if len(rows) else 1.0
    whole: dict[str, Any] = {"t0": 0.0, "t1": end, "reason": "whole profile"}
    if not len(gpu):
        return whole
    steps = rows[kinds == Kind.STEP]
    steps = steps[np.argsort(b.start_ns[steps], kind="stable")]
    gpu_starts = np.sort(b.start_ns[gpu])
    for r in steps.tolist():
        lo, hi = int(b.start_ns[r]), int(b.end_ns[r])
        i = int(np.searchsorted(gpu_starts, lo))
        if i < len(gpu_starts) and gpu_starts[i] < hi:
            pad = (hi - lo) * 0.02
            return {"t0": lo - t0 - pad, "t1": hi - t0 + pad,
                    "reason": f"the first step with GPU work: {step_label(b.strings[b.name[r]])}"}
    second = 1_000_000_000
    if end <= 2 * second:
        return whole
    bins = ((b.start_ns[gpu] - t0) // second).astype(np.int64)
    busy = np.bincount(bins, weights=(b.end_ns[gpu] - b.start_ns[gpu]).astype(np.float64))
    top = int(np.argmax(busy))
    return {"t0": float(top * second), "t1": float((top + 1) * second),
            "reason": "the busiest second of GPU work"}


def _within_budget(t: Tracks) -> tuple:
    """The timeline's rows, tracks and launch links after ``timeline_budget.thin``, the count left
    out per track, and the page's note on it (None when every event is shown)."""
    b = t.batch
    budget = thin(t.track, b.start_ns[t.rows], b.end_ns[t.rows] - b.start_ns[t.rows])
    left_out = np.bincount(t.track[~budget.keep], minlength=len(t.tracks)).tolist()
    if budget.keep.all():
        return t.rows, t.track, t.flow_src, t.flow_dst, left_out, None
    position = np.cumsum(budget.keep) - 1  # old timeline index -> new one, where kept
    linked = budget.keep[t.flow_src] & budget.keep[t.flow_dst]
    note = left_out_note(len(t.rows), int(budget.keep.sum()), budget)
    return (t.rows[budget.keep], t.track[budget.keep], position[t.flow_src[linked]],
            position[t.flow_dst[linked]], left_out, note)


def report_data(doc: SummaryDocument) -> dict[str, Any]:
    """Everything the page shows: the document's summary (with insights), dashboard extras and the
    timeline."""
    profile, summary, thresholds = doc.profile, doc.summary, doc.thresholds
    batch = profile.batch()
    return {
        "title": ", ".join(profile.sources) or "profile",
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "summary": summary,
        "dashboard": {
            "utilization": utilization_over_time(batch, multi_rank="ranks" in summary),
            "cpu_active": cpu_active(batch),
            "precision": precision_times(summary["kernels"]["by_name"]),
            "annotations": annotation_durations(batch),
            "memory": memory_timeline(batch, multi_rank="ranks" in summary),
            "cpu_timeline": cpu_timelines(profile),
        },
        "thresholds": [dict(t, value=getattr(thresholds, t["name"])) for t in thresholds_doc()]
        if doc.thresholds_given else thresholds_doc(),
        "timeline": timeline_data(profile),
        "flame": flame_data(profile, batch),
    }


_SCRIPTS = ("report.js", "operators.js", "memory.js", "roofline.js", "host.js", "timeline.js", "flame.js",
            "page.js")  # helpers and tabs, the timeline, the page: in order


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets").joinpath(name).read_text(encoding="utf-8")


def render_html(data: dict[str, Any]) -> str:
    """The page: template with the CSS, the script and the JSON data block filled in."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("<", "\\u003c")  # no "</script>" or "<!--" can end the data block
    parts = {"TITLE": html.escape(data["title"]), "CSS": _asset("report.css"), "DATA": payload,
             "JS": "\n".join(_asset(n) for n in _SCRIPTS).replace("</", "<\\/")}
    # One pass, so text inside one part (a kernel named "/*JS*/") is never substituted again.
    return re.sub(r"/\*(TITLE|CSS|DATA|JS)\*/", lambda m: parts[m.group(1)], _asset("template.html"))


def write_report(profile: Profile, path: str, thresholds: Thresholds | None = None) -> int:
    """Write the HTML report of ``profile`` to ``path``; returns its size in bytes."""
    text = render_html(report_data(SummaryDocument(profile, thresholds)))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return len(text.encode("utf-8"))
