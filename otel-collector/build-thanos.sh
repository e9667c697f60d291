#!/usr/bin/env bash
# Builds otel-collector/bin/thanos, Thanos v0.42.5 (Apache-2.0), from its Go
# module: the storage tier of `scripts/run-tier.sh thanos` and of
# tests/thanos_tier.rs (three `thanos receive` ingesters in a hashring with
# replication factor 3, a routing receiver, `thanos query`).
#
#   bash otel-collector/build-thanos.sh
#
# thanos/go.mod requires the release as a tool and repeats its replace
# directives (a replace applies only in the main module, which is why
# `go install …/cmd/thanos@v0.42.5` refuses). Thanos's go.mod asks for Go
# 1.26.10, newer than the machine's Go: GOTOOLCHAIN=go1.27.3 makes the go
# command fetch that toolchain from the Go module proxy once. Does nothing
# when the binary is newer than thanos/go.mod and go.sum (or this script); the
# first build takes a few minutes on 2 cores.
set -euo pipefail

export GOTOOLCHAIN=go1.27.3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/go-build.sh"
# Thanos's release builds use these tags; without slicelabels, Prometheus's
# labels take another memory layout than the one Thanos converts them from,
# and a receiver crashes on its first Info call.
build_go_binary thanos "$here/thanos" github.com/thanos-io/thanos/cmd/thanos netgo,slicelabels
