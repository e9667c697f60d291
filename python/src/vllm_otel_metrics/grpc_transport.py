"""gRPC: how the plugin streams to a sidecar run by other means (or with
``VLLM_OTEL_METRICS_SOCKET=none``): one long-lived client-streaming call
to the target, so that the sidecar applies each record as it arrives.

- the call's request iterator (:meth:`GrpcTransport.requests`) runs on a
  thread of gRPC's: it converts what is queued and yields what is ready as
  one message (a batch). It and the stream's thread take turns on the
  queue and the counters (:func:`end_turns`);
- a sidecar that shuts down (SIGTERM) ends each open call with the summary
  of what it applied (the ``ingest-summary-bin`` trailer): the records after
  those are sent again, first, on the next call (:mod:`.resend`);
- a call that breaks without a summary (the sidecar killed) may lose what
  it had in flight, uncounted: gRPC acknowledges a client stream only at its
  end, so the records the sidecar read before it died cannot be told from
  the others. The loss is logged with the stream's status.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from . import config, wire
from .convert import pb
from .outbox import Outbox, Ticks
from .resend import Handed

log = logging.getLogger("vllm.vllm_otel_metrics")


class GrpcTransport:
    """Calls to ``settings.address`` (with its TLS and token), sending
    ``outbox``'s records until a call breaks or ``stop`` is set."""

    def __init__(self, settings: config.Settings, outbox: Outbox[Any], stop: threading.Event):
        self.address = settings.address
        self._tls = settings.tls
        self._root_certificates = settings.root_certificates
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {settings.token}"),) if settings.token else ()
        )
        self._outbox = outbox
        self._stop = stop

    def channel(self) -> grpc.Channel:
        options = [
            ("grpc.max_send_message_length", wire.MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        if self._tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
            return grpc.secure_channel(self.address, credentials, options=options)
        return grpc.insecure_channel(self.address, options=options)

    @staticmethod
    def ready(channel: grpc.Channel, timeout: float) -> bool:
        """Whether ``channel`` connects within ``timeout`` seconds."""
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
            return True
        except grpc.FutureTimeoutError:
            return False

    def one_call(self, channel: grpc.Channel) -> grpc.StatusCode | None:
        """One client-streaming call, until it breaks or the stream stops.
        Returns the status code it broke with, or None when it ended at
        close()."""
        outbox = self._outbox
        done = threading.Event()
        turn = threading.Lock()
        handed = outbox.handed()
        # The generated stub's serializer takes protobuf messages only; this
        # one takes a Raw record too.
        stream = channel.stream_unary(
            wire.STREAM_METHOD,
            request_serializer=wire.serialize,
            response_deserializer=pb.IngestSummary.FromString,
        )
        try:
            call = stream.future(self.requests(done, handed, turn), metadata=self.metadata)
            call.add_done_callback(lambda _f: done.set())
            # gRPC's result() wakes every 100 ms to look; the event sleeps.
            done.wait()
            summary = call.result()
        except grpc.RpcError as e:
            end_turns(done, turn)
            code = e.code() if hasattr(e, "code") else None
            trailing = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
            ended = wire.summary(trailing)
            if ended is not None:
                again = outbox.send_unread_again(
                    handed, ended.records_applied + ended.records_rejected
                )
                outcome = f"the {again} records it had not read are sent again"
            else:
                outcome = "what it had in flight may be lost"
            log.warning(
                "vllm-otel-metrics: stream to %s ended (%s: %s); %s; reconnecting",
                self.address,
                getattr(code, "name", code),
                e.details() if hasattr(e, "details") else e,
                outcome,
            )
            return code
        finally:
            # The request iterator, on gRPC's thread, may be in the middle
            # of a turn: it takes no more records for this ended call.
            end_turns(done, turn)
            outbox.let_go_of_handed(handed)
        if summary.records_rejected:
            log.warning(
                "vllm-otel-metrics: the sidecar rejected %d records: %s",
                summary.records_rejected,
                "; ".join(summary.first_rejections),
            )
        return None

    def requests(
        self, done: threading.Event, handed: Handed, turn: threading.Lock
    ) -> Iterator[wire.Raw]:
        """The request iterator of one call (gRPC consumes it on a thread of
        its own). It converts what is queued, then yields the records ready
        as one message (a batch of up to the outbox's ``max_records``), each
        record noted in ``handed``. It ends when the call does or when the
        stream stops."""
        outbox = self._outbox
        unsent = outbox.unsent
        ticks = Ticks()
        while True:
            # A turn on the queue and the counters is whole under ``turn``,
            # and none starts once the call has ended (end_turns).
            with turn:
                if done.is_set():
                    return
                if outbox.refill(ticks):
                    continue
                messages = None
                if unsent:
                    # Everything ready goes in one batch message: gRPC's cost
                    # is per message, in this process (the GIL) and in the
                    # sidecar.
                    taken = handed.take(unsent, outbox.max_records, outbox.pack)
                    if taken is None:
                        # The call has ended (its records were counted for
                        # sending again): what is left waits for the next one.
                        return
                    messages, count = taken
                    outbox.count_sent(count)
            if messages is not None:
                yield from messages
                continue
            if self._stop.is_set():
                return
            outbox.idle_wait(done, ticks)


def end_turns(done: threading.Event, turn: threading.Lock) -> None:
    """Ends a call's request iterator for the stream's thread: no turn
    starts after this, and one under way has ended when it returns, so the
    queue and the counters have one writer again."""
    done.set()
    with turn:
        pass
