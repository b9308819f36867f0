#!/usr/bin/env bash
# The full test suite, as CI runs it: installs what the tests need on a fresh Debian machine (Prometheus,
# Chromium and its driver, PostgreSQL, when run as root with apt-get), this package with the `dev` extra and the
# CPU build of torch, then runs every test. Arguments go to pytest, e.g. `bash scripts/test.sh -x`, except
# `--repeat N` (or `--repeat=N`): after the one-time installs, run pytest N times in a row, stopping at the first
# run that fails (its exit status is the script's), with one line per run giving its result and duration.
# Jaeger and the OpenTelemetry Collector come from scripts/backends.sh (built once per machine with Go).
# In CI (CI=true) a missing Chromium, chromedriver, Prometheus, PostgreSQL, Jaeger or Collector fails the run instead
# of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=""  # empty: one run, exactly as without the option
pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) [ $# -ge 2 ] || { echo "scripts/test.sh: --repeat needs a number of runs" >&2; exit 2; }
              repeat=$2; shift 2;;
    --repeat=*) repeat=${1#--repeat=}; shift;;
    --) pytest_args+=("$@"); break;;  # the rest is pytest's, as it is
    *) pytest_args+=("$1"); shift;;
  esac
done
if [ -n "$repeat" ] && ! [[ "$repeat" =~ ^[1-9][0-9]*$ ]]; then
  echo "scripts/test.sh: --repeat takes a whole number of runs, 1 or more (not '$repeat')" >&2
  exit 2
fi

have_driver() { command -v chromedriver >/dev/null; }
have_chromium() { command -v chromium >/dev/null; }
have_postgres() { command -v initdb >/dev/null || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; }

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  command -v prometheus >/dev/null || need+=(prometheus)
  have_chromium || need+=(chromium)
  have_driver || need+=(chromium-driver)
  have_postgres || need+=(postgresql)  # the Profiler app's tests start a throwaway server of their own
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

case "${CI:-}" in
  ""|0|false|no) ;;
  *)
    missing=()
    have_chromium || missing+=(chromium)
    have_driver || missing+=(chromedriver)
    command -v prometheus >/dev/null || missing+=(prometheus)
    command -v promtool >/dev/null || missing+=(promtool)
    have_postgres || missing+=(postgresql)
    if [ ${#missing[@]} -gt 0 ]; then
      echo "scripts/test.sh: missing in CI: ${missing[*]} (apt-get install prometheus chromium chromium-driver postgresql)" >&2
      exit 1
    fi
    ;;
esac

# The oldest and the newest supported torch, each in a virtual environment of its own (about 4 GB each), and
# TensorFlow's (1.8 GB): tests/venvs.py makes them once per machine, then only checks them; made in the
# background while the rest installs, so that the tests do not wait for them.
releases_log=$(mktemp)
python3 tests/venvs.py >"$releases_log" 2>&1 &
releases_pid=$!

# Jaeger and the OpenTelemetry Collector for the `backends` tests: built once per machine (Go), then
# only checked. Without them those tests skip; in CI that fails the run.
if backends=$(bash scripts/backends.sh); then
  export TEST_JAEGER_BINARY="$(sed -n 's/^jaeger //p' <<<"$backends")"
  export TEST_OTELCOL_BINARY="$(sed -n 's/^otelcol //p' <<<"$backends")"
else
  case "${CI:-}" in ""|0|false|no) ;; *) echo "scripts/test.sh: Jaeger and the Collector are missing in CI" >&2; exit 1;; esac
fi

python3 -m pip install -q torch==2.13.0 -e '.[dev]'
if ! wait "$releases_pid"; then
  echo "scripts/test.sh: the torch and TensorFlow environments could not be made: $(tail -n 5 "$releases_log")" >&2
  case "${CI:-}" in ""|0|false|no) ;; *) exit 1;; esac
fi
rm -f "$releases_log"
# One run of the suite: the tests that may share the machine in parallel workers (pytest-xdist, one per
# core, 2 to 4; a module's tests stay on one worker, so its fixtures are made once), then the `busy` ones
# (they keep every core busy on purpose) in parallel workers that share out the busy loops, then the
# `exclusive` ones alone (tests/conftest.py). Its status is the first failing phase's. With arguments of
# your own (`-x`, `-k`, a test file, `-m`), one plain pytest run gets them instead, as before.
workers=$(nproc 2>/dev/null || echo 2)
workers=$(( workers < 2 ? 2 : workers > 4 ? 4 : workers ))
suite() {
  if [ ${#pytest_args[@]} -gt 0 ]; then
    python3 -m pytest -q "${pytest_args[@]}"
    return
  fi
  local status=0
  python3 -m pytest -q -n "$workers" --dist loadfile -m "not busy and not exclusive" || status=$?
  python3 -m pytest -q -n "$workers" -m busy || { [ "$status" -ne 0 ] || status=$?; }
  python3 -m pytest -q -m exclusive || { [ "$status" -ne 0 ] || status=$?; }
  return "$status"
}

if [ -z "$repeat" ]; then
  suite
  exit
fi

load() { [ -r /proc/loadavg ] && echo ", load average $(cut -d' ' -f1-3 /proc/loadavg)" || true; }
for run in $(seq "$repeat"); do
  started=$(date +%s)
  status=0
  suite || status=$?
  took=$(( $(date +%s) - started ))
  if [ "$status" -eq 0 ]; then result=passed; else result="FAILED (pytest exit status $status)"; fi
  echo "scripts/test.sh: run $run of $repeat $result in $((took / 60)) min $((took % 60)) s$(load)"
  [ "$status" -eq 0 ] || exit "$status"
done
