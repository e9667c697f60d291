#!/usr/bin/env bash
# Builds otel-collector/bin/otelcol-vllm, the project's minimal OpenTelemetry
# Collector distribution (see distribution/components.go for its components).
#
#   bash otel-collector/build.sh          # from any directory
#
# Does nothing when the binary is newer than every source file of the
# distribution (go.mod, go.sum, *.go). Needs Go 1.26 or newer (the collector
# release v0.161.0 requires it); the first build downloads the modules listed
# in go.sum and takes several minutes on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/distribution"
bin_dir="$here/bin"
bin="$bin_dir/otelcol-vllm"

# Up to date when the binary exists and no source file is newer than it.
if [[ -x "$bin" ]]; then
    newer="$(find "$src" -maxdepth 1 -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -newer "$bin" -print -quit)"
    if [[ -z "$newer" ]]; then
        echo "otelcol-vllm is up to date"
        exit 0
    fi
fi

if ! command -v go >/dev/null 2>&1; then
    echo "build.sh: 'go' not found: install Go 1.26 or newer (the collector release v0.161.0 needs it) and put it on PATH" >&2
    exit 1
fi
go_version="$(go env GOVERSION)"            # e.g. go1.26.8
if [[ "$go_version" =~ ^go1\.([0-9]+) ]] && (( BASH_REMATCH[1] < 26 )); then
    echo "build.sh: $go_version is too old: install Go 1.26 or newer (the collector release v0.161.0 needs it)" >&2
    exit 1
fi

mkdir -p "$bin_dir"
echo "building otelcol-vllm with $go_version ..."
start=$SECONDS
start_epoch="$(date +%s)"
cd "$src"
# Build to a temporary name and move it into place, so that an interrupted
# build never leaves a binary that looks up to date.
tmp="$bin_dir/.otelcol-vllm.tmp.$$"
trap 'rm -f "$tmp"' EXIT
CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags='-s -w' -o "$tmp" .
# Stamp the binary with the build's start time: a source file edited while
# the build ran stays newer than the binary, so the next run rebuilds.
touch -d "@$start_epoch" "$tmp"
mv -f "$tmp" "$bin"
trap - EXIT
echo "built $bin in $((SECONDS - start))s"
