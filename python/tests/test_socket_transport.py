"""The ingest socket: each record once, in order; what a closed connection
did not read is sent again."""

import logging

from vllm_otel_metrics.v1 import ingest_pb2 as pb

from streams import SocketSink, sleep_record, socket_streamer, submit_one
from vllm_otel_metrics import wire


def test_over_the_ingest_socket_each_record_arrives_once_in_order(tmp_path):

    sink = SocketSink(tmp_path / "s.sock")
    writer = wire.ChunkWriter(model_name="m")
    chunk = writer.record([b"\x90", b"\x91\x01"], [1.0, 2.0], 3)
    sleep = pb.Record(sleep_state=pb.SleepState(model_name="m", level=1))
    records = {"a": [sleep, chunk], "b": [sleep]}
    streamer = socket_streamer(tmp_path / "s.sock", records.get).start()
    try:
        streamer.queue.submit("a")
        streamer.queue.submit("b")
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
        streamer.queue.submit(0)
        sink.wait_for(1)
        # The sidecar closed that connection; what is sent next fails on it.
        time.sleep(0.1)
        with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
            streamer.queue.submit(1)
            time.sleep(0.3)
            streamer.queue.submit(2)
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


def test_over_the_socket_a_record_too_large_is_counted_not_sent(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(wire, "MAX_MESSAGE_BYTES", 100)
    sink = SocketSink(tmp_path / "s.sock")
    records = {0: [sleep_record("x" * 200), sleep_record("after")]}
    streamer = socket_streamer(tmp_path / "s.sock", records.get)
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        received = submit_one(streamer, sink)
    assert [r.sleep_state.model_name for r in received if r.HasField("sleep_state")] == ["after"]
    assert streamer.unsendable == 1
    assert "a sleep_state record of 208 bytes is larger than a message may be" in caplog.text
