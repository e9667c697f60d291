"""Settings from the environment: defaults, and one clear error per bad value
(the private directory and its files: test_private.py; the SLO: test_slo.py)."""

import pytest

from vllm_otel_metrics import config


def test_defaults_are_loopback_without_tls(tmp_path):
    s = config.from_env({"XDG_RUNTIME_DIR": str(tmp_path)})
    assert (s.address, s.tls, s.token, s.root_certificates, s.queue, s.queue_bytes) == (
        "127.0.0.1:50051",
        False,
        None,
        None,
        4096,
        64 * 1024 * 1024,
    )


def test_https_with_token_and_ca(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "ca.pem").write_bytes(b"PEM")
    s = config.from_env(
        {
            "VLLM_OTEL_METRICS_TARGET": "https://sidecar.internal:8443",
            "VLLM_OTEL_METRICS_TOKEN_FILE": str(tmp_path / "token"),
            "VLLM_OTEL_METRICS_CA_FILE": str(tmp_path / "ca.pem"),
            "VLLM_OTEL_METRICS_QUEUE": "10",
            "VLLM_OTEL_METRICS_QUEUE_BYTES": "1048576",
        }
    )
    assert (s.address, s.tls, s.token, s.root_certificates, s.queue, s.queue_bytes) == (
        "sidecar.internal:8443",
        True,
        "s3cret",
        b"PEM",
        10,
        1048576,
    )
    assert "s3cret" not in repr(s)


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {"VLLM_OTEL_METRICS_TARGET": "grpc://x:1"},
            "VLLM_OTEL_METRICS_TARGET='grpc://x:1' is not http://HOST:PORT",
        ),
        (
            {"VLLM_OTEL_METRICS_TARGET": "http://u:p@x:1"},
            "VLLM_OTEL_METRICS_TARGET carries credentials",
        ),
        ({"VLLM_OTEL_METRICS_QUEUE": "0"}, "VLLM_OTEL_METRICS_QUEUE='0' is not a whole number"),
        (
            {"VLLM_OTEL_METRICS_QUEUE_BYTES": "64MiB"},
            "VLLM_OTEL_METRICS_QUEUE_BYTES='64MiB' is not a whole number from 1 to 17179869184",
        ),
        (
            {"VLLM_OTEL_METRICS_QUEUE_BYTES": "0"},
            "VLLM_OTEL_METRICS_QUEUE_BYTES='0' is not a whole number",
        ),
        (
            {"VLLM_OTEL_METRICS_TOKEN_FILE": "/nonexistent/token"},
            "VLLM_OTEL_METRICS_TOKEN_FILE=/nonexistent/token: cannot read it",
        ),
        (
            {"VLLM_OTEL_METRICS_CA_FILE": "/x.pem"},
            "VLLM_OTEL_METRICS_CA_FILE is set but VLLM_OTEL_METRICS_TARGET is not https://",
        ),
    ],
)
def test_bad_settings_name_their_variable(env, message):
    with pytest.raises(config.ConfigError) as e:
        config.from_env(env)
    assert str(e.value).startswith(message)
    assert "p@" not in str(e.value)


def test_the_sidecar_is_started_for_a_loopback_http_target_only(tmp_path):
    private = tmp_path / "vllm-otel-metrics"
    s = config.from_env(
        {"VLLM_OTEL_METRICS_TARGET": "http://localhost:6000", "XDG_RUNTIME_DIR": str(tmp_path)}
    )
    assert s.sidecar == config.SidecarSettings(
        ingest_addr="127.0.0.1:6000",
        metrics_addr="127.0.0.1:9464",
        args=(),
        log_file=str(private / "sidecar-6000.log"),
        ingest_socket=str(private / "ingest-6000.sock"),
        lock_file=str(private / "sidecar-6000.lock"),
    )
    (tmp_path / "token").write_text("s3cret\n")
    s = config.from_env(
        {
            "VLLM_OTEL_METRICS_TARGET": "http://[::1]:6001",
            "VLLM_OTEL_METRICS_METRICS_ADDR": "none",
            "VLLM_OTEL_METRICS_SIDECAR_ARGS": "--otlp-interval-ms 5000 --otlp-header 'a=b c'",
            "VLLM_OTEL_METRICS_SIDECAR_LOG": str(tmp_path / "s.log"),
            "VLLM_OTEL_METRICS_SOCKET": "none",
            "VLLM_OTEL_METRICS_TOKEN_FILE": str(tmp_path / "token"),
            "XDG_RUNTIME_DIR": str(tmp_path),
        }
    )
    assert s.sidecar == config.SidecarSettings(
        "[::1]:6001",
        "none",
        ("--otlp-interval-ms", "5000", "--otlp-header", "a=b c"),
        str(tmp_path / "s.log"),
        lock_file=str(private / "sidecar-6001.lock"),
        token_file=str(tmp_path / "token"),
    )
    assert config.from_env({"VLLM_OTEL_METRICS_SIDECAR": "off"}).sidecar is None
    assert config.from_env({"VLLM_OTEL_METRICS_TARGET": "http://10.1.2.3:1"}).sidecar is None
    (tmp_path / "ca.pem").write_bytes(b"PEM")
    assert (
        config.from_env(
            {
                "VLLM_OTEL_METRICS_TARGET": "https://127.0.0.1:1",
                "VLLM_OTEL_METRICS_CA_FILE": str(tmp_path / "ca.pem"),
            }
        ).sidecar
        is None
    )


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {"VLLM_OTEL_METRICS_SIDECAR": "yes"},
            "VLLM_OTEL_METRICS_SIDECAR='yes' is not one of auto, off",
        ),
        (
            {"VLLM_OTEL_METRICS_SIDECAR_ARGS": "--otlp-header 'k=s3cret"},
            "VLLM_OTEL_METRICS_SIDECAR_ARGS cannot be split as a shell would: No closing quotation",
        ),
    ],
)
def test_bad_sidecar_settings_name_their_variable_not_their_value(env, message):
    with pytest.raises(config.ConfigError) as e:
        config.from_env(env)
    assert str(e.value) == message


def test_an_ingest_socket_path_too_long_for_a_socket(tmp_path):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    # Not gRPC over TCP instead (whoever holds the port would get the
    # records): the plugin is off, and the line says what to set.
    with pytest.raises(config.ConfigError) as e:
        config.from_env({"XDG_RUNTIME_DIR": str(deep)})
    assert "longer than a Unix socket's 107 bytes: set VLLM_OTEL_METRICS_SOCKET" in str(e.value)
    long_path = str(deep / "s.sock")
    with pytest.raises(config.ConfigError) as e:
        config.from_env({"VLLM_OTEL_METRICS_SOCKET": long_path, "XDG_RUNTIME_DIR": str(tmp_path)})
    assert str(e.value) == (
        f"VLLM_OTEL_METRICS_SOCKET={long_path!r} is longer than a Unix socket's 107 bytes"
    )
    with pytest.raises(config.ConfigError) as e:
        config.from_env({"VLLM_OTEL_METRICS_SOCKET": "s.sock", "XDG_RUNTIME_DIR": str(tmp_path)})
    assert str(e.value) == "VLLM_OTEL_METRICS_SOCKET='s.sock' is not an absolute path"


def test_a_started_sidecar_listens_on_tcp_only_when_asked(tmp_path):
    """Before: a started sidecar always listened on the target's TCP port
    (127.0.0.1:50051 by default), where any local user could write records
    without a credential, though the plugin streams over its socket. After:
    on its socket (and /metrics) only, unless VLLM_OTEL_METRICS_TARGET is
    set (its address, as before), VLLM_OTEL_METRICS_INGEST_ADDR asks for a
    listener, or the plugin itself streams over TCP (no socket)."""
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    private = tmp_path / "vllm-otel-metrics"
    sidecar = config.from_env(env).sidecar
    assert (sidecar.ingest_addr, sidecar.ingest_socket) == (
        None,
        str(private / "ingest-50051.sock"),
    )
    for asked, listener in [
        ("localhost:6001", "127.0.0.1:6001"),
        ("0.0.0.0:6001", "0.0.0.0:6001"),
        ("[::1]:6001", "[::1]:6001"),
    ]:
        sidecar = config.from_env({**env, "VLLM_OTEL_METRICS_INGEST_ADDR": asked}).sidecar
        assert (sidecar.ingest_addr, sidecar.ingest_socket) == (
            listener,
            str(private / "ingest-50051.sock"),
        )
    target = {**env, "VLLM_OTEL_METRICS_TARGET": "http://localhost:6000"}
    assert config.from_env(target).sidecar.ingest_addr == "127.0.0.1:6000"
    # Streaming over gRPC to the target's port: the sidecar listens there.
    tcp = config.from_env({**env, "VLLM_OTEL_METRICS_SOCKET": "none"}).sidecar
    assert (tcp.ingest_addr, tcp.ingest_socket) == ("127.0.0.1:50051", None)


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {
                "VLLM_OTEL_METRICS_INGEST_ADDR": "127.0.0.1:1",
                "VLLM_OTEL_METRICS_TARGET": "http://127.0.0.1:2",
            },
            "VLLM_OTEL_METRICS_INGEST_ADDR and VLLM_OTEL_METRICS_TARGET are both set: with a "
            "target, the started sidecar listens on the target's address; unset one of them",
        ),
        (
            {"VLLM_OTEL_METRICS_INGEST_ADDR": "127.0.0.1:1", "VLLM_OTEL_METRICS_SOCKET": "none"},
            "VLLM_OTEL_METRICS_INGEST_ADDR is set with VLLM_OTEL_METRICS_SOCKET=none: the plugin "
            "then streams over TCP to the target's port; set VLLM_OTEL_METRICS_TARGET instead",
        ),
        *[
            (
                {"VLLM_OTEL_METRICS_INGEST_ADDR": bad},
                f"VLLM_OTEL_METRICS_INGEST_ADDR={bad!r} is not IP:PORT ([IPv6]:PORT for IPv6) "
                "with a port from 1 to 65535",
            )
            for bad in (
                "sidecar.internal:1",
                "127.0.0.1",
                "127.0.0.1:0",
                "::1:5",
                "127.0.0.1:65536",
            )
        ],
    ],
)
def test_a_tcp_listener_asked_for_wrongly_names_its_variable(tmp_path, env, message):
    with pytest.raises(config.ConfigError) as e:
        config.from_env({"XDG_RUNTIME_DIR": str(tmp_path), **env})
    assert str(e.value) == message
