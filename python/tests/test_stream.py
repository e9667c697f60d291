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
