"""The resend window: the last records handed to one gRPC call or one
ingest-socket connection, kept so that those a shutting-down sidecar did
not read are sent again, first, to the sidecar that replaces it: nothing
lost, nothing twice.

A sidecar that shuts down (SIGTERM) ends each open call with the summary
of what it applied (the ``ingest-summary-bin`` trailer), and answers an
open ingest-socket connection with the number of messages it read: the
records after those are the unread ones (:meth:`Handed.unread`). The last
:data:`RESEND_WINDOW` records handed over (fewer for the engine-core tap,
whose chunks are large) are kept for this; unread records beyond them are
counted as lost.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from .wire import Raw

#: Records handed to a call that are kept, to be sent again when a
#: shutting-down sidecar ends the call before reading them.
RESEND_WINDOW = 4096


class Handed:
    """The records handed to one call: how many, and the last of them, to
    be sent again: at most ``window`` records and, when ``most_bytes`` is
    given, at most that many frame bytes (:class:`.wire.Raw` chunks). A
    record let go from the window is passed to ``release`` (its frame bytes
    no longer held).

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

    def unread(self, read: int) -> tuple[list[Any], list[Any], int]:
        """Ends the handing over (:meth:`close`) when the sidecar read
        ``read`` of the records handed: returns those it did not read that
        the window still keeps (to be sent again, in order), those it read
        (to be let go), and how many unread ones the window no longer kept
        (lost).

        >>> handed = Handed(window=2)
        >>> for record in "abc":
        ...     _ = handed.note(record)
        >>> handed.unread(0)
        (['b', 'c'], [], 1)
        """
        count, last = self.close()
        unread = count - read
        kept = last[-unread:] if unread > 0 else []
        return kept, last[: len(last) - len(kept)], max(unread - len(kept), 0)
