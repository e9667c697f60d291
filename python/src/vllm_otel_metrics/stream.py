"""The background half of the plugin: a bounded queue and one thread that
streams its records to ``vllm-otel-metrics serve``: over the started
sidecar's ingest socket when there is one (a Unix domain socket in the
user's private directory: length-prefixed records handed to the kernel with
one ``sendmsg``, no gRPC layer), else over gRPC.

vLLM calls ``record()`` on its event loop once per engine step, so the only
work done there is :meth:`Streamer.submit`: a length check and a
``deque.append`` (atomic under the GIL; no lock, no allocation beyond the
item). Everything else happens on the thread:

- it converts queued items to protobuf records (:mod:`.convert`) and
  sends them on one long-lived client-streaming call, so the sidecar
  applies each record as it arrives — within the 50 ms poll of an idle
  queue;
- when the sidecar is down, slow or refusing, the queue fills and
  :meth:`Streamer.submit` drops and counts; the thread reconnects with
  exponential back-off (0.1 s to 5 s) and, on each new stream and whenever
  the count changed, sends the drops not yet reported as a ``plugin_drops``
  record, which the sidecar adds to
  ``vllm_otel_metrics_plugin_dropped_records_total``;
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
  the record whose send failed is counted as lost.
"""

import collections
import logging
import os
import socket
import struct
import threading
import time

import grpc

from . import convert

log = logging.getLogger("vllm.vllm_otel_metrics")

#: How often an idle stream looks at the queue, seconds.
POLL_SECONDS = 0.05
#: How often the thread looks once the queue has been empty for a second.
IDLE_POLL_SECONDS = 0.25
#: Reconnection back-off, seconds.
BACKOFF_MIN, BACKOFF_MAX = 0.1, 5.0
#: How long to wait for a connection before backing off, seconds.
CONNECT_TIMEOUT = 2.0
#: Largest message the client sends (the sidecar's default limit is 16 MiB).
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
#: The ingest service's client-streaming method.
STREAM_METHOD = "/vllm_otel_metrics.v1.Ingest/Stream"
_LENGTH = struct.Struct("<I")
#: A send to a sidecar that went away fails (EPIPE) instead of signalling.
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
#: The trailer in which a shutting-down sidecar says what a call applied.
SUMMARY_TRAILER = "ingest-summary-bin"


class Streamer:
    """A bounded queue of items and the thread that streams them.

    ``to_records(item)`` turns one queued item into records (ingest
    ``Record`` messages, or :class:`.convert.NotFinite` in place of one that
    cannot be sent); it runs on the thread, never in :meth:`submit`.
    ``weigh(item)`` says how many records an item would have become; it runs
    only for an item the full queue refuses, so that drops are counted in
    records.
    """

    def __init__(self, settings, to_records, weigh=lambda item: 1, *, batched=False,
                 max_records=MAX_BATCH, resend_window=RESEND_WINDOW, max_drain=MAX_BATCH,
                 max_drain_bytes=0, poll_seconds=POLL_SECONDS):
        self.settings = settings
        self._to_records = to_records
        self._weigh = weigh
        self._queue = collections.deque()
        self._bound = settings.queue
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
        #: Records of the items refused because the queue was full (only
        #: submit() writes it).
        self.dropped = 0
        #: Records the thread could not send: not convertible, or a number
        #: that is not finite (only the thread writes it).
        self.unsendable = 0
        #: Records a shutting-down sidecar did not read and that were no
        #: longer kept to be sent again (only the thread writes it).
        self.lost = 0
        self._dropped_reported = 0
        #: Messages converted and not yet handed to a call, or handed to a
        #: call that a shutting-down sidecar ended before applying them.
        self._unsent = collections.deque()
        #: Records handed to a stream (for tests and the benchmark).
        self.sent = 0
        #: Whether a stream to the sidecar is open (for tests and the benchmark).
        self.connected = False
        #: The last stream's transport, ``socket`` or ``grpc`` (for tests and
        #: the benchmark).
        self.transport = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="vllm-otel-metrics-stream", daemon=True
        )

    def start(self) -> "Streamer":
        self._thread.start()
        return self

    def submit(self, item) -> None:
        """Enqueues one item, or drops and counts it when the queue is full.
        Never blocks."""
        if len(self._queue) >= self._bound:
            self.dropped += self._weigh(item)
        else:
            self._queue.append(item)

    @property
    def queue(self) -> collections.deque:
        """The queue itself, for a producer that appends without
        :meth:`submit`'s call (checking :attr:`bound` first)."""
        return self._queue

    @property
    def bound(self) -> int:
        """The queue's bound."""
        return self._bound

    def count_dropped(self, records: int) -> None:
        """Counts records a producer dropped because the queue was full."""
        self.dropped += records

    @property
    def pending(self) -> int:
        """Items and messages waiting to be sent."""
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

    def _channel(self):
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

    def _unix(self):
        """A connection to the started sidecar's ingest socket, or None when
        there is none (no socket set, or none listening: a sidecar run by
        other means, or one still starting)."""
        path = getattr(getattr(self.settings, "sidecar", None), "ingest_socket", None)
        if not path:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(SEND_TIMEOUT)
            sock.connect(path)
            # The directory is this user's alone (config.private_dir); the
            # peer is checked all the same, as the sidecar checks its peer.
            uid = struct.unpack("3i", sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
            if uid != os.getuid():
                log.warning(
                    "vllm-otel-metrics: the process listening on %s runs as uid %d, not "
                    "this user; not streaming to it",
                    path,
                    uid,
                )
                sock.close()
                return None
        except OSError:
            sock.close()
            return None
        return sock

    def _run(self) -> None:
        pb = convert.messages()
        metadata = (("authorization", f"Bearer {self.settings.token}"),) if self.settings.token else ()
        backoff = BACKOFF_MIN
        failures = 0
        while not self._stop.is_set():
            channel = None
            sock = self._unix()
            if sock is None:
                channel = self._channel()
                try:
                    grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT)
                except grpc.FutureTimeoutError:
                    channel.close()
                    failures += 1
                    if failures == 1 or failures % 60 == 0:
                        log.warning(
                            "vllm-otel-metrics: sidecar at %s unreachable (%d attempts); "
                            "records are queued, then dropped and counted",
                            self.settings.address,
                            failures,
                        )
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                    continue
                # A started sidecar binds its socket before its port: one
                # that just came up has it now.
                sock = self._unix()
                if sock is not None:
                    channel.close()
                    channel = None
            if failures:
                log.warning(
                    "vllm-otel-metrics: streaming to %s again after %d failed attempts",
                    self.settings.address,
                    failures,
                )
            failures = 0
            backoff = BACKOFF_MIN
            self.connected = True
            try:
                if sock is not None:
                    self.transport = "socket"
                    self._socket_session(sock, pb)
                else:
                    self.transport = "grpc"
                    if self._one_call(channel, pb, metadata) == grpc.StatusCode.UNAUTHENTICATED:
                        backoff = BACKOFF_MAX
            finally:
                self.connected = False
                if sock is not None:
                    sock.close()
                if channel is not None:
                    channel.close()
            self._stop.wait(backoff)

    def _socket_session(self, sock, pb) -> None:
        """Sends records over the ingest socket, one message each, until a
        send fails or close(). A sidecar that shuts down answers with how
        many it read: the others are sent again to the next one. Without
        that answer (a sidecar killed) the record being sent is counted as
        lost; what the kernel had taken before it may be lost uncounted, as
        on gRPC."""
        ticks = _Ticks()
        unsent = self._unsent
        handed = Handed(self._resend_window)
        while True:
            if self._refill(pb, ticks):
                continue
            if unsent:
                record = unsent.popleft()
                handed.note(record)
                try:
                    parts, total = socket_parts(record)
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

    def _one_call(self, channel, pb, metadata):
        """One client-streaming call, until it breaks or close(). Returns
        the status code it broke with, or None when it ended at close()."""
        done = threading.Event()
        handed = Handed(self._resend_window)
        # The generated stub's serializer takes protobuf messages only; this
        # one takes a Raw record too.
        stream = channel.stream_unary(
            STREAM_METHOD,
            request_serializer=_serialize,
            response_deserializer=pb.IngestSummary.FromString,
        )
        call = stream.future(self._requests(pb, done, handed), metadata=metadata)
        call.add_done_callback(lambda _f: done.set())
        try:
            # gRPC's result() wakes every 100 ms to look; the event sleeps.
            done.wait()
            summary = call.result()
        except grpc.RpcError as e:
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
            done.set()
        if summary.records_rejected:
            log.warning(
                "vllm-otel-metrics: the sidecar rejected %d records: %s",
                summary.records_rejected,
                "; ".join(summary.first_rejections),
            )
        return None

    def _send_unread_again(self, handed: "Handed", read: int) -> int:
        """Puts the records a shutting-down sidecar did not read (it read
        ``read`` of those handed over) first in line for the next call;
        counts as lost those no longer kept."""
        unread = handed.count - read
        kept = list(handed.last)[-unread:] if unread > 0 else []
        self._unsent.extendleft(reversed(kept))
        self.lost += max(unread - len(kept), 0)
        return len(kept)

    def _drops_record(self, pb):
        dropped = self.dropped + self.unsendable + self.lost
        if dropped == self._dropped_reported:
            return None
        delta = dropped - self._dropped_reported
        self._dropped_reported = dropped
        return pb.Record(plugin_drops=pb.PluginDrops(dropped=delta))

    def _drain(self) -> list:
        """Takes what is queued, up to ``max_drain`` items or, counting
        frames (``(time, bytes)`` items), ``max_drain_bytes``."""
        queue, items, size = self._queue, [], 0
        limit = self._max_drain_bytes
        while len(items) < self._max_drain:
            try:
                item = queue.popleft()
            except IndexError:
                break
            items.append(item)
            if limit and type(item) is tuple:
                size += len(item[1])
                if size >= limit:
                    break
        return items

    def _refill(self, pb, ticks: "_Ticks") -> bool:
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
        if item is None:
            return False
        ticks.busy = now
        try:
            for record in self._to_records(item):
                if type(record) is convert.NotFinite:
                    self.unsendable += 1
                    log.warning(
                        "vllm-otel-metrics: a %s record of engine %s has a number that "
                        "is not finite; dropped and counted",
                        record.kind,
                        record.engine,
                    )
                else:
                    unsent.append(record)
        except Exception:  # noqa: BLE001 — a bad item must not end the stream
            log.exception("vllm-otel-metrics: cannot convert one stats record; dropped")
            self.unsendable += 1
        return True

    def _idle_wait(self, event: threading.Event, ticks: "_Ticks") -> None:
        """Waits for the next look at the queue: less often after a second
        without items (vLLM waits for requests)."""
        idle = time.monotonic() - ticks.busy >= 1.0
        event.wait(max(IDLE_POLL_SECONDS, self._poll_seconds) if idle else self._poll_seconds)

    def _requests(self, pb, done: threading.Event, handed: "Handed"):
        """The request iterator of one call (gRPC consumes it on a thread of
        its own). It converts what is queued, then yields the records ready
        as one message (a batch of up to :data:`MAX_BATCH`), each record
        noted in ``handed``. It ends when the call does or on close()."""
        unsent = self._unsent
        ticks = _Ticks()
        while not done.is_set():
            if self._refill(pb, ticks):
                continue
            if unsent:
                # Everything ready goes in one batch message: gRPC's cost is
                # per message, in this process (the GIL) and in the sidecar.
                records = [unsent.popleft() for _ in range(min(len(unsent), self._max_records))]
                for record in records:
                    handed.note(record)
                self.sent += len(records)
                if self._batched:
                    yield from _messages_of(pb, records)
                else:
                    yield _message(pb, records)
                continue
            if self._stop.is_set():
                return
            self._idle_wait(done, ticks)


class _Ticks:
    """When a stream last looked for a drops record and last found items."""

    __slots__ = ("drops_checked", "busy")

    def __init__(self):
        self.drops_checked = 0.0
        self.busy = 0.0


class Raw:
    """A ``Record`` serialized by hand, kept as the parts it is made of
    (the engine-core tap's frames chunk: vLLM's frames between a prefix and
    a suffix). The ingest socket hands the parts to the kernel as they are;
    gRPC joins them."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list, size: int):
        self.parts = parts
        self.size = size

    def SerializeToString(self) -> bytes:  # noqa: N802 — protobuf's name
        return b"".join(self.parts)


def socket_parts(record) -> tuple:
    """The buffers of ``record``'s message on the ingest socket (its length,
    then the record: a :class:`Raw` one's parts as they are), and their
    total size."""
    if type(record) is Raw:
        return [_LENGTH.pack(record.size), *record.parts], record.size + 4
    data = record.SerializeToString()
    return [_LENGTH.pack(len(data)), data], len(data) + 4


def _serialize(message) -> bytes:
    return message.SerializeToString()


def _message(pb, records: list):
    """One message of ``records``: the record itself, or a batch of them."""
    return records[0] if len(records) == 1 else pb.Record(batch=pb.RecordBatch(records=records))


def _messages_of(pb, records: list):
    """The messages of the engine-core tap's records, in order: each
    ``frames`` record alone (putting it into a batch would copy its bytes,
    as costly as building it), the records between them in one batch."""
    run: list = []
    for record in records:
        if type(record) is not Raw and record.WhichOneof("record") != "frames":
            run.append(record)
            continue
        if run:
            yield _message(pb, run)
            run = []
        yield record
    if run:
        yield _message(pb, run)


class Handed:
    """The records handed to one call: how many, and the last ``window``
    of them."""

    def __init__(self, window: int = RESEND_WINDOW):
        self.count = 0
        self.last = collections.deque(maxlen=window)

    def note(self, message) -> None:
        self.count += 1
        self.last.append(message)


def _read_answer(sock) -> "int | None":
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


def _summary_trailer(error, pb):
    """The ``IngestSummary`` a shutting-down sidecar put in the trailer of a
    call it ended, or None."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == SUMMARY_TRAILER:
            try:
                return pb.IngestSummary.FromString(value)
            except Exception:  # noqa: BLE001 — a garbled trailer is no summary
                return None
    return None
