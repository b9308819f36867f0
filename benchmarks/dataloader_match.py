"""How the DataLoader ``__next__`` name matcher of the insight rules scales on long hostile names:
``is_dataloader_next`` against a linear baseline (a substring search over the same name), side by side
in one run, at growing sizes. A linear matcher keeps the ratio flat as the name grows; the old regex
``DataLoader.*__next__`` grew quadratically (4.5 s on a 200 kB name of repeated "DataLoader").

    python benchmarks/dataloader_match.py [--mb 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from otel_profiler.analysis.insights.context import is_dataloader_next  # noqa: E402


def _best(fn, name: str, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(name)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0, help="largest name, in MB")
    args = parser.parse_args()
    print(f"{'name (MB)':>10}  {'pattern':<28}  {'matcher (s)':>11}  {'baseline (s)':>12}  {'ratio':>6}")
    size = args.mb / 8
    while size <= args.mb:
        n = int(size * 1e6)
        for label, unit in (("DataLoader repeated", "DataLoader"),
                            ("dataloader.py( digits", "utils/data/dataloader.py(1"),
                            ("one dataloader.py( + digits", "utils/data/dataloader.py(")):
            name = (unit * (n // len(unit) + 1))[:n]
            if label.startswith("one"):
                name = unit + "1" * n
            matcher = _best(is_dataloader_next, name)
            baseline = _best(lambda s: "__never__" in s, name)
            print(f"{size:>10.1f}  {label:<28}  {matcher:>11.4f}  {baseline:>12.4f}  {matcher / baseline:>6.1f}")
        size *= 2


if __name__ == "__main__":
    main()
