#!/usr/bin/env bash
# The full test suite, as CI runs it: installs what the tests need on a fresh Debian machine (Prometheus,
# Chromium and its driver, PostgreSQL, when run as root with apt-get), this package with the `dev` extra and the
# CPU build of torch, then runs every test. Arguments go to pytest, e.g. `bash scripts/test.sh -x`.
# Jaeger and the OpenTelemetry Collector come from scripts/backends.sh (built once per machine with Go).
# In CI (CI=true) a missing Chromium, chromedriver, Prometheus, PostgreSQL, Jaeger or Collector fails the run instead
# of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."

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

# Jaeger and the OpenTelemetry Collector for the `backends` tests: built once per machine (Go), then
# only checked. Without them those tests skip; in CI that fails the run.
if backends=$(bash scripts/backends.sh); then
  export TEST_JAEGER_BINARY="$(sed -n 's/^jaeger //p' <<<"$backends")"
  export TEST_OTELCOL_BINARY="$(sed -n 's/^otelcol //p' <<<"$backends")"
else
  case "${CI:-}" in ""|0|false|no) ;; *) echo "scripts/test.sh: Jaeger and the Collector are missing in CI" >&2; exit 1;; esac
fi

python3 -m pip install -q torch==2.13.0 -e '.[dev]'
python3 -m pytest -q "$@"
