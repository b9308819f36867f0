#!/usr/bin/env bash
# The GPU check: real GPU work captured through every live source, then checked (docs/gpu-checks.md).
#
#   bash tests/gpu/run_gpu_checks.sh [OUTPUT_DIR]
#
# OUTPUT_DIR (default: a new temporary folder) receives
#   gpu_checks.log               everything printed
#   prerequisites.json           versions found (Python, torch, CUDA, cupti-python, libcupti, driver)
#   results.json                 every capture's summary, overhead ratios, NVML readings, step times
#   pytest.xml                   the checks' verdicts (JUnit XML)
#   kineto_trace.json.gz         torch.profiler's Chrome trace of the checked work
#   {kineto,kineto_live,cupti,cupti_nvtx}_capture.batch.zip   captured EventBatches
# After a passing run, tests/gpu/keep_as_fixtures.sh OUTPUT_DIR copies them into tests/data/ as CPU
# fixtures. Packages missing on the machine may be carried as wheels in .whl/ (tests/gpu/fetch_wheels.sh).
#
# Exit codes: 0 every check passed; 1 a check or capture failed; 2 bad usage;
#             3 a prerequisite is missing (nothing was captured).
# Time: every step runs under `timeout`, within one budget (GPU_CHECK_BUDGET_S, default 270 s), so the
# whole check ends within 5 minutes even if steps hang; a step that no longer fits is skipped and
# reported. Expected: about 2-3 minutes.
set -uo pipefail
if [ $# -gt 1 ]; then echo "usage: $0 [OUTPUT_DIR]" >&2; exit 2; fi
cd "$(dirname "$0")/../.." || exit 2
OUT_DIR="${1:-$(mktemp -d -t gpu-checks.XXXXXX)}"
if ! mkdir -p "$OUT_DIR" 2>/dev/null || [ ! -w "$OUT_DIR" ]; then
  echo "output folder $OUT_DIR: cannot be created or written" >&2; exit 2
fi
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
exec > >(tee "$OUT_DIR/gpu_checks.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
BUDGET=${GPU_CHECK_BUDGET_S:-270}
RESERVE=45  # kept for the final pytest run while captures are going on
t0=$SECONDS
STEPS="$OUT_DIR/steps.tsv"
: > "$STEPS"

missing() { echo "PREREQUISITE MISSING: $*"; echo "prerequisite missing: $*" > "$OUT_DIR/prerequisite_missing.txt"; exit 3; }
# step NAME CAP RESERVE CMD...: runs CMD under a limit of min(CAP, budget left - RESERVE) seconds.
step() {
  local name=$1 cap=$2 reserve=$3; shift 3
  local limit=$((BUDGET - (SECONDS - t0) - reserve))
  [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 5 ]; then
    echo "=== $name: skipped, the check's time budget is spent"
    printf '%s\tskipped\t0\n' "$name" >> "$STEPS"; return 124
  fi
  echo "=== [$((SECONDS - t0)) s] $name (limit $limit s)"
  local began=$SECONDS
  timeout -k 5 "$limit" "$@"
  local rc=$?
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "$name: timed out after $limit s"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - began))" >> "$STEPS"
  return "$rc"
}

# ---------------------------------------------------------------- prerequisites (exit 3)
for cmd in python3 timeout nvidia-smi; do
  command -v "$cmd" >/dev/null || missing "the command $cmd is not installed"
done
step "nvidia-smi" 20 0 nvidia-smi -L || missing "nvidia-smi sees no NVIDIA GPU (nvidia-smi -L failed)"

if compgen -G ".whl/*.whl" >/dev/null; then  # packages carried to a machine without a registry
  SITE="$(mktemp -d -t gpu-checks-site.XXXXXX)"  # outside OUTPUT_DIR: not part of the results
  step "carried wheels" 40 0 python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || missing "the wheels in .whl/ do not install"
  export PYTHONPATH="$SITE"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

step "prerequisites" 60 0 python3 tests/gpu/gpu_env.py prerequisites "$OUT_DIR/prerequisites.json" \
  || missing "$(python3 -c 'import json,sys; print("; ".join(json.load(open(sys.argv[1]))["missing"]))' \
                "$OUT_DIR/prerequisites.json" 2>/dev/null || echo 'see the lines above')"
LIBCUPTI=$(timeout -k 5 45 python3 tests/gpu/gpu_env.py libcupti) \
  || missing "the libcupti that cupti-python loads cannot be told apart (none, or several copies): $LIBCUPTI"
echo "libcupti loaded by cupti-python: $LIBCUPTI"

# ---------------------------------------------------------------- captures: one process each
# (CUPTI allows one subscriber per process). Expected 10-30 s each.
failed=0
step "capture kineto" 75 "$RESERVE" python3 tests/gpu/capture.py kineto --out "$OUT_DIR" || failed=1
step "capture cupti" 50 "$RESERVE" python3 tests/gpu/capture.py cupti --out "$OUT_DIR" || failed=1
# NVTX ranges reach CUPTI only when NVTX's injection library is the libcupti cupti-python loaded.
NVTX_INJECTION64_PATH="$LIBCUPTI" step "capture cupti with NVTX" 50 "$RESERVE" \
  python3 tests/gpu/capture.py cupti --out "$OUT_DIR" || failed=1
step "overhead kineto" 45 "$RESERVE" python3 tests/gpu/capture.py overhead-kineto --out "$OUT_DIR" || failed=1
step "overhead cupti" 45 "$RESERVE" python3 tests/gpu/capture.py overhead-cupti --out "$OUT_DIR" || failed=1
step "nvml" 30 "$RESERVE" python3 tests/gpu/capture.py nvml --out "$OUT_DIR" || failed=1

# ---------------------------------------------------------------- the checks
GPU_CHECK_DIR="$OUT_DIR" step "pytest tests/gpu" 60 0 python3 -m pytest -q -rs -p no:cacheprovider \
  --junitxml "$OUT_DIR/pytest.xml" tests/gpu
rc=$?
python3 - "$OUT_DIR" "$rc" "$((SECONDS - t0))" <<'EOF'
import json, sys
out, rc, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
path = f"{out}/results.json"
try:
    data = json.load(open(path))
except (OSError, ValueError):
    data = {}
data["pytest_exit"] = rc
data["check_seconds"] = seconds
data["steps"] = [dict(zip(("name", "exit", "seconds"), line.rstrip("\n").split("\t")))
                 for line in open(f"{out}/steps.tsv")]
json.dump(data, open(path, "w"), indent=1, sort_keys=True)
for key in ("overhead_kineto", "overhead_cupti"):
    value = data.get(key, {})
    print(key, "ratio", value.get("ratio"), "step ms", value.get("median_step_ms_unprofiled"))
EOF
ls -l "$OUT_DIR"
echo "=== [$((SECONDS - t0)) s] done: pytest exit $rc, capture failures $failed; output in $OUT_DIR"
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ]; then exit 1; fi
exit 0
