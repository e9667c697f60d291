"""Which sidecar binary the plugin starts."""

import os
import stat

from vllm_otel_metrics import sidecar


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
