#!/usr/bin/env bash
# Copies a passing GPU check's captures into tests/data/gpu_capture/, where the CPU suite re-checks
# them (tests/gpu/test_gpu_capture.py reads that folder when no GPU is present):
#   bash tests/gpu/keep_as_fixtures.sh OUTPUT_DIR      then commit tests/data/gpu_capture/
# Exit codes: 0 copied; 2 bad usage or OUTPUT_DIR is not a passing check's output.
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 OUTPUT_DIR" >&2; exit 2; fi
SRC="$1"
cd "$(dirname "$0")/../.."
if [ ! -f "$SRC/results.json" ]; then echo "$SRC: no results.json (not a GPU check's output)" >&2; exit 2; fi
if ! python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("pytest_exit") != 0)' "$SRC/results.json"; then
  echo "$SRC/results.json: the checks did not pass (pytest_exit is not 0); not kept" >&2; exit 2
fi
DEST=tests/data/gpu_capture
mkdir -p "$DEST"
cp "$SRC/results.json" "$SRC/prerequisites.json" "$DEST/"
cp "$SRC"/*_capture.batch.zip "$DEST/"
[ -f "$SRC/kineto_trace.json.gz" ] && cp "$SRC/kineto_trace.json.gz" "$DEST/"
du -sh "$DEST"; ls -l "$DEST"
