#!/usr/bin/env bash
# For a machine with an NVIDIA GPU but no package registry: downloads, on a machine with one, the
# Python packages the GPU check needs beyond torch into .whl/ (do not commit it), for Python 3.12 on
# x86-64 (set PY_VERSION to change). Copy the checkout with .whl/ to the GPU machine:
# run_gpu_checks.sh installs them into a temporary folder first.
#   cupti-python 13.0.1 (CUDA 13 drivers) and what it imports: cuda-bindings, cuda-pathfinder
#   msgspec (the trace reader), nvidia-ml-py (NVML), pytest and its dependencies (the checks)
# libcupti itself comes with torch's CUDA build (nvidia-cuda-cupti).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl cupti-python==13.0.1 "cuda-bindings>=13.0,<13.1" \
  cuda-pathfinder msgspec==0.23.0 nvidia-ml-py pytest pluggy iniconfig packaging pygments
ls -l .whl
