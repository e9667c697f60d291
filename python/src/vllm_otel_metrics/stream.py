"""The streaming thread: it takes what a bounded queue holds
(:mod:`.bounded_queue`), converts it (:mod:`.outbox`) and streams it to
``vllm-otel-metrics serve``: to a sidecar the plugin starts, over its
ingest socket only (:mod:`.socket_transport`); to a sidecar run by other
means (or with ``VLLM_OTEL_METRICS_SOCKET=none``), over gRPC to the target
(:mod:`.grpc_transport`).

vLLM calls ``record()`` on its event loop once per engine step, so the only
work done there is :meth:`.bounded_queue.RecordQueue.submit`. Everything
else happens on the thread:

- it converts queued items to protobuf records and sends them on one
  long-lived connection or call, so the sidecar applies each record as it
  arrives — within the 50 ms poll of an idle queue;
- when the sidecar is down, slow or refusing, the queue fills and drops
  and counts; the thread reconnects with exponential back-off (0.1 s to
  5 s) and, on each new stream and whenever the count changed, sends the
  drops not yet reported as a ``plugin_drops`` record;
- a sidecar that shuts down is answered by sending again, to the sidecar
  that replaces it, what it did not read (:mod:`.resend`);
- whatever else goes wrong in a session is one line in vLLM's log, then a
  reconnection after the back-off: the thread never ends in silence.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import grpc

from . import config, wire
from .bounded_queue import Source
from .grpc_transport import GrpcTransport
from .outbox import Outbox
from .resend import RESEND_WINDOW
from .socket_transport import SocketTransport

log = logging.getLogger("vllm.vllm_otel_metrics")

B = TypeVar("B")

#: How often an idle stream looks at the queue, seconds.
POLL_SECONDS = 0.05
#: How long to wait for a connection before backing off, seconds.
CONNECT_TIMEOUT = 2.0
#: Reconnection back-off, seconds.
BACKOFF_MIN, BACKOFF_MAX = 0.1, 5.0
#: Most records in one batch message: a batch-256 engine step's stats are a
#: few KiB, so 256 of them stay far below :data:`.wire.MAX_MESSAGE_BYTES`.
MAX_BATCH = 256
#: How often a streamer that was turned off empties its queue, seconds.
OFF_POLL_SECONDS = 1.0


class Streamer(Generic[B]):
    """The thread that streams ``queue``'s batches, converted by
    ``to_records`` (:class:`.outbox.Outbox`), to the sidecar ``settings``
    name: over the started sidecar's ingest socket when it has one, else
    over gRPC to ``settings.address``.

    ``admit()``, when given, runs on the thread before each connection:
    False turns the streamer off for good (:class:`.sidecar.Gate`): what is
    queued and what comes after is dropped.
    """

    def __init__(
        self,
        settings: config.Settings,
        queue: Source[B],
        to_records: Callable[[B], Iterable[Any]],
        *,
        grouping: Callable[[list[Any]], Iterable[list[Any]]] = wire.whole,
        max_records: int = MAX_BATCH,
        resend_window: int = RESEND_WINDOW,
        poll_seconds: float = POLL_SECONDS,
        admit: Callable[[], bool] | None = None,
    ) -> None:
        self.queue = queue
        self.outbox = Outbox(
            queue,
            to_records,
            max_records=max_records,
            resend_window=resend_window,
            grouping=grouping,
            poll_seconds=poll_seconds,
        )
        self._admit = admit
        self._stop = threading.Event()
        path = settings.sidecar.ingest_socket if settings.sidecar is not None else None
        #: The started sidecar's ingest socket: the only way to it.
        self.socket = SocketTransport(path, self.outbox, self._stop) if path else None
        self.grpc = GrpcTransport(settings, self.outbox, self._stop)
        #: Where the stream goes, for log lines.
        self.where = path or settings.address
        #: Whether a stream to the sidecar is open (for tests and the benchmark).
        self.connected = False
        #: The last stream's transport, ``socket`` or ``grpc`` (for tests and
        #: the benchmark).
        self.transport: str | None = None
        self._thread = threading.Thread(
            target=self._run, name="vllm-otel-metrics-stream", daemon=True
        )

    def start(self) -> Streamer[B]:
        self._thread.start()
        return self

    # What was streamed and dropped, read from the counters' owners.

    @property
    def sent(self) -> int:
        """Records handed to a stream."""
        return self.outbox.sent

    @property
    def dropped(self) -> int:
        """Records the full queue refused (the tap's frames among them)."""
        return self.queue.drops

    @property
    def unsendable(self) -> int:
        """Records that could not be sent: not convertible, a number that is
        not finite, or too large."""
        return self.outbox.unsendable

    @property
    def lost(self) -> int:
        """Records a shutting-down sidecar did not read that were no longer
        kept to be sent again, or whose send failed."""
        return self.outbox.lost

    @property
    def off(self) -> bool:
        """Whether the plugin was turned off (``admit()`` said no)."""
        return self.queue.off

    @property
    def pending(self) -> int:
        """Items and messages waiting to be sent (none once turned off)."""
        if self.queue.off:
            return 0
        return len(self.queue) + len(self.outbox)

    def close(self, timeout: float = 2.0) -> None:
        """Sends what is queued (waiting at most ``timeout`` seconds), then
        ends the stream and the thread."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS / 5)
        self._stop.set()
        self._thread.join(max(deadline - time.monotonic(), 0.1))

    # The thread.

    def _run(self) -> None:
        where = self.where
        backoff = BACKOFF_MIN
        failures = 0
        errors = 0
        while not self._stop.is_set():
            if self._admit is not None and not self._admit():
                self._turn_off()
                return
            sock: socket.socket | None = None
            channel: grpc.Channel | None = None
            try:
                if self.socket is not None:
                    sock = self.socket.connect_within(CONNECT_TIMEOUT)
                    up = sock is not None
                else:
                    channel = self.grpc.channel()
                    up = self.grpc.ready(channel, CONNECT_TIMEOUT)
                if not up:
                    failures += 1
                    if (failures == 1 or failures % 60 == 0) and not self._stop.is_set():
                        log.warning(
                            "vllm-otel-metrics: sidecar at %s unreachable (%d attempts); "
                            "records are queued, then dropped and counted",
                            where,
                            failures,
                        )
                    wait = backoff
                    backoff = min(backoff * 2, BACKOFF_MAX)
                else:
                    if failures:
                        log.warning(
                            "vllm-otel-metrics: streaming to %s again after %d failed attempts",
                            where,
                            failures,
                        )
                    failures = 0
                    backoff = wait = BACKOFF_MIN
                    self.connected = True
                    if sock is not None:
                        assert self.socket is not None
                        self.transport = "socket"
                        self.socket.session(sock)
                    else:
                        assert channel is not None
                        self.transport = "grpc"
                        if self.grpc.one_call(channel) == grpc.StatusCode.UNAUTHENTICATED:
                            wait = BACKOFF_MAX
                    errors = 0
            except Exception as e:  # noqa: BLE001 — the thread must not end: nothing would stream
                errors += 1
                wait = min(BACKOFF_MIN * 2**errors, BACKOFF_MAX)
                self.outbox.limits.emit(
                    logging.ERROR,
                    "session",
                    "vllm-otel-metrics: the stream to %s failed (%s: %s); reconnecting in %.1f s",
                    where,
                    type(e).__name__,
                    e,
                    wait,
                )
            finally:
                self.connected = False
                if sock is not None:
                    sock.close()
                if channel is not None:
                    channel.close()
            self._stop.wait(wait)

    def _turn_off(self) -> None:
        """The plugin is off: nothing more is sent. What is queued is
        dropped, and so is what producers queue after (the engine-core
        tap's hooks keep their bounds, so the queue is emptied now and
        then until close())."""
        self.queue.turn_off()
        self.outbox.turn_off()
        while True:
            self.queue.clear()
            if self._stop.wait(OFF_POLL_SECONDS):
                return
