"""gRPC: the call, its request iterator on gRPC's thread, and the turns it
takes with the stream's thread."""

import logging
import threading
import types

import streams
from streams import here, sleep_record
from vllm_otel_metrics import grpc_transport, resend


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

    streamer = streams.streamer(lambda i: [])
    with caplog.at_level(logging.WARNING, logger="vllm.vllm_otel_metrics"):
        assert streamer.grpc.one_call(Channel()) == grpc.StatusCode.UNAVAILABLE
    assert here(caplog) == [
        "vllm-otel-metrics: stream to 127.0.0.1:1 ended (UNAVAILABLE: refused); what it had in "
        "flight may be lost; reconnecting"
    ]


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

    streamer = streams.streamer(slow)
    done, turn = threading.Event(), threading.Lock()
    requests = streamer.grpc.requests(done, resend.Handed(), turn)
    streamer.queue.submit("a")
    streamer.queue.submit("b")
    iterating = threading.Thread(target=lambda: list(requests), daemon=True)
    iterating.start()
    assert entered.wait(5)
    ended = threading.Event()
    ending = threading.Thread(
        target=lambda: (grpc_transport.end_turns(done, turn), ended.set()), daemon=True
    )
    ending.start()
    assert not ended.wait(0.2), "the turn under way was not waited for"
    release.set()
    assert ended.wait(5)
    iterating.join(5)
    assert not iterating.is_alive()
    # The second item was never taken: no turn started after the end.
    assert (streamer.queue.records_out, len(streamer.queue)) == (1, 1)
