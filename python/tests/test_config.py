"""Settings from the environment: defaults, and one clear error per bad value."""

import os
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
    s = config.from_env({"VLLM_OTEL_METRICS_TARGET": "http://localhost:6000", "XDG_RUNTIME_DIR": str(tmp_path)})
    assert s.sidecar == config.SidecarSettings(
        ingest_addr="127.0.0.1:6000",
        metrics_addr="127.0.0.1:9464",
        args=(),
        log_file=str(pathlib.Path(tempfile.gettempdir()) / "vllm-otel-metrics-6000.log"),
        ingest_socket=str(tmp_path / "vllm-otel-metrics" / "ingest-6000.sock"),
    )
    s = config.from_env({
        "VLLM_OTEL_METRICS_TARGET": "http://[::1]:6001",
        "VLLM_OTEL_METRICS_METRICS_ADDR": "none",
        "VLLM_OTEL_METRICS_SIDECAR_ARGS": "--otlp-interval-ms 5000 --otlp-header 'a=b c'",
        "VLLM_OTEL_METRICS_SIDECAR_LOG": str(tmp_path / "s.log"),
        "VLLM_OTEL_METRICS_SOCKET": "none",
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


def test_the_ingest_socket_lives_in_a_directory_of_this_users_alone(tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    directory = tmp_path / "vllm-otel-metrics"
    assert config.from_env(env).sidecar.ingest_socket == str(directory / "ingest-50051.sock")
    assert directory.stat().st_mode & 0o777 == 0o700
    # Opened to others, or replaced by a link: not private, so no socket.
    directory.chmod(0o755)
    assert config.from_env(env).sidecar.ingest_socket is None
    directory.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    directory.symlink_to(tmp_path / "elsewhere")
    assert config.from_env(env).sidecar.ingest_socket is None
    # Without XDG_RUNTIME_DIR: a directory named after the user in the
    # temporary directory.
    private = config.private_dir({})
    assert private == str(pathlib.Path(tempfile.gettempdir()) / f"vllm-otel-metrics-{os.getuid()}")


def test_an_ingest_socket_path_too_long_for_a_socket(tmp_path):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    assert config.from_env({"XDG_RUNTIME_DIR": str(deep)}).sidecar.ingest_socket is None
    long_path = str(deep / "s.sock")
    with pytest.raises(config.ConfigError) as e:
        config.from_env({"VLLM_OTEL_METRICS_SOCKET": long_path})
    assert str(e.value) == (
        f"VLLM_OTEL_METRICS_SOCKET={long_path!r} is longer than a Unix socket's 107 bytes"
    )
    with pytest.raises(config.ConfigError) as e:
        config.from_env({"VLLM_OTEL_METRICS_SOCKET": "s.sock"})
    assert str(e.value) == "VLLM_OTEL_METRICS_SOCKET='s.sock' is not an absolute path"
