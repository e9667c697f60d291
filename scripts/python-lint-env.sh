#!/usr/bin/env bash
# Makes (or reuses) the Python environment the plugin's lints run in: ruff
# and mypy, with the type stubs of the plugin's runtime dependencies (grpcio,
# protobuf), at pinned versions from PyPI. Prints the environment's python on
# stdout.
#
#   bash scripts/python-lint-env.sh [PYTHON]
#
# Given PYTHON (the vLLM environment's, scripts/vllm-env.sh), this environment
# also sees that one's packages (a .pth file, rewritten on every run): mypy
# then reads vLLM and the installed plugin's generated ingest module from
# there, and the stubs from here, while nothing is installed into the vLLM
# environment, which the tests share. Its own packages come first.
#
#   LINT_ENV   where the environment lives (default: venv-python-lint in the
#              cache directory, VLLM_OTEL_METRICS_CACHE, by default
#              ~/.cache/vllm-otel-metrics)
set -euo pipefail

PINS="ruff==0.17.6 mypy==2.4.1 types-protobuf==7.35.1.20261122 types-grpcio==1.85.0.20261028"
LINT_ENV=${LINT_ENV:-${VLLM_OTEL_METRICS_CACHE:-$HOME/.cache/vllm-otel-metrics}/venv-python-lint}

# The environment is remade when a pin changes.
if [ "$(cat "$LINT_ENV/.ready" 2>/dev/null)" != "$PINS" ]; then
  echo "==> creating $LINT_ENV ($PINS)" >&2
  rm -rf "$LINT_ENV"
  python3 -m venv "$LINT_ENV"
  # shellcheck disable=SC2086 # one argument per pin
  if ! "$LINT_ENV/bin/python" -m pip --disable-pip-version-check --quiet install $PINS \
    >"$LINT_ENV.log" 2>&1; then
    cat "$LINT_ENV.log" >&2
    exit 1
  fi
  echo "$PINS" >"$LINT_ENV/.ready"
fi
site=$("$LINT_ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
if [ $# -gt 0 ]; then
  "$1" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' >"$site/vllm-env.pth"
else
  rm -f "$site/vllm-env.pth"
fi
echo "$LINT_ENV/bin/python"
