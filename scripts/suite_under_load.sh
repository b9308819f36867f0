#!/usr/bin/env bash
# The whole test suite (scripts/test.sh) several times in a row while one CPU-bound process per core runs
# beside it: the check that the tests hold on a busy machine. Usage: bash scripts/suite_under_load.sh [RUNS]
# [pytest arguments]; RUNS defaults to 3. The runs are `scripts/test.sh --repeat RUNS` (the installs once, then
# one line per run with its result, duration and load average); it stops at the first run that fails, and the
# busy processes end with it.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
shift || true
busy=()
stop_busy() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null || true; }
trap stop_busy EXIT
for _ in $(seq "$(nproc)"); do
  python3 -c 'while True: pass' &
  busy+=($!)
done
echo "started ${#busy[@]} busy processes (one per core), load average $(cut -d' ' -f1-3 /proc/loadavg)"
bash scripts/test.sh --repeat "$runs" "$@"
