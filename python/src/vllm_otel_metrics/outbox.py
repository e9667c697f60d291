"""The consumer's side of the queue: what the streaming thread (or a gRPC
call's request iterator) does between taking a batch from the queue and
handing records to a transport.

- it converts each batch to protobuf records (``to_records``, with
  :mod:`.convert`), which wait in :attr:`Outbox.unsent` until a transport
  takes them;
- a record it cannot send (not convertible, a number that is not finite,
  larger than a message may be) is counted among the plugin's drops. Its
  log line comes at most once every :data:`LOG_EVERY_SECONDS` per kind
  (:class:`LogLimit`): a flood of bad records must not flood vLLM's log;
- it counts the records handed to a transport and those a shutting-down
  sidecar did not read that the resend window (:mod:`.resend`) no longer
  kept (lost), and once a second, whenever the count of everything dropped
  changed, queues a ``plugin_drops`` record, which the sidecar adds to
  ``vllm_otel_metrics_plugin_dropped_records_total``.

Its counters are written by the consumer only, like the queue's counts out.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from . import convert, wire
from .bounded_queue import Source
from .resend import Handed

log = logging.getLogger("vllm.vllm_otel_metrics")

B = TypeVar("B")

#: How often the thread looks once the queue has been empty for a second.
IDLE_POLL_SECONDS = 0.25
#: At most one log line per kind of bad record this often, seconds.
LOG_EVERY_SECONDS = 10.0


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


class Ticks:
    """When a stream last looked for a drops record and last found items."""

    __slots__ = ("busy", "drops_checked")

    def __init__(self) -> None:
        self.drops_checked = 0.0
        self.busy = 0.0


class Outbox(Generic[B]):
    """Records converted from ``source``'s batches, waiting for a transport.

    ``to_records(batch)`` turns one batch (an item, or a drain of items:
    the source's choice) into records (ingest ``Record`` messages, or
    :class:`.convert.NotFinite` or :class:`.convert.Unconvertible` in place
    of one that cannot be sent). What it returns goes out as messages of at
    most ``max_records`` records, grouped by ``grouping``
    (:func:`.wire.whole` or :func:`.wire.groups`). ``poll_seconds``: how
    often a stream that found nothing looks again.
    """

    def __init__(
        self,
        source: Source[B],
        to_records: Callable[[B], Iterable[Any]],
        *,
        max_records: int,
        resend_window: int,
        grouping: Callable[[list[Any]], Iterable[list[Any]]] = wire.whole,
        poll_seconds: float,
    ) -> None:
        self.source = source
        self._to_records = to_records
        self.max_records = max_records
        self._resend_window = resend_window
        self._grouping = grouping
        self.poll_seconds = poll_seconds
        #: Messages converted and not yet handed to a call, or handed to a
        #: call that a shutting-down sidecar ended before applying them.
        self.unsent: collections.deque[Any] = collections.deque()
        #: Records handed to a transport (for tests and the benchmark).
        self.sent = 0
        #: Records the consumer could not send: not convertible, a number
        #: that is not finite, or too large.
        self.unsendable = 0
        #: Records a shutting-down sidecar did not read and that were no
        #: longer kept to be sent again (only the stream's thread writes it).
        self.lost = 0
        self._dropped_reported = 0
        self.limits = LogLimit()

    def __len__(self) -> int:
        return len(self.unsent)

    def count_sent(self, records: int) -> None:
        self.sent += records

    def count_lost(self, records: int) -> None:
        self.lost += records

    def let_go(self, record: Any) -> None:
        """A record the streamer no longer holds: its frame bytes are free."""
        if type(record) is wire.Raw:
            self.source.release(record.frame_bytes)

    def handed(self) -> Handed:
        """A call's or connection's :class:`.resend.Handed`, whose resend
        window lets go of what it no longer keeps."""
        return Handed(self._resend_window, self.source.window_bytes(), self.let_go)

    def let_go_of_handed(self, handed: Handed) -> None:
        """At the end of a call or connection: what its window still kept
        (and no summary put back in line) is let go."""
        _count, last = handed.close()
        for record in last:
            self.let_go(record)

    def send_unread_again(self, handed: Handed, read: int) -> int:
        """Puts the records a shutting-down sidecar did not read (it read
        ``read`` of those handed over) first in line for the next call;
        counts as lost those no longer kept. Returns how many go again."""
        kept, read_ones, lost = handed.unread(read)
        self.unsent.extendleft(reversed(kept))
        # The sidecar read the others: their frames are free.
        for record in read_ones:
            self.let_go(record)
        self.lost += lost
        return len(kept)

    def drops_record(self) -> Any:
        """A ``plugin_drops`` record of the drops not yet reported, or None."""
        dropped = self.source.drops + self.unsendable + self.lost
        if dropped == self._dropped_reported:
            return None
        delta = dropped - self._dropped_reported
        self._dropped_reported = dropped
        return wire.drops_record(delta)

    def refill(self, ticks: Ticks) -> bool:
        """Converts one batch from the queue into records waiting in
        :attr:`unsent`, while fewer than ``max_records`` wait; once a second
        queues a drops record when the count changed. Says whether it took
        anything from the queue."""
        unsent = self.unsent
        now = time.monotonic()
        if now - ticks.drops_checked >= 1.0:
            ticks.drops_checked = now
            drops = self.drops_record()
            if drops is not None:
                unsent.append(drops)
        if len(unsent) >= self.max_records:
            return False
        batch = self.source.take()
        if batch is None:
            return False
        ticks.busy = now
        try:
            records = self._to_records(batch)
            if type(records) is not list:
                records = list(records)
        except Exception as e:  # noqa: BLE001 — a bad item must not end the stream
            lost = self.source.discard(batch)
            self.unsendable += lost
            self.limits.emit(
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
                self.limits.emit(
                    logging.WARNING,
                    "not finite",
                    "vllm-otel-metrics: a %s record of engine %s has a number that "
                    "is not finite; dropped and counted",
                    record.kind,
                    record.engine,
                )
            elif kind is convert.Unconvertible:
                self.unsendable += 1
                self.limits.emit(
                    logging.WARNING,
                    "unconvertible",
                    "vllm-otel-metrics: cannot convert a %s record (%s); dropped and counted",
                    record.kind,
                    record.error,
                )
            else:
                unsent.append(record)
        return True

    def too_large(self, record: Any, size: int) -> None:
        """Counts (and logs, rate-limited) a record no message can carry."""
        self.unsendable += 1
        self.let_go(record)
        self.limits.emit(
            logging.WARNING,
            "too large",
            "vllm-otel-metrics: a %s record of %d bytes is larger than a message may be "
            "(%d bytes); dropped and counted",
            wire.kind(record),
            size,
            wire.MAX_MESSAGE_BYTES,
        )

    def pack(self, records: list[Any]) -> list[tuple[wire.Raw, list[Any]]]:
        """``records`` as messages (:func:`.wire.pack`); a record too large
        is counted (:meth:`too_large`)."""
        return wire.pack(records, self._grouping, self.too_large)

    def idle_wait(self, event: threading.Event, ticks: Ticks) -> None:
        """Waits for the next look at the queue: less often after a second
        without items (vLLM waits for requests)."""
        idle = time.monotonic() - ticks.busy >= 1.0
        event.wait(max(IDLE_POLL_SECONDS, self.poll_seconds) if idle else self.poll_seconds)

    def turn_off(self) -> None:
        """Nothing more is sent: what waits is let go."""
        for record in self.unsent:
            self.let_go(record)
        self.unsent.clear()
