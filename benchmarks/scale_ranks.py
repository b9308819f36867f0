"""An N-rank job with a known truth, made from a real rank of a multi-rank NCCL job in the repository
(HTA's ``trace_filter/sampled_rank-0``, rank 0 of a 128-rank job): every rank is that trace with its
own clock offset, jittered compute kernels and collective ends, and one injected straggler.

Truth: rank ``r``'s clock runs ``offsets_us[r]`` ahead of rank 0's (every time in its file is shifted
by it), so aligning to rank 0 must recover those offsets. The straggler does extra compute before
each collective (a compute kernel of ``straggler_share`` of the collective's time, just before it
on the same stream) and so enters each collective that much later; the collective still ends with
everyone else's (it shortens by as much), so the other ranks are the ones that wait.

    python benchmarks/scale_ranks.py OUT_FOLDER --ranks 64 [--seed 1] [--straggler 5]

Importable: ``make_job(folder, ranks, ...) -> dict`` (the truth).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).resolve().parent.parent / "tests/data/traces/hta/trace_filter/sampled_rank-0.json.gz"
INJECTED_KERNEL = "void injected_straggler_compute_kernel(float*, int)"


def _is_collective(event: dict) -> bool:
    return event.get("cat") == "kernel" and "nccl" in event.get("name", "").lower()


def make_job(folder: str | os.PathLike, ranks: int, seed: int = 1, straggler: int | None = None,
             max_offset_us: float = 500.0, collective_jitter_us: float = 3.0,
             compute_jitter: float = 0.02, straggler_share: float = 0.5,
             template: Path = TEMPLATE) -> dict[str, Any]:
    """Write ``rank-NNNN.json.gz`` for ranks 0..ranks-1 into ``folder``; returns the truth:
    ``{ranks, straggler, offsets_us: {rank: µs}, files: [...]}``."""
    rng = random.Random(seed)
    doc = json.loads(gzip.decompress(template.read_bytes()))
    events = doc.pop("traceEvents")
    straggler = rng.randrange(1, ranks) if straggler is None and ranks > 1 else (straggler or 0)
    os.makedirs(folder, exist_ok=True)
    offsets: dict[int, float] = {}
    files = []
    for r in range(ranks):
        offset = 0.0 if r == 0 else round(rng.uniform(-max_offset_us, max_offset_us), 3)
        offsets[r] = offset
        out = []
        for e in events:
            if "ts" not in e:
                out.append(e)
                continue
            e = dict(e, ts=e["ts"] + offset)
            if _is_collective(e):
                e["dur"] = e["dur"] + round(rng.uniform(-collective_jitter_us, collective_jitter_us), 3)
                if r == straggler:
                    extra = round(e["dur"] * straggler_share, 3)
                    out.append({"ph": "X", "cat": "kernel", "name": INJECTED_KERNEL, "pid": e["pid"],
                                "tid": e["tid"], "ts": e["ts"], "dur": extra,
                                "args": {k: v for k, v in e.get("args", {}).items()
                                         if k in ("device", "stream", "context")}})
                    e["ts"], e["dur"] = e["ts"] + extra, round(e["dur"] - extra, 3)
            elif e.get("cat") == "kernel" and e.get("dur"):
                e["dur"] = round(e["dur"] * (1 + rng.uniform(-compute_jitter, compute_jitter)), 3)
            out.append(e)
        info = dict(doc.get("distributedInfo") or {}, rank=r, world_size=ranks)
        path = Path(folder) / f"rank-{r:04d}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(dict(doc, distributedInfo=info, traceEvents=out)).encode(),
                                       compresslevel=1))
        files.append(str(path))
    return {"ranks": ranks, "straggler": straggler, "offsets_us": offsets, "files": files}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--straggler", type=int, default=None)
    a = p.parse_args()
    truth = make_job(a.folder, a.ranks, a.seed, a.straggler)
    print(json.dumps({k: v for k, v in truth.items() if k != "files"}))


if __name__ == "__main__":
    main()
