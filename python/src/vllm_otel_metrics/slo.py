"""The latency SLO a started sidecar judges each finished request against
(``VLLM_OTEL_METRICS_SLO``, ``serve --slo``): read and checked here, so that
a value the sidecar would refuse is one error line at start-up, never a
sidecar that fails to start (and is started again)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NoReturn

from .errors import ConfigError


def from_env(env: Mapping[str, str]) -> str:
    """``VLLM_OTEL_METRICS_SLO`` as the started sidecar's ``--slo`` (JSON),
    checked (:func:`check_slo`), or empty for none.

    >>> from_env({"VLLM_OTEL_METRICS_SLO": ' {"ttft": 0.5} '})
    '{"ttft": 0.5}'
    >>> from_env({})
    ''
    """
    slo = env.get("VLLM_OTEL_METRICS_SLO", "").strip()
    if slo:
        check_slo(slo)
    return slo


#: The keys of an SLO's bounds (``serve --slo``).
SLO_BOUNDS = ("ttft", "tpot", "e2e")


def check_slo(text: str) -> None:
    """Checks ``VLLM_OTEL_METRICS_SLO`` as ``serve --slo`` reads it (a JSON
    object of bounds in seconds, and ``models`` of the same per model name);
    raises :class:`ConfigError` naming the key at fault, so that a sidecar
    that would refuse it is never started (and started again).

    >>> check_slo('{"ttft": 0.5, "models": {"big": {"tpot": 0.1}}}')
    >>> check_slo('{"models": {"big": {"ttft": 0}}}')
    Traceback (most recent call last):
    ...
    vllm_otel_metrics.errors.ConfigError: VLLM_OTEL_METRICS_SLO: models.big.ttft: 0 is not a positive number of seconds
    """

    def fail(key: str, reason: str) -> NoReturn:
        raise ConfigError(f"VLLM_OTEL_METRICS_SLO: {key}: {reason}")

    try:
        value = json.loads(text)
    except ValueError as e:
        fail("--slo", f"not JSON ({e})")
    if not isinstance(value, dict):
        fail("--slo", "not a JSON object")

    def bounds(obj: dict[str, Any], place: str, models: bool) -> None:
        for key, bound in obj.items():
            where = f"{place}.{key}" if place else key
            if models and key == "models":
                if not isinstance(bound, dict):
                    fail("models", "not an object of models")
                for model, inner in bound.items():
                    if not isinstance(inner, dict):
                        fail(f"models.{model}", "not an object of bounds")
                    bounds(inner, f"models.{model}", False)
            elif key in SLO_BOUNDS:
                ok = type(bound) in (int, float) and math.isfinite(bound) and bound > 0
                if not ok:
                    fail(where, f"{json.dumps(bound)} is not a positive number of seconds")
            else:
                fail(where, "unknown key")

    bounds(value, "", True)
