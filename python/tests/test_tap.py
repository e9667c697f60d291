"""The engine-core tap's hooks and its records, on a stand-in engine core
(the live test, tests/vllm_live.rs, runs it inside vLLM's own)."""

import gc
import threading
import types
import weakref

import pytest

from vllm_otel_metrics import config, convert, tap, wire


class StandInEngine:
    """The three methods the tap wraps, recording their calls."""

    def __init__(self):
        self.calls = []

    def _send_msg_tracking_payload(self, socket, buffers):
        self.calls.append(("send", socket, bytes(buffers[0])))
        return "tracker"

    def add_request(self, request, wave=0):
        self.calls.append(("add", request.request_id, wave))

    def abort_requests(self, request_ids):
        self.calls.append(("abort", list(request_ids)))


def parsed(records):
    """Records as protobuf parses them (the tap builds frames chunks by hand)."""
    pb = convert.messages()
    return [pb.Record.FromString(r.SerializeToString()) for r in records]


def make_tap(queue=16, queue_bytes=None):
    env = {"VLLM_OTEL_METRICS_QUEUE": str(queue), "VLLM_OTEL_METRICS_SIDECAR": "off"}
    if queue_bytes is not None:
        env["VLLM_OTEL_METRICS_QUEUE_BYTES"] = str(queue_bytes)
    settings = config.from_env(env)
    return tap.Tap(
        settings,
        "tiny",
        0,
        ["engine_index", "outputs", "timestamp"],
        ["request_id", "new_token_ids", "finish_reason", "events"],
        False,
        False,
    )


def request(request_id, stop=None, headers=None):
    params = types.SimpleNamespace(max_tokens=32, n=1, stop=stop)
    return types.SimpleNamespace(
        request_id=request_id,
        arrival_time=1700000000.0,
        num_prompt_tokens=7,
        sampling_params=params,
        trace_headers=headers,
        lora_request=None,
        priority=0,
    )


def test_hooks_call_through_and_queue_in_order():
    t = make_tap()
    engine = StandInEngine()
    t._hook(engine)
    buffer = bytearray(b"\x91\x00")
    engine.add_request(request("r1"), 3)
    assert engine._send_msg_tracking_payload("sock", [buffer, b"aux"]) == "tracker"
    # vLLM reuses its buffer: the tap's copy must not change with it.
    buffer[0] = 0xFF
    engine.abort_requests(("r1",))
    assert engine.calls == [("add", "r1", 3), ("send", "sock", b"\x91\x00"), ("abort", ["r1"])]
    items = list(t.queue.items)
    assert [type(i).__name__ for i in items] == ["Started", "tuple", "Aborted"]
    assert items[1][1] == b"\x91\x00"


def test_a_full_queue_drops_and_counts_but_vllm_goes_on():
    t = make_tap(queue=1)
    engine = StandInEngine()
    t._hook(engine)
    engine.add_request(request("r1"))
    engine._send_msg_tracking_payload("sock", [b"\x90"])
    engine.abort_requests(["r1", "r2"])
    assert len(engine.calls) == 3
    assert len(t.queue.items) == 1
    # The frame's drop on vLLM's output thread, the aborts' on its engine
    # thread: a counter each, one writer each.
    assert (t.queue.dropped_frames, t.queue.dropped) == (1, 2)


def test_frames_are_bounded_in_bytes_too():
    """Before: only the number of queued items was bounded, so large steps
    (a batch of long outputs) could queue without limit in bytes. After:
    VLLM_OTEL_METRICS_QUEUE_BYTES bounds the frames' bytes as well, counted
    lock-free: in by the output hook, out by the streaming thread once it
    lets a frame go (not when it drains it: test_frames_held_anywhere_...)."""
    t = make_tap(queue=100, queue_bytes=10)
    engine = StandInEngine()
    t._hook(engine)
    for _ in range(3):
        engine._send_msg_tracking_payload("sock", [b"\x90" * 4])
    assert [len(frame) for _at, frame in t.queue.items] == [4, 4]
    assert t.queue.dropped_frames == 1
    drained = t.queue.take()
    assert len(drained) == 2
    # Drained, the frames are still held: no room yet.
    engine._send_msg_tracking_payload("sock", [b"\x90" * 4])
    assert (len(t.queue.items), t.queue.dropped_frames, t.queue.held_bytes) == (0, 2, 8)
    (chunk,) = t._to_records(drained)
    assert chunk.frame_bytes == 8
    t.streamer.outbox.let_go(chunk)
    engine._send_msg_tracking_payload("sock", [b"\x90" * 4])
    assert (len(t.queue.items), t.queue.dropped_frames, t.queue.held_bytes) == (1, 2, 4)
    assert len(engine.calls) == 5


def test_frames_held_anywhere_count_against_one_byte_bound():
    """Before: frames counted against VLLM_OTEL_METRICS_QUEUE_BYTES only
    while queued; drained, converted, waiting to be sent and kept in the
    resend window (64 chunks of up to 512 KiB: 32 MiB beside the default
    64 MiB) they counted against nothing. After: until the streamer lets
    them go, so the bound holds over all of them, and the resend window
    keeps at most half of it."""
    bound, size = 8000, 1000
    t = make_tap(queue=1000, queue_bytes=bound)
    engine = StandInEngine()
    t._hook(engine)
    streamer = t.streamer
    frames = t.queue
    handed = streamer.outbox.handed()
    requests = streamer.grpc.requests(threading.Event(), handed, threading.Lock())

    def held():
        """Counted here, independently of the streamer's counters."""
        queued = sum(len(item[1]) for item in frames.items if type(item) is tuple)
        waiting = sum(r.frame_bytes for r in streamer.outbox.unsent if type(r) is wire.Raw)
        kept = sum(r.frame_bytes for r in handed.last if type(r) is wire.Raw)
        return queued + waiting + kept

    # The sidecar reads: each step's frame goes out as a chunk of its own.
    for _ in range(20):
        engine._send_msg_tracking_payload("sock", [b"\x90" * size])
        next(requests)
        assert held() == frames.held_bytes <= bound
    assert (handed.count, len(handed.last), handed.bytes) == (20, 4, 4000)
    assert frames.dropped_frames == 0
    # The sidecar stops reading, the resend window full: the queue takes
    # what the window leaves of the bound, and no more.
    for _ in range(10):
        engine._send_msg_tracking_payload("sock", [b"\x90" * size])
    assert (len(frames.items), frames.dropped_frames) == (4, 6)
    assert held() == frames.held_bytes == bound
    # A shutting-down sidecar read all but the last two chunks: they are
    # sent again (still held), the others in the window are let go.
    assert streamer.outbox.send_unread_again(handed, 18) == 2
    assert frames.held_bytes == 4 * size + 2 * size
    # The next call sends everything (the two chunks again, the four queued
    # frames as one chunk, the drops record), and the sidecar reads it all.
    streamer._stop.set()
    again = streamer.outbox.handed()
    list(streamer.grpc.requests(threading.Event(), again, threading.Lock()))
    assert (again.count, len(frames.items), len(streamer.outbox.unsent)) == (4, 0, 0)
    assert streamer.outbox.send_unread_again(again, again.count) == 0
    assert frames.held_bytes == 0


def test_the_queue_keeps_no_reference_to_the_request():
    """Before: add_request queued vLLM's Request itself (its prompt token
    ids, its multimodal inputs), read on the streaming thread: while the
    sidecar was down, up to VLLM_OTEL_METRICS_QUEUE requests stayed alive
    in the engine core. After: the few fields the record needs, copied."""

    class Params:
        def __init__(self):
            self.max_tokens, self.n, self.stop = 32, 2, ["###"]

    class Request:
        def __init__(self, request_id):
            self.request_id = request_id
            self.arrival_time = 1700000000.0
            self.num_prompt_tokens = 7
            self.prompt_token_ids = list(range(7))
            self.sampling_params = Params()
            self.trace_headers = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
            self.lora_request = types.SimpleNamespace(lora_name="sql-adapter", lora_int_id=1)
            self.priority = -3

    t = make_tap()
    engine = StandInEngine()
    t._hook(engine)
    request = Request("r1")
    inner = (
        request,
        request.sampling_params,
        request.prompt_token_ids,
        request.sampling_params.stop,
        request.trace_headers,
        request.lora_request,
    )
    engine.add_request(request, 1)
    (item,) = t.queue.items
    assert not [o for o in gc.get_referents(item) if any(o is x for x in inner)]
    alive = [weakref.ref(request), weakref.ref(request.sampling_params)]
    del request, inner
    gc.collect()
    assert [ref() for ref in alive] == [None, None]
    # What the queue holds still makes the request's record.
    assert engine.calls == [("add", "r1", 1)]
    (record,) = parsed(t._to_records(list(t.queue.items)))
    assert record.request == convert.messages().RequestStarted(
        request_id="r1",
        model_name="tiny",
        arrival_time=1700000000.0,
        prompt_len=7,
        max_tokens=32,
        n=2,
        stop_strings=True,
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        lora_name="sql-adapter",
        priority=-3,
    )


def test_a_vllm_request_is_copied_not_kept():
    """The same with vLLM's own Request (vLLM 0.33.0), as its input thread
    makes it from an EngineCoreRequest: the prompt's token ids die with it."""
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.request import Request

    core_request = EngineCoreRequest(
        request_id="cmpl-1",
        prompt_token_ids=list(range(512)),
        mm_features=None,
        sampling_params=SamplingParams(max_tokens=128),
        pooling_params=None,
        arrival_time=1700000000.5,
        lora_request=LoRARequest("sql", 1, "/adapters/sql"),
        cache_salt=None,
        data_parallel_rank=None,
        priority=7,
    )
    request = Request.from_engine_core_request(core_request, None)
    t = make_tap()
    engine = StandInEngine()
    t._hook(engine)
    engine.add_request(request)
    alive = weakref.ref(request)
    del request, core_request
    gc.collect()
    assert alive() is None
    (record,) = parsed(t._to_records(list(t.queue.items)))
    assert (
        record.request.request_id,
        record.request.arrival_time,
        record.request.prompt_len,
        record.request.max_tokens,
        record.request.n,
        record.request.stop_strings,
        record.request.lora_name,
        record.request.priority,
    ) == ("cmpl-1", 1700000000.5, 512, 128, 1, False, "sql", 7)


def test_a_request_that_cannot_be_read_is_counted_and_the_rest_is_sent():
    """Before: one request the tap could not read made the whole drain
    (every frame of a second of steps) one "cannot convert" traceback.
    After: that request alone is counted; the rest goes out. One whose
    fields cannot be read in add_request is counted too, and vLLM's own
    add_request runs all the same."""
    t = make_tap()
    engine = StandInEngine()
    t._hook(engine)
    # Sampling parameters without max_tokens: add_request cannot copy them.
    broken = request("r0")
    broken.sampling_params = object()
    engine.add_request(broken)
    assert engine.calls == [("add", "r0", 0)]
    (unreadable,) = t.queue.items
    odd = tap.started(2.0, request("r1"))
    odd.arrival_time = "soon"
    records = t._to_records([(1.0, b"\x90"), unreadable, odd, tap.started(3.0, request("r2"))])
    assert [(r.kind, r.error) for r in records[1:3]] == [
        ("request", "AttributeError: 'object' object has no attribute 'max_tokens'"),
        ("request", "ValueError: could not convert string to float: 'soon'"),
    ]
    kinds = [r.WhichOneof("record") for r in parsed([records[0], records[3]])]
    assert kinds == ["frames", "request"]


def test_records_keep_the_order_and_join_consecutive_frames():
    t = make_tap()
    pb = convert.messages()
    items = [
        tap.started(
            5.0,
            request(
                "r1",
                stop=["###"],
                headers={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
            ),
        ),
        (6.0, b"\x91\x01"),
        (6.5, b"\x91\x02\x03"),
        tap.Aborted(7.0, ["r1", "r2"]),
        (8.0, b"\x90"),
    ]
    records = parsed(t._to_records(items))
    kinds = [r.WhichOneof("record") for r in records]
    assert kinds == ["request", "frames", "abort", "abort", "frames"]
    started = records[0].request
    assert (
        started.request_id,
        started.model_name,
        started.prompt_len,
        started.max_tokens,
        started.n,
        started.stop_strings,
    ) == ("r1", "tiny", 7, 32, 1, True)
    assert started.traceparent.startswith("00-aaaa")
    frames = records[1].frames
    assert frames.frames == b"\x91\x01\x91\x02\x03"
    assert list(frames.frame_lengths) == [2, 3]
    assert list(frames.sent_at) == [6.0, 6.5]
    assert list(frames.engine_core_output_fields)[:2] == ["request_id", "new_token_ids"]
    assert [(r.abort.request_id, r.abort.received_at) for r in records[2:4]] == [
        ("r1", 7.0),
        ("r2", 7.0),
    ]
    assert pb.Record.FromString(records[4].SerializeToString()).frames.frames == b"\x90"


def test_a_chunk_never_grows_beyond_its_byte_bound():
    t = make_tap()
    frame = b"\x90" * (tap.MAX_CHUNK_BYTES // 3 + 1)
    records = parsed(t._to_records([(float(i), frame) for i in range(7)]))
    assert [len(r.frames.frame_lengths) for r in records] == [2, 2, 2, 1]
    assert all(len(r.frames.frames) <= tap.MAX_CHUNK_BYTES for r in records)


def test_a_chunk_never_holds_more_frames_than_one_sendmsg_takes():
    t = make_tap()
    records = parsed(
        t._to_records([(float(i), b"\x90") for i in range(2 * tap.MAX_CHUNK_FRAMES + 1)])
    )
    assert [len(r.frames.frame_lengths) for r in records] == [tap.MAX_CHUNK_FRAMES] * 2 + [1]
    assert [len(r.frames.sent_at) for r in records] == [tap.MAX_CHUNK_FRAMES] * 2 + [1]


def test_an_unreadable_layout_is_named():
    outputs = types.SimpleNamespace(__struct_fields__=("outputs", "timestamp"))
    output = types.SimpleNamespace(__struct_fields__=("request_id", "new_token_ids", "events"))
    assert tap.readable_layout(outputs, output) == "EngineCoreOutput has no field 'finish_reason'"
    assert tap.readable_layout(object, output) == "EngineCoreOutputs is not a msgspec struct"


def test_the_source_follows_the_frontend_unless_chosen():
    assert config.engine_source({"VLLM_USE_RUST_FRONTEND": "true"}) == "engine_core"
    assert (
        config.engine_source(
            {"VLLM_OTEL_METRICS_SOURCE": "stat_logger", "VLLM_USE_RUST_FRONTEND": "1"}
        )
        == "stat_logger"
    )


def test_an_abort_is_recorded_once_while_the_scheduler_runs_the_request():
    # vLLM 0.33 calls abort_requests twice for one abort from the frontend.
    t = make_tap()
    engine = StandInEngine()
    running = types.SimpleNamespace(is_finished=lambda: False)
    finished = types.SimpleNamespace(is_finished=lambda: True)
    engine.scheduler = types.SimpleNamespace(requests={"r1": running, "done": finished})
    t._hook(engine)
    engine.abort_requests(["r1", "done", "unknown"])
    engine.scheduler.requests["r1"] = finished
    engine.abort_requests(["r1"])
    engine.abort_requests("r1")
    aborts = [item.request_ids for item in t.queue.items]
    assert aborts == [["r1"]]
    # vLLM's own method saw every call.
    assert [c for c in engine.calls if c[0] == "abort"] == [
        ("abort", ["r1", "done", "unknown"]),
        ("abort", ["r1"]),
        ("abort", ["r", "1"]),
    ]


def test_under_vllm_rs_the_main_process_starts_the_sidecar_with_rust_buckets(
    monkeypatch, started_supervisors, tmp_path
):
    from vllm_otel_metrics import sidecar

    started = started_supervisors(sidecar)
    monkeypatch.setenv("VLLM_OTEL_METRICS_SIDECAR", "auto")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    tap.start_sidecar()
    ((settings, max_model_len, token_buckets),) = started
    argv = sidecar.command("bin", settings, max_model_len, token_buckets)
    assert argv[argv.index("--token-buckets") + 1] == "rust"
    # vllm-rs's token buckets end at 131072 whatever the model: the default.
    assert "--max-model-len" not in argv


def test_queued_items_are_matched_by_type():
    """The engine start's records come as they were queued, and each kind
    of item weighs the records it stands for; anything else is refused,
    not taken for an engine start."""
    t = make_tap()
    config_record = convert.engine_config_record(types.SimpleNamespace(), "tiny", 0, None, 8)
    start = tap.EngineStart([config_record, config_record])
    assert t._to_records([start]) == [config_record, config_record]
    assert [t._weigh(item) for item in (start, tap.Aborted(1.0, ["a", "b", "c"]))] == [2, 3]
    assert t._weigh((1.0, b"\x90")) == 1
    with pytest.raises(TypeError, match="not an item the tap queues"):
        t._to_records([[config_record]])
