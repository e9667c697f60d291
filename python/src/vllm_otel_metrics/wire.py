"""The ingest protocol on the wire: how records become the bytes the
sidecar reads, on gRPC and on the ingest socket.

- a message is one ``Record``, or a ``RecordBatch`` record of several
  (:func:`message`); the engine-core tap's ``frames`` records go alone
  (:func:`groups`); a message is never larger than
  :data:`MAX_MESSAGE_BYTES` (:func:`pack` splits a batch, and leaves out a
  record too large alone);
- the engine-core tap's ``frames`` record is built by hand (:class:`ChunkWriter`)
  as a :class:`Raw` record: its parts, vLLM's frames among them, are never
  copied in Python;
- on the ingest socket each message is its length (4 bytes, little-endian)
  and then the message (:func:`socket_parts`); gRPC takes the serialized
  message (:func:`serialize`);
- a shutting-down sidecar says what a gRPC call applied in the trailer
  :data:`SUMMARY_TRAILER` (:func:`summary`), and what it read from the
  ingest socket as 8 bytes before it closes (:func:`read_count`).

The generated message classes come from one accessor, :data:`.convert.pb`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

from .convert import pb

if TYPE_CHECKING:
    from .v1 import ingest_pb2

#: Largest message the client sends, on gRPC and on the ingest socket (the
#: sidecar's default limit is 16 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: The ingest service's client-streaming method.
STREAM_METHOD = "/vllm_otel_metrics.v1.Ingest/Stream"
#: The trailer in which a shutting-down sidecar says what a call applied.
SUMMARY_TRAILER = "ingest-summary-bin"
#: A message's length on the ingest socket.
LENGTH = struct.Struct("<I")


class Raw:
    """A ``Record`` serialized by hand, kept as the parts it is made of
    (the engine-core tap's frames chunk: vLLM's frames between a prefix and
    a suffix). The ingest socket hands the parts to the kernel as they are;
    gRPC joins them. ``frame_bytes``: the bytes of vLLM's frames among the
    parts, which count against the tap's byte bound until the streamer
    lets the record go (:attr:`.bounded_queue.FrameQueue.held_bytes`)."""

    __slots__ = ("frame_bytes", "parts", "size")

    def __init__(self, parts: list[bytes], size: int, frame_bytes: int = 0) -> None:
        self.parts = parts
        self.size = size
        self.frame_bytes = frame_bytes

    def SerializeToString(self) -> bytes:  # noqa: N802 — protobuf's name
        return b"".join(self.parts)


#: A record as the stream holds it: a generated ``Record``, or a
#: :class:`Raw` one.
Record = Any


def frame_bytes(record: Record) -> int:
    """The bytes of vLLM's frames ``record`` holds (a :class:`Raw` chunk's)."""
    return record.frame_bytes if type(record) is Raw else 0


def socket_parts(record: Record) -> tuple[list[bytes], int]:
    """The buffers of ``record``'s message on the ingest socket (its length,
    then the record: a :class:`Raw` one's parts as they are), and their
    total size."""
    if type(record) is Raw:
        return [LENGTH.pack(record.size), *record.parts], record.size + 4
    data = record.SerializeToString()
    return [LENGTH.pack(len(data)), data], len(data) + 4


def serialize(message: Record) -> bytes:
    """``message`` as gRPC sends it (the generated stub's serializer takes
    protobuf messages only; this one takes a :class:`Raw` record too)."""
    data: bytes = message.SerializeToString()
    return data


def message(records: list[Record]) -> Record:
    """One message of ``records``: the record itself, or a batch of them."""
    return records[0] if len(records) == 1 else pb.Record(batch=pb.RecordBatch(records=records))


def whole(records: list[Record]) -> Iterable[list[Record]]:
    """The stat-logger plugin's records as the groups that go out as one
    message each: all of them together."""
    return (records,)


def groups(records: list[Record]) -> Iterator[list[Record]]:
    """The engine-core tap's records in the groups that go out as one
    message each, in order: each ``frames`` record alone (putting it into a
    batch would copy its bytes, as costly as building it), the records
    between them together."""
    run: list[Record] = []
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


def messages_of(records: list[Record]) -> Iterator[Record]:
    """The messages of the engine-core tap's records (:func:`groups`)."""
    for group in groups(records):
        yield message(group)


def pack(
    records: list[Record],
    grouping: Callable[[list[Record]], Iterable[list[Record]]],
    too_large: Callable[[Record, int], None],
) -> list[tuple[Raw, list[Record]]]:
    """``records`` as serialized messages no larger than
    :data:`MAX_MESSAGE_BYTES`, each with the records it carries, in the
    groups ``grouping`` makes: a batch too large is split in halves; a
    record too large alone is passed to ``too_large`` with its size and
    left out. Serialized here, where the size is free to read; gRPC sends
    the bytes as they are."""
    out: list[tuple[Raw, list[Record]]] = []
    if not records:
        return out
    for group in grouping(records):
        _fit(group, out, too_large)
    return out


def _fit(
    records: list[Record],
    out: list[tuple[Raw, list[Record]]],
    too_large: Callable[[Record, int], None],
) -> None:
    built = message(records)
    if type(built) is not Raw:
        data = built.SerializeToString()
        built = Raw([data], len(data))
    if built.size <= MAX_MESSAGE_BYTES:
        out.append((built, records))
    elif len(records) == 1:
        too_large(records[0], built.size)
    else:
        half = len(records) // 2
        _fit(records[:half], out, too_large)
        _fit(records[half:], out, too_large)


def kind(record: Record) -> str:
    """What ``record`` is, for a log line: its ``record`` field's name."""
    return "frames" if type(record) is Raw else str(record.WhichOneof("record"))


def drops_record(dropped: int) -> ingest_pb2.Record:
    """The ``plugin_drops`` record of ``dropped`` more records lost."""
    return pb.Record(plugin_drops=pb.PluginDrops(dropped=dropped))


def summary(trailing: object) -> ingest_pb2.IngestSummary | None:
    """The ``IngestSummary`` a shutting-down sidecar put in the trailing
    metadata of a call it ended, or None."""
    # (Each is a (key, value) named tuple, whatever the stubs say.)
    for key, value in cast("Iterable[tuple[str, bytes]]", trailing or ()):
        if key == SUMMARY_TRAILER:
            try:
                return pb.IngestSummary.FromString(value)
            except Exception:  # noqa: BLE001 — a garbled trailer is no summary
                return None
    return None


def read_count(data: bytes) -> int | None:
    """The number of messages a shutting-down sidecar read from its ingest
    socket, from the 8 bytes it wrote before it closed; None when it wrote
    fewer.

    >>> read_count((3).to_bytes(8, "little")), read_count(b"\\x03")
    (3, None)
    """
    return int.from_bytes(data, "little") if len(data) == 8 else None


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class ChunkWriter:
    """Builds the ``Record`` of a chunk of frames by hand, as a :class:`Raw`:
    a prefix, vLLM's frame buffers as they are, and a suffix of their
    lengths and send times.

    Protobuf would copy every frame twice (into the message, then into its
    serialization) with the GIL held; here no frame byte is copied in Python.
    The field numbers come from the generated descriptors, so the layout
    follows proto/; the parts parse as the message protobuf would build
    (python/tests/test_wire.py). ``header``: the chunk's fields that never
    change (model name, field names, flags), serialized once::

        raw = ChunkWriter(model_name="m").record([b"ab", b"c"], [1.0, 2.0], 3)
        record = pb.Record.FromString(raw.SerializeToString())
        # record.frames: model_name "m", frames b"abc", frame_lengths [2, 1]
    """

    def __init__(self, **header: Any) -> None:
        frames = pb.EngineCoreFrames.DESCRIPTOR.fields_by_name
        record = pb.Record.DESCRIPTOR.fields_by_name["frames"].number

        def key(number: int) -> bytes:
            return _varint(number << 3 | 2)  # wire type 2: length-delimited

        self._record_key = key(record)
        self._header = pb.EngineCoreFrames(**header).SerializeToString()
        self._frames_key = key(frames["frames"].number)
        self._lengths_key = key(frames["frame_lengths"].number)
        self._times_key = key(frames["sent_at"].number)

    def record(self, frames: list[bytes], times: list[float], size: int) -> Raw:
        """The record of ``frames`` (``size`` bytes in all), sent at ``times``."""
        n = len(frames)
        head = self._frames_key + _varint(size)
        tail = b"".join(
            (
                self._lengths_key,
                _varint(4 * n),
                struct.pack(f"<{n}I", *map(len, frames)),
                self._times_key,
                _varint(8 * n),
                struct.pack(f"<{n}d", *times),
            )
        )
        body = len(self._header) + len(head) + size + len(tail)
        prefix = b"".join((self._record_key, _varint(body), self._header, head))
        return Raw([prefix, *frames, tail], len(prefix) + size + len(tail), size)
