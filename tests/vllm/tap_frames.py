"""Engine steps encoded by vLLM's own engine-core code, with the records
they must become: the oracle of the engine-core tap's decoder
(tests/tap_frames.rs).

Builds a fixed run of steps with vLLM's classes (``EngineCoreOutputs``,
``EngineCoreOutput``, ``EngineCoreEvent``, ``PrefillStats``,
``SchedulerStats``, logprobs tensors, a utility answer), encodes each with
``MsgpackEncoder.encode_into`` as the engine core's output thread does, and
writes, beside the frames and the field names of the running vLLM's structs,
the records each step must become, read off the same objects here (the
JSONL format of docs/TRACE_FORMAT.md).

    python tap_frames.py --report OUT.json
"""

import argparse
import json

import numpy as np
import vllm
from vllm.v1.engine import (
    EngineCoreEvent,
    EngineCoreEventType,
    EngineCoreOutput,
    EngineCoreOutputs,
    FinishReason,
    UtilityOutput,
)
from vllm.v1.metrics.stats import PrefillStats, PrefixCacheStats, SchedulerStats
from vllm.v1.serial_utils import MsgpackEncoder

MODEL = "tiny"
EVENT_NAMES = {1: "queued", 2: "scheduled", 3: "preempted"}
REASONS = ("stop", "length", "abort", "error", "repetition")


def event(kind, at):
    return EngineCoreEvent(kind, at)


def steps():
    """(EngineCoreOutputs, sent_at) of a short run: two requests, one
    preempted and resumed, a utility answer between steps."""
    t = 1000.0
    queued, scheduled, preempted = (
        EngineCoreEventType.QUEUED,
        EngineCoreEventType.SCHEDULED,
        EngineCoreEventType.PREEMPTED,
    )
    prefix = PrefixCacheStats()
    prefix.queries, prefix.hits = 24, 8
    stats = SchedulerStats(num_running_reqs=2, num_waiting_reqs=1, kv_cache_usage=0.25,
                           prefix_cache_stats=prefix)
    if hasattr(stats, "num_skipped_waiting_reqs"):
        stats.num_skipped_waiting_reqs = 1
    yield EngineCoreOutputs(
        engine_index=0,
        outputs=[
            EngineCoreOutput(
                "cmpl-a-0", [11], events=[event(queued, t), event(scheduled, t + 0.01)],
                prefill_stats=PrefillStats(num_prompt_tokens=12, num_computed_tokens=8,
                                           num_cached_tokens=4, num_local_cached_tokens=4),
            ),
            EngineCoreOutput(
                "cmpl-b-0", [21], events=[event(queued, t), event(scheduled, t + 0.01)],
                prefill_stats=PrefillStats(num_prompt_tokens=6, num_computed_tokens=6),
            ),
        ],
        scheduler_stats=stats,
        timestamp=t + 0.02,
    ), 1_700_000_000.5
    # A utility call's answer: no outputs, no records.
    yield EngineCoreOutputs(utility_output=UtilityOutput(call_id=7), timestamp=t + 0.025), 1_700_000_000.52
    yield EngineCoreOutputs(
        engine_index=0,
        outputs=[
            EngineCoreOutput("cmpl-a-0", [12], events=[event(preempted, t + 0.03)]),
            # Logprobs travel as tensors: extension values and extra buffers.
            EngineCoreOutput("cmpl-b-0", [22, 23], finish_reason=FinishReason.LENGTH,
                             stop_reason=None,
                             pooling_output=None, num_nans_in_logits=0,
                             kv_transfer_params={"remote": [1, 2]},
                             routed_experts=np.arange(600, dtype=np.int32).reshape(200, 3)),
        ],
        timestamp=t + 0.04,
        finished_requests={"cmpl-b-0"},
    ), 1_700_000_000.54
    yield EngineCoreOutputs(
        engine_index=0,
        outputs=[
            EngineCoreOutput("cmpl-a-0", [13], events=[event(scheduled, t + 0.05)]),
        ],
        timestamp=t + 0.06,
    ), 1_700_000_000.56
    yield EngineCoreOutputs(
        engine_index=0,
        outputs=[EngineCoreOutput("cmpl-a-0", [14], finish_reason=FinishReason.STOP,
                                  stop_reason="###")],
        scheduler_stats=SchedulerStats(num_running_reqs=0, num_waiting_reqs=0,
                                       kv_cache_usage=0.0, prefix_cache_stats=PrefixCacheStats()),
        timestamp=t + 0.07,
    ), 1_700_000_000.58


def output_record(output) -> dict:
    record = {"request_id": output.request_id, "new_token_ids": list(output.new_token_ids)}
    if output.events:
        record["events"] = [
            {"type": EVENT_NAMES[int(e.type)], "timestamp": e.timestamp} for e in output.events
        ]
    if output.prefill_stats is not None:
        p = output.prefill_stats
        record["prefill_stats"] = {
            "num_prompt_tokens": p.num_prompt_tokens,
            "num_computed_tokens": p.num_computed_tokens,
            "num_cached_tokens": p.num_cached_tokens,
            "num_local_cached_tokens": p.num_local_cached_tokens,
            "num_external_cached_tokens": p.num_external_cached_tokens,
        }
    if output.finish_reason is not None:
        record["finish_reason"] = REASONS[int(output.finish_reason)]
    return record


def expected(outputs, sent_at) -> list:
    records = []
    if outputs.outputs:
        records.append({
            "type": "outputs",
            "engine": outputs.engine_index,
            "timestamp": outputs.timestamp,
            "received_at": sent_at,
            "outputs": [output_record(o) for o in outputs.outputs],
        })
    s = outputs.scheduler_stats
    if s is not None:
        skipped = getattr(s, "num_skipped_waiting_reqs", 0)
        record = {
            "type": "scheduler_stats",
            "model_name": MODEL,
            "engine": outputs.engine_index,
            "num_running_reqs": s.num_running_reqs,
            "num_waiting_reqs": s.num_waiting_reqs + skipped,
            "kv_cache_usage": s.kv_cache_usage,
            "prefix_cache_queries": s.prefix_cache_stats.queries,
            "prefix_cache_hits": s.prefix_cache_stats.hits,
            "received_at": sent_at,
        }
        if skipped:
            record["num_skipped_waiting_reqs"] = skipped
        records.append(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    args = parser.parse_args()
    encoder = MsgpackEncoder()
    frames, sent, records, aux = [], [], [], 0
    for outputs, sent_at in steps():
        buffers = encoder.encode_into(outputs, bytearray())
        aux += len(buffers) - 1
        frames.append(bytes(buffers[0]).hex())
        sent.append(sent_at)
        records.append(expected(outputs, sent_at))
    report = {
        "vllm_version": vllm.__version__,
        "engine_core_outputs_fields": list(EngineCoreOutputs.__struct_fields__),
        "engine_core_output_fields": list(EngineCoreOutput.__struct_fields__),
        "frames": frames,
        "sent_at": sent,
        "records": records,
        "aux_buffers": aux,
    }
    with open(args.report, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
