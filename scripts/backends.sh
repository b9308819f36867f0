#!/usr/bin/env bash
# The trace backends the tests run for real: a Jaeger v2 binary and an OpenTelemetry Collector whose
# components are exactly those of the shipped stack configs (otel_profiler/stack/otel-collector*.yaml).
# Both are built once per machine from their Go modules at pinned versions, into a cache folder outside
# the repository (${XDG_CACHE_HOME:-~/.cache}/otel-profiler/backends, or OTEL_PROFILER_BACKENDS_DIR);
# later calls only check that the binaries there report the expected version.
# Prints `jaeger PATH` and `otelcol PATH`; on failure one line naming what failed, exit 1.
# `--check` builds nothing: it exits 1 when either binary is missing or stale.
set -uo pipefail

JAEGER_MODULE=github.com/jaegertracing/jaeger
JAEGER_VERSION=v1.75.0          # the Jaeger v2 binary (cmd/jaeger) of this release
CORE=v0.165.0                   # Collector core; contrib at the same release:
CONTRIB=v0.165.1
CORE_MOD=go.opentelemetry.io/collector
CONTRIB_MOD=github.com/open-telemetry/opentelemetry-collector-contrib

CACHE="${OTEL_PROFILER_BACKENDS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-profiler/backends}"
LOG="$CACHE/build.log"

fail() { echo "backends.sh: $*" >&2; exit 1; }

builder_config() {
  # One Collector release for every module; the component list is what the shipped configs use.
  cat <<EOF
dist:
  name: otelcol
  module: otel-profiler-backends/otelcol
  description: OpenTelemetry Collector with the components of the otel-profiler stack
  output_path: $CACHE/build/otelcol
  version: "${CORE#v}-$1"
extensions:
  - gomod: $CONTRIB_MOD/extension/healthcheckextension $CONTRIB
  - gomod: $CONTRIB_MOD/extension/bearertokenauthextension $CONTRIB
  - gomod: $CONTRIB_MOD/extension/storage/filestorage $CONTRIB
receivers:
  - gomod: $CORE_MOD/receiver/otlpreceiver $CORE
processors:
  - gomod: $CORE_MOD/processor/memorylimiterprocessor $CORE
exporters:
  - gomod: $CORE_MOD/exporter/otlpexporter $CORE
  - gomod: $CONTRIB_MOD/exporter/prometheusexporter $CONTRIB
  - gomod: $CONTRIB_MOD/exporter/prometheusremotewriteexporter $CONTRIB
EOF
}

# The build's identity: a change of the component list or of a version makes the binary stale.
SPEC_HASH=$( { builder_config x; echo "$JAEGER_VERSION"; } | sha256sum | cut -c1-12)
OTELCOL_VERSION="${CORE#v}-$SPEC_HASH"
JAEGER="$CACHE/bin/jaeger"
OTELCOL="$CACHE/bin/otelcol"

jaeger_ok() { [ -x "$JAEGER" ] && "$JAEGER" version 2>/dev/null | grep -q "\"gitVersion\":\"$JAEGER_VERSION\""; }
otelcol_ok() { [ -x "$OTELCOL" ] && [ "$("$OTELCOL" --version 2>/dev/null)" = "otelcol version $OTELCOL_VERSION" ]; }

go_env() {
  command -v go >/dev/null || fail "go is not installed (Go 1.25 or newer builds Jaeger and the Collector)"
  export GOFLAGS="-buildvcs=false -mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
  mkdir -p "$CACHE/bin" "$CACHE/build" || fail "cannot create the cache folder $CACHE"
}

build_jaeger() {
  local dir="$CACHE/build/jaeger"
  mkdir -p "$dir" && cd "$dir" || return 1
  [ -f go.mod ] || go mod init otel-profiler-backends/jaeger || return 1
  go get -tool "$JAEGER_MODULE/cmd/jaeger@$JAEGER_VERSION" || return 1
  go build -trimpath -o "$JAEGER.tmp" \
    -ldflags "-s -w -X $JAEGER_MODULE/internal/version.latestVersion=$JAEGER_VERSION" \
    "$JAEGER_MODULE/cmd/jaeger" || return 1
  mv -f "$JAEGER.tmp" "$JAEGER"
}

build_otelcol() {
  local tools="$CACHE/tools"
  [ -x "$tools/builder" ] && "$tools/builder" version 2>&1 | grep -q "version $CORE$" \
    || GOBIN="$tools" go install "$CORE_MOD/cmd/builder@$CORE" || return 1
  builder_config "$SPEC_HASH" > "$CACHE/build/otelcol-builder.yaml" || return 1
  rm -rf "$CACHE/build/tmp" && mkdir -p "$CACHE/build/tmp" || return 1  # the builder's scratch folders
  TMPDIR="$CACHE/build/tmp" "$tools/builder" --config "$CACHE/build/otelcol-builder.yaml" || return 1
  rm -rf "$CACHE/build/tmp"
  cp -f "$CACHE/build/otelcol/otelcol" "$OTELCOL.tmp" && mv -f "$OTELCOL.tmp" "$OTELCOL"
}

main() {
  if [ "${1:-}" = "--check" ]; then
    jaeger_ok || fail "jaeger $JAEGER_VERSION is not built in $CACHE (run bash scripts/backends.sh)"
    otelcol_ok || fail "otelcol ${CORE#v} is not built in $CACHE (run bash scripts/backends.sh)"
  elif ! jaeger_ok || ! otelcol_ok; then
    go_env
    exec 9>"$CACHE/.lock" && flock 9 || fail "cannot lock $CACHE/.lock"
    if ! jaeger_ok; then
      echo "backends.sh: building jaeger $JAEGER_VERSION into $CACHE (once per machine; log: $LOG)" >&2
      SECONDS=0
      (build_jaeger) >>"$LOG" 2>&1 && jaeger_ok \
        || fail "building jaeger $JAEGER_VERSION failed (log: $LOG)"
      echo "built jaeger $JAEGER_VERSION in $SECONDS s" >>"$LOG"
    fi
    if ! otelcol_ok; then
      echo "backends.sh: building otelcol ${CORE#v} into $CACHE (once per machine; log: $LOG)" >&2
      SECONDS=0
      (build_otelcol) >>"$LOG" 2>&1 && otelcol_ok \
        || fail "building otelcol ${CORE#v} (contrib $CONTRIB) failed (log: $LOG)"
      echo "built otelcol ${CORE#v} in $SECONDS s" >>"$LOG"
    fi
  fi
  echo "jaeger $JAEGER"
  echo "otelcol $OTELCOL"
}

main "$@"
