"""Which sidecar binary the plugin starts."""

import json
import logging
import os
import re
import socket
import stat
import subprocess
import threading
import time

import pytest

from vllm_otel_metrics import config, sidecar


def _executable(path, content: bytes):
    path.write_bytes(content)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_plugin_only_installs_command_script_is_passed_over(tmp_path, monkeypatch):
    scripts, native = tmp_path / "scripts", tmp_path / "native"
    scripts.mkdir()
    native.mkdir()
    # What pip writes for the `vllm-otel-metrics` entry point of a
    # plugin-only install: a Python launcher with no binary behind it.
    _executable(scripts / "vllm-otel-metrics", b"#!/usr/bin/python3\nimport sys\n")
    binary = _executable(native / "vllm-otel-metrics", b"\x7fELF\x02\x01\x01")
    monkeypatch.setattr(sidecar.sysconfig, "get_path", lambda name: str(scripts))
    monkeypatch.setenv("PATH", os.pathsep.join([str(scripts), str(native)]))
    if sidecar.PACKAGED_BINARY.exists():
        # A wheel with the binary: that one wins, whatever else is on PATH.
        assert sidecar.binary().endswith("_bin/vllm-otel-metrics")
        return
    assert sidecar.binary() == str(binary)
    monkeypatch.setenv("PATH", str(scripts))
    assert sidecar.binary() is None


# The supervisor on a shared host (issue 41).


def sidecar_settings(tmp_path, **env):
    """A started sidecar's settings with its private directory in
    ``tmp_path`` and a free ingest port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return config.from_env(
        {
            "XDG_RUNTIME_DIR": str(tmp_path),
            "VLLM_OTEL_METRICS_TARGET": f"http://127.0.0.1:{port}",
            "VLLM_OTEL_METRICS_METRICS_ADDR": "none",
            **env,
        }
    ).sidecar


def lines_of(caplog, level=logging.DEBUG):
    """The plugin's log lines from the supervisor's thread (other tests'
    threads may still be logging)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.threadName == "vllm-otel-metrics-sidecar" and r.levelno >= level
    ]


def wait_until(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


def test_a_sidecar_answers_on_this_users_socket_not_on_the_tcp_port(tmp_path):
    """Before: a TCP connect to the ingest port, which any user can bind,
    decided that a sidecar answers (so an impostor there was streamed to).
    After: only a process of this user on the ingest socket answers."""
    settings = sidecar_settings(tmp_path)
    host, port = settings.ingest_addr.rsplit(":", 1)
    with socket.socket() as impostor:
        impostor.bind((host, int(port)))
        impostor.listen()
        supervisor = sidecar.Supervisor(settings, 4096)
        assert not supervisor._answers()
        with socket.socket(socket.AF_UNIX) as ours:
            ours.bind(settings.ingest_socket)
            ours.listen()
            assert supervisor._answers()


def fake_serve(tmp_path, monkeypatch, exit_status):
    """A stand-in for the sidecar binary that writes down its command line
    and its SERVE_ARGS variable, then exits with ``exit_status``."""
    script = tmp_path / "serve.sh"
    out = tmp_path / "serve-out"
    script.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$@\" > {out}.argv\n"
        f"printf '%s' \"${{VLLM_OTEL_METRICS_SERVE_ARGS-unset}}\" > {out}.env\n"
        f"exit {exit_status}\n"
    )
    script.chmod(0o755)
    monkeypatch.setattr(sidecar, "binary", lambda: str(script))
    monkeypatch.setattr(sidecar, "RESTART_MIN", 0.01)
    return out


def test_the_started_sidecar_gets_no_secret_on_its_command_line(tmp_path, monkeypatch):
    """Before: VLLM_OTEL_METRICS_SIDECAR_ARGS (an --otlp-header value among
    them) was on the sidecar's command line, which every user can read,
    the sidecar was told --exit-with-parent (which watches init if vLLM
    ended before it started) and not the token file. After: the flags
    come in VLLM_OTEL_METRICS_SERVE_ARGS, which only this user can read;
    the command line has --parent-pid and the token's path, not the token."""
    (tmp_path / "token").write_text("t0ken\n")
    settings = sidecar_settings(
        tmp_path,
        VLLM_OTEL_METRICS_SIDECAR_ARGS="--otlp-header 'authorization=Bearer s3cret'",
        VLLM_OTEL_METRICS_TOKEN_FILE=str(tmp_path / "token"),
    )
    out = fake_serve(tmp_path, monkeypatch, 0)
    supervisor = sidecar.Supervisor(settings, 4096).start()
    try:
        assert wait_until(lambda: pathlib_exists(f"{out}.env"))
    finally:
        supervisor.close()
    argv = open(f"{out}.argv").read().splitlines()
    assert argv[:3] == ["serve", "--parent-pid", str(os.getpid())]
    assert "--exit-with-parent" not in argv
    assert argv[argv.index("--ingest-auth-token-file") + 1] == str(tmp_path / "token")
    assert not [a for a in argv if "s3cret" in a or "t0ken" in a]
    assert json.loads(open(f"{out}.env").read()) == ["--otlp-header", "authorization=Bearer s3cret"]
    # The lock file holds the started sidecar's pid and configuration.
    record = sidecar.read_record(settings.lock_file)
    assert (record["pid"], record["holder"], record["config"]) == (
        supervisor.process.pid,
        os.getpid(),
        sidecar.fingerprint(settings, 4096),
    )


def test_no_stale_serve_args_reach_a_sidecar_without_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_OTEL_METRICS_SERVE_ARGS", '["--otlp-header", "stale=1"]')
    out = fake_serve(tmp_path, monkeypatch, 0)
    supervisor = sidecar.Supervisor(sidecar_settings(tmp_path), 4096).start()
    try:
        assert wait_until(lambda: pathlib_exists(f"{out}.env"))
    finally:
        supervisor.close()
    assert open(f"{out}.env").read() == "unset"


def pathlib_exists(path) -> bool:
    return os.path.exists(path) and os.path.getsize(path) > 0


def test_a_sidecar_whose_address_is_in_use_is_given_up_after_three_retries(
    tmp_path, monkeypatch, caplog
):
    """Before: a sidecar that exits because its port is taken (status 4)
    was started again forever, a warning each time. After: three retries,
    then one error line that says what to do, and the plugin off."""
    fake_serve(tmp_path, monkeypatch, 4)  # serve's status: an address in use
    settings = sidecar_settings(tmp_path)
    with caplog.at_level(logging.INFO, logger="vllm.vllm_otel_metrics"):
        supervisor = sidecar.Supervisor(settings, 4096).start()
        try:
            wait_until(lambda: lines_of(caplog, logging.ERROR), timeout=5.0)
            time.sleep(0.5)
        finally:
            supervisor.close()
    starts = [
        line
        for line in lines_of(caplog, logging.INFO)
        if line.startswith("vllm-otel-metrics: started the sidecar")
    ]
    assert len(starts) == 4, starts
    errors = lines_of(caplog, logging.ERROR)
    assert len(errors) == 1, errors
    assert (
        "address in use: another vLLM instance's sidecar or another program holds it; set "
        "VLLM_OTEL_METRICS_TARGET / VLLM_OTEL_METRICS_METRICS_ADDR to free ports" in errors[0]
    )
    assert settings.log_file in errors[0]
    assert not supervisor.admits()
    # The other plugins of this vLLM read why in the lock file.
    assert sidecar.read_record(settings.lock_file)["failed"] == "address in use"


def test_whatever_fails_in_the_supervisor_is_one_line_then_a_retry(tmp_path, monkeypatch, caplog):
    """Before: an exception in the thread (the binary vanished, a log file
    that cannot be opened) ended it, with a traceback on stderr at most,
    and no sidecar was started again. After: one line in vLLM's log, then
    a retry after the back-off."""
    fake_serve(tmp_path, monkeypatch, 0)

    def vanished(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "vllm-otel-metrics")

    monkeypatch.setattr(subprocess, "Popen", vanished)
    with caplog.at_level(logging.INFO, logger="vllm.vllm_otel_metrics"):
        supervisor = sidecar.Supervisor(sidecar_settings(tmp_path), 4096).start()
        try:
            assert wait_until(lambda: len(lines_of(caplog, logging.ERROR)) >= 2)
            assert supervisor._thread.is_alive()
        finally:
            supervisor.close()
    errors = lines_of(caplog, logging.ERROR)
    assert errors[0].startswith(
        "vllm-otel-metrics: supervising the sidecar failed ([Errno 2] No such file or directory: "
        "'vllm-otel-metrics'); trying again in 0.0 s; its log: "
    )
    assert not [r for r in caplog.records if r.exc_info]


def test_a_lock_or_log_file_that_is_not_this_users_refuses_the_supervisor(tmp_path):
    """Before: the lock file (in /tmp) was opened following links, and the
    log file in the supervisor's thread, which a failure ended silently.
    After: both are opened and checked in vLLM's thread; the ConfigError
    turns the plugin off (test_plugin.py)."""
    settings = sidecar_settings(tmp_path)
    os.symlink(tmp_path / "elsewhere", settings.lock_file)
    with pytest.raises(config.ConfigError) as e:
        sidecar.Supervisor(settings, 4096)
    assert str(e.value).startswith(f"{settings.lock_file} is a symbolic link")
    assert not (tmp_path / "elsewhere").exists()
    os.unlink(settings.lock_file)
    os.mkfifo(settings.log_file)
    with pytest.raises(config.ConfigError) as e:
        sidecar.Supervisor(settings, 4096)
    assert str(e.value).startswith(f"{settings.log_file} cannot be opened")


def test_a_sidecar_started_with_other_settings_turns_the_plugin_off(tmp_path, caplog):
    """Before: a plugin streamed to whichever sidecar answered on its port,
    exporting with another vLLM instance's settings. After: the lock file
    says how the holder's sidecar is configured; another configuration,
    while holder and sidecar run, is one line and the plugin off."""
    lock = tmp_path / "sidecar-1.lock"
    gone = subprocess.Popen(["true"])
    gone.wait()

    def holder_wrote(**record):
        lock.write_text(json.dumps(record))

    gate = sidecar.Gate(str(lock), "mine")
    assert gate.admits()
    holder_wrote(pid=os.getpid(), config="mine", holder=os.getpid())
    assert gate.admits()
    # A holder that ended: the next one starts a sidecar with its own.
    holder_wrote(pid=os.getpid(), config="theirs", holder=gone.pid)
    assert gate.admits()
    holder_wrote(pid=os.getpid(), config="theirs", holder=os.getpid())
    with caplog.at_level(logging.ERROR, logger="vllm.vllm_otel_metrics"):
        assert not gate.admits()
        assert not gate.admits()
    lines = [r.getMessage() for r in caplog.records if r.thread == threading.get_ident()]
    assert lines == [
        f"vllm-otel-metrics: the sidecar (pid {os.getpid()}) on this ingest port was started by "
        f"another vLLM instance (pid {os.getpid()}) with other settings; not streaming to it: give "
        "each vLLM instance its own VLLM_OTEL_METRICS_TARGET port and "
        "VLLM_OTEL_METRICS_METRICS_ADDR; the plugin is off, vLLM goes on"
    ]


def test_the_fingerprint_is_the_command_line_but_the_executable_and_parent():
    settings = config.SidecarSettings("127.0.0.1:1", "127.0.0.1:2", ("--otlp-names", "otel"), "l")
    assert sidecar.fingerprint(settings, 4096) == sidecar.fingerprint(settings, 4096)
    for changed in (
        {"metrics_addr": "127.0.0.1:3"},
        {"args": ()},
        {"token_file": "/t"},
        {"custom_histogram_buckets": "{}"},
    ):
        other = config.dataclasses.replace(settings, **changed)
        assert sidecar.fingerprint(other, 4096) != sidecar.fingerprint(settings, 4096), changed
    assert sidecar.fingerprint(settings, 4096, "rust") != sidecar.fingerprint(settings, 4096)


def test_the_slo_reaches_the_started_sidecar_and_a_bad_one_is_refused_first(tmp_path):
    """VLLM_OTEL_METRICS_SLO becomes the sidecar's --slo; a value serve would
    refuse is a ConfigError naming the key, before any sidecar is started
    (one that exits at once would be started again and again)."""
    slo = '{"ttft": 0.5, "models": {"big": {"tpot": 0.1}}}'
    settings = sidecar_settings(tmp_path, VLLM_OTEL_METRICS_SLO=slo)
    argv = sidecar.command("bin", settings, 4096, parent_pid=1)
    assert argv[argv.index("--slo") + 1] == slo
    for bad, key in [
        ('{"ttft": -1}', "ttft"),
        ('{"p99": 1}', "p99"),
        ('{"models": {"big": {"e2e": "slow"}}}', "models.big.e2e"),
        ("[1]", "--slo"),
        ('{"ttft": true}', "ttft"),
    ]:
        with pytest.raises(config.ConfigError, match=f"VLLM_OTEL_METRICS_SLO: {re.escape(key)}: "):
            sidecar_settings(tmp_path, VLLM_OTEL_METRICS_SLO=bad)


def test_the_attribution_reaches_the_started_sidecar_and_a_bad_class_is_named(tmp_path):
    """VLLM_OTEL_METRICS_ATTRIBUTE becomes the sidecar's --attribute (and a
    sidecar started without it differs); a class serve does not know is a
    ConfigError naming it, before any sidecar is started."""
    settings = sidecar_settings(tmp_path, VLLM_OTEL_METRICS_ATTRIBUTE="lora, priority")
    argv = sidecar.command("bin", settings, 4096, parent_pid=1)
    assert argv[argv.index("--attribute") + 1] == "lora,priority"
    plain = sidecar_settings(tmp_path)
    assert "--attribute" not in sidecar.command("bin", plain, 4096, parent_pid=1)
    assert sidecar.fingerprint(settings, 4096) != sidecar.fingerprint(plain, 4096)
    with pytest.raises(
        config.ConfigError, match="VLLM_OTEL_METRICS_ATTRIBUTE: 'adapter' is not one of"
    ):
        sidecar_settings(tmp_path, VLLM_OTEL_METRICS_ATTRIBUTE="priority,adapter")


def socket_only_settings(tmp_path):
    """A started sidecar's settings without VLLM_OTEL_METRICS_TARGET: its
    private directory in ``tmp_path``, no /metrics."""
    return config.from_env(
        {"XDG_RUNTIME_DIR": str(tmp_path), "VLLM_OTEL_METRICS_METRICS_ADDR": "none"}
    ).sidecar


def test_a_sidecar_nobody_asked_a_tcp_port_of_listens_on_its_socket_only(
    tmp_path, monkeypatch, caplog
):
    """Before: the started sidecar always got --ingest-addr 127.0.0.1:50051,
    a TCP listener any local user could write records into. After: without
    VLLM_OTEL_METRICS_TARGET, --ingest-addr none and its socket; the plugin
    never looks at a TCP port to tell whether it answers, and its log line
    names what it listens on."""
    settings = socket_only_settings(tmp_path)
    out = fake_serve(tmp_path, monkeypatch, 0)
    with caplog.at_level(logging.INFO, logger="vllm.vllm_otel_metrics"):
        supervisor = sidecar.Supervisor(settings, 4096).start()
        try:
            assert wait_until(lambda: pathlib_exists(f"{out}.argv"))
            assert wait_until(lambda: lines_of(caplog, logging.INFO))
        finally:
            supervisor.close()
    argv = open(f"{out}.argv").read().splitlines()
    assert argv[argv.index("--ingest-addr") + 1] == "none"
    assert argv[argv.index("--ingest-socket") + 1] == settings.ingest_socket
    assert argv.count("--ingest-addr") == 1
    line = lines_of(caplog, logging.INFO)[0]
    assert line.startswith("vllm-otel-metrics: started the sidecar (pid ")
    assert line.endswith(
        f") on the socket {settings.ingest_socket}, /metrics on none; its log: {settings.log_file}"
    )
    # Nothing listens on its socket: no sidecar answers, whatever holds a port.
    assert not supervisor._answers()


def test_an_address_in_use_without_a_tcp_listener_names_the_socket(tmp_path, monkeypatch, caplog):
    """The give-up line names what the sidecar listens on: its socket and
    /metrics, no TCP ingest address it does not have."""
    fake_serve(tmp_path, monkeypatch, 4)
    settings = socket_only_settings(tmp_path)
    with caplog.at_level(logging.INFO, logger="vllm.vllm_otel_metrics"):
        supervisor = sidecar.Supervisor(settings, 4096).start()
        try:
            assert wait_until(lambda: lines_of(caplog, logging.ERROR), timeout=5.0)
        finally:
            supervisor.close()
    (error,) = lines_of(caplog, logging.ERROR)
    assert error.startswith(
        f"vllm-otel-metrics: the sidecar cannot listen on the socket {settings.ingest_socket} or "
        "/metrics none: address in use: "
    )
