"""The SLO setting (VLLM_OTEL_METRICS_SLO): what serve --slo would refuse is
one error naming the key at fault, before any sidecar starts."""

import pytest

from vllm_otel_metrics import slo
from vllm_otel_metrics.errors import ConfigError


def test_bounds_and_per_model_bounds_are_taken_as_given():
    text = '{"ttft": 0.5, "tpot": 0.05, "e2e": 30, "models": {"big": {"ttft": 2}}}'
    slo.check_slo(text)
    assert slo.from_env({"VLLM_OTEL_METRICS_SLO": f"  {text}\n"}) == text
    assert slo.from_env({"VLLM_OTEL_METRICS_SLO": "  "}) == ""


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", "--slo: not JSON ("),
        ("[1]", "--slo: not a JSON object"),
        ('{"ttft": 0}', "ttft: 0 is not a positive number of seconds"),
        ('{"ttft": true}', "ttft: true is not a positive number of seconds"),
        ('{"ttft": NaN}', "ttft: NaN is not a positive number of seconds"),
        ('{"tpot": "1"}', 'tpot: "1" is not a positive number of seconds'),
        ('{"itl": 1}', "itl: unknown key"),
        ('{"models": [1]}', "models: not an object of models"),
        ('{"models": {"big": 1}}', "models.big: not an object of bounds"),
        ('{"models": {"big": {"models": {}}}}', "models.big.models: unknown key"),
    ],
)
def test_a_value_serve_would_refuse_names_the_key_at_fault(text, message):
    with pytest.raises(ConfigError) as e:
        slo.from_env({"VLLM_OTEL_METRICS_SLO": text})
    assert str(e.value).startswith(f"VLLM_OTEL_METRICS_SLO: {message}"), e.value
