#!/usr/bin/env bash
# Builds otel-collector/bin/jaeger, the Jaeger v2 backend (Apache-2.0, built
# on the Collector) the trace tests send spans to, from its Go module
# (github.com/jaegertracing/jaeger/cmd/jaeger v1.76.0, pinned as a tool in
# otel-collector/jaeger/go.mod and go.sum). Run it with jaeger.yaml.
#
#   bash otel-collector/build-jaeger.sh          # from any directory
#
# Does nothing when the binary is newer than go.mod and go.sum. The first
# build downloads the modules and takes about 7 minutes on 2 cores (2.4 GB
# of memory at its peak).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/jaeger"
bin_dir="$here/bin"
bin="$bin_dir/jaeger"

if [[ -x "$bin" ]]; then
    newer="$(find "$src" -maxdepth 1 -type f \( -name go.mod -o -name go.sum \) -newer "$bin" -print -quit)"
    if [[ -z "$newer" ]]; then
        echo "jaeger is up to date"
        exit 0
    fi
fi

if ! command -v go >/dev/null 2>&1; then
    echo "build-jaeger.sh: 'go' not found: install Go 1.26 or newer and put it on PATH" >&2
    exit 1
fi

mkdir -p "$bin_dir"
echo "building jaeger with $(go env GOVERSION) ..."
start=$SECONDS
start_epoch="$(date +%s)"
cd "$src"
tmp="$bin_dir/.jaeger.tmp.$$"
trap 'rm -f "$tmp"' EXIT
CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags='-s -w' -o "$tmp" github.com/jaegertracing/jaeger/cmd/jaeger
touch -d "@$start_epoch" "$tmp"
mv -f "$tmp" "$bin"
trap - EXIT
echo "built $bin in $((SECONDS - start))s"
