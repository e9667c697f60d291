#!/usr/bin/env python3
"""Streams a JSONL engine trace to `vllm-otel-metrics serve` over gRPC.

The gRPC code is generated at run time from proto/ with grpcio-tools, so the
only inputs are the .proto file and this script:

    pip install -r examples/python/requirements.txt
    python3 examples/python/stream_trace.py TRACE.jsonl --target 127.0.0.1:50051

Each JSONL line (see docs/TRACE_FORMAT.md) becomes one `Record`. Lines
that are not valid JSON objects are reported as FILE:LINE and not sent. When
the trace is done the server's summary is printed; the exit status is 1 when
the server or this client rejected anything, 0 otherwise.
"""

import argparse
import importlib
import json
import math
import pathlib
import sys
import tempfile

import grpc
from grpc_tools import protoc

PROTO_ROOT = pathlib.Path(__file__).resolve().parents[2] / "proto"
PROTO_FILE = "vllm_otel_metrics/v1/ingest.proto"


def load_modules():
    """Generates the message and service modules into a temporary directory."""
    out = tempfile.mkdtemp(prefix="vllm_otel_metrics_proto_")
    include = importlib.resources.files("grpc_tools") / "_proto"
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_ROOT / PROTO_FILE),
        ]
    )
    if status != 0:
        sys.exit(f"protoc failed on {PROTO_ROOT / PROTO_FILE} (status {status})")
    sys.path.insert(0, out)
    messages = importlib.import_module("vllm_otel_metrics.v1.ingest_pb2")
    services = importlib.import_module("vllm_otel_metrics.v1.ingest_pb2_grpc")
    return messages, services


EVENT_TYPES = {"queued": 1, "scheduled": 2, "preempted": 3}
FINISH_REASONS = {"stop": 1, "length": 2, "abort": 3, "error": 4, "repetition": 5}


class BadLine(Exception):
    """A line that cannot become a Record."""


def number(obj, key, required=True):
    value = obj.get(key)
    if value is None:
        if required:
            raise BadLine(f"missing field `{key}`")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadLine(f"`{key}` is not a finite number")
    return float(value)


def unsigned(obj, key, required=True, default=None):
    value = obj.get(key)
    if value is None:
        if required:
            raise BadLine(f"missing field `{key}`")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadLine(f"`{key}` is not an unsigned integer")
    return value


def text(obj, key):
    value = obj.get(key)
    if not isinstance(value, str):
        raise BadLine(f"missing field `{key}`")
    return value


def to_record(pb, line):
    """Converts one JSONL object to a Record message (the record format of docs/SEMANTICS.md §5)."""
    obj = json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(BadLine(f"non-finite number {c}")))
    if not isinstance(obj, dict):
        raise BadLine("not a JSON object")
    kind = obj.get("type")
    if kind == "request":
        request = pb.RequestStarted(
            request_id=text(obj, "request_id"),
            model_name=text(obj, "model_name"),
            engine=unsigned(obj, "engine"),
            arrival_time=number(obj, "arrival_time"),
            prompt_len=unsigned(obj, "prompt_len"),
        )
        max_tokens = unsigned(obj, "max_tokens", required=False)
        if max_tokens is not None:
            request.max_tokens = max_tokens
        request.n = unsigned(obj, "n", required=False, default=1)
        traceparent = obj.get("traceparent")
        if traceparent is not None:
            if not isinstance(traceparent, str):
                raise BadLine("traceparent is not a string")
            request.traceparent = traceparent
        return pb.Record(request=request)
    if kind == "outputs":
        batch = pb.OutputBatch(
            engine=unsigned(obj, "engine"),
            timestamp=number(obj, "timestamp"),
            received_at=number(obj, "received_at"),
        )
        outputs = obj.get("outputs")
        if not isinstance(outputs, list):
            raise BadLine("missing field `outputs`")
        for o in outputs:
            if not isinstance(o, dict):
                raise BadLine("an output is not an object")
            tokens = o.get("new_token_ids")
            if not isinstance(tokens, list):
                raise BadLine("missing field `new_token_ids`")
            out = batch.outputs.add(request_id=text(o, "request_id"))
            out.new_token_ids.extend(unsigned({"t": t}, "t") for t in tokens)
            for e in o.get("events") or []:
                if not isinstance(e, dict) or e.get("type") not in EVENT_TYPES:
                    raise BadLine(f"unknown event {e!r}")
                event = out.events.add(type=EVENT_TYPES[e["type"]], timestamp=number(e, "timestamp"))
                if isinstance(e.get("reason"), str):
                    event.reason = e["reason"]
            stats = o.get("prefill_stats")
            if stats is not None:
                if not isinstance(stats, dict):
                    raise BadLine("prefill_stats is not an object")
                out.prefill_stats.SetInParent()
                for field in (
                    "num_prompt_tokens",
                    "num_computed_tokens",
                    "num_cached_tokens",
                    "num_local_cached_tokens",
                    "num_external_cached_tokens",
                ):
                    setattr(out.prefill_stats, field, unsigned(stats, field, required=False, default=0))
            reason = o.get("finish_reason")
            if reason is not None:
                if reason not in FINISH_REASONS:
                    raise BadLine(f"unknown finish reason {reason!r}")
                out.finish_reason = FINISH_REASONS[reason]
        return pb.Record(outputs=batch)
    if kind == "abort":
        return pb.Record(abort=pb.Abort(request_id=text(obj, "request_id"), received_at=number(obj, "received_at")))
    if kind == "scheduler_stats":
        return pb.Record(
            scheduler_stats=pb.SchedulerStats(
                model_name=text(obj, "model_name"),
                engine=unsigned(obj, "engine"),
                num_running_reqs=unsigned(obj, "num_running_reqs"),
                num_waiting_reqs=unsigned(obj, "num_waiting_reqs"),
                kv_cache_usage=number(obj, "kv_cache_usage"),
                prefix_cache_queries=unsigned(obj, "prefix_cache_queries"),
                prefix_cache_hits=unsigned(obj, "prefix_cache_hits"),
            )
        )
    raise BadLine(f"unknown record type {kind!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="JSONL trace file, or - for standard input")
    parser.add_argument("--target", required=True, help="HOST:PORT of `vllm-otel-metrics serve`")
    args = parser.parse_args()

    pb, services = load_modules()
    local_rejections = []

    def records():
        source = sys.stdin if args.trace == "-" else open(args.trace, encoding="utf-8")
        with source:
            for number_, line in enumerate(source, start=1):
                if not line.strip():
                    continue
                try:
                    yield to_record(pb, line)
                except (BadLine, ValueError) as error:
                    message = f"{args.trace}:{number_}: {error}"
                    print(message, file=sys.stderr)
                    local_rejections.append(message)

    with grpc.insecure_channel(args.target) as channel:
        stub = services.IngestStub(channel)
        try:
            summary = stub.Stream(records())
        except grpc.RpcError as error:
            sys.exit(f"{args.target}: {error.code().name}: {error.details()}")

    reasons = ", ".join(f"{v} {k}" for k, v in sorted(summary.rejected_by_reason.items()))
    print(
        f"{summary.records_applied} record(s) applied ({summary.outputs_applied} outputs), "
        f"{summary.records_rejected} rejected by the server, {len(local_rejections)} line(s) rejected here"
        + (f"; changed no metric: {reasons}" if reasons else "")
    )
    for message in summary.first_rejections:
        print(f"  {message}")
    rejected = summary.records_rejected or summary.rejected_by_reason or local_rejections
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
