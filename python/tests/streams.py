"""Streamers, settings, records and a stand-in ingest socket that several
tests build."""

import threading

from vllm_otel_metrics.v1 import ingest_pb2 as pb

from vllm_otel_metrics import config, stream
from vllm_otel_metrics.bounded_queue import RecordQueue


def settings(queue=10, address="127.0.0.1:1", token=None, socket=None):
    """Settings streaming to ``address`` over gRPC, or over the ingest
    socket ``socket`` of a started sidecar when given."""
    sidecar = None
    if socket is not None:
        sidecar = config.SidecarSettings(
            ingest_addr=None, metrics_addr="none", args=(), log_file="", ingest_socket=str(socket)
        )
    return config.Settings(
        address=address,
        tls=False,
        root_certificates=None,
        token=token,
        queue=queue,
        sidecar=sidecar,
    )


def streamer(
    to_records,
    weigh=lambda item: 1,
    queue=10,
    address="127.0.0.1:1",
    token=None,
    socket=None,
    **kwargs,
):
    """A stat-logger streamer (a RecordQueue of ``queue`` records), not started."""
    given = settings(queue, address, token, socket)
    return stream.Streamer(given, RecordQueue(given.queue, weigh), to_records, **kwargs)


def here(caplog):
    """The log lines of this test's own thread: a streamer thread another
    test left behind may still be logging (that made this module's first
    test fail now and then)."""
    return [r.getMessage() for r in caplog.records if r.thread == threading.get_ident()]


def parsed(messages):
    """What the sidecar reads of the messages a call was handed."""
    return [pb.Record.FromString(m.SerializeToString()) for m in messages]


def sleep_record(name="m"):
    return pb.Record(sleep_state=pb.SleepState(model_name=name, level=1))


class SocketSink:
    """A listening Unix socket that reads length-prefixed records, as the
    sidecar's ingest socket does; ``close_after`` closes the first connection
    after that many messages, first answering how many it read, as a
    shutting-down sidecar does, when ``answer``."""

    def __init__(self, path, close_after=None, answer=True):
        import socket

        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.close_after = close_after
        self.answer = answer
        self.connections = []
        self.received = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            messages = []
            self.connections.append(messages)
            limit = self.close_after if len(self.connections) == 1 else None
            with connection, connection.makefile("rb") as f:
                while limit is None or len(messages) < limit:
                    header = f.read(4)
                    if len(header) < 4:
                        break
                    body = f.read(int.from_bytes(header, "little"))
                    record = pb.Record.FromString(body)
                    messages.append(record)
                    self.received.append(record)
                if self.answer and limit is not None:
                    connection.sendall(len(messages).to_bytes(8, "little"))

    def wait_for(self, count, timeout=10.0):
        import time

        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.received

    def close(self):
        self.listener.close()


def socket_streamer(path, to_records, weigh=lambda item: 1, **kwargs):
    return streamer(to_records, weigh, queue=100, socket=path, poll_seconds=0.01, **kwargs)


def submit_one(streamer, sink):
    """Starts ``streamer``, submits item 0 and returns the first record
    ``sink`` receives; both are closed after."""
    streamer.start()
    try:
        streamer.queue.submit(0)
        return sink.wait_for(1)
    finally:
        streamer.close()
        sink.close()


def wait(check, timeout=5.0):
    import time

    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()
