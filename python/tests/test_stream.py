"""The streaming thread: transport choice, reconnection, turning off, closing."""

import logging

import streams
from streams import SocketSink, sleep_record, socket_streamer, submit_one, wait
from vllm_otel_metrics import stream


def test_a_session_that_fails_is_one_line_then_a_reconnection(tmp_path, caplog):
    """Before: an exception in a session other than gRPC's ended the
    thread: nothing more was sent, and nothing said so in vLLM's log.
    After: one line, then a new connection."""
    sink = SocketSink(tmp_path / "s.sock")
    records = {0: [sleep_record("0")]}
    streamer = socket_streamer(tmp_path / "s.sock", records.get)
    session = streamer.socket.session
    calls = []

    def failing_once(sock):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return session(sock)

    streamer.socket.session = failing_once
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
    streamer = streams.streamer(
        lambda item: [sleep_record()],
        queue=100,
        address=f"{host}:{port}",
        token="s3cret",
        socket=tmp_path / "none.sock",
        poll_seconds=0.01,
    ).start()
    try:
        streamer.queue.submit(0)
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
    streamer.queue.submit(step)
    streamer.start()
    try:
        assert wait(lambda: streamer.off)
        assert streamer._thread.is_alive()
        streamer.queue.submit(step)
        assert streamer.pending == 0
        assert wait(lambda: not streamer.queue)
    finally:
        streamer.close()
        sink.close()
    assert (sink.connections, streamer.sent) == ([], 0)


def test_a_closed_streamer_logs_nothing_more(monkeypatch, caplog):
    """Why the first test of this module failed now and then: a streamer
    another test had closed was still waiting for its connection (close()
    waits 0.1 s for the thread), and logged "unreachable" into this
    module's captured lines. Now a closed streamer's thread says nothing
    more (and the tests read their own thread's lines)."""
    import time

    monkeypatch.setattr(stream, "CONNECT_TIMEOUT", 0.3)
    streamer = streams.streamer(lambda item: [], address="127.0.0.1:9").start()
    time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        # Closed while it waits for its first connection.
        streamer.close(timeout=0)
        streamer._thread.join(2.0)
    assert [r.getMessage() for r in caplog.records if r.thread == streamer._thread.ident] == []
