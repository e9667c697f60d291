"""The stream thread's request iterator: what it sends of the records a
queued item becomes, and what it counts and logs."""

import logging
import threading
import types

from vllm_otel_metrics import convert, stream
from vllm_otel_metrics.v1 import ingest_pb2 as pb


def test_a_record_that_is_not_finite_is_counted_and_logged_and_the_others_are_sent(caplog):
    record = pb.Record(sleep_state=pb.SleepState(model_name="m", level=1))
    records = {"item": [record, convert.NotFinite("iteration_stats", 3), record]}
    streamer = stream.Streamer(types.SimpleNamespace(queue=10), records.get)
    # Stopped: the iterator ends once it has sent what was queued.
    streamer._stop.set()
    streamer.submit("item")
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        sent = list(streamer._requests(pb, threading.Event(), stream.Handed()))
    assert sent == [pb.Record(batch=pb.RecordBatch(records=[record, record]))]
    assert (streamer.sent, streamer.unsendable) == (2, 1)
    assert [r.getMessage() for r in caplog.records] == [
        "vllm-otel-metrics: a iteration_stats record of engine 3 has a number that is not "
        "finite; dropped and counted"
    ]


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
    settings = types.SimpleNamespace(
        queue=100, address="127.0.0.1:1", tls=False, token=None,
        sidecar=types.SimpleNamespace(ingest_socket=str(path)))
    return stream.Streamer(settings, to_records, weigh, poll_seconds=0.01, **kwargs)


def test_over_the_ingest_socket_each_record_arrives_once_in_order(tmp_path):
    from vllm_otel_metrics import tap

    sink = SocketSink(tmp_path / "s.sock")
    writer = tap.ChunkWriter(pb, model_name="m")
    chunk = writer.record([b"\x90", b"\x91\x01"], [1.0, 2.0], 3)
    sleep = pb.Record(sleep_state=pb.SleepState(model_name="m", level=1))
    records = {"a": [sleep, chunk], "b": [sleep]}
    streamer = socket_streamer(tmp_path / "s.sock", records.get).start()
    try:
        streamer.submit("a")
        streamer.submit("b")
        received = sink.wait_for(3)
    finally:
        streamer.close()
        sink.close()
    assert received == [sleep, pb.Record.FromString(chunk.SerializeToString()), sleep]
    assert [len(c) for c in sink.connections] == [3]
    assert streamer.transport == "socket"


def close_one_connection(tmp_path, caplog, answer):
    """Sends 0, lets the sink close the connection (answering how many it
    read when ``answer``), then sends 1 and 2; returns what arrived and the
    streamer."""
    import time

    sink = SocketSink(tmp_path / "s.sock", close_after=1, answer=answer)
    records = {i: [pb.Record(sleep_state=pb.SleepState(model_name=str(i), level=1))] for i in range(3)}
    streamer = socket_streamer(tmp_path / "s.sock", records.get).start()
    try:
        streamer.submit(0)
        sink.wait_for(1)
        # The sidecar closed that connection; what is sent next fails on it.
        time.sleep(0.1)
        with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
            streamer.submit(1)
            time.sleep(0.3)
            streamer.submit(2)
            received = sink.wait_for(3, timeout=5.0)
    finally:
        streamer.close()
        sink.close()
    return received, sink.connections, streamer


def test_a_record_the_closed_connection_did_not_read_is_sent_on_the_next(tmp_path, caplog):
    received, connections, streamer = close_one_connection(tmp_path, caplog, answer=True)
    assert [r.sleep_state.model_name for r in received] == ["0", "1", "2"]
    assert [len(c) for c in connections] == [1, 2]
    assert streamer.lost == 0
    assert "closed (Broken pipe); the 1 records it had not read are sent again" in caplog.text


def test_without_the_sidecars_answer_the_record_being_sent_is_counted_lost(tmp_path, caplog):
    received, _, streamer = close_one_connection(tmp_path, caplog, answer=False)
    # 1 is lost; the drops record that says so arrives with 2.
    names = [r.sleep_state.model_name for r in received if r.WhichOneof("record") == "sleep_state"]
    drops = [r.plugin_drops.dropped for r in received if r.WhichOneof("record") == "plugin_drops"]
    assert (names, drops, streamer.lost) == (["0", "2"], [1], 1)
    assert "the record being sent is lost and counted" in caplog.text
