"""The plugin's settings, read from the environment.

vLLM hands a stat-logger plugin nothing but its own configuration, so the
plugin is configured with environment variables:

- ``VLLM_OTEL_METRICS_TARGET``: the sidecar's ingest address, ``http://`` or
  ``https://`` (default ``http://127.0.0.1:50051``). Set, it is also the TCP
  address a started sidecar listens on; unset, a started sidecar opens no
  TCP ingest listener (``serve --ingest-addr none``): the plugin reaches it
  over its ingest socket, and the default's port only names its files;
- ``VLLM_OTEL_METRICS_INGEST_ADDR``: ``IP:PORT`` (``[IPv6]:PORT``), a TCP
  ingest listener for a started sidecar without ``VLLM_OTEL_METRICS_TARGET``,
  for clients other than this plugin (which streams over the socket);
  refused beside ``VLLM_OTEL_METRICS_TARGET`` (whose address is then the
  listener) and beside ``VLLM_OTEL_METRICS_SOCKET=none``;
- ``VLLM_OTEL_METRICS_TOKEN_FILE``: a file holding the bearer token that
  ``serve --auth-token-file`` expects; a sidecar the plugin starts is given
  the file's path (``serve --ingest-auth-token-file``), never the token;
- ``VLLM_OTEL_METRICS_CA_FILE``: a PEM file of the CA that signed an
  ``https://`` target's certificate (default: the system's roots);
- ``VLLM_OTEL_METRICS_QUEUE``: the most records waiting to be sent (default
  4096): for the stat-logger plugin, records (an engine step makes up to
  two); for the engine-core tap, queued items (a step's frame, a new
  request, an abort); beyond it records are dropped and counted;
- ``VLLM_OTEL_METRICS_QUEUE_BYTES``: the most bytes of vLLM's frames the
  engine-core tap holds (default 64 MiB): queued, converted and waiting to
  be sent, and kept to be sent again after a sidecar's shutdown (at most
  half of it); beyond it frames are dropped and counted (the stat-logger
  plugin queues vLLM's objects, not bytes);
- ``VLLM_OTEL_METRICS_SIDECAR``: ``auto`` (default) starts and supervises
  ``vllm-otel-metrics serve`` when the target is an ``http://`` loopback
  address and no sidecar of this user answers (:mod:`.sidecar`); ``off``
  never starts one, for a sidecar run by other means (another container, a
  service manager);
- ``VLLM_OTEL_METRICS_METRICS_ADDR``: the started sidecar's Prometheus
  ``/metrics`` address (default ``127.0.0.1:9464``; ``none`` for none);
- ``VLLM_OTEL_METRICS_SIDECAR_ARGS``: more ``serve`` flags for the started
  sidecar, split as a shell would (``--otlp-interval-ms 5000``); they reach
  it in its environment (``VLLM_OTEL_METRICS_SERVE_ARGS``), not its command
  line, which every user of the host can read;
- ``VLLM_OTEL_METRICS_SIDECAR_LOG``: the started sidecar's log file (default
  ``sidecar-PORT.log`` in the user's private directory, :func:`private_dir`);
- ``VLLM_OTEL_METRICS_SOCKET``: the started sidecar's ingest socket, a Unix
  domain socket over which this host's plugins stream to it without gRPC
  (default ``ingest-PORT.sock`` in the user's private directory). With a
  started sidecar the plugin streams over this socket only, to a process of
  its own user. ``none`` streams over gRPC to the target's port instead,
  trusting whichever process holds that port;
- ``VLLM_OTEL_METRICS_SOURCE``: where an engine's records come from:
  ``auto`` (default) is the engine-core tap (:mod:`.tap`) under vLLM's Rust
  frontend (``VLLM_USE_RUST_FRONTEND=1``, where no stat-logger plugin loads)
  and the stat-logger plugin under the Python frontend; ``engine_core`` or
  ``stat_logger`` choose one. Never both: an engine is counted once;
- ``VLLM_OTEL_METRICS_CUSTOM_HISTOGRAM_BUCKETS``: the started sidecar's
  ``--custom-histogram-buckets`` JSON, for a vLLM without that flag of its
  own (a vLLM that has it passes its own value, which wins);
- ``VLLM_OTEL_METRICS_SLO``: the started sidecar's ``--slo`` JSON, the
  latency SLO each finished request is judged against
  (``{"ttft": 0.5, "tpot": 0.05, "models": {"NAME": {...}}}``); checked
  here, so that a value the sidecar would refuse is one error line at
  start-up;
- ``VLLM_OTEL_METRICS_ATTRIBUTE``: the started sidecar's ``--attribute``,
  the classes each request is recorded with (the sidecar's ``vllm_class:``
  families): ``lora``, ``priority`` or ``lora,priority`` (their bounds, ``--max-adapters`` and
  ``--priority-classes``, go in ``VLLM_OTEL_METRICS_SIDECAR_ARGS``).

The started sidecar reads the standard ``OTEL_*`` variables itself (endpoint,
protocol, headers, resource, traces exporter), as vLLM's environment passes
them on.

Everything the plugin creates for a started sidecar (its lock file, its
default log file and ingest socket) lives in the user's private directory,
which must be this user's alone (:mod:`.private`); the SLO is checked by
:mod:`.slo`. :func:`rust_frontend` and :func:`engine_source` read which of
vLLM's frontends runs and which half of the plugin sends an engine's
records.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import shlex
import urllib.parse
from collections.abc import Mapping

from . import slo as slo_settings

# ConfigError is re-exported: the callers of from_env() catch it as
# config.ConfigError.
from .errors import ConfigError as ConfigError
from .private import private_dir

log = logging.getLogger("vllm.vllm_otel_metrics")

DEFAULT_TARGET = "http://127.0.0.1:50051"
DEFAULT_QUEUE = 4096
#: The largest queue bound accepted: a record holds one engine step's stats.
MAX_QUEUE = 1_000_000
#: The engine-core tap's bound on queued frame bytes, by default.
DEFAULT_QUEUE_BYTES = 64 * 1024 * 1024
#: The largest bound on queued frame bytes accepted.
MAX_QUEUE_BYTES = 1 << 34
#: The largest token file read (a bearer token is a few dozen bytes).
MAX_TOKEN_BYTES = 4096
DEFAULT_METRICS_ADDR = "127.0.0.1:9464"
#: Values of ``VLLM_OTEL_METRICS_SIDECAR``.
SIDECAR_MODES = ("auto", "off")
#: Values of ``VLLM_OTEL_METRICS_SOURCE``.
SOURCES = ("auto", "engine_core", "stat_logger")
#: The longest path a Unix domain socket can bind (``sun_path`` less its NUL).
MAX_SOCKET_PATH = 107


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where and how to stream."""

    #: ``host:port`` for grpc.
    address: str
    #: Whether to use TLS (an ``https://`` target).
    tls: bool
    #: The CA certificates (PEM) for TLS, or None for the system's roots.
    root_certificates: bytes | None
    #: The bearer token, or None. Never logged.
    token: str | None
    #: The queue bound: records (the stat-logger plugin) or items (the
    #: engine-core tap).
    queue: int
    #: How to start the sidecar, or None when the plugin never starts one
    #: (``VLLM_OTEL_METRICS_SIDECAR=off``, a TLS target, or a target that is
    #: not a loopback address: a sidecar elsewhere is someone else's to run).
    sidecar: SidecarSettings | None = None
    #: The bound on the frame bytes the engine-core tap holds (queued,
    #: waiting to be sent and kept to be sent again).
    queue_bytes: int = DEFAULT_QUEUE_BYTES

    def __repr__(self) -> str:
        # The token stays out of every log line and traceback.
        token = "***" if self.token else None
        return (
            f"Settings(address={self.address!r}, tls={self.tls}, "
            f"ca={'set' if self.root_certificates else None}, token={token}, queue={self.queue}, "
            f"queue_bytes={self.queue_bytes}, sidecar={self.sidecar!r})"
        )


@dataclasses.dataclass(frozen=True)
class SidecarSettings:
    """The sidecar the plugin starts when none answers at its target."""

    #: ``serve --ingest-addr``: the TCP ingest listener's ``host:port`` (the
    #: target's, or ``VLLM_OTEL_METRICS_INGEST_ADDR``), or None for none
    #: (``--ingest-addr none``: the plugin streams over ``ingest_socket``).
    #: Never None without an ingest socket.
    ingest_addr: str | None
    #: ``serve --metrics-addr``.
    metrics_addr: str
    #: More ``serve`` flags.
    args: tuple[str, ...]
    #: Where the sidecar's output goes.
    log_file: str
    #: ``serve --custom-histogram-buckets``, or empty.
    custom_histogram_buckets: str = ""
    #: ``serve --ingest-socket``, or None for gRPC over TCP only.
    ingest_socket: str | None = None
    #: The lock file that makes one sidecar per host and user (in the
    #: private directory).
    lock_file: str | None = None
    #: ``serve --ingest-auth-token-file``: the plugin's token file, or None.
    token_file: str | None = None
    #: ``serve --slo``: the latency SLO (JSON), or empty.
    slo: str = ""
    #: ``serve --attribute``: ``lora``, ``priority`` or both, or empty.
    attribute: str = ""


#: The classes ``VLLM_OTEL_METRICS_ATTRIBUTE`` may name.
ATTRIBUTE_DIMENSIONS = ("lora", "priority")


def attribute(env: Mapping[str, str]) -> str:
    """``VLLM_OTEL_METRICS_ATTRIBUTE`` as ``serve --attribute`` takes it;
    raises :class:`ConfigError` naming a value that is not a class.

    >>> attribute({"VLLM_OTEL_METRICS_ATTRIBUTE": " priority, lora "})
    'priority,lora'
    >>> attribute({})
    ''
    >>> attribute({"VLLM_OTEL_METRICS_ATTRIBUTE": "lora,tenant"})
    Traceback (most recent call last):
    ...
    vllm_otel_metrics.errors.ConfigError: VLLM_OTEL_METRICS_ATTRIBUTE: 'tenant' is not one of lora, priority
    """
    raw = env.get("VLLM_OTEL_METRICS_ATTRIBUTE", "").strip()
    if not raw:
        return ""
    names = [name.strip() for name in raw.split(",")]
    for name in names:
        if name not in ATTRIBUTE_DIMENSIONS:
            # A class name is short: show at most 64 characters of it.
            raise ConfigError(
                f"VLLM_OTEL_METRICS_ATTRIBUTE: {name[:64]!r} is not one of "
                f"{', '.join(ATTRIBUTE_DIMENSIONS)}"
            )
    return ",".join(names)


def _read(variable: str, path: str, limit: int | None = None) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1 if limit else -1)
    except OSError as e:
        raise ConfigError(f"{variable}={path}: cannot read it ({e.strerror})") from None
    if limit and len(data) > limit:
        raise ConfigError(f"{variable}={path}: more than {limit} bytes")
    return data


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Reads the settings; raises :class:`ConfigError` naming the bad variable.

    >>> from_env({}).address
    '127.0.0.1:50051'
    >>> from_env({"VLLM_OTEL_METRICS_QUEUE": "many"})
    Traceback (most recent call last):
    ...
    vllm_otel_metrics.errors.ConfigError: VLLM_OTEL_METRICS_QUEUE='many' is not a whole number from 1 to 1000000
    """
    env = os.environ if env is None else env
    target_set = bool(env.get("VLLM_OTEL_METRICS_TARGET", ""))
    target = env.get("VLLM_OTEL_METRICS_TARGET", "") or DEFAULT_TARGET
    parsed = urllib.parse.urlsplit(target)
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.hostname
        or parsed.path not in ("", "/")
    ):
        raise ConfigError(
            f"VLLM_OTEL_METRICS_TARGET={target!r} is not http://HOST:PORT or https://HOST:PORT"
        )
    if parsed.username or parsed.password:
        raise ConfigError(
            "VLLM_OTEL_METRICS_TARGET carries credentials: put the token in "
            "VLLM_OTEL_METRICS_TOKEN_FILE instead"
        )
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"VLLM_OTEL_METRICS_TARGET={target!r} has an invalid port") from None
    host = parsed.hostname
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    queue = _bound(env, "VLLM_OTEL_METRICS_QUEUE", DEFAULT_QUEUE, MAX_QUEUE)

    queue_bytes = _bound(env, "VLLM_OTEL_METRICS_QUEUE_BYTES", DEFAULT_QUEUE_BYTES, MAX_QUEUE_BYTES)

    token = None
    token_file = env.get("VLLM_OTEL_METRICS_TOKEN_FILE", "")
    if token_file:
        token = (
            _read("VLLM_OTEL_METRICS_TOKEN_FILE", token_file, MAX_TOKEN_BYTES)
            .decode("utf-8", "replace")
            .strip()
        )
        if not token:
            raise ConfigError(f"VLLM_OTEL_METRICS_TOKEN_FILE={token_file}: the file is empty")

    root_certificates = None
    ca_file = env.get("VLLM_OTEL_METRICS_CA_FILE", "")
    if ca_file:
        if parsed.scheme != "https":
            raise ConfigError(
                "VLLM_OTEL_METRICS_CA_FILE is set but VLLM_OTEL_METRICS_TARGET is not https://"
            )
        root_certificates = _read("VLLM_OTEL_METRICS_CA_FILE", ca_file)

    return Settings(
        address=address,
        tls=parsed.scheme == "https",
        root_certificates=root_certificates,
        token=token,
        queue=queue,
        queue_bytes=queue_bytes,
        sidecar=_sidecar(env, parsed.scheme, host, port, address, target_set),
    )


def _bound(env: Mapping[str, str], variable: str, default: int, most: int) -> int:
    """A queue bound: a whole number from 1 to ``most``.

    >>> _bound({"VLLM_OTEL_METRICS_QUEUE_BYTES": "0"}, "VLLM_OTEL_METRICS_QUEUE_BYTES", 1, 10)
    Traceback (most recent call last):
    ...
    vllm_otel_metrics.errors.ConfigError: VLLM_OTEL_METRICS_QUEUE_BYTES='0' is not a whole number from 1 to 10
    """
    raw = env.get(variable, "") or str(default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= most:
        raise ConfigError(f"{variable}={raw!r} is not a whole number from 1 to {most}")
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _sidecar(
    env: Mapping[str, str],
    scheme: str,
    host: str,
    port: int,
    address: str,
    target_set: bool = True,
) -> SidecarSettings | None:
    """The started sidecar's settings, or None when none is to be started.
    Makes the user's private directory (:func:`private_dir`), where its
    files live. ``target_set``: whether ``VLLM_OTEL_METRICS_TARGET`` was
    set (then the sidecar listens on its address; else on its socket only,
    unless ``VLLM_OTEL_METRICS_INGEST_ADDR`` asks for a TCP listener).

    >>> import tempfile
    >>> env = {"XDG_RUNTIME_DIR": tempfile.mkdtemp()}
    >>> s = _sidecar(env, "http", "127.0.0.1", 50051, "127.0.0.1:50051")
    >>> s.ingest_addr, s.metrics_addr, os.path.basename(s.lock_file), os.path.basename(s.log_file)
    ('127.0.0.1:50051', '127.0.0.1:9464', 'sidecar-50051.lock', 'sidecar-50051.log')
    >>> _sidecar(env, "http", "127.0.0.1", 50051, "127.0.0.1:50051", target_set=False).ingest_addr is None
    True
    >>> _sidecar({"VLLM_OTEL_METRICS_SIDECAR": "off"}, "http", "127.0.0.1", 1, "127.0.0.1:1") is None
    True
    >>> _sidecar({}, "http", "sidecar.internal", 1, "sidecar.internal:1") is None
    True
    """
    mode = (env.get("VLLM_OTEL_METRICS_SIDECAR", "") or "auto").strip().lower()
    if mode not in SIDECAR_MODES:
        raise ConfigError(
            f"VLLM_OTEL_METRICS_SIDECAR={mode!r} is not one of {', '.join(SIDECAR_MODES)}"
        )
    metrics_addr = env.get("VLLM_OTEL_METRICS_METRICS_ADDR", "") or DEFAULT_METRICS_ADDR
    raw_args = env.get("VLLM_OTEL_METRICS_SIDECAR_ARGS", "")
    try:
        args = tuple(shlex.split(raw_args))
    except ValueError as e:
        # The value may hold a header or a token: name the error, not the value.
        raise ConfigError(
            f"VLLM_OTEL_METRICS_SIDECAR_ARGS cannot be split as a shell would: {e}"
        ) from None
    if mode == "off" or scheme != "http" or not _is_loopback(host):
        return None
    directory = private_dir(env)
    log_file = env.get("VLLM_OTEL_METRICS_SIDECAR_LOG", "") or os.path.join(
        directory, f"sidecar-{port}.log"
    )
    token_file = env.get("VLLM_OTEL_METRICS_TOKEN_FILE", "")
    slo = slo_settings.from_env(env)
    attribution = attribute(env)
    ingest_socket = _ingest_socket(env, port, directory)
    asked = env.get("VLLM_OTEL_METRICS_INGEST_ADDR", "").strip()
    ingest_addr: str | None
    if asked:
        if target_set:
            raise ConfigError(
                "VLLM_OTEL_METRICS_INGEST_ADDR and VLLM_OTEL_METRICS_TARGET are both set: with a "
                "target, the started sidecar listens on the target's address; unset one of them"
            )
        if ingest_socket is None:
            raise ConfigError(
                "VLLM_OTEL_METRICS_INGEST_ADDR is set with VLLM_OTEL_METRICS_SOCKET=none: the "
                "plugin then streams over TCP to the target's port; set VLLM_OTEL_METRICS_TARGET "
                "instead"
            )
        ingest_addr = socket_address("VLLM_OTEL_METRICS_INGEST_ADDR", asked)
    elif target_set or ingest_socket is None:
        # The plugin's target (and, without a socket, the way it streams).
        # `serve --ingest-addr` takes an address, not a name.
        ingest_addr = f"127.0.0.1:{port}" if host == "localhost" else address
    else:
        # Nobody asked for a TCP listener: any local user could write
        # records into it. The plugin streams over its socket.
        ingest_addr = None
    return SidecarSettings(
        ingest_addr=ingest_addr,
        metrics_addr=metrics_addr,
        args=args,
        log_file=log_file,
        custom_histogram_buckets=env.get("VLLM_OTEL_METRICS_CUSTOM_HISTOGRAM_BUCKETS", "").strip(),
        ingest_socket=ingest_socket,
        lock_file=os.path.join(directory, f"sidecar-{port}.lock"),
        # Absolute: the path is the sidecar's to open.
        token_file=os.path.abspath(token_file) if token_file else None,
        slo=slo,
        attribute=attribution,
    )


def socket_address(variable: str, raw: str) -> str:
    """``raw`` as the ``IP:PORT`` ``serve`` binds (``localhost`` is
    127.0.0.1, an IPv6 address is bracketed); raises :class:`ConfigError`
    naming ``variable`` when it is not one.

    >>> socket_address("V", "localhost:6000"), socket_address("V", "[::1]:6000")
    ('127.0.0.1:6000', '[::1]:6000')
    >>> socket_address("V", "x:1")
    Traceback (most recent call last):
    ...
    vllm_otel_metrics.errors.ConfigError: V='x:1' is not IP:PORT ([IPv6]:PORT for IPv6) with a port from 1 to 65535
    """
    host, colon, port = raw.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    name = host[1:-1] if bracketed else host
    try:
        ip = ipaddress.ip_address("127.0.0.1" if name == "localhost" else name)
        number = int(port) if port.isdigit() else 0
    except ValueError:
        ip, number = None, 0
    if not colon or ip is None or not 1 <= number <= 65535 or (ip.version == 6) != bracketed:
        raise ConfigError(
            f"{variable}={raw!r} is not IP:PORT ([IPv6]:PORT for IPv6) with a port from 1 to 65535"
        )
    return f"[{ip}]:{number}" if ip.version == 6 else f"{ip}:{number}"


def _ingest_socket(env: Mapping[str, str], port: int, directory: str) -> str | None:
    """The started sidecar's ingest socket, or None for none.

    >>> _ingest_socket({"VLLM_OTEL_METRICS_SOCKET": "none"}, 1, "/d") is None
    True
    >>> _ingest_socket({"VLLM_OTEL_METRICS_SOCKET": "/run/s.sock"}, 1, "/d")
    '/run/s.sock'
    >>> _ingest_socket({}, 1, "/d")
    '/d/ingest-1.sock'
    """
    raw = env.get("VLLM_OTEL_METRICS_SOCKET", "").strip()
    if raw.lower() == "none":
        return None
    if raw:
        path = raw
        if not os.path.isabs(path):
            raise ConfigError(f"VLLM_OTEL_METRICS_SOCKET={raw!r} is not an absolute path")
    else:
        path = os.path.join(directory, f"ingest-{port}.sock")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        if raw:
            raise ConfigError(
                f"VLLM_OTEL_METRICS_SOCKET={raw!r} is longer than a Unix socket's "
                f"{MAX_SOCKET_PATH} bytes"
            )
        # Not gRPC instead: over TCP the plugin cannot tell its sidecar
        # from another user's process on the port.
        raise ConfigError(
            f"the ingest socket {path} is longer than a Unix socket's {MAX_SOCKET_PATH} bytes: "
            "set VLLM_OTEL_METRICS_SOCKET to a shorter path (or to none for gRPC over TCP)"
        )
    return path


def rust_frontend(env: Mapping[str, str] | None = None) -> bool:
    """Whether vLLM runs its Rust frontend (``VLLM_USE_RUST_FRONTEND``, read
    as vLLM's ``envs`` reads a boolean).

    >>> rust_frontend({"VLLM_USE_RUST_FRONTEND": "1"}), rust_frontend({})
    (True, False)
    """
    env = os.environ if env is None else env
    return env.get("VLLM_USE_RUST_FRONTEND", "0").strip().lower() in ("1", "true")


def engine_source(env: Mapping[str, str] | None = None) -> str:
    """``engine_core`` or ``stat_logger``: which of the plugin's two halves
    sends an engine's records (``VLLM_OTEL_METRICS_SOURCE``).

    >>> engine_source({"VLLM_USE_RUST_FRONTEND": "1"}), engine_source({})
    ('engine_core', 'stat_logger')
    >>> engine_source({"VLLM_OTEL_METRICS_SOURCE": "engine_core"})
    'engine_core'
    >>> engine_source({"VLLM_OTEL_METRICS_SOURCE": "both"})
    Traceback (most recent call last):
    ...
    vllm_otel_metrics.errors.ConfigError: VLLM_OTEL_METRICS_SOURCE='both' is not one of auto, engine_core, stat_logger

    Attribution (``VLLM_OTEL_METRICS_ATTRIBUTE``) needs each request's
    adapter and priority, which only the engine core's ``Request`` carries:
    vLLM's stat logger gets finished requests by id alone. ``auto`` is then
    the tap under either frontend, and ``stat_logger`` an error:

    >>> engine_source({"VLLM_OTEL_METRICS_ATTRIBUTE": "priority"})
    'engine_core'
    >>> engine_source(  # doctest: +ELLIPSIS
    ...     {"VLLM_OTEL_METRICS_ATTRIBUTE": "lora", "VLLM_OTEL_METRICS_SOURCE": "stat_logger"}
    ... )
    Traceback (most recent call last):
    ...
    vllm_otel_metrics.errors.ConfigError: VLLM_OTEL_METRICS_ATTRIBUTE needs ...: vLLM's stat logger sees no ...
    """
    env = os.environ if env is None else env
    source = env.get("VLLM_OTEL_METRICS_SOURCE", "").strip() or "auto"
    if source not in SOURCES:
        raise ConfigError(f"VLLM_OTEL_METRICS_SOURCE={source!r} is not one of {', '.join(SOURCES)}")
    attributed = bool(attribute(env))
    if source == "auto":
        return "engine_core" if rust_frontend(env) or attributed else "stat_logger"
    if source == "stat_logger" and attributed:
        raise ConfigError(
            "VLLM_OTEL_METRICS_ATTRIBUTE needs VLLM_OTEL_METRICS_SOURCE engine_core or auto: "
            "vLLM's stat logger sees no request's adapter or priority"
        )
    return source
