"""Sends misfit input to `vllm-otel-metrics serve` and prints what happened,
one JSON object per line, for tests/grpc_ingest.rs.

Usage: grpc_misfits.py HOST:PORT
1. a stream of valid records with an empty record, a NaN time and an unknown
   event type among them -> the summary;
2. a stream whose second frame is not protobuf -> the error status;
3. another valid stream afterwards -> its summary (the server still serves);
4. a batch message holding a start, a batch (refused: batches do not nest)
   and a finish, then one more record -> the summary, positions counting the
   records inside the batch.
"""

import json
import sys

import grpc

sys.path.insert(0, __import__("pathlib").Path(__file__).resolve().parents[2].joinpath("examples", "python").as_posix())
import stream_trace  # noqa: E402  (generates the gRPC modules from proto/)

pb, services = stream_trace.load_modules()
target = sys.argv[1]


def summary_json(summary):
    return {
        "applied": summary.records_applied,
        "rejected": summary.records_rejected,
        "by_reason": dict(summary.rejected_by_reason),
        "first": list(summary.first_rejections),
    }


def start(request_id):
    return pb.Record(request=pb.RequestStarted(request_id=request_id, model_name="m", engine=0, arrival_time=100.0, prompt_len=8))


def finish(request_id):
    batch = pb.OutputBatch(engine=0, timestamp=5.0, received_at=101.0)
    batch.outputs.add(request_id=request_id, new_token_ids=[1], finish_reason=pb.FINISH_REASON_STOP)
    return pb.Record(outputs=batch)


with grpc.insecure_channel(target) as channel:
    stub = services.IngestStub(channel)
    bad_event = pb.OutputBatch(engine=0, timestamp=1.0, received_at=100.5)
    bad_event.outputs.add(request_id="a", new_token_ids=[1]).events.add(type=7, timestamp=1.0)
    records = [
        start("a"),
        pb.Record(),
        pb.Record(abort=pb.Abort(request_id="a", received_at=float("nan"))),
        pb.Record(outputs=bad_event),
        finish("a"),
    ]
    print(json.dumps({"misfits": summary_json(stub.Stream(iter(records)))}))

    garbage = stub.Stream.__class__  # the multi-callable type; use a raw call below
    raw = channel.stream_unary(
        "/vllm_otel_metrics.v1.Ingest/Stream",
        request_serializer=lambda b: b,
        response_deserializer=pb.IngestSummary.FromString,
    )
    try:
        summary = raw(iter([
            start("b").SerializeToString(),
            b"\xff\xff\xff\xff not protobuf",
            finish("b").SerializeToString(),
        ]))
        print(json.dumps({"garbage": summary_json(summary)}))
    except grpc.RpcError as error:
        print(json.dumps({"garbage": {"code": error.code().name, "details": error.details()}}))

    print(json.dumps({"after": summary_json(stub.Stream(iter([start("c"), finish("c")])))}))

    def batch(*records):
        return pb.Record(batch=pb.RecordBatch(records=list(records)))

    print(json.dumps({"batch": summary_json(stub.Stream(iter([
        batch(start("d"), batch(finish("d")), finish("d")),
        start("e"),
    ])))}))
