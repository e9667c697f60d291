#!/usr/bin/env bash
# The project's whole test suite, runnable on a fresh machine: installs what the
# tests need (Prometheus/promtool from Debian, Python packages from PyPI, vLLM
# 0.33.0 with the plugin in a cached virtual environment, vLLM's CPU build for
# the live engine in another, vLLM's Rust frontend (vllm-rs), the plugin's wheel with the sidecar binary, the
# OpenTelemetry Collector, the Jaeger traces backend and Thanos built from their
# Go modules), then
# checks formatting and lints, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Each step's wall time, printed at the end (also when a step fails): the
# breakdown docs/TESTING.md reports for a cold and a warm machine.
step_names=() step_seconds=() step_name="" step_start=$SECONDS
step() {
  if [ -n "$step_name" ]; then
    step_names+=("$step_name")
    step_seconds+=($((SECONDS - step_start)))
  fi
  step_name="$1" step_start=$SECONDS
  if [ -n "$1" ]; then echo "==> $1"; fi
}
timings() {
  step ""
  echo "==> time per step (s)"
  for i in "${!step_names[@]}"; do
    printf '%6d  %s\n' "${step_seconds[$i]}" "${step_names[$i]}"
  done
  cat "$go_times" 2>/dev/null || true
  printf '%6d  total\n' "$SECONDS"
}
stop_background() {
  if [ -n "${go_pid:-}" ] && kill -0 "$go_pid" 2>/dev/null; then
    kill -- "-$go_pid" 2>/dev/null || true
  fi
  rm -f "${go_log:-}" "${go_times:-}"
}
trap 'timings; stop_background' EXIT

# Everything the command builds or downloads is cached under one directory,
# keyed by version (docs/TESTING.md lists what is where).
export VLLM_OTEL_METRICS_CACHE="${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}"
# Cargo's build outputs live in the cache too, so that a fresh clone on a
# machine that ran the tests before compiles only this crate, not its
# dependencies again (cargo keys every artifact by compiler, features and
# Cargo.lock itself; `cargo clean` with this variable set empties it).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$VLLM_OTEL_METRICS_CACHE/cargo-target}"

# The Go binaries (the Collector, Jaeger, Thanos) build in the background
# from the start: on a fresh machine their module downloads and compiles
# overlap the Python environments' downloads and the Rust builds, instead of
# following them. Their output goes to a log, shown when they are waited for.
# They run in a session of their own, so that stopping them (this script
# failing first) stops every go process they started.
go_log="$(mktemp)"
export go_times="$(mktemp)"
setsid bash -c '
  set -e
  for script in build.sh build-jaeger.sh build-thanos.sh; do
    start=$SECONDS
    bash "otel-collector/$script"
    printf "%6d  (in the background) otel-collector/%s\n" $((SECONDS - start)) "$script" >>"$go_times"
  done
' >"$go_log" 2>&1 &
go_pid=$!

if ! command -v promtool >/dev/null 2>&1; then
  step "installing Prometheus (promtool) from Debian's packages"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
fi

if ! python3 -c 'import prometheus_client, grpc, grpc_tools' >/dev/null 2>&1; then
  step "installing Python requirements (tests, gRPC client example)"
  python3 -m pip install --quiet --disable-pip-version-check \
    -r tests/requirements.txt -r examples/python/requirements.txt
fi

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  step "installing python3-venv from Debian's packages"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
step "vLLM 0.33.0 and the plugin (scripts/vllm-env.sh)"
VLLM_OTEL_METRICS_PYTHON=$(bash scripts/vllm-env.sh)
export VLLM_OTEL_METRICS_PYTHON

step "vLLM's CPU build for the live engine (scripts/vllm-cpu-env.sh)"
VLLM_OTEL_METRICS_CPU_PYTHON=$(bash scripts/vllm-cpu-env.sh)
export VLLM_OTEL_METRICS_CPU_PYTHON
step "vLLM's Rust frontend, vllm-rs, from vLLM 0.32.0's wheel (scripts/vllm-rs.sh)"
VLLM_OTEL_METRICS_VLLM_RS=$(bash scripts/vllm-rs.sh)
export VLLM_OTEL_METRICS_VLLM_RS
step "the plugin's wheel, with the sidecar binary (scripts/build-wheel.sh)"
# The wheel's release build goes to a target directory of its own, `wheel/`:
# cargo-zigbuild's, for glibc 2.28, under `wheel/x86_64-unknown-linux-gnu/`.
VLLM_OTEL_METRICS_WHEEL=$(CARGO_TARGET_DIR="$CARGO_TARGET_DIR/wheel" bash scripts/build-wheel.sh)
export VLLM_OTEL_METRICS_WHEEL
step "the build for the pip-install test (cargo build, the dev profile)"
# `pip install ./python` builds the sidecar with cargo; the test asks for the
# `dev` profile in the tests' own target directory (tests/plugin_pip.rs), a
# build whose dependencies are mostly the tests' own. Made here, the test
# finds it done instead of building it while it holds the plugin tests'
# lock. (It was a release build of its own, 250 s on a fresh machine.)
cargo build --locked --quiet

step "waiting for the Go builds: the Collector, the Jaeger traces backend, Thanos (otel-collector/build*.sh)"
go_status=0
wait "$go_pid" || go_status=$?
cat "$go_log"
if [ "$go_status" -ne 0 ]; then
  echo "the Go builds failed (exit status $go_status; their output is above)" >&2
  exit 1
fi

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy"
cargo clippy --all-targets --quiet -- -D warnings
step "promtool check rules / test rules"
promtool check rules otel-collector/rules.yml
promtool test rules otel-collector/rules_test.yml
step "plugin tests (pytest, in the vLLM environment)"
# The lints first: ruff and mypy at pinned versions (scripts/python-lint-env.sh),
# mypy reading vLLM and the generated ingest module from the vLLM environment.
lint_python=$(bash scripts/python-lint-env.sh "$VLLM_OTEL_METRICS_PYTHON")
(
  cd python
  export RUFF_CACHE_DIR="$VLLM_OTEL_METRICS_CACHE/ruff-cache"
  "$lint_python" -m ruff check src tests setup.py
  "$lint_python" -m ruff format --check src tests setup.py
  "$lint_python" -m mypy --cache-dir "$VLLM_OTEL_METRICS_CACHE/mypy-cache"
)
"$VLLM_OTEL_METRICS_PYTHON" -m pytest -q -p no:cacheprovider python/tests
"$VLLM_OTEL_METRICS_PYTHON" -m pytest -q -p no:cacheprovider --doctest-modules \
  python/src/vllm_otel_metrics/bounded_queue.py python/src/vllm_otel_metrics/config.py \
  python/src/vllm_otel_metrics/convert.py python/src/vllm_otel_metrics/errors.py \
  python/src/vllm_otel_metrics/grpc_transport.py python/src/vllm_otel_metrics/kv_connector.py \
  python/src/vllm_otel_metrics/outbox.py python/src/vllm_otel_metrics/private.py \
  python/src/vllm_otel_metrics/resend.py python/src/vllm_otel_metrics/sidecar.py \
  python/src/vllm_otel_metrics/slo.py python/src/vllm_otel_metrics/socket_transport.py \
  python/src/vllm_otel_metrics/stream.py python/src/vllm_otel_metrics/tap.py \
  python/src/vllm_otel_metrics/wire.py
step "cargo test"
cargo test --all-targets
cargo test --doc
step "the minimal feature set (--no-default-features: catalog, protocol, tracker, instruments, bridge)"
cargo clippy --no-default-features --all-targets --quiet -- -D warnings
cargo test --no-default-features
