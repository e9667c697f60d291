"""The outbox: what the stream sends of the records a queued item becomes,
and what it counts and logs."""

import logging
import threading

from vllm_otel_metrics.v1 import ingest_pb2 as pb

import streams
from streams import here, parsed, sleep_record
from vllm_otel_metrics import convert, resend, wire


def test_a_record_that_is_not_finite_is_counted_and_logged_and_the_others_are_sent(caplog):
    record = sleep_record()
    records = {"item": [record, convert.NotFinite("iteration_stats", 3), record]}
    streamer = streams.streamer(records.get)
    # Stopped: the iterator ends once it has sent what was queued.
    streamer._stop.set()
    streamer.queue.submit("item")
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        sent = list(streamer.grpc.requests(threading.Event(), resend.Handed(), threading.Lock()))
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

    streamer = streams.streamer(to_records, queue=1000)
    streamer._stop.set()
    for item in ["not finite", "broken"] * 50:
        streamer.queue.submit(item)
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        sent = list(
            streamer.grpc.requests(threading.Event(), resend.Handed(1000), threading.Lock())
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
    limit = streamer.outbox.limits
    limit._next = {kind: 0.0 for kind in limit._next}
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        streamer.queue.submit("not finite")
        list(streamer.grpc.requests(threading.Event(), resend.Handed(1000), threading.Lock()))
    assert here(caplog)[-1] == (
        "vllm-otel-metrics: a iteration_stats record of engine 0 has a number that is not "
        "finite; dropped and counted (49 more like it in the last 10 s not logged)"
    )


def test_a_batch_too_large_for_one_message_is_split_and_a_record_too_large_counted(
    monkeypatch, caplog
):
    """Before: a batch message beyond the message limit went out whole (the
    sidecar refuses it: the call breaks and its records are lost,
    uncounted). After: it is split in halves until each fits; a record too
    large alone is counted, logged once, and never handed to the call."""
    monkeypatch.setattr(wire, "MAX_MESSAGE_BYTES", 100)
    records = [sleep_record(f"model-{i:02}") for i in range(10)]
    huge = sleep_record("x" * 200)
    items = {"a": [*records[:5], huge, *records[5:]]}
    streamer = streams.streamer(items.get, max_records=16)
    streamer._stop.set()
    streamer.queue.submit("a")
    handed = resend.Handed()
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        sent = list(streamer.grpc.requests(threading.Event(), handed, threading.Lock()))
    assert all(len(m.SerializeToString()) <= 100 for m in sent)
    assert len(sent) > 1
    arrived = [r for m in parsed(sent) for r in (m.batch.records if m.HasField("batch") else [m])]
    assert arrived == records
    assert (streamer.sent, streamer.unsendable, handed.count) == (10, 1, 10)
    assert here(caplog) == [
        f"vllm-otel-metrics: a sleep_state record of {huge.ByteSize()} bytes is larger than a "
        "message may be (100 bytes); dropped and counted"
    ]
