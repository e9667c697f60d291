"""The background half of the plugin: a bounded queue and one thread that
streams its records to ``vllm-otel-metrics serve``: to a sidecar the plugin
starts, over its ingest socket only (a Unix domain socket in the user's
private directory, its listener checked to be this user's process:
length-prefixed records handed to the kernel with one ``sendmsg``, no gRPC
layer); to a sidecar run by other means (or with
``VLLM_OTEL_METRICS_SOCKET=none``), over gRPC to the target.

Never gRPC to the started sidecar's port instead of its socket: on a shared
host any user can hold that port, and would get the token and the records.

vLLM calls ``record()`` on its event loop once per engine step, so the only
work done there is :meth:`Streamer.submit`: a weight, a comparison and a
``deque.append`` (atomic under the GIL; no lock, no allocation beyond the
item). Everything else happens on the thread:

- it converts queued items to protobuf records (:mod:`.convert`) and
  sends them on one long-lived client-streaming call, so the sidecar
  applies each record as it arrives — within the 50 ms poll of an idle
  queue;
- the queue is bounded in records (the stat-logger plugin) or in items and
  frame bytes (the engine-core tap), counted by pairs of counters: in,
  written by the producer only; out, written by the consumer only (this
  thread, or during a gRPC call the call's request iterator on gRPC's
  thread, never both at once: :meth:`Streamer._end_turns`). The producer
  takes no lock. The tap's frame bytes count until the streamer lets them
  go, not until they leave the queue: drained and converted, waiting to be
  sent, and kept to be sent again (at most half the bound of those) all
  count, so one number bounds the frame bytes the plugin holds;
- when the sidecar is down, slow or refusing, the queue fills and
  :meth:`Streamer.submit` drops and counts; the thread reconnects with
  exponential back-off (0.1 s to 5 s) and, on each new stream and whenever
  the count changed, sends the drops not yet reported as a ``plugin_drops``
  record, which the sidecar adds to
  ``vllm_otel_metrics_plugin_dropped_records_total``;
- a record it cannot send (not convertible, a number that is not finite,
  larger than a message may be) is counted among those drops; a batch too
  large for one message is split. Its log line comes at most once every
  :data:`LOG_EVERY_SECONDS` per kind (:class:`LogLimit`): a flood of bad
  records must not flood vLLM's log;
- a sidecar that shuts down (SIGTERM) ends each open call with the summary
  of what it applied (the ``ingest-summary-bin`` trailer): the records after
  those are sent again, first, on the next call — to the sidecar that
  replaces it, nothing lost, nothing twice. The last :data:`RESEND_WINDOW`
  records handed over are kept for this; unread records beyond them are
  counted as lost;
- on the ingest socket, a sidecar that shuts down answers an open
  connection with the number of messages it read; the records after those
  are sent again, first, on the next connection, as after a gRPC summary;
- a call that breaks without a summary (the sidecar killed) may lose what
  it had in flight, uncounted: gRPC acknowledges a client stream only at its
  end, so the records the sidecar read before it died cannot be told from
  the others. The loss is logged with the stream's status. On the socket,
  the record whose send failed is counted as lost;
- whatever else goes wrong in a session is one line in vLLM's log, then a
  reconnection after the back-off: the thread never ends in silence.
"""

from __future__ import annotations

import collections
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any, cast

import grpc

from . import config, convert
from .sidecar import connect_own

log = logging.getLogger("vllm.vllm_otel_metrics")

#: How often an idle stream looks at the queue, seconds.
POLL_SECONDS = 0.05
#: How often the thread looks once the queue has been empty for a second.
IDLE_POLL_SECONDS = 0.25
#: Reconnection back-off, seconds.
BACKOFF_MIN, BACKOFF_MAX = 0.1, 5.0
#: How long to wait for a connection before backing off, seconds.
CONNECT_TIMEOUT = 2.0
#: Largest message the client sends, on gRPC and on the ingest socket (the
#: sidecar's default limit is 16 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Most records in one batch message: a batch-256 engine step's stats are a
#: few KiB, so 256 of them stay far below :data:`MAX_MESSAGE_BYTES`.
MAX_BATCH = 256
#: Records handed to a call that are kept, to be sent again when a
#: shutting-down sidecar ends the call before reading them.
RESEND_WINDOW = 4096
#: How long a send on the ingest socket may block (a sidecar that stopped
#: reading), seconds; then the connection is dropped and made again.
SEND_TIMEOUT = 10.0
#: At most one log line per kind of bad record this often, seconds.
LOG_EVERY_SECONDS = 10.0
#: How often a streamer that was turned off empties its queue, seconds.
OFF_POLL_SECONDS = 1.0
#: The ingest service's client-streaming method.
STREAM_METHOD = "/vllm_otel_metrics.v1.Ingest/Stream"
_LENGTH = struct.Struct("<I")
#: A send to a sidecar that went away fails (EPIPE) instead of signalling.
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
#: The trailer in which a shutting-down sidecar says what a call applied.
SUMMARY_TRAILER = "ingest-summary-bin"


class LogLimit:
    """At most one log line per kind every ``seconds``; the next line of a
    kind says how many were left out. Costs a clock read and a dict look-up.

    >>> lines = []
    >>> limit = LogLimit(10.0, clock=iter([0.0, 1.0, 2.0, 11.0]).__next__)
    >>> limit.log = lambda level, msg, *args: lines.append(msg % args)
    >>> for n in range(4):
    ...     limit.emit(logging.WARNING, "bad", "record %d is bad", n)
    >>> lines
    ['record 0 is bad', 'record 3 is bad (2 more like it in the last 10 s not logged)']
    """

    __slots__ = ("_clock", "_left_out", "_next", "log", "seconds")

    def __init__(
        self, seconds: float = LOG_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self._clock = clock
        self._next: dict[str, float] = {}
        self._left_out: dict[str, int] = {}
        self.log = log.log

    def emit(self, level: int, kind: str, message: str, *args: object) -> None:
        now = self._clock()
        due = self._next.get(kind)
        if due is not None and now < due:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return
        self._next[kind] = now + self.seconds
        left_out = self._left_out.pop(kind, 0)
        if left_out:
            message += " (%d more like it in the last %.0f s not logged)"
            args += (left_out, self.seconds)
        self.log(level, message, *args)


class Streamer:
    """A bounded queue of items and the thread that streams them.

    ``to_records(item)`` turns one queued item into records (ingest
    ``Record`` messages, or :class:`.convert.NotFinite` or
    :class:`.convert.Unconvertible` in place of one that cannot be sent); it
    runs on the thread, never in :meth:`submit`. ``weigh(item)`` says how
    many records an item becomes (a cheap guess: it runs in :meth:`submit`),
    so that the queue is bounded, and drops counted, in records. A producer
    that appends to :attr:`queue` itself (the engine-core tap) bounds it in
    items and frame bytes instead; ``weigh`` then only counts what is lost.

    ``admit()``, when given, runs on the thread before each connection:
    False turns the streamer off for good (:class:`.sidecar.Gate`): what is
    queued and what comes after is dropped.
    """

    def __init__(
        self,
        settings: Any,
        to_records: Callable[[Any], Iterable[Any]],
        weigh: Callable[[Any], int] = lambda item: 1,
        *,
        batched: bool = False,
        max_records: int = MAX_BATCH,
        resend_window: int = RESEND_WINDOW,
        max_drain: int = MAX_BATCH,
        max_drain_bytes: int = 0,
        poll_seconds: float = POLL_SECONDS,
        admit: Callable[[], bool] | None = None,
    ) -> None:
        self.settings = settings
        self._to_records = to_records
        self._weigh = weigh
        self._queue: collections.deque[Any] = collections.deque()
        self._bound: int = settings.queue
        self._byte_bound: int = getattr(settings, "queue_bytes", config.DEFAULT_QUEUE_BYTES)
        #: The most frame bytes kept to be sent again: half the byte bound,
        #: so that sent frames never keep more than half of it from new ones.
        self._window_bytes = self._byte_bound // 2
        #: ``to_records`` takes every queued item at once (up to
        #: ``max_drain`` of them, or until ``max_drain_bytes`` of frames),
        #: and what it returns goes out as its own message(s) of at most
        #: ``max_records`` records (the engine-core tap: one item per step).
        self._batched = batched
        self._max_records = max_records
        self._resend_window = resend_window
        self._max_drain = max_drain
        self._max_drain_bytes = max_drain_bytes
        #: How often a stream that found nothing looks again, seconds.
        self._poll_seconds = poll_seconds
        self._admit = admit
        # The consumer, below, is whichever thread takes from the queue: the
        # stream's own thread, or, during a gRPC call, the call's request
        # iterator on gRPC's thread. Never both at once: the stream's thread
        # goes on only once the iterator's turn has ended (_end_turns).
        #: Records queued by submit() (only submit() writes it) and taken
        #: by the consumer (only it writes it): their difference is what is
        #: queued, without a lock.
        self.records_in = 0
        self.records_out = 0
        #: Frame bytes queued by the engine-core tap's output hook (only it
        #: writes it) and let go by the consumer (only it writes it): taken
        #: from the queue is not let go; a frame is let go once it is out of
        #: the resend window, dropped, or cleared (:attr:`held_bytes`).
        self.bytes_in = 0
        self.bytes_out = 0
        #: Records of the items refused because the queue was full (only
        #: submit(), or the tap's engine thread, writes it).
        self.dropped = 0
        #: Frames the tap's output hook refused (only it writes it).
        self.dropped_frames = 0
        #: Records the consumer could not send: not convertible, a number
        #: that is not finite, or too large (only the consumer writes it).
        self.unsendable = 0
        #: Records a shutting-down sidecar did not read and that were no
        #: longer kept to be sent again (only the stream's thread writes it).
        self.lost = 0
        self._dropped_reported = 0
        #: Messages converted and not yet handed to a call, or handed to a
        #: call that a shutting-down sidecar ended before applying them.
        self._unsent: collections.deque[Any] = collections.deque()
        #: Records handed to a stream (for tests and the benchmark).
        self.sent = 0
        #: Whether a stream to the sidecar is open (for tests and the benchmark).
        self.connected = False
        #: The last stream's transport, ``socket`` or ``grpc`` (for tests and
        #: the benchmark).
        self.transport: str | None = None
        #: Whether the plugin was turned off (``admit()`` said no).
        self.off = False
        self._limits = LogLimit()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="vllm-otel-metrics-stream", daemon=True
        )

    def start(self) -> Streamer:
        self._thread.start()
        return self

    def submit(self, item: object, weight: int | None = None) -> None:
        """Enqueues one item of ``weight`` records (default: ``weigh(item)``),
        or drops and counts it when its records would take the queue beyond
        its bound. Never blocks."""
        if weight is None:
            weight = self._weigh(item)
        if self.records_in - self.records_out + weight > self._bound or self.off:
            self.dropped += weight
        else:
            self.records_in += weight
            self._queue.append(item)

    @property
    def queue(self) -> collections.deque[Any]:
        """The queue itself, for a producer that appends without
        :meth:`submit`'s call (checking :attr:`bound` and, for frames,
        :attr:`byte_bound` against :attr:`bytes_in` first)."""
        return self._queue

    @property
    def bound(self) -> int:
        """The queue's bound."""
        return self._bound

    @property
    def byte_bound(self) -> int:
        """The bound on the frame bytes held (:attr:`held_bytes`)."""
        return self._byte_bound

    @property
    def held_bytes(self) -> int:
        """The frame bytes the streamer holds: queued (``(time, bytes)``
        items), converted into chunks waiting to be sent, and kept to be
        sent again. The tap's output hook queues a frame only while this
        stays within :attr:`byte_bound`."""
        return self.bytes_in - self.bytes_out

    def _let_go(self, record: Any) -> None:
        """A record the streamer no longer holds: its frame bytes are free
        (on the consumer's side)."""
        if type(record) is Raw:
            self.bytes_out += record.frame_bytes

    def _handed(self) -> Handed:
        """A call's or connection's :class:`Handed`, whose resend window
        lets go of what it no longer keeps."""
        return Handed(self._resend_window, self._window_bytes, self._let_go)

    def _let_go_of_handed(self, handed: Handed) -> None:
        """At the end of a call or connection: what its window still kept
        (and no summary put back in line) is let go."""
        _count, last = handed.close()
        for record in last:
            self._let_go(record)

    def count_dropped(self, records: int) -> None:
        """Counts records a producer dropped because the queue was full."""
        self.dropped += records

    @property
    def pending(self) -> int:
        """Items and messages waiting to be sent (none once turned off)."""
        if self.off:
            return 0
        return len(self._queue) + len(self._unsent)

    def close(self, timeout: float = 2.0) -> None:
        """Sends what is queued (waiting at most ``timeout`` seconds), then
        ends the stream and the thread."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS / 5)
        self._stop.set()
        self._thread.join(max(deadline - time.monotonic(), 0.1))

    # The thread.

    def _channel(self) -> grpc.Channel:
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        s = self.settings
        if s.tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=s.root_certificates)
            return grpc.secure_channel(s.address, credentials, options=options)
        return grpc.insecure_channel(s.address, options=options)

    def _socket_path(self) -> str | None:
        """The started sidecar's ingest socket: the only way to it."""
        return getattr(getattr(self.settings, "sidecar", None), "ingest_socket", None)

    def _unix(self) -> socket.socket | None:
        """A connection to the started sidecar's ingest socket, or None when
        no process of this user listens there (none started yet, one still
        starting, or another user's)."""
        path = self._socket_path()
        if not path:
            return None
        sock, uid = connect_own(path, SEND_TIMEOUT)
        if uid is not None:
            self._limits.emit(
                logging.WARNING,
                "peer",
                "vllm-otel-metrics: the process listening on %s runs as uid %d, not this user; "
                "not streaming to it",
                path,
                uid,
            )
        return sock

    def _unix_within(self, seconds: float) -> socket.socket | None:
        """:meth:`_unix`, tried again every poll for up to ``seconds``: a
        sidecar just started binds its socket within a second or two, and
        is no failure to warn about (gRPC's wait for a channel is alike)."""
        deadline = time.monotonic() + seconds
        sock = self._unix()
        while sock is None and time.monotonic() < deadline and not self._stop.wait(POLL_SECONDS):
            sock = self._unix()
        return sock

    def _run(self) -> None:
        pb = convert.messages()
        metadata = (
            (("authorization", f"Bearer {self.settings.token}"),) if self.settings.token else ()
        )
        path = self._socket_path()
        where = path or self.settings.address
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
                if path:
                    sock = self._unix_within(CONNECT_TIMEOUT)
                    up = sock is not None
                else:
                    channel = self._channel()
                    up = _ready(channel)
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
                        self.transport = "socket"
                        self._socket_session(sock, pb)
                    else:
                        assert channel is not None
                        self.transport = "grpc"
                        if self._one_call(channel, pb, metadata) == grpc.StatusCode.UNAUTHENTICATED:
                            wait = BACKOFF_MAX
                    errors = 0
            except Exception as e:  # noqa: BLE001 — the thread must not end: nothing would stream
                errors += 1
                wait = min(BACKOFF_MIN * 2**errors, BACKOFF_MAX)
                self._limits.emit(
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
        self.off = True
        for record in self._unsent:
            self._let_go(record)
        self._unsent.clear()
        while True:
            self.clear()
            if self._stop.wait(OFF_POLL_SECONDS):
                return

    def clear(self) -> None:
        """Empties the queue: what was queued is neither sent nor counted.
        The queue's record and byte counts follow (``queue.clear()`` would
        leave them counting what is gone, and the bounds would shrink). On
        the streaming thread, or while it does not run: the counts out are
        that thread's to write."""
        queue = self._queue
        while queue:
            item = queue.popleft()
            if not self._batched:
                self.records_out += self._weigh(item)
            elif type(item) is tuple:
                # The engine-core tap's frame, (time, bytes).
                self.bytes_out += len(item[1])

    def _socket_session(self, sock: socket.socket, pb: ModuleType) -> None:
        """Sends records over the ingest socket, one message each, until a
        send fails or close(). A sidecar that shuts down answers with how
        many it read: the others are sent again to the next one. Without
        that answer (a sidecar killed) the record being sent is counted as
        lost; what the kernel had taken before it may be lost uncounted, as
        on gRPC."""
        handed = self._handed()
        try:
            self._socket_sends(sock, pb, handed)
        finally:
            self._let_go_of_handed(handed)

    def _socket_sends(self, sock: socket.socket, pb: ModuleType, handed: Handed) -> None:
        """:meth:`_socket_session`'s loop; ``handed`` notes what it sent."""
        ticks = _Ticks()
        unsent = self._unsent
        while True:
            if self._refill(pb, ticks):
                continue
            if unsent:
                record = unsent.popleft()
                parts, total = socket_parts(record)
                if total - _LENGTH.size > MAX_MESSAGE_BYTES:
                    self._too_large(record, total - _LENGTH.size)
                    continue
                handed.note(record)
                try:
                    # Gathered by the kernel, the GIL released: no join.
                    sent = sock.sendmsg(parts, (), _NOSIGNAL)
                    if sent < total:
                        sock.sendall(b"".join(parts)[sent:])
                except OSError as e:
                    read = _read_answer(sock)
                    if read is not None:
                        again = self._send_unread_again(handed, read)
                        outcome = f"the {again} records it had not read are sent again"
                    else:
                        self.lost += 1
                        outcome = "the record being sent is lost and counted"
                    log.warning(
                        "vllm-otel-metrics: the ingest socket %s closed (%s); %s; reconnecting",
                        self.settings.sidecar.ingest_socket,
                        e.strerror or e,
                        outcome,
                    )
                    return
                self.sent += 1
                continue
            if self._stop.is_set():
                return
            self._idle_wait(self._stop, ticks)

    def _one_call(
        self, channel: grpc.Channel, pb: ModuleType, metadata: tuple[tuple[str, str], ...]
    ) -> grpc.StatusCode | None:
        """One client-streaming call, until it breaks or close(). Returns
        the status code it broke with, or None when it ended at close()."""
        done = threading.Event()
        turn = threading.Lock()
        handed = self._handed()
        # The generated stub's serializer takes protobuf messages only; this
        # one takes a Raw record too.
        stream = channel.stream_unary(
            STREAM_METHOD,
            request_serializer=_serialize,
            response_deserializer=pb.IngestSummary.FromString,
        )
        try:
            call = stream.future(self._requests(pb, done, handed, turn), metadata=metadata)
            call.add_done_callback(lambda _f: done.set())
            # gRPC's result() wakes every 100 ms to look; the event sleeps.
            done.wait()
            summary = call.result()
        except grpc.RpcError as e:
            self._end_turns(done, turn)
            code = e.code() if hasattr(e, "code") else None
            summary = _summary_trailer(e, pb)
            if summary is not None:
                again = self._send_unread_again(
                    handed, summary.records_applied + summary.records_rejected
                )
                outcome = f"the {again} records it had not read are sent again"
            else:
                outcome = "what it had in flight may be lost"
            log.warning(
                "vllm-otel-metrics: stream to %s ended (%s: %s); %s; reconnecting",
                self.settings.address,
                getattr(code, "name", code),
                e.details() if hasattr(e, "details") else e,
                outcome,
            )
            return code
        finally:
            # The request iterator, on gRPC's thread, may be in the middle
            # of a turn: it takes no more records for this ended call.
            self._end_turns(done, turn)
            self._let_go_of_handed(handed)
        if summary.records_rejected:
            log.warning(
                "vllm-otel-metrics: the sidecar rejected %d records: %s",
                summary.records_rejected,
                "; ".join(summary.first_rejections),
            )
        return None

    def _send_unread_again(self, handed: Handed, read: int) -> int:
        """Puts the records a shutting-down sidecar did not read (it read
        ``read`` of those handed over) first in line for the next call;
        counts as lost those no longer kept."""
        count, last = handed.close()
        unread = count - read
        kept = last[-unread:] if unread > 0 else []
        self._unsent.extendleft(reversed(kept))
        # The sidecar read the others: their frames are free.
        for record in last[: len(last) - len(kept)]:
            self._let_go(record)
        self.lost += max(unread - len(kept), 0)
        return len(kept)

    def _drops_record(self, pb: ModuleType) -> Any:
        dropped = self.dropped + self.dropped_frames + self.unsendable + self.lost
        if dropped == self._dropped_reported:
            return None
        delta = dropped - self._dropped_reported
        self._dropped_reported = dropped
        return pb.Record(plugin_drops=pb.PluginDrops(dropped=delta))

    def _drain(self) -> list[Any]:
        """Takes what is queued, up to ``max_drain`` items or, counting
        frames (``(time, bytes)`` items), ``max_drain_bytes``. The frames'
        bytes stay held (:attr:`held_bytes`): ``to_records`` makes them
        :class:`Raw` chunks, let go once sent and out of the resend window."""
        queue, size = self._queue, 0
        items: list[Any] = []
        limit = self._max_drain_bytes
        while len(items) < self._max_drain:
            try:
                item = queue.popleft()
            except IndexError:
                break
            items.append(item)
            if type(item) is tuple:
                size += len(item[1])
                if limit and size >= limit:
                    break
        return items

    def _refill(self, pb: ModuleType, ticks: _Ticks) -> bool:
        """Converts one queued item (or, batched, a drain of them) into
        records waiting in ``_unsent``, while fewer than ``max_records``
        wait; once a second queues a drops record when the count changed.
        Says whether it took anything from the queue."""
        unsent = self._unsent
        now = time.monotonic()
        if now - ticks.drops_checked >= 1.0:
            ticks.drops_checked = now
            drops = self._drops_record(pb)
            if drops is not None:
                unsent.append(drops)
        if len(unsent) >= self._max_records:
            return False
        if self._batched:
            item = self._drain() or None
        else:
            try:
                item = self._queue.popleft()
            except IndexError:
                item = None
            else:
                self.records_out += self._weigh(item)
        if item is None:
            return False
        ticks.busy = now
        try:
            records = self._to_records(item)
            if type(records) is not list:
                records = list(records)
        except Exception as e:  # noqa: BLE001 — a bad item must not end the stream
            lost = sum(map(self._weigh, item)) if self._batched else self._weigh(item)
            self.unsendable += lost
            if self._batched:
                # The drained frames are gone with the drain.
                self.bytes_out += sum(len(i[1]) for i in item if type(i) is tuple)
            self._limits.emit(
                logging.ERROR,
                "convert",
                "vllm-otel-metrics: cannot convert %d queued records (%s: %s); dropped and counted",
                lost,
                type(e).__name__,
                e,
            )
            return True
        for record in records:
            kind = type(record)
            if kind is convert.NotFinite:
                self.unsendable += 1
                self._limits.emit(
                    logging.WARNING,
                    "not finite",
                    "vllm-otel-metrics: a %s record of engine %s has a number that "
                    "is not finite; dropped and counted",
                    record.kind,
                    record.engine,
                )
            elif kind is convert.Unconvertible:
                self.unsendable += 1
                self._limits.emit(
                    logging.WARNING,
                    "unconvertible",
                    "vllm-otel-metrics: cannot convert a %s record (%s); dropped and counted",
                    record.kind,
                    record.error,
                )
            else:
                unsent.append(record)
        return True

    def _too_large(self, record: Any, size: int) -> None:
        """Counts (and logs, rate-limited) a record no message can carry."""
        self.unsendable += 1
        self._let_go(record)
        kind = "frames" if type(record) is Raw else record.WhichOneof("record")
        self._limits.emit(
            logging.WARNING,
            "too large",
            "vllm-otel-metrics: a %s record of %d bytes is larger than a message may be "
            "(%d bytes); dropped and counted",
            kind,
            size,
            MAX_MESSAGE_BYTES,
        )

    def _idle_wait(self, event: threading.Event, ticks: _Ticks) -> None:
        """Waits for the next look at the queue: less often after a second
        without items (vLLM waits for requests)."""
        idle = time.monotonic() - ticks.busy >= 1.0
        event.wait(max(IDLE_POLL_SECONDS, self._poll_seconds) if idle else self._poll_seconds)

    def _requests(
        self, pb: ModuleType, done: threading.Event, handed: Handed, turn: threading.Lock
    ) -> Iterator[Raw]:
        """The request iterator of one call (gRPC consumes it on a thread of
        its own). It converts what is queued, then yields the records ready
        as one message (a batch of up to :data:`MAX_BATCH`), each record
        noted in ``handed``. It ends when the call does or on close()."""
        unsent = self._unsent
        ticks = _Ticks()
        while True:
            # A turn on the queue and the counters is whole under ``turn``,
            # and none starts once the call has ended (:meth:`_end_turns`).
            with turn:
                if done.is_set():
                    return
                if self._refill(pb, ticks):
                    continue
                messages = None
                if unsent:
                    # Everything ready goes in one batch message: gRPC's cost
                    # is per message, in this process (the GIL) and in the
                    # sidecar.
                    taken = handed.take(
                        unsent, self._max_records, lambda records: self._pack(pb, records)
                    )
                    if taken is None:
                        # The call has ended (its records were counted for
                        # sending again): what is left waits for the next one.
                        return
                    messages, count = taken
                    self.sent += count
            if messages is not None:
                yield from messages
                continue
            if self._stop.is_set():
                return
            self._idle_wait(done, ticks)

    @staticmethod
    def _end_turns(done: threading.Event, turn: threading.Lock) -> None:
        """Ends a call's request iterator for the stream's thread: no turn
        starts after this, and one under way has ended when it returns, so
        the queue and the counters have one writer again."""
        done.set()
        with turn:
            pass

    def _pack(self, pb: ModuleType, records: list[Any]) -> list[tuple[Raw, list[Any]]]:
        """``records`` as serialized messages no larger than
        :data:`MAX_MESSAGE_BYTES`, each with the records it carries: a batch
        too large is split in halves; a record too large alone is counted
        and left out. Serialized here, where the size is free to read; gRPC
        sends the bytes as they are."""
        out: list[tuple[Raw, list[Any]]] = []
        if not records:
            return out
        for group in _groups(records) if self._batched else (records,):
            self._fit(pb, group, out)
        return out

    def _fit(self, pb: ModuleType, records: list[Any], out: list[tuple[Raw, list[Any]]]) -> None:
        message = _message(pb, records)
        if type(message) is not Raw:
            data = message.SerializeToString()
            message = Raw([data], len(data))
        if message.size <= MAX_MESSAGE_BYTES:
            out.append((message, records))
        elif len(records) == 1:
            self._too_large(records[0], message.size)
        else:
            half = len(records) // 2
            self._fit(pb, records[:half], out)
            self._fit(pb, records[half:], out)


def _ready(channel: grpc.Channel) -> bool:
    """Whether ``channel`` connects within :data:`CONNECT_TIMEOUT`."""
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT)
        return True
    except grpc.FutureTimeoutError:
        return False


class _Ticks:
    """When a stream last looked for a drops record and last found items."""

    __slots__ = ("busy", "drops_checked")

    def __init__(self) -> None:
        self.drops_checked = 0.0
        self.busy = 0.0


class Raw:
    """A ``Record`` serialized by hand, kept as the parts it is made of
    (the engine-core tap's frames chunk: vLLM's frames between a prefix and
    a suffix). The ingest socket hands the parts to the kernel as they are;
    gRPC joins them. ``frame_bytes``: the bytes of vLLM's frames among the
    parts, which count against the tap's byte bound until the streamer
    lets the record go (:attr:`Streamer.held_bytes`)."""

    __slots__ = ("frame_bytes", "parts", "size")

    def __init__(self, parts: list[bytes], size: int, frame_bytes: int = 0) -> None:
        self.parts = parts
        self.size = size
        self.frame_bytes = frame_bytes

    def SerializeToString(self) -> bytes:  # noqa: N802 — protobuf's name
        return b"".join(self.parts)


def socket_parts(record: Any) -> tuple[list[bytes], int]:
    """The buffers of ``record``'s message on the ingest socket (its length,
    then the record: a :class:`Raw` one's parts as they are), and their
    total size."""
    if type(record) is Raw:
        return [_LENGTH.pack(record.size), *record.parts], record.size + 4
    data = record.SerializeToString()
    return [_LENGTH.pack(len(data)), data], len(data) + 4


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _message(pb: ModuleType, records: list[Any]) -> Any:
    """One message of ``records``: the record itself, or a batch of them."""
    return records[0] if len(records) == 1 else pb.Record(batch=pb.RecordBatch(records=records))


def _groups(records: list[Any]) -> Iterator[list[Any]]:
    """The engine-core tap's records in the groups that go out as one
    message each, in order: each ``frames`` record alone (putting it into a
    batch would copy its bytes, as costly as building it), the records
    between them together."""
    run: list[Any] = []
    for record in records:
        if type(record) is not Raw and record.WhichOneof("record") != "frames":
            run.append(record)
            continue
        if run:
            yield run
            run = []
        yield [record]
    if run:
        yield run


def _messages_of(pb: ModuleType, records: list[Any]) -> Iterator[Any]:
    """The messages of the engine-core tap's records (:func:`_groups`)."""
    for group in _groups(records):
        yield _message(pb, group)


class Handed:
    """The records handed to one call: how many, and the last of them, to
    be sent again: at most ``window`` records and, when ``most_bytes`` is
    given, at most that many frame bytes (:class:`Raw` chunks). A record
    let go from the window is passed to ``release`` (its frame bytes no
    longer held).

    gRPC's thread hands records over (the request iterator); the stream's
    thread reads what was handed once the call has ended. A lock makes
    each side's step whole, and :meth:`close` ends the handing over: a
    record taken after it would be in neither the snapshot nor the queue.
    """

    __slots__ = ("_lock", "_most_bytes", "_release", "bytes", "closed", "count", "last", "window")

    def __init__(
        self,
        window: int = RESEND_WINDOW,
        most_bytes: int | None = None,
        release: Callable[[Any], None] | None = None,
    ) -> None:
        self.count = 0
        self.window = window
        self.last: collections.deque[Any] = collections.deque()
        #: The frame bytes of the records in ``last``.
        self.bytes = 0
        self.closed = False
        self._most_bytes = most_bytes
        self._release = release
        self._lock = threading.Lock()

    def _keep(self, record: Any) -> None:
        """Keeps ``record`` in the window, letting the oldest go beyond its
        bounds (under the lock)."""
        last = self.last
        last.append(record)
        if type(record) is Raw:
            self.bytes += record.frame_bytes
        most = self._most_bytes
        while len(last) > self.window or (most is not None and self.bytes > most and last):
            old = last.popleft()
            if type(old) is Raw:
                self.bytes -= old.frame_bytes
            if self._release is not None:
                self._release(old)

    def note(self, message: Any) -> bool:
        """Notes one record handed over; False (not noted) once closed."""
        with self._lock:
            if self.closed:
                return False
            self.count += 1
            self._keep(message)
            return True

    def take(
        self,
        unsent: collections.deque[Any],
        most: int,
        pack: Callable[[list[Any]], list[tuple[Raw, list[Any]]]],
    ) -> tuple[list[Raw], int] | None:
        """Takes up to ``most`` records from the front of ``unsent``, packs
        them (``pack(records)``: ``(message, records)`` pairs) and notes the
        records packed, all at once; returns the messages and how many
        records they carry. None once closed: the records stay first in
        ``unsent``, behind those the call's snapshot sends again."""
        with self._lock:
            if self.closed:
                return None
            records = [unsent.popleft() for _ in range(min(len(unsent), most))]
            packed = pack(records)
            count = 0
            for _message, carried in packed:
                count += len(carried)
                for record in carried:
                    self._keep(record)
            self.count += count
            return [message for message, _carried in packed], count

    def close(self) -> tuple[int, list[Any]]:
        """Ends the handing over; returns how many records were handed and
        the last of them, which are the caller's from then on (a second
        close returns none)."""
        with self._lock:
            self.closed = True
            last = list(self.last)
            self.last.clear()
            self.bytes = 0
            return self.count, last


def _read_answer(sock: socket.socket) -> int | None:
    """The number of messages a shutting-down sidecar read from its ingest
    socket, which it wrote before it closed; None when it wrote none."""
    try:
        sock.settimeout(0.5)
        data = b""
        while len(data) < 8:
            more = sock.recv(8 - len(data))
            if not more:
                break
            data += more
    except OSError:
        return None
    return int.from_bytes(data, "little") if len(data) == 8 else None


def _summary_trailer(error: grpc.RpcError, pb: ModuleType) -> Any:
    """The ``IngestSummary`` a shutting-down sidecar put in the trailer of a
    call it ended, or None."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    # (Each is a (key, value) named tuple, whatever the stubs say.)
    for key, value in cast("Iterable[tuple[str, bytes]]", trailing or ()):
        if key == SUMMARY_TRAILER:
            try:
                return pb.IngestSummary.FromString(value)
            except Exception:  # noqa: BLE001 — a garbled trailer is no summary
                return None
    return None
