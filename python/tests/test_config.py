"""Settings from the environment: defaults, and one clear error per bad value."""

import pathlib
import tempfile

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


def test_the_sidecar_is_started_for_a_loopback_http_target_only(tmp_path):
    s = config.from_env({"VLLM_OTEL_METRICS_TARGET": "http://localhost:6000"})
    assert s.sidecar == config.SidecarSettings(
        ingest_addr="127.0.0.1:6000",
        metrics_addr="127.0.0.1:9464",
        args=(),
        log_file=str(pathlib.Path(tempfile.gettempdir()) / "vllm-otel-metrics-6000.log"),
    )
    s = config.from_env({
        "VLLM_OTEL_METRICS_TARGET": "http://[::1]:6001",
        "VLLM_OTEL_METRICS_METRICS_ADDR": "none",
        "VLLM_OTEL_METRICS_SIDECAR_ARGS": "--otlp-interval-ms 5000 --otlp-header 'a=b c'",
        "VLLM_OTEL_METRICS_SIDECAR_LOG": str(tmp_path / "s.log"),
    })
    assert s.sidecar == config.SidecarSettings(
        "[::1]:6001", "none", ("--otlp-interval-ms", "5000", "--otlp-header", "a=b c"), str(tmp_path / "s.log")
    )
    assert config.from_env({"VLLM_OTEL_METRICS_SIDECAR": "off"}).sidecar is None
    assert config.from_env({"VLLM_OTEL_METRICS_TARGET": "http://10.1.2.3:1"}).sidecar is None
    (tmp_path / "ca.pem").write_bytes(b"PEM")
    assert config.from_env({
        "VLLM_OTEL_METRICS_TARGET": "https://127.0.0.1:1",
        "VLLM_OTEL_METRICS_CA_FILE": str(tmp_path / "ca.pem"),
    }).sidecar is None


@pytest.mark.parametrize("env,message", [
    ({"VLLM_OTEL_METRICS_SIDECAR": "yes"}, "VLLM_OTEL_METRICS_SIDECAR='yes' is not one of auto, off"),
    ({"VLLM_OTEL_METRICS_SIDECAR_ARGS": "--otlp-header 'k=s3cret"},
     "VLLM_OTEL_METRICS_SIDECAR_ARGS cannot be split as a shell would: No closing quotation"),
])
def test_bad_sidecar_settings_name_their_variable_not_their_value(env, message):
    with pytest.raises(config.ConfigError) as e:
        config.from_env(env)
    assert str(e.value) == message
