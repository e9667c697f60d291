"""The bounded queues: their bounds, and the counters they own."""

import streams
from streams import sleep_record
from vllm_otel_metrics import bounded_queue, outbox


def test_the_queue_is_bounded_in_records_not_items():
    """Before: the bound counted items, whatever their records (an engine
    step is two). After: records, counted lock-free by submit() in and by
    the thread out."""
    streamer = streams.streamer(lambda item: [sleep_record()] * item, lambda item: item, queue=5)
    for weight in (2, 2, 2, 1, 1):
        streamer.queue.submit(weight)
    assert list(streamer.queue.items) == [2, 2, 1]
    assert streamer.dropped == 3
    # The thread takes one: its records make room.
    assert streamer.outbox.refill(outbox.Ticks())
    streamer.queue.submit(2)
    assert (list(streamer.queue.items), streamer.dropped) == ([2, 1, 2], 3)


def test_the_frame_queue_counts_its_frames_until_they_are_let_go():
    """The tap's hooks and the streamer change the frame queue's counters
    through its methods only: a frame queued counts in, a drained batch that
    could not be converted or a chunk let go counts out."""
    sent = []
    frames = bounded_queue.FrameQueue(3, 10, lambda item: 1, max_drain=8)
    through = frames.frames_through(lambda socket, buffers: sent.append(buffers) or "sent")
    for size in (4, 4, 4):
        assert through(None, [b"\x90" * size]) == "sent"
    assert len(sent) == 3
    assert (len(frames), frames.held_bytes, frames.dropped_frames, frames.drops) == (2, 8, 1, 1)
    frames.put("start")
    frames.drop(2)
    assert (len(frames), frames.dropped, frames.drops) == (3, 2, 3)
    # Full in items: a frame is dropped before it is copied.
    through(None, [b"\x90"])
    assert (frames.dropped_frames, frames.held_bytes) == (2, 8)
    batch = frames.take()
    assert [type(item) for item in batch] == [tuple, tuple, str]
    # Taken, the frames are still held; discarded, they are not.
    assert (frames.take(), frames.held_bytes) == (None, 8)
    assert frames.discard(batch) == 3
    assert frames.held_bytes == 0
    through(None, [b"\x90" * 4])
    frames.clear()
    assert (len(frames), frames.held_bytes) == (0, 0)
    assert frames.window_bytes() == 5


def test_a_record_queue_turned_off_drops_everything():
    queue = bounded_queue.RecordQueue(10, lambda item: item)
    queue.submit(2)
    queue.turn_off()
    queue.submit(3)
    assert (list(queue.items), queue.dropped, queue.records_in) == ([2], 3, 2)
    queue.clear()
    assert (len(queue), queue.records_in - queue.records_out) == (0, 0)
