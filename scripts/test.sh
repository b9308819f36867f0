#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  command -v prometheus >/dev/null || need+=(prometheus)
  command -v chromium >/dev/null || need+=(chromium chromium-driver)
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
python3 -m pip install -q torch==2.13.0 -e '.[dev]'
python3 -m pytest -q "$@"
