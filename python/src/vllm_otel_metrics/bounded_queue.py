"""The bounded queues between vLLM's threads and the streaming thread, and
their counters.

vLLM calls the producers on its own threads (``record()`` on its event
loop, the engine-core tap's hooks on its engine and output threads), so
the only work done there is a weight or a length, a comparison and a
``deque.append`` (atomic under the GIL; no lock). Each queue is counted by
pairs of counters that it owns: in, written by the producer only; out,
written by the consumer only (the streaming thread, or during a gRPC call
the call's request iterator on gRPC's thread, never both at once:
:func:`.grpc_transport.end_turns`). Their difference is what is held,
without a lock. Others read the counters; only the queue's methods write
them.

Two policies, one per producer:

- :class:`RecordQueue`, the stat-logger plugin's: bounded in records (an
  item weighs the records it becomes); the consumer takes one item at a
  time;
- :class:`FrameQueue`, the engine-core tap's: bounded in items and in the
  bytes of vLLM's frames (:data:`Frame`) it holds; the consumer drains many
  items at a time. A frame's bytes count until the streamer lets them go
  (:meth:`FrameQueue.release`), not until they leave the queue: drained and
  converted, waiting to be sent, and kept to be sent again (at most half
  the bound of those) all count, so one number bounds the frame bytes the
  plugin holds.

When the sidecar is down, slow or refusing, a queue fills and drops and
counts (:attr:`RecordQueue.drops`); the streamer reports the drops to the
sidecar.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
B = TypeVar("B")
B_co = TypeVar("B_co", covariant=True)

#: A queued engine step of the tap: the wall-clock time and vLLM's encoded
#: ``EngineCoreOutputs``. A plain tuple, unlike the other items: it is made
#: on vLLM's output thread once per step, where even a dataclass would cost
#: twice as much. The frame queue tells its frames from its other items by
#: this type.
Frame = tuple[float, bytes]


class Source(Protocol[B_co]):
    """What the streaming thread needs of a queue: batches to convert
    (one item, or a drain of items), and the counts of what it drops."""

    @property
    def drops(self) -> int:
        """Records dropped because the queue was full."""

    @property
    def off(self) -> bool:
        """Whether the queue was turned off."""

    def __len__(self) -> int: ...

    def take(self) -> B_co | None:
        """The next batch, or None when nothing is queued."""

    def discard(self, batch: Any) -> int:
        """``batch`` could not be converted: lets go of what it held and
        returns the records it stood for."""

    def release(self, frame_bytes: int) -> None:
        """Frame bytes the consumer no longer holds."""

    def window_bytes(self) -> int | None:
        """The most frame bytes the resend window may keep, or None."""

    def clear(self) -> None:
        """Empties the queue."""

    def turn_off(self) -> None:
        """From now on what producers queue is dropped or cleared."""


class RecordQueue(Generic[T]):
    """The stat-logger plugin's queue: bounded in records. ``weigh(item)``
    says how many records an item becomes (a cheap guess: it runs in
    :meth:`submit`, on vLLM's event loop, unless the weight is given)."""

    __slots__ = ("_items", "_weigh", "bound", "dropped", "off", "records_in", "records_out")

    def __init__(self, bound: int, weigh: Callable[[T], int] = lambda item: 1) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._weigh = weigh
        #: The bound, in records.
        self.bound = bound
        #: Records queued by submit() (only submit() writes it) and taken
        #: by the consumer (only it writes it).
        self.records_in = 0
        self.records_out = 0
        #: Records of the items refused because the queue was full (only
        #: submit() writes it).
        self.dropped = 0
        #: Whether the queue was turned off: everything is dropped.
        self.off = False

    def submit(self, item: T, weight: int | None = None) -> None:
        """Enqueues one item of ``weight`` records (default: ``weigh(item)``),
        or drops and counts it when its records would take the queue beyond
        its bound. Never blocks."""
        if weight is None:
            weight = self._weigh(item)
        if self.records_in - self.records_out + weight > self.bound or self.off:
            self.dropped += weight
        else:
            self.records_in += weight
            self._items.append(item)

    @property
    def items(self) -> Sequence[T]:
        """What is queued (read only)."""
        return self._items

    @property
    def drops(self) -> int:
        return self.dropped

    def __len__(self) -> int:
        return len(self._items)

    def take(self) -> T | None:
        try:
            item = self._items.popleft()
        except IndexError:
            return None
        self.records_out += self._weigh(item)
        return item

    def discard(self, batch: T) -> int:
        return self._weigh(batch)

    def release(self, frame_bytes: int) -> None:
        """Holds no frames: nothing to let go."""

    def window_bytes(self) -> int | None:
        return None

    def clear(self) -> None:
        """Empties the queue: what was queued is neither sent nor counted
        as dropped; the count out follows, so the bound is whole again. On
        the consumer's side."""
        items = self._items
        while items:
            self.records_out += self._weigh(items.popleft())

    def turn_off(self) -> None:
        self.off = True


class FrameQueue:
    """The engine-core tap's queue: bounded in items (``bound``) and in the
    frame bytes it holds (``byte_bound``). Its producers are the tap's
    hooks: :meth:`frames_through` makes the output hook; the others queue
    with :attr:`put` while ``len(items) < bound``, and count what they drop
    with :meth:`drop`. ``weigh(item)`` says how many records an item stands
    for, as its loss is counted.

    The consumer takes up to ``max_drain`` items at once, or until
    ``max_drain_bytes`` of frames (:meth:`take`)."""

    __slots__ = (
        "_items",
        "_weigh",
        "bound",
        "byte_bound",
        "bytes_in",
        "bytes_out",
        "dropped",
        "dropped_frames",
        "max_drain",
        "max_drain_bytes",
        "off",
        "put",
    )

    def __init__(
        self,
        bound: int,
        byte_bound: int,
        weigh: Callable[[Any], int],
        max_drain: int,
        max_drain_bytes: int = 0,
    ) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._weigh = weigh
        #: The bound, in items.
        self.bound = bound
        #: The bound on the frame bytes held (:attr:`held_bytes`).
        self.byte_bound = byte_bound
        self.max_drain = max_drain
        self.max_drain_bytes = max_drain_bytes
        #: Frame bytes queued by the output hook (only it writes it) and let
        #: go by the consumer (only it writes it): taken from the queue is
        #: not let go; a frame is let go once it is out of the resend
        #: window, dropped, or cleared (:attr:`held_bytes`).
        self.bytes_in = 0
        self.bytes_out = 0
        #: Records of the items refused because the queue was full (only
        #: the tap's engine thread writes it).
        self.dropped = 0
        #: Frames the output hook refused (only it writes it: it runs on
        #: vLLM's output thread, the other hooks on its engine thread).
        self.dropped_frames = 0
        self.off = False
        #: Queues an item (``deque.append``): for a producer that found
        #: ``len(items) < bound``.
        self.put: Callable[[Any], None] = self._items.append

    @property
    def items(self) -> Sequence[Any]:
        """What is queued (read only)."""
        return self._items

    @property
    def held_bytes(self) -> int:
        """The frame bytes held: queued (:data:`Frame` items), converted
        into chunks waiting to be sent, and kept to be sent again. The
        output hook queues a frame only while this stays within
        :attr:`byte_bound`."""
        return self.bytes_in - self.bytes_out

    @property
    def drops(self) -> int:
        return self.dropped + self.dropped_frames

    def __len__(self) -> int:
        return len(self._items)

    def frames_through(self, send: Callable[..., Any]) -> Callable[..., Any]:
        """A function that stands in for ``send(socket, buffers)``: it
        queues a copy of ``buffers[0]`` with the wall-clock time (a
        :data:`Frame`) while the queue has room for it, counts the frame
        dropped otherwise, and calls ``send`` with its arguments. The
        producer's hot path: one engine step."""
        items = self._items
        bound = self.bound
        byte_bound = self.byte_bound
        now = time.time

        # A copy of the encoded step, a time, an append; no lock
        # (deque.append is atomic under the GIL, and bytes_in is written by
        # this function only, bytes_out by the consumer only).
        def _send_msg_tracking_payload(
            socket: Any, buffers: Sequence[Any], _append: Callable[[Any], None] = items.append
        ) -> Any:
            # The copy only when the queue has room for one more item.
            if len(items) < bound:
                frame = bytes(buffers[0])
                size = len(frame)
                if self.bytes_in - self.bytes_out + size <= byte_bound:
                    self.bytes_in += size
                    _append((now(), frame))
                    return send(socket, buffers)
            self.dropped_frames += 1
            return send(socket, buffers)

        return _send_msg_tracking_payload

    def drop(self, records: int) -> None:
        """Counts records a producer dropped because the queue was full."""
        self.dropped += records

    def take(self) -> list[Any] | None:
        """Takes what is queued, up to ``max_drain`` items or ``max_drain_bytes``
        of frames; None when nothing is. The frames' bytes stay held
        (:attr:`held_bytes`) until :meth:`release`."""
        queue, size = self._items, 0
        items: list[Any] = []
        limit = self.max_drain_bytes
        while len(items) < self.max_drain:
            try:
                item = queue.popleft()
            except IndexError:
                break
            items.append(item)
            if type(item) is tuple:
                size += len(item[1])
                if limit and size >= limit:
                    break
        return items or None

    def discard(self, batch: list[Any]) -> int:
        """The drained ``batch`` could not be converted: its frames are
        gone with it."""
        lost = sum(map(self._weigh, batch))
        self.bytes_out += sum(len(i[1]) for i in batch if type(i) is tuple)
        return lost

    def release(self, frame_bytes: int) -> None:
        self.bytes_out += frame_bytes

    def window_bytes(self) -> int | None:
        """Half the byte bound: sent frames never keep more than half of it
        from new ones."""
        return self.byte_bound // 2

    def clear(self) -> None:
        """Empties the queue: what was queued is neither sent nor counted.
        The byte count follows (``items.clear()`` would leave it counting
        what is gone, and the bound would shrink). On the consumer's side."""
        queue = self._items
        while queue:
            item = queue.popleft()
            if type(item) is tuple:
                self.bytes_out += len(item[1])

    def turn_off(self) -> None:
        """The hooks keep their bounds: the streamer empties the queue now
        and then (:meth:`clear`)."""
        self.off = True
