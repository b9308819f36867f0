"""A large trace for benchmarks: a shared trace's events repeated with shifted times and ids.

Copy ``k`` of every event has its ``ts`` moved by ``k`` times the trace's span (plus a gap), and its
ids (``External id``, ``correlation``, flow ids) moved past those of copy ``k - 1``, so the result
reads as one long run of the same steps: kernels still link to their launches, nothing overlaps.
Decimal timestamps stay exact decimals. Written gzip'd, once, into a cache folder (not committed)::

    python benchmarks/large_trace.py [--events 2000000] [--source TRACE] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import os
from decimal import Decimal

import msgspec

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "tests", "data", "traces")
DEFAULT_SOURCE = os.path.join(SHARED, "hta", "ns_resolution_trace",
                              "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
CACHE = os.path.join(HERE, ".cache")
_ID_ARGS = ("External id", "external id", "correlation", "Ev Idx")


def build(source: str, events: int, out: str) -> str:
    """Write ``out`` (gzip) holding at least ``events`` events; returns ``out``."""
    with gzip.open(source, "rb") as f:
        doc = msgspec.json.Decoder(float_hook=Decimal).decode(f.read())
    base = doc["traceEvents"]
    times = [e["ts"] for e in base if isinstance(e.get("ts"), (int, Decimal))]
    ends = [e["ts"] + e.get("dur", 0) for e in base if isinstance(e.get("ts"), (int, Decimal))
            and isinstance(e.get("dur", 0), (int, Decimal))]
    span = max(ends) - min(times) + 1000  # µs, plus 1 ms between copies
    max_id = max([int(v) for e in base for k, v in (e.get("args") or {}).items()
                  if k in _ID_ARGS and isinstance(v, int)] +
                 [int(e["id"]) for e in base if isinstance(e.get("id"), int)] + [0]) + 1
    copies = -(-events // len(base))
    encoder = msgspec.json.Encoder(decimal_format="number")
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with gzip.open(tmp, "wb", compresslevel=3) as f:
        f.write(encoder.encode(head)[:-1] + b', "traceEvents": [\n')
        for k in range(copies):
            for i, e in enumerate(base):
                if k:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, Decimal)) and e.get("ph") != "M":
                        e["ts"] = e["ts"] + k * span
                    if isinstance(e.get("id"), int):
                        e["id"] = e["id"] + k * max_id
                    args = e.get("args")
                    if isinstance(args, dict) and any(a in args for a in _ID_ARGS):
                        e["args"] = {a: (v + k * max_id if a in _ID_ARGS and isinstance(v, int)
                                         and v >= 0 else v) for a, v in args.items()}
                f.write(encoder.encode(e))
                f.write(b",\n" if (k, i) != (copies - 1, len(base) - 1) else b"\n")
        f.write(b"]}\n")
    os.replace(tmp, out)
    return out


def large_trace(events: int = 2_000_000, source: str = DEFAULT_SOURCE) -> str:
    """The cached fixture of ``events`` events from ``source``, built on first use."""
    name = os.path.basename(source).split(".json")[0]
    out = os.path.join(CACHE, f"{name}.x{events}.json.gz")
    return out if os.path.exists(out) else build(source, events, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--source", default=DEFAULT_SOURCE)
    parser.add_argument("--out")
    args = parser.parse_args()
    path = build(args.source, args.events, args.out) if args.out else large_trace(args.events, args.source)
    print(path)


if __name__ == "__main__":
    main()
