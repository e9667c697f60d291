#!/usr/bin/env bash
# The fast tests: the library's and the binary's unit tests and every
# integration test that needs no real component. A test that needs one
# lives in a module named `needs_<component>…` (docs/TESTING.md), which
# `--skip needs_` leaves out. The skip is a substring match, so it is not
# given to the unit tests, whose names may say "needs_" for other reasons.
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test "$@" --lib --bins
cargo test "$@" --test '*' -- --skip needs_
