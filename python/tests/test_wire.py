"""The wire encoding: the hand-built frames chunk is the record protobuf
builds; which records go out in one message."""

import test_tap
from vllm_otel_metrics import convert, tap, wire


def test_a_hand_built_chunk_is_the_record_protobuf_builds():
    pb = convert.messages()
    fields = (["engine_index", "outputs", "timestamp"], ["request_id", "new_token_ids"])
    writer = wire.ChunkWriter(
        model_name="m\u00e9",
        engine_core_outputs_fields=fields[0],
        engine_core_output_fields=fields[1],
        kv_consumer=True,
        lora_enabled=True,
    )
    # Long enough for multi-byte lengths at every level.
    frames = [bytes([i % 256]) * (i * 37) for i in range(1, 200)]
    times = [1.7e9 + i / 7 for i in range(len(frames))]
    raw = writer.record(frames, times, sum(map(len, frames)))
    data = raw.SerializeToString()
    assert raw.size == len(data)
    expected = pb.Record(
        frames=pb.EngineCoreFrames(
            model_name="m\u00e9",
            engine_core_outputs_fields=fields[0],
            engine_core_output_fields=fields[1],
            frames=b"".join(frames),
            frame_lengths=[len(f) for f in frames],
            sent_at=times,
            kv_consumer=True,
            lora_enabled=True,
        )
    )
    assert pb.Record.FromString(data) == expected
    assert len(data) == len(expected.SerializeToString())


def test_frames_records_go_alone_the_rest_batched_in_order():
    t = test_tap.make_tap()
    records = t._to_records(
        [
            tap.started(1.0, test_tap.request("r1")),
            tap.started(1.0, test_tap.request("r2")),
            (2.0, b"\x90"),
            tap.Aborted(3.0, ["r1"]),
            (4.0, b"\x90"),
            (4.5, b"\x90"),
        ]
    )
    messages = test_tap.parsed(wire.messages_of(records))
    shapes = [
        [r.WhichOneof("record") for r in m.batch.records]
        if m.WhichOneof("record") == "batch"
        else m.WhichOneof("record")
        for m in messages
    ]
    assert shapes == [["request", "request"], "frames", "abort", "frames"]
