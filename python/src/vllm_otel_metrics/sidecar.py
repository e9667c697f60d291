"""Starts ``vllm-otel-metrics serve`` beside vLLM and keeps it running.

With ``VLLM_OTEL_METRICS_SIDECAR=auto`` (the default) and an ``http://``
loopback target, every plugin in the host's vLLM processes runs one
:class:`Supervisor` thread, and the one that holds the lock file of the
target's port (``sidecar-PORT.lock`` in the user's private directory,
:func:`.private.private_dir`) supervises the sidecar:

- **one sidecar per host and user**: ``vllm serve --api-server-count N``
  loads the plugin in N processes; the lock is ``flock``'d, so one holds it
  and the others stream to the sidecar it started. When the holder's process
  ends, the kernel releases the lock and another plugin's thread takes over.
  The lock file holds the pid of the sidecar its holder started, so the next
  holder waits for that one to finish draining (it still holds the
  ``/metrics`` port) before it starts its own;
- **only this user's sidecar**: the host is shared. Every file the plugin
  makes is in the private directory, opened without following links and
  checked to be this user's (:func:`.private.open_private`); one that is not
  turns the plugin off, with one line in vLLM's log. A sidecar "answers"
  when a process of this user listens on the ingest socket (its peer's uid
  is checked), not when something accepts connections on the TCP port,
  which any user can hold; the plugin streams over that socket only;
- **only a sidecar with this plugin's settings**: two vLLM instances of one
  user on one ingest port would share a sidecar that exports with the
  settings of whichever started it. The lock file also holds a fingerprint
  of the started sidecar's configuration (:func:`fingerprint`); a plugin
  whose own differs turns off, with one line (:class:`Gate`);
- **a sidecar is started only when none answers**: a sidecar the user runs
  on that socket (or one left by a holder that just ended) is used, not
  doubled;
- **no orphans**: the sidecar runs with ``serve --parent-pid PID
  --drain-timeout 2`` (``PID`` this process), so it drains and ends within
  about 2 s of the process that started it, however that process ends (even
  ``SIGKILL``), and ends at once if that process ended before it started;
  at interpreter exit it is terminated;
- **a sidecar that dies is started again**, after a back-off (0.5 s,
  doubling to 10 s while it keeps failing within a minute of its start). One
  that cannot listen (:data:`EXIT_ADDRESS_IN_USE`: another instance's
  sidecar or another program holds one of its addresses) is tried
  :data:`ADDRESS_IN_USE_RETRIES` more times, then the plugin says so in one
  line and turns off: restarting it cannot free the port;
- **no secret in a command line**: every user can read a process's command
  line (``/proc/PID/cmdline``), so ``VLLM_OTEL_METRICS_SIDECAR_ARGS`` (which
  may hold ``--otlp-header`` values) reaches the sidecar in its environment,
  ``VLLM_OTEL_METRICS_SERVE_ARGS``, which only its user can read; the
  token is passed as its file's path;
- **nothing fails in silence**: whatever goes wrong in the thread (a log
  file that cannot be opened, a binary that vanished) is one line in
  vLLM's log, then a retry after the back-off;
- its output goes to a log file, which vLLM's log names.

The sidecar is the ``vllm-otel-metrics`` binary the wheel carries
(:func:`binary`). It takes its OTLP settings from the standard ``OTEL_*``
variables, which it inherits from vLLM's environment.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import pathlib
import shutil
import socket
import stat
import struct
import subprocess
import sysconfig
import threading
import time
from collections.abc import Mapping
from typing import Any

from . import config, private

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
#: ``serve``'s exit status when one of its listen addresses is in use.
EXIT_ADDRESS_IN_USE = 4
#: How many times a sidecar that found its address in use is started again
#: before the plugin gives up: a sidecar still draining frees its ports
#: within seconds; a port held longer is another program's.
ADDRESS_IN_USE_RETRIES = 3
#: The sidecar's environment variable that carries the flags of
#: ``VLLM_OTEL_METRICS_SIDECAR_ARGS``, a JSON array of strings.
SERVE_ARGS_VARIABLE = "VLLM_OTEL_METRICS_SERVE_ARGS"
#: ``serve --ingest-addr``'s value for no TCP ingest listener.
NO_LISTENER = "none"
#: The most of a lock file read.
MAX_RECORD_BYTES = 4096
#: Where a wheel built with the binary carries it (setup.py puts it there).
PACKAGED_BINARY = pathlib.Path(__file__).resolve().parent / "_bin" / "vllm-otel-metrics"
_UCRED = struct.Struct("3i")


def binary() -> str | None:
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
    """Whether something accepts TCP connections at ``host:port`` (anyone's
    process: with ``VLLM_OTEL_METRICS_SOCKET=none`` only)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def connect_own(path: str, timeout: float) -> tuple[socket.socket | None, int | None]:
    """A connection to the Unix socket ``path`` when a process of this user
    listens there, else None; and the uid of a listener of another user's
    (else None). The connection's timeout is ``timeout``.

    The peer's uid is the kernel's word (``SO_PEERCRED``), whoever made the
    socket file.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        uid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))[1]
    except OSError:
        sock.close()
        return None, None
    if uid != os.getuid():
        sock.close()
        return None, uid
    return sock, None


def command(
    executable: str,
    settings: config.SidecarSettings,
    max_model_len: int | None,
    token_buckets: str = "python",
    parent_pid: int | None = None,
) -> list[str]:
    """``serve``'s command line for ``settings`` (a
    :class:`.config.SidecarSettings`), for a sidecar whose parent is
    ``parent_pid`` (default: this process). The flags of
    ``VLLM_OTEL_METRICS_SIDECAR_ARGS`` are not in it: they go in its
    environment (:func:`environment`).

    A sidecar without ``VLLM_OTEL_METRICS_TARGET`` listens on its ingest
    socket and ``/metrics`` only (``--ingest-addr none``):

    >>> from vllm_otel_metrics.config import SidecarSettings
    >>> settings = SidecarSettings(None, "127.0.0.1:9464", (), "l", ingest_socket="/run/i.sock")
    >>> command("bin", settings, None, parent_pid=7)
    ... # doctest: +NORMALIZE_WHITESPACE
    ['bin', 'serve', '--parent-pid', '7', '--drain-timeout', '2', '--ingest-addr', 'none',
     '--metrics-addr', '127.0.0.1:9464', '--token-buckets', 'python',
     '--ingest-socket', '/run/i.sock']

    With a target, on its address too; the token as its file's path, and
    no ``VLLM_OTEL_METRICS_SIDECAR_ARGS`` flag:

    >>> settings = SidecarSettings("127.0.0.1:50051", "none", ("--otlp-header", "k=s3cret"), "l",
    ...                            token_file="/run/token")
    >>> command("bin", settings, 4096, parent_pid=7)
    ... # doctest: +NORMALIZE_WHITESPACE
    ['bin', 'serve', '--parent-pid', '7', '--drain-timeout', '2', '--ingest-addr', '127.0.0.1:50051',
     '--metrics-addr', 'none', '--token-buckets', 'python', '--ingest-auth-token-file', '/run/token',
     '--max-model-len', '4096']
    """
    if settings.ingest_addr is None and not settings.ingest_socket:
        raise ValueError("a sidecar with neither a TCP ingest address nor an ingest socket")
    argv = [
        executable,
        "serve",
        # It ends when this process does, and at once if this process ended
        # before it started (--exit-with-parent alone would then watch its
        # new parent, init, and never end).
        "--parent-pid",
        str(os.getpid() if parent_pid is None else parent_pid),
        # Streams still open when the plugin that started it ended are other
        # API servers' plugins: they reconnect to the next holder's sidecar.
        "--drain-timeout",
        str(DRAIN_SECONDS),
        # No TCP listener unless the user asked for one: on a shared host any
        # local user could write records into it (the plugin streams over
        # the socket).
        "--ingest-addr",
        settings.ingest_addr or NO_LISTENER,
        "--metrics-addr",
        settings.metrics_addr,
        # The token buckets of the vLLM frontend whose /metrics the sidecar
        # stands beside: the Python logger's, or the Rust frontend's.
        "--token-buckets",
        token_buckets,
    ]
    if settings.ingest_socket:
        argv += ["--ingest-socket", settings.ingest_socket]
    if settings.token_file:
        # The path, never the token: a command line is every user's to read.
        argv += ["--ingest-auth-token-file", settings.token_file]
    if max_model_len:
        argv += ["--max-model-len", str(max_model_len)]
    if settings.custom_histogram_buckets:
        argv += ["--custom-histogram-buckets", settings.custom_histogram_buckets]
    if settings.slo:
        argv += ["--slo", settings.slo]
    if settings.attribute:
        argv += ["--attribute", settings.attribute]
    return argv


def listeners(settings: config.SidecarSettings) -> str:
    """What a started sidecar listens on for records, for log lines.

    >>> from vllm_otel_metrics.config import SidecarSettings
    >>> listeners(SidecarSettings(None, "m", (), "l", ingest_socket="/run/i.sock"))
    'the socket /run/i.sock'
    >>> listeners(SidecarSettings("127.0.0.1:1", "m", (), "l", ingest_socket="/run/i.sock"))
    '127.0.0.1:1 and the socket /run/i.sock'
    """
    where = [settings.ingest_addr] if settings.ingest_addr else []
    if settings.ingest_socket:
        where.append(f"the socket {settings.ingest_socket}")
    return " and ".join(where)


def environment(
    settings: config.SidecarSettings, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The started sidecar's environment: this process's (``base``), with
    ``VLLM_OTEL_METRICS_SIDECAR_ARGS``'s flags as a JSON array in
    :data:`SERVE_ARGS_VARIABLE`, or without that variable when there are
    none (not one inherited from elsewhere).

    >>> from vllm_otel_metrics.config import SidecarSettings
    >>> env = environment(SidecarSettings("a", "m", ("--otlp-header", "k=v"), "l"), {"PATH": "/bin"})
    >>> env == {"PATH": "/bin", "VLLM_OTEL_METRICS_SERVE_ARGS": '["--otlp-header", "k=v"]'}
    True
    >>> environment(SidecarSettings("a", "m", (), "l"), {SERVE_ARGS_VARIABLE: "[]"})
    {}
    """
    env = dict(os.environ if base is None else base)
    env.pop(SERVE_ARGS_VARIABLE, None)
    if settings.args:
        env[SERVE_ARGS_VARIABLE] = json.dumps(list(settings.args))
    return env


def fingerprint(
    settings: config.SidecarSettings, max_model_len: int | None, token_buckets: str = "python"
) -> str:
    """The configuration a started sidecar would have, as a sha256: its
    command line, less the executable and ``--parent-pid`` (the same for
    two processes of one vLLM, and for two installs of one release), and
    its :data:`SERVE_ARGS_VARIABLE` flags.

    >>> from vllm_otel_metrics.config import SidecarSettings
    >>> a = SidecarSettings("127.0.0.1:1", "127.0.0.1:2", (), "l")
    >>> fingerprint(a, 4096) == fingerprint(a, 4096), fingerprint(a, 4096) == fingerprint(a, 8192)
    (True, False)
    >>> fingerprint(a, 4096) == fingerprint(dataclasses.replace(a, args=("--otlp-names", "otel")), 4096)
    False
    """
    argv = command("", settings, max_model_len, token_buckets, parent_pid=0)
    at = argv.index("--parent-pid")
    del argv[at : at + 2]
    return hashlib.sha256(json.dumps([argv[1:], list(settings.args)]).encode()).hexdigest()


def planned(
    settings: config.SidecarSettings, vllm_config: Any, rust_frontend: bool
) -> tuple[config.SidecarSettings, int | None, str]:
    """The sidecar a plugin of this vLLM starts: its settings (vLLM's own
    ``--custom-histogram-buckets`` in place of the environment's), the
    model length for ``--max-model-len`` and the token buckets, as
    ``(settings, max_model_len, token_buckets)``.

    Under the Rust frontend (``rust_frontend``) no ``--max-model-len``:
    vllm-rs 0.32.0 builds its token buckets for 131072 tokens whatever the
    model's length (``build_1_2_5_buckets(131_072)`` in its
    ``rust/src/metrics/src/request.rs``), which is the sidecar's default.
    """
    if rust_frontend:
        return settings, None, "rust"
    from_vllm = vllm_bucket_overrides(vllm_config)
    if from_vllm is not None:
        settings = dataclasses.replace(settings, custom_histogram_buckets=from_vllm)
    return settings, getattr(vllm_config.model_config, "max_model_len", None), "python"


def vllm_bucket_overrides(vllm_config: Any) -> str | None:
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


def parse_record(data: bytes) -> dict[str, Any]:
    """What a lock file says of the sidecar its holder started: ``pid`` (0
    for none), ``config`` (its :func:`fingerprint`), ``holder`` (the
    holder's pid), ``log`` (its log file), and ``failed`` when the holder
    gave up on it. Empty when it says nothing (never written, or caught
    while being written).

    >>> parse_record(b'{"pid": 12, "config": "ab", "holder": 7}')["pid"]
    12
    >>> parse_record(b"12"), parse_record(b""), parse_record(b'{"pid"')
    ({'pid': 12}, {}, {})
    """
    text = data.decode("utf-8", "replace").strip()
    if text.isdigit():
        # An older plugin's lock file: the pid alone.
        return {"pid": int(text)}
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def read_record(path: str) -> dict[str, Any]:
    """The record of the lock file at ``path`` (:func:`parse_record`), read
    without taking the lock (only its holder writes it); empty when it
    cannot be read or is not this user's regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return {}
        return parse_record(os.pread(fd, MAX_RECORD_BYTES, 0))
    except OSError:
        return {}
    finally:
        os.close(fd)


def _pid(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


class Gate:
    """Whether this plugin may stream to the sidecar on its ingest socket.

    A sidecar of this user answers there, but it may be another vLLM
    instance's on the same port, started with other settings (another OTLP
    endpoint, ``/metrics`` port, model length, buckets): records streamed to
    it would be exported with those. The lock file says how the sidecar its
    holder started is configured (:func:`fingerprint`). While that holder
    and its sidecar run, another configuration turns this plugin off; so
    does a holder that gave up on its sidecar (its addresses are in use).
    Either is one line in vLLM's log.

    :meth:`admits` runs on the streaming thread before each connection.
    """

    def __init__(self, lock_file: str, config_fingerprint: str):
        self.lock_file = lock_file
        self.config = config_fingerprint
        #: Whether the plugin is off (read by the streaming thread).
        self.off = False

    def turn_off(self) -> None:
        self.off = True

    def admits(self) -> bool:
        if self.off:
            return False
        record = read_record(self.lock_file)
        holder = _pid(record.get("holder"))
        if not holder or not alive(holder):
            # Nobody's, or a holder gone: the next holder starts a sidecar
            # with its own settings once the old one has drained.
            return True
        if record.get("failed"):
            self.off = True
            log.error(
                "vllm-otel-metrics: the sidecar this plugin shares with the others of this vLLM "
                "(pid %d) could not start (%s; its log: %s); the plugin is off, vLLM goes on",
                holder,
                record["failed"],
                record.get("log", "?"),
            )
            return False
        pid = _pid(record.get("pid"))
        if record.get("config") not in (None, self.config) and pid and alive(pid):
            self.off = True
            log.error(
                "vllm-otel-metrics: the sidecar (pid %d) on this ingest port was started by "
                "another vLLM instance (pid %d) with other settings; not streaming to it: give "
                "each vLLM instance its own VLLM_OTEL_METRICS_TARGET port and "
                "VLLM_OTEL_METRICS_METRICS_ADDR; the plugin is off, vLLM goes on",
                pid,
                holder,
            )
            return False
        return True


class Supervisor:
    """The thread that holds the host's sidecar lock and keeps a sidecar up.

    Made in vLLM's thread, it opens the lock file and the log file there, so
    that one that is not this user's refuses the plugin at once
    (:class:`.config.ConfigError`), before anything streams.
    """

    def __init__(
        self,
        settings: config.SidecarSettings,
        max_model_len: int | None,
        token_buckets: str = "python",
    ) -> None:
        self.settings = settings
        self.max_model_len = max_model_len
        self.token_buckets = token_buckets
        if settings.lock_file is None:
            raise ValueError("a supervised sidecar needs a lock file (SidecarSettings.lock_file)")
        self.lock_path: str = settings.lock_file
        #: The configuration this plugin's sidecar has.
        self.config = fingerprint(settings, max_model_len, token_buckets)
        self.gate = Gate(self.lock_path, self.config)
        #: The sidecar this plugin started and is watching, if any.
        self.process: subprocess.Popen[bytes] | None = None
        #: Held for the process's life: the kernel releases the lock when
        #: it ends, however it ends.
        self._lock_fd = private.open_private(self.lock_path, os.O_RDWR)
        try:
            os.close(self._open_log())
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="vllm-otel-metrics-sidecar", daemon=True
        )

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def admits(self) -> bool:
        """Whether the plugin may stream to the sidecar that answers (:class:`Gate`)."""
        return self.gate.admits()

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

    def _open_log(self) -> int:
        # The default log file is in the private directory, beside the lock;
        # one the user named may be anywhere, and its mode is theirs.
        named = os.path.dirname(self.settings.log_file) != os.path.dirname(self.lock_path)
        return private.open_private(
            self.settings.log_file, os.O_WRONLY | os.O_APPEND, user_named=named
        )

    def _take_lock(self) -> bool:
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _write_record(self, pid: int, **more: object) -> None:
        data = json.dumps(
            {
                "pid": pid,
                "config": self.config,
                "holder": os.getpid(),
                "log": self.settings.log_file,
                **more,
            }
        ).encode()
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, data, 0)

    def _wait_for_previous_sidecar(self) -> None:
        """Waits (up to a minute) for the sidecar the lock's previous holder
        started, whose pid the lock file holds, to end."""
        pid = _pid(parse_record(os.pread(self._lock_fd, MAX_RECORD_BYTES, 0)).get("pid"))
        deadline = time.monotonic() + 60
        while pid and alive(pid) and time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(0.1)

    def _answers(self) -> bool:
        """Whether a sidecar of this user answers: on the ingest socket, or
        (with none) whatever holds the TCP port."""
        path = self.settings.ingest_socket
        if not path:
            address = self.settings.ingest_addr
            return address is not None and answers(address)
        sock, _uid = connect_own(path, 0.5)
        if sock is None:
            return False
        sock.close()
        return True

    def _run(self) -> None:
        backoff = RESTART_MIN
        held = False
        executable = None
        warned_missing = False
        in_use = 0
        while not self._stop.is_set() and not self.gate.off:
            try:
                if not held:
                    if not self._take_lock():
                        self._stop.wait(POLL_SECONDS)
                        continue
                    held = True
                    self._wait_for_previous_sidecar()
                    continue
                if self._answers():
                    # Someone else's sidecar (or one still draining): use it.
                    self._stop.wait(POLL_SECONDS)
                    continue
                executable = executable or binary()
                if executable is None:
                    if not warned_missing:
                        log.error(
                            "vllm-otel-metrics: no sidecar answers at %s and the "
                            "vllm-otel-metrics binary is not installed (a plugin-only install?): "
                            "start `vllm-otel-metrics serve` yourself, or set "
                            "VLLM_OTEL_METRICS_SIDECAR=off",
                            listeners(self.settings),
                        )
                        warned_missing = True
                    self._stop.wait(POLL_SECONDS)
                    continue
                began = time.monotonic()
                status = self._run_one(executable)
                if self._stop.is_set():
                    return
                if time.monotonic() - began >= HEALTHY_SECONDS:
                    backoff = RESTART_MIN
                in_use = in_use + 1 if status == EXIT_ADDRESS_IN_USE else 0
                if in_use > ADDRESS_IN_USE_RETRIES:
                    self._give_up()
                    return
                log.warning(
                    "vllm-otel-metrics: the sidecar ended (exit status %s%s); starting it again "
                    "in %.1f s; its log: %s",
                    status,
                    ": address in use" if status == EXIT_ADDRESS_IN_USE else "",
                    backoff,
                    self.settings.log_file,
                )
            except Exception as e:  # noqa: BLE001 — the thread must not end in silence
                if self._stop.is_set():
                    return
                # A binary that vanished is looked for again.
                executable = None
                log.error(
                    "vllm-otel-metrics: supervising the sidecar failed (%s); trying again in "
                    "%.1f s; its log: %s",
                    str(e) or type(e).__name__,
                    backoff,
                    self.settings.log_file,
                )
            self._stop.wait(backoff)
            backoff = min(backoff * 2, RESTART_MAX)

    def _give_up(self) -> None:
        """One line for a sidecar that cannot listen, and the plugin off:
        another instance's sidecar or another program holds its address,
        and starting it again cannot change that."""
        log.error(
            "vllm-otel-metrics: the sidecar cannot listen on %s or /metrics %s: address in "
            "use: another vLLM instance's sidecar or another program holds it; set "
            "VLLM_OTEL_METRICS_TARGET / VLLM_OTEL_METRICS_METRICS_ADDR to free ports; its log: "
            "%s; the plugin is off, vLLM goes on",
            listeners(self.settings),
            self.settings.metrics_addr,
            self.settings.log_file,
        )
        self.gate.turn_off()
        # The other plugins of this vLLM read it and turn off too; the lock
        # stays held, so none of them starts the sidecar again.
        self._write_record(0, failed="address in use")

    def _run_one(self, executable: str) -> int:
        """Starts one sidecar and waits for it to end; returns its exit status."""
        argv = command(executable, self.settings, self.max_model_len, self.token_buckets)
        output = self._open_log()
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                close_fds=True,
                env=environment(self.settings),
                # Out of vLLM's process group: a Ctrl-C meant for vLLM does
                # not cut the sidecar short; it drains when vLLM has ended.
                start_new_session=True,
            )
        finally:
            os.close(output)
        log.info(
            "vllm-otel-metrics: started the sidecar (pid %d) on %s, /metrics on %s; its log: %s",
            self.process.pid,
            listeners(self.settings),
            self.settings.metrics_addr,
            self.settings.log_file,
        )
        self._write_record(self.process.pid)
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
