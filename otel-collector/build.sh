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
source "$here/go-build.sh"
build_go_binary otelcol-vllm "$here/distribution" .
