"""The ingest socket: how the plugin streams to a sidecar it started.

A Unix domain socket in the user's private directory, its listener checked
to be this user's process (:func:`.sidecar.connect_own`): length-prefixed
records (:func:`.wire.socket_parts`) handed to the kernel with one
``sendmsg``, no gRPC layer. Never gRPC to the started sidecar's port
instead: on a shared host any user can hold that port, and would get the
token and the records.

A sidecar that shuts down answers an open connection with the number of
messages it read; the records after those are sent again, first, on the
next connection (:mod:`.resend`). Without that answer (a sidecar killed)
the record whose send failed is counted as lost; what the kernel had taken
before it may be lost uncounted, as on gRPC.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from . import wire
from .outbox import Outbox, Ticks
from .resend import Handed
from .sidecar import connect_own

log = logging.getLogger("vllm.vllm_otel_metrics")

#: How long a send on the ingest socket may block (a sidecar that stopped
#: reading), seconds; then the connection is dropped and made again.
SEND_TIMEOUT = 10.0
#: How often a connection is tried again while a sidecar starts, seconds.
RETRY_SECONDS = 0.05
#: A send to a sidecar that went away fails (EPIPE) instead of signalling.
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


class SocketTransport:
    """Sessions on the ingest socket ``path``, sending ``outbox``'s records
    until a send fails or ``stop`` is set."""

    def __init__(self, path: str, outbox: Outbox[Any], stop: threading.Event) -> None:
        self.path = path
        self._outbox = outbox
        self._stop = stop

    def connect(self) -> socket.socket | None:
        """A connection to the ingest socket, or None when no process of
        this user listens there (none started yet, one still starting, or
        another user's)."""
        sock, uid = connect_own(self.path, SEND_TIMEOUT)
        if uid is not None:
            self._outbox.limits.emit(
                logging.WARNING,
                "peer",
                "vllm-otel-metrics: the process listening on %s runs as uid %d, not this user; "
                "not streaming to it",
                self.path,
                uid,
            )
        return sock

    def connect_within(self, seconds: float) -> socket.socket | None:
        """:meth:`connect`, tried again every :data:`RETRY_SECONDS` for up to
        ``seconds``: a sidecar just started binds its socket within a second
        or two, and is no failure to warn about (gRPC's wait for a channel
        is alike)."""
        deadline = time.monotonic() + seconds
        sock = self.connect()
        while sock is None and time.monotonic() < deadline and not self._stop.wait(RETRY_SECONDS):
            sock = self.connect()
        return sock

    def session(self, sock: socket.socket) -> None:
        """Sends records over ``sock``, one message each, until a send
        fails or the stream stops."""
        outbox = self._outbox
        handed = outbox.handed()
        try:
            self._sends(sock, handed)
        finally:
            outbox.let_go_of_handed(handed)

    def _sends(self, sock: socket.socket, handed: Handed) -> None:
        """:meth:`session`'s loop; ``handed`` notes what it sent."""
        outbox = self._outbox
        ticks = Ticks()
        unsent = outbox.unsent
        while True:
            if outbox.refill(ticks):
                continue
            if unsent:
                record = unsent.popleft()
                parts, total = wire.socket_parts(record)
                if total - wire.LENGTH.size > wire.MAX_MESSAGE_BYTES:
                    outbox.too_large(record, total - wire.LENGTH.size)
                    continue
                handed.note(record)
                try:
                    # Gathered by the kernel, the GIL released: no join.
                    sent = sock.sendmsg(parts, (), _NOSIGNAL)
                    if sent < total:
                        sock.sendall(b"".join(parts)[sent:])
                except OSError as e:
                    read = read_answer(sock)
                    if read is not None:
                        again = outbox.send_unread_again(handed, read)
                        outcome = f"the {again} records it had not read are sent again"
                    else:
                        outbox.count_lost(1)
                        outcome = "the record being sent is lost and counted"
                    log.warning(
                        "vllm-otel-metrics: the ingest socket %s closed (%s); %s; reconnecting",
                        self.path,
                        e.strerror or e,
                        outcome,
                    )
                    return
                outbox.count_sent(1)
                continue
            if self._stop.is_set():
                return
            outbox.idle_wait(self._stop, ticks)


def read_answer(sock: socket.socket) -> int | None:
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
    return wire.read_count(data)
