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
source "$here/go-build.sh"
build_go_binary jaeger "$here/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger
