#!/usr/bin/env bash
# Run on the CPU machine before a device call: downloads the Python packages the GPU machine lacks
# into .whl/ (ignored by git through .git/info/exclude), for Python 3.12 on x86-64 as it has there.
#   cupti-python 13.0.1: CUPTI bindings for CUDA 13.0 (the machine has torch cu130 and driver 580;
#                        its own cuda-bindings and nvidia-cuda-cupti satisfy the dependencies)
#   msgspec:             needed by cuda_tracer.trace_files (the Kineto trace reader)
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d .whl cupti-python==13.0.1 msgspec==0.23.0
ls -l .whl
