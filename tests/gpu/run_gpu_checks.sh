#!/usr/bin/env bash
# All GPU checks in one call on the device machine, writing under $OUT. Expected 3-4 minutes; the
# per-step timeouts below bound it at about 9 minutes.
#   results.json                 every capture's summary, overhead ratios, NVML readings, pytest exit
#   gpu_checks.log               everything printed
#   kineto_trace.json.gz         torch.profiler's raw Chrome trace of the checked work
#   {kineto,kineto_live,cupti,cupti_nvtx}_capture.batch.zip   captured EventBatches (CPU fixtures)
# Before the call, on the CPU machine: bash tests/gpu/fetch_wheels.sh   (then carry ".whl").
# Device call:  run(command="bash tests/gpu/run_gpu_checks.sh", carry=[".whl"], timeout_s=590)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_checks.log") 2>&1
export PYTHONUNBUFFERED=1
t0=$SECONDS
step() { echo "=== [$((SECONDS - t0)) s] $*"; }

step "machine"
nvidia-smi -L || true
python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'

step "carried wheels"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import msgspec, cuda_tracer; print("msgspec", msgspec.__version__)' || echo "msgspec missing: the Kineto trace reader cannot run"

step "libcupti"
LIBCUPTI=$(python3 - <<'EOF'
import glob, os, site, sys
roots = site.getsitepackages() + [p for p in sys.path if p.endswith("site-packages")]
found = []
for root in roots:
    found += glob.glob(os.path.join(root, "nvidia", "**", "libcupti.so*"), recursive=True)
found += glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*")
print(sorted(found, key=len)[0] if found else "")
EOF
)
echo "libcupti: ${LIBCUPTI:-not found}"
if [ -n "$LIBCUPTI" ]; then
  export LD_LIBRARY_PATH="$(dirname "$LIBCUPTI")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
python3 -c 'from cuda_tracer.cupti import load_cupti; m, r = load_cupti(); print("cupti-python:", "ok" if m else r)'

capture() {  # one process per capture: CUPTI allows one subscriber per process
  step "capture $1"
  timeout "$2" python3 tests/gpu/capture.py "$1" --out "$OUT" || echo "capture $1 failed: exit $?"
}
capture kineto 90
capture cupti 90
# NVTX ranges reach CUPTI only when libcupti is NVTX's injection library: a second, separate capture.
if [ -n "$LIBCUPTI" ]; then NVTX_INJECTION64_PATH="$LIBCUPTI" capture cupti 60; fi
capture overhead-kineto 90
capture overhead-cupti 90
capture nvml 45

step "pytest tests/gpu"
GPU_CHECK_DIR="$OUT" timeout 60 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu
rc=$?
python3 - "$OUT" "$rc" <<'EOF'
import json, sys
path = f"{sys.argv[1]}/results.json"
try:
    data = json.load(open(path))
except FileNotFoundError:
    data = {}
data["pytest_exit"] = int(sys.argv[2])
json.dump(data, open(path, "w"), indent=1, sort_keys=True)
for key in ("overhead_kineto", "overhead_cupti"):
    print(key, data.get(key, {}).get("ratio"))
EOF
ls -l "$OUT"
step "done (pytest exit $rc)"
exit "$rc"
