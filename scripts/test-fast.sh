#!/usr/bin/env bash
# The fast tests: the library's unit tests and the test files that need no
# real component (docs/TESTING.md lists which file needs what). Extra
# arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST_TESTS=(allocations catalog embedding fuzz http_endpoint iteration_stats kv_connector listeners otlp_histograms readme replay settings slo tracker)
args=(--lib)
for t in "${FAST_TESTS[@]}"; do args+=(--test "$t"); done
cargo test "$@" "${args[@]}"
