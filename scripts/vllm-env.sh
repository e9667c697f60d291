#!/usr/bin/env bash
# Makes (or reuses) the Python environment the vLLM tests run in: vLLM 0.33.0
# and just what importing its metrics code needs, plus this repository's
# plugin (python/, plugin only). Prints the environment's python on stdout.
#
# vLLM's full install pulls ~9.4 GB (flashinfer, CUDA kernels, audio/video
# codecs...). The tests import only `vllm.config`, `vllm.v1.engine` and
# `vllm.v1.metrics.*`, so vLLM is installed without its dependencies and then
# given the packages those imports need, at the versions vLLM's own metadata
# requires. torch is unavoidable (vllm.config imports it) and brings its CUDA
# libraries from PyPI (they are loaded even on a CPU-only machine).
#
#   VLLM_ENV   where the environment lives (default: venv-vllm-0.33.0 in the
#              cache directory, VLLM_OTEL_METRICS_CACHE, by default
#              ~/.cache/vllm-otel-metrics)
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=0.33.0
VLLM_ENV=${VLLM_ENV:-${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}/venv-vllm-$VLLM_VERSION}
# What `import vllm.config, vllm.v1.engine, vllm.v1.metrics.loggers` needs
# (found by importing until nothing is missing), plus the plugin's runtime
# and what vLLM's KV-connector stats classes import (einops).
IMPORT_DEPS="torch numpy packaging prometheus_client pydantic regex cbor2 psutil
pyzmq urllib3 transformers aiohttp requests oss-harmony openai pillow pybase64
cachetools msgspec cloudpickle uvloop py-cpuinfo xgrammar fastapi
partial-json-parser llguidance protobuf grpcio pytest einops"

log() { echo "==> $*" >&2; }

# The environment is remade when this list or the version changes.
READY="vllm==$VLLM_VERSION $(echo $IMPORT_DEPS)"
if [ "$(cat "$VLLM_ENV/.ready" 2>/dev/null)" != "$READY" ]; then
  start=$(date +%s)
  log "creating $VLLM_ENV (vLLM $VLLM_VERSION without its optional kernels)"
  rm -rf "$VLLM_ENV"
  python3 -m venv "$VLLM_ENV"
  pip=("$VLLM_ENV/bin/python" -m pip --disable-pip-version-check --quiet)
  "${pip[@]}" install --no-deps "vllm==$VLLM_VERSION" packaging >&2 2>"$VLLM_ENV.log" \
    || { cat "$VLLM_ENV.log" >&2; exit 1; }
  # Each dependency at the version vLLM's metadata asks for (markers
  # evaluated), and every package vLLM pins as a constraint, so what they
  # pull in also stays at vLLM's versions.
  mapfile -t reqs < <("$VLLM_ENV/bin/python" - "$VLLM_ENV/constraints.txt" $IMPORT_DEPS <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
constraints_file, names = sys.argv[1], sys.argv[2:]
wanted = {canonicalize_name(n): n for n in names}
pinned, constraints = {}, []
for line in requires("vllm") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = canonicalize_name(req.name)
    if req.specifier:
        constraints.append(f"{name}{req.specifier}")
    if name in wanted:
        pinned[name] = f"{req.name}{req.specifier}"
with open(constraints_file, "w") as f:
    f.write("\n".join(constraints) + "\n")
for name, original in wanted.items():
    print(pinned.get(name, original))
PY
  )
  # pip lists every vLLM dependency left out as a "conflict": expected here,
  # so its output is shown only when the install fails.
  if ! "${pip[@]}" install -c "$VLLM_ENV/constraints.txt" "${reqs[@]}" >"$VLLM_ENV.log" 2>&1; then
    cat "$VLLM_ENV.log" >&2
    exit 1
  fi
  "$VLLM_ENV/bin/python" -c 'import vllm.config, vllm.v1.engine, vllm.v1.metrics.loggers' >&2
  echo "$READY" >"$VLLM_ENV/.ready"
  log "vLLM environment ready in $(( $(date +%s) - start )) s, $(du -sh "$VLLM_ENV" | cut -f1)"
fi

# The plugin, rebuilt from this checkout every time (its gRPC code comes from
# proto/); the sidecar binary is the one cargo builds for the tests.
VLLM_OTEL_METRICS_NO_BINARY=1 "$VLLM_ENV/bin/python" -m pip --disable-pip-version-check --quiet \
  install --force-reinstall --no-deps ./python >&2
echo "$VLLM_ENV/bin/python"
