"""Starts ``vllm-otel-metrics serve`` beside vLLM and keeps it running.

With ``VLLM_OTEL_METRICS_SIDECAR=auto`` (the default) and an ``http://``
loopback target, every plugin in the host's vLLM processes runs one
:class:`Supervisor` thread, and the one that holds the lock file of the
target's port (``vllm-otel-metrics-PORT.lock`` in the temporary directory)
supervises the sidecar:

- **one sidecar per host**: ``vllm serve --api-server-count N`` loads the
  plugin in N processes; the lock is ``flock``'d, so one holds it and the
  others connect to the sidecar it started. When the holder's process ends,
  the kernel releases the lock and another plugin's thread takes over. The
  lock file holds the pid of the sidecar its holder started, so the next
  holder waits for that one to finish draining (it still holds the
  ``/metrics`` port) before it starts its own;
- **a sidecar is started only when nothing answers**: a sidecar the user
  runs on that port (or one left by a holder that just ended) is used, not
  doubled;
- **no orphans**: the sidecar runs with ``serve --exit-with-parent
  --drain-timeout 2``, so it drains and ends within about 2 s of the process
  that started it, however that process ends (even ``SIGKILL``); at
  interpreter exit it is terminated;
- **a sidecar that dies is started again**, after a back-off (0.5 s, doubling
  to 10 s while it keeps failing within a minute of its start);
- its output goes to a log file, which vLLM's log names.

The sidecar is the ``vllm-otel-metrics`` binary the wheel carries
(:func:`binary`). It takes its OTLP settings from the standard ``OTEL_*``
variables, which it inherits from vLLM's environment.
"""

import fcntl
import json
import logging
import os
import pathlib
import shutil
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time

log = logging.getLogger("vllm.vllm_otel_metrics")

#: How often a plugin without the lock tries to take it, and how often the
#: holder looks whether a sidecar it did not start still answers, seconds.
POLL_SECONDS = 1.0
#: Back-off before starting a sidecar again, seconds.
RESTART_MIN, RESTART_MAX = 0.5, 10.0
#: A sidecar that ran this long before it ended resets the back-off, seconds.
HEALTHY_SECONDS = 60.0
#: How long a terminated sidecar gets to drain before it is killed, seconds.
STOP_SECONDS = 5.0
#: ``serve --drain-timeout`` of a started sidecar, seconds.
DRAIN_SECONDS = 2
#: Where a wheel built with the binary carries it (setup.py puts it there).
PACKAGED_BINARY = pathlib.Path(__file__).resolve().parent / "_bin" / "vllm-otel-metrics"


def binary() -> "str | None":
    """The sidecar binary: the wheel's own, else the first native
    ``vllm-otel-metrics`` executable in this environment's scripts directory
    or on ``PATH``. A plugin-only install's ``vllm-otel-metrics`` command is a
    Python script that has no binary to run: it is passed over."""
    if PACKAGED_BINARY.is_file() and os.access(PACKAGED_BINARY, os.X_OK):
        return str(PACKAGED_BINARY)
    directories = [sysconfig.get_path("scripts"), *os.environ.get("PATH", "").split(os.pathsep)]
    for directory in directories:
        candidate = shutil.which("vllm-otel-metrics", path=directory) if directory else None
        if candidate and not _is_script(candidate):
            return candidate
    return None


def _is_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return True


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def answers(address: str, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def command(executable: str, settings, max_model_len, token_buckets: str = "python") -> list:
    """``serve``'s command line for ``settings`` (a :class:`.config.SidecarSettings`).

    >>> from vllm_otel_metrics.config import SidecarSettings
    >>> command("bin", SidecarSettings("127.0.0.1:50051", "none", ("--otlp-interval-ms", "5000"), "l"), 4096)
    ... # doctest: +NORMALIZE_WHITESPACE
    ['bin', 'serve', '--exit-with-parent', '--drain-timeout', '2', '--ingest-addr', '127.0.0.1:50051',
     '--metrics-addr', 'none', '--token-buckets', 'python', '--max-model-len', '4096', '--otlp-interval-ms', '5000']
    """
    argv = [
        executable,
        "serve",
        "--exit-with-parent",
        # Streams still open when the plugin that started it ended are other
        # API servers' plugins: they reconnect to the next holder's sidecar.
        "--drain-timeout",
        str(DRAIN_SECONDS),
        "--ingest-addr",
        settings.ingest_addr,
        "--metrics-addr",
        settings.metrics_addr,
        # The token buckets of the vLLM frontend whose /metrics the sidecar
        # stands beside: the Python logger's, or the Rust frontend's.
        "--token-buckets",
        token_buckets,
    ]
    if settings.ingest_socket:
        argv += ["--ingest-socket", settings.ingest_socket]
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    if settings.custom_histogram_buckets:
        argv += ["--custom-histogram-buckets", settings.custom_histogram_buckets]
    return argv + list(settings.args)


def vllm_bucket_overrides(vllm_config):
    """vLLM's own ``--custom-histogram-buckets`` (vLLM PR #48867) as JSON, or None.

    A vLLM with the flag keeps it in ``observability_config``; the sidecar
    takes the same value, so its buckets are the ones vLLM's ``/metrics`` has.

    >>> import types
    >>> observability = types.SimpleNamespace(custom_histogram_buckets={"request_latency": [0.1, 1]})
    >>> vllm_bucket_overrides(types.SimpleNamespace(observability_config=observability))
    '{"request_latency": [0.1, 1]}'
    >>> vllm_bucket_overrides(types.SimpleNamespace()) is None
    True
    """
    observability = getattr(vllm_config, "observability_config", None)
    value = getattr(observability, "custom_histogram_buckets", None)
    if not value:
        return None
    return value if isinstance(value, str) else json.dumps(value)


class Supervisor:
    """The thread that holds the host's sidecar lock and keeps a sidecar up."""

    def __init__(self, settings, max_model_len, token_buckets: str = "python"):
        self.settings = settings
        self.max_model_len = max_model_len
        self.token_buckets = token_buckets
        port = settings.ingest_addr.rpartition(":")[2]
        self.lock_path = os.path.join(tempfile.gettempdir(), f"vllm-otel-metrics-{port}.lock")
        #: The sidecar this plugin started and is watching, if any.
        self.process = None
        #: How many sidecars this plugin started (for tests and the log).
        self.started = 0
        self._lock_file = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="vllm-otel-metrics-sidecar", daemon=True
        )

    def start(self) -> "Supervisor":
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops supervising; terminates the sidecar this plugin started."""
        self._stop.set()
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._thread.join(1.0)

    def _take_lock(self) -> bool:
        if self._lock_file is None:
            self._lock_file = open(self.lock_path, "a+b")  # noqa: SIM115 — held for the process's life
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False

    def _wait_for_previous_sidecar(self) -> None:
        """Waits (up to a minute) for the sidecar the lock's previous holder
        started, whose pid the lock file holds, to end."""
        self._lock_file.seek(0)
        try:
            pid = int(self._lock_file.read().decode() or 0)
        except ValueError:
            pid = 0
        deadline = time.monotonic() + 60
        while pid and alive(pid) and time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(0.1)

    def _record_pid(self, pid: int) -> None:
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(str(pid).encode())
        self._lock_file.flush()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._take_lock():
                break
            self._stop.wait(POLL_SECONDS)
        else:
            return
        self._wait_for_previous_sidecar()
        executable = binary()
        backoff = RESTART_MIN
        warned_missing = False
        while not self._stop.is_set():
            if answers(self.settings.ingest_addr):
                # Someone else's sidecar (or one still draining): use it.
                self._stop.wait(POLL_SECONDS)
                continue
            if executable is None:
                if not warned_missing:
                    log.error(
                        "vllm-otel-metrics: no sidecar answers at %s and the vllm-otel-metrics "
                        "binary is not installed (a plugin-only install?): start `vllm-otel-metrics "
                        "serve` yourself, or set VLLM_OTEL_METRICS_SIDECAR=off",
                        self.settings.ingest_addr,
                    )
                    warned_missing = True
                self._stop.wait(POLL_SECONDS)
                executable = binary()
                continue
            began = time.monotonic()
            status = self._run_one(executable)
            if self._stop.is_set():
                return
            if time.monotonic() - began >= HEALTHY_SECONDS:
                backoff = RESTART_MIN
            log.warning(
                "vllm-otel-metrics: the sidecar ended (exit status %s); starting it again in "
                "%.1f s; its log: %s",
                status,
                backoff,
                self.settings.log_file,
            )
            self._stop.wait(backoff)
            backoff = min(backoff * 2, RESTART_MAX)

    def _run_one(self, executable: str):
        """Starts one sidecar and waits for it to end; returns its exit status."""
        argv = command(executable, self.settings, self.max_model_len, self.token_buckets)
        with open(self.settings.log_file, "ab") as output:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                close_fds=True,
                # Out of vLLM's process group: a Ctrl-C meant for vLLM does
                # not cut the sidecar short; it drains when vLLM has ended.
                start_new_session=True,
            )
        self._record_pid(self.process.pid)
        self.started += 1
        log.info(
            "vllm-otel-metrics: started the sidecar (pid %d) on %s%s, /metrics on %s; its log: %s",
            self.process.pid,
            self.settings.ingest_addr,
            f" and {self.settings.ingest_socket}" if self.settings.ingest_socket else "",
            self.settings.metrics_addr,
            self.settings.log_file,
        )
        return self.process.wait()


def main() -> None:
    """The ``vllm-otel-metrics`` command of a wheel: runs the binary it carries."""
    import sys

    if not PACKAGED_BINARY.is_file():
        sys.exit(
            "vllm-otel-metrics: this install has no sidecar binary (a plugin-only build); "
            "install a wheel built by scripts/build-wheel.sh"
        )
    os.execv(PACKAGED_BINARY, [str(PACKAGED_BINARY), *sys.argv[1:]])
