"""The resend window: what a shutting-down sidecar did not read goes again,
in order, nothing lost, nothing twice."""

import threading

from vllm_otel_metrics.v1 import ingest_pb2 as pb

import streams
from streams import parsed, sleep_record
from vllm_otel_metrics import resend


def test_a_record_handed_after_the_call_ended_waits_for_the_next_call():
    """The request iterator runs on gRPC's thread; the stream's thread reads
    what was handed once the call has ended. Before: nothing kept the two
    apart: a record the iterator took after that read was in neither the
    records sent again nor the queue (lost, uncounted). After: the read
    closes the handing over; the iterator takes nothing more, and the
    records wait, in order, behind those sent again."""
    records = [sleep_record(str(i)) for i in range(6)]
    items = {"a": records[:2], "b": records[2:]}
    streamer = streams.streamer(items.get, max_records=2)
    handed = resend.Handed()
    requests = streamer.grpc.requests(threading.Event(), handed, threading.Lock())
    streamer.queue.submit("a")
    first = next(requests)
    streamer.queue.submit("b")
    # The call ends here, the sidecar having read none of the first batch;
    # the iterator is in the middle of its turn (not yet told it is done).
    assert streamer.outbox.send_unread_again(handed, 0) == 2
    assert not handed.note(records[0])
    # (Stopped, so that an iterator that does take them ends once they are sent.)
    streamer._stop.set()
    assert list(requests) == []
    assert parsed([first]) == [pb.Record(batch=pb.RecordBatch(records=records[:2]))]
    # The next call gets them all, in order.
    again = list(streamer.grpc.requests(threading.Event(), resend.Handed(), threading.Lock()))
    arrived = [r for m in parsed(again) for r in m.batch.records]
    assert arrived == records
    assert streamer.lost == 0
