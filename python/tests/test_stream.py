"""The stream thread's request iterator: what it sends of the records a
queued item becomes, and what it counts and logs."""

import logging
import threading
import types

from vllm_otel_metrics.v1 import ingest_pb2 as pb

from vllm_otel_metrics import convert, stream


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


def test_a_record_that_is_not_finite_is_counted_and_logged_and_the_others_are_sent(caplog):
    record = sleep_record()
    records = {"item": [record, convert.NotFinite("iteration_stats", 3), record]}
    streamer = stream.Streamer(types.SimpleNamespace(queue=10), records.get)
    # Stopped: the iterator ends once it has sent what was queued.
    streamer._stop.set()
    streamer.submit("item")
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        sent = list(streamer._requests(pb, threading.Event(), stream.Handed(), threading.Lock()))
    assert parsed(sent) == [pb.Record(batch=pb.RecordBatch(records=[record, record]))]
    assert (streamer.sent, streamer.unsendable) == (2, 1)
    assert here(caplog) == [
        "vllm-otel-metrics: a iteration_stats record of engine 3 has a number that is not "
        "finite; dropped and counted"
    ]


def test_a_flood_of_bad_records_is_one_log_line_per_kind_and_ten_seconds(caplog):
    """Before: a line per bad record (and a traceback per item that did not
    convert) on vLLM's log. After: one line per kind every 10 s, counted
    all the same; the next line says how many were left out."""
    record = sleep_record()

    def to_records(item):
        if item == "broken":
            raise ValueError("no such field")
        return [convert.NotFinite("iteration_stats", 0), record]

    streamer = stream.Streamer(types.SimpleNamespace(queue=1000), to_records)
    streamer._stop.set()
    for item in ["not finite", "broken"] * 50:
        streamer.submit(item)
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        sent = list(
            streamer._requests(pb, threading.Event(), stream.Handed(1000), threading.Lock())
        )
    assert (streamer.unsendable, streamer.sent) == (100, 50)
    assert sum(len(m.batch.records) or 1 for m in parsed(sent)) == 50
    assert here(caplog) == [
        "vllm-otel-metrics: a iteration_stats record of engine 0 has a number that is not "
        "finite; dropped and counted",
        "vllm-otel-metrics: cannot convert 1 queued records (ValueError: no such field); dropped "
        "and counted",
    ]
    # Ten seconds on, the next line of a kind says how many were left out.
    limit = streamer._limits
    limit._next = {kind: 0.0 for kind in limit._next}
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        streamer.submit("not finite")
        list(streamer._requests(pb, threading.Event(), stream.Handed(1000), threading.Lock()))
    assert here(caplog)[-1] == (
        "vllm-otel-metrics: a iteration_stats record of engine 0 has a number that is not "
        "finite; dropped and counted (49 more like it in the last 10 s not logged)"
    )


def test_the_queue_is_bounded_in_records_not_items():
    """Before: the bound counted items, whatever their records (an engine
    step is two). After: records, counted lock-free by submit() in and by
    the thread out."""
    streamer = stream.Streamer(
        types.SimpleNamespace(queue=5), lambda item: [sleep_record()] * item, lambda item: item
    )
    for weight in (2, 2, 2, 1, 1):
        streamer.submit(weight)
    assert list(streamer.queue) == [2, 2, 1]
    assert streamer.dropped == 3
    # The thread takes one: its records make room.
    assert streamer._refill(pb, stream._Ticks())
    streamer.submit(2)
    assert (list(streamer.queue), streamer.dropped) == ([2, 1, 2], 3)


def test_a_batch_too_large_for_one_message_is_split_and_a_record_too_large_counted(
    monkeypatch, caplog
):
    """Before: a batch message beyond the message limit went out whole (the
    sidecar refuses it: the call breaks and its records are lost,
    uncounted). After: it is split in halves until each fits; a record too
    large alone is counted, logged once, and never handed to the call."""
    monkeypatch.setattr(stream, "MAX_MESSAGE_BYTES", 100)
    records = [sleep_record(f"model-{i:02}") for i in range(10)]
    huge = sleep_record("x" * 200)
    items = {"a": [*records[:5], huge, *records[5:]]}
    streamer = stream.Streamer(types.SimpleNamespace(queue=10), items.get, max_records=16)
    streamer._stop.set()
    streamer.submit("a")
    handed = stream.Handed()
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        sent = list(streamer._requests(pb, threading.Event(), handed, threading.Lock()))
    assert all(len(m.SerializeToString()) <= 100 for m in sent)
    assert len(sent) > 1
    arrived = [r for m in parsed(sent) for r in (m.batch.records if m.HasField("batch") else [m])]
    assert arrived == records
    assert (streamer.sent, streamer.unsendable, handed.count) == (10, 1, 10)
    assert here(caplog) == [
        f"vllm-otel-metrics: a sleep_state record of {huge.ByteSize()} bytes is larger than a "
        "message may be (100 bytes); dropped and counted"
    ]


def test_a_record_handed_after_the_call_ended_waits_for_the_next_call():
    """The request iterator runs on gRPC's thread; the stream's thread reads
    what was handed once the call has ended. Before: nothing kept the two
    apart: a record the iterator took after that read was in neither the
    records sent again nor the queue (lost, uncounted). After: the read
    closes the handing over; the iterator takes nothing more, and the
    records wait, in order, behind those sent again."""
    records = [sleep_record(str(i)) for i in range(6)]
    items = {"a": records[:2], "b": records[2:]}
    streamer = stream.Streamer(types.SimpleNamespace(queue=10), items.get, max_records=2)
    handed = stream.Handed()
    requests = streamer._requests(pb, threading.Event(), handed, threading.Lock())
    streamer.submit("a")
    first = next(requests)
    streamer.submit("b")
    # The call ends here, the sidecar having read none of the first batch;
    # the iterator is in the middle of its turn (not yet told it is done).
    assert streamer._send_unread_again(handed, 0) == 2
    assert not handed.note(records[0])
    # (Stopped, so that an iterator that does take them ends once they are sent.)
    streamer._stop.set()
    assert list(requests) == []
    assert parsed([first]) == [pb.Record(batch=pb.RecordBatch(records=records[:2]))]
    # The next call gets them all, in order.
    again = list(streamer._requests(pb, threading.Event(), stream.Handed(), threading.Lock()))
    arrived = [r for m in parsed(again) for r in m.batch.records]
    assert arrived == records
    assert streamer.lost == 0


def test_a_call_that_fails_to_start_is_logged_and_made_again(caplog):
    """Before: an error when the call was made (outside the try) ended the
    thread. After: a gRPC error there is the stream's end, logged; any
    other error one line, then a new connection after the back-off."""
    import grpc

    class Refused(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

        def details(self):
            return "refused"

    class Channel:
        def stream_unary(self, *args, **kwargs):
            return types.SimpleNamespace(future=self.future)

        def future(self, requests, metadata=None):
            raise Refused()

    streamer = stream.Streamer(types.SimpleNamespace(queue=10, address="127.0.0.1:1"), lambda i: [])
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        assert streamer._one_call(Channel(), pb, ()) == grpc.StatusCode.UNAVAILABLE
    assert here(caplog) == [
        "vllm-otel-metrics: stream to 127.0.0.1:1 ended (UNAVAILABLE: refused); what it had in "
        "flight may be lost; reconnecting"
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
        queue=100,
        address="127.0.0.1:1",
        tls=False,
        token=None,
        sidecar=types.SimpleNamespace(ingest_socket=str(path)),
    )
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
    records = {
        i: [pb.Record(sleep_state=pb.SleepState(model_name=str(i), level=1))] for i in range(3)
    }
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


def submit_one(streamer, sink):
    """Starts ``streamer``, submits item 0 and returns the first record
    ``sink`` receives; both are closed after."""
    streamer.start()
    try:
        streamer.submit(0)
        return sink.wait_for(1)
    finally:
        streamer.close()
        sink.close()


def test_a_session_that_fails_is_one_line_then_a_reconnection(tmp_path, caplog):
    """Before: an exception in a session other than gRPC's ended the
    thread: nothing more was sent, and nothing said so in vLLM's log.
    After: one line, then a new connection."""
    sink = SocketSink(tmp_path / "s.sock")
    records = {0: [sleep_record("0")]}
    streamer = socket_streamer(tmp_path / "s.sock", records.get)
    session = streamer._socket_session
    calls = []

    def failing_once(sock, pb_):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return session(sock, pb_)

    streamer._socket_session = failing_once
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        received = submit_one(streamer, sink)
    assert [r.sleep_state.model_name for r in received] == ["0"]
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.threadName == "vllm-otel-metrics-stream"
        and r.getMessage().startswith("vllm-otel-metrics: the stream to")
    ]
    assert lines == [
        f"vllm-otel-metrics: the stream to {tmp_path / 's.sock'} failed (RuntimeError: a bug); "
        "reconnecting in 0.2 s"
    ]


def test_a_started_sidecar_is_streamed_to_over_its_socket_only(tmp_path):
    """Before: with no sidecar on the ingest socket, the stream fell back
    to gRPC on the TCP port, whoever held it (on a shared host, another
    user could: they would get the token and the records). After: the
    socket only."""
    import socket

    impostor = socket.socket()
    impostor.bind(("127.0.0.1", 0))
    impostor.listen()
    impostor.settimeout(2.5)
    host, port = impostor.getsockname()
    settings = types.SimpleNamespace(
        queue=100,
        address=f"{host}:{port}",
        tls=False,
        token="s3cret",
        sidecar=types.SimpleNamespace(ingest_socket=str(tmp_path / "none.sock")),
    )
    streamer = stream.Streamer(settings, lambda item: [sleep_record()], poll_seconds=0.01).start()
    try:
        streamer.submit(0)
        try:
            connection, _ = impostor.accept()
            connection.close()
            connected = True
        except TimeoutError:
            connected = False
    finally:
        streamer.close(timeout=0.1)
        impostor.close()
    assert not connected
    assert streamer.pending == 1


def test_a_streamer_turned_off_sends_nothing_and_keeps_nothing(tmp_path):
    """The gate (sidecar.Gate) says no: another instance's sidecar, or none
    could start. Nothing is sent to the socket, nothing piles up."""
    sink = SocketSink(tmp_path / "s.sock")
    # Items as the stat-logger plugin queues them.
    step = ("step", 0, None, object(), None, 0.0)
    streamer = socket_streamer(
        tmp_path / "s.sock", lambda item: [sleep_record()], admit=lambda: False
    )
    streamer.submit(step)
    streamer.start()
    try:
        assert wait(lambda: streamer.off)
        assert streamer._thread.is_alive()
        streamer.submit(step)
        assert streamer.pending == 0
        assert wait(lambda: not streamer.queue)
    finally:
        streamer.close()
        sink.close()
    assert (sink.connections, streamer.sent) == ([], 0)


def test_over_the_socket_a_record_too_large_is_counted_not_sent(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(stream, "MAX_MESSAGE_BYTES", 100)
    sink = SocketSink(tmp_path / "s.sock")
    records = {0: [sleep_record("x" * 200), sleep_record("after")]}
    streamer = socket_streamer(tmp_path / "s.sock", records.get)
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        received = submit_one(streamer, sink)
    assert [r.sleep_state.model_name for r in received if r.HasField("sleep_state")] == ["after"]
    assert streamer.unsendable == 1
    assert "a sleep_state record of 208 bytes is larger than a message may be" in caplog.text


def wait(check, timeout=5.0):
    import time

    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


def test_a_closed_streamer_logs_nothing_more(monkeypatch, caplog):
    """Why the first test of this module failed now and then: a streamer
    another test had closed was still waiting for its connection (close()
    waits 0.1 s for the thread), and logged "unreachable" into this
    module's captured lines. Now a closed streamer's thread says nothing
    more (and the tests read their own thread's lines)."""
    import time

    monkeypatch.setattr(stream, "CONNECT_TIMEOUT", 0.3)
    settings = types.SimpleNamespace(queue=10, address="127.0.0.1:9", tls=False, token=None)
    streamer = stream.Streamer(settings, lambda item: []).start()
    time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        # Closed while it waits for its first connection.
        streamer.close(timeout=0)
        streamer._thread.join(2.0)
    assert [r.getMessage() for r in caplog.records if r.thread == streamer._thread.ident] == []


def test_the_streams_thread_goes_on_only_once_the_iterators_turn_has_ended():
    """The request iterator (gRPC's thread) converts and counts what it
    takes from the queue; the stream's thread, once the call has ended,
    writes the same counters (or starts the next call). Before: nothing
    kept the two apart, though the counters were documented as written by
    one thread. After: the stream's thread waits for the turn under way,
    and no turn starts after it."""
    entered, release = threading.Event(), threading.Event()

    def slow(item):
        entered.set()
        release.wait(5)
        return [sleep_record()]

    streamer = stream.Streamer(types.SimpleNamespace(queue=10), slow)
    done, turn = threading.Event(), threading.Lock()
    requests = streamer._requests(pb, done, stream.Handed(), turn)
    streamer.submit("a")
    streamer.submit("b")
    iterating = threading.Thread(target=lambda: list(requests), daemon=True)
    iterating.start()
    assert entered.wait(5)
    ended = threading.Event()
    ending = threading.Thread(
        target=lambda: (streamer._end_turns(done, turn), ended.set()), daemon=True
    )
    ending.start()
    assert not ended.wait(0.2), "the turn under way was not waited for"
    release.set()
    assert ended.wait(5)
    iterating.join(5)
    assert not iterating.is_alive()
    # The second item was never taken: no turn started after the end.
    assert (streamer.records_out, len(streamer.queue)) == (1, 1)
