"""Settings from the environment: defaults, and one clear error per bad value."""

import pytest

from vllm_otel_metrics import config


def test_defaults_are_loopback_without_tls():
    s = config.from_env({})
    assert (s.address, s.tls, s.token, s.root_certificates, s.queue) == ("127.0.0.1:50051", False, None, None, 4096)


def test_https_with_token_and_ca(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "ca.pem").write_bytes(b"PEM")
    s = config.from_env({
        "VLLM_OTEL_METRICS_TARGET": "https://sidecar.internal:8443",
        "VLLM_OTEL_METRICS_TOKEN_FILE": str(tmp_path / "token"),
        "VLLM_OTEL_METRICS_CA_FILE": str(tmp_path / "ca.pem"),
        "VLLM_OTEL_METRICS_QUEUE": "10",
    })
    assert (s.address, s.tls, s.token, s.root_certificates, s.queue) == ("sidecar.internal:8443", True, "s3cret", b"PEM", 10)
    assert "s3cret" not in repr(s)


@pytest.mark.parametrize("env,message", [
    ({"VLLM_OTEL_METRICS_TARGET": "grpc://x:1"}, "VLLM_OTEL_METRICS_TARGET='grpc://x:1' is not http://HOST:PORT"),
    ({"VLLM_OTEL_METRICS_TARGET": "http://u:p@x:1"}, "VLLM_OTEL_METRICS_TARGET carries credentials"),
    ({"VLLM_OTEL_METRICS_QUEUE": "0"}, "VLLM_OTEL_METRICS_QUEUE='0' is not a whole number"),
    ({"VLLM_OTEL_METRICS_TOKEN_FILE": "/nonexistent/token"}, "VLLM_OTEL_METRICS_TOKEN_FILE=/nonexistent/token: cannot read it"),
    ({"VLLM_OTEL_METRICS_CA_FILE": "/x.pem"}, "VLLM_OTEL_METRICS_CA_FILE is set but VLLM_OTEL_METRICS_TARGET is not https://"),
])
def test_bad_settings_name_their_variable(env, message):
    with pytest.raises(config.ConfigError) as e:
        config.from_env(env)
    assert str(e.value).startswith(message)
    assert "p@" not in str(e.value)
