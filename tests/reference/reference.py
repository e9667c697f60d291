#!/usr/bin/env python3
"""Independent reference implementation of docs/SEMANTICS.md §3-§4b over the records of §5.

Usage:
    python3 tests/reference/reference.py TRACE.jsonl [--max-model-len N]
        [--max-label-bytes N] [--quiet]
        [--semconv gen_ai [--semconv-server-address ADDR] [--semconv-server-port PORT]]

Prints the final Prometheus text exposition (format 0.0.4) to stdout.
With ``--semconv gen_ai`` the three GenAI semantic-convention histograms of
docs/SEMANTICS.md §3c follow every other family, named as the Collector's
Prometheus exporter names them (``gen_ai_server_request_duration_seconds``, …);
without it the output has none of them.  Invalid
lines are skipped entirely (reported on stderr as ``FILE:LINE: reason``; the
exit status stays 0 so the output can be piped/captured unconditionally).

The engine tier (engine_config / sleep_state / operation records and
scheduler_stats' optional engine-level fields) follows docs/TRACE_FORMAT.md; its
resolutions of open points are noted where they are applied (an empty label
value is an absent label; a later engine_config replaces max_loras; eviction
events need lifetime_seconds and idle_seconds, spec_decoding's counts default
to 0 and its per-position list to []; engine-tier histogram series appear on
their first observation).

The KV-connector stats of §4b (``scheduler_stats.kv_connector_stats``) feed
25 families that follow every other vLLM family.  Their objects are typed
strictly: an unknown field, outcome or connector kind makes the line invalid.

Only the Python 3.11 standard library is used.  This file is deliberately
written without looking at the Rust implementation: it is the oracle the Rust
replay output is compared against (see compare.py).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

# ---------------------------------------------------------------------------
# Catalog (src/catalog/, docs/CATALOG.md's metric table).  Order matters: it is the exposition order.
# ---------------------------------------------------------------------------

PRE = [1, 2, 3, 4, 5, 10, 20]
N_BUCKETS = [1, 2, 5, 10, 20]
ITER = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
        2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LAT = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
       50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def tok_buckets(max_model_len: int) -> list[int]:
    """§2 TOK: 1-2-5 series up to max_model_len, then max_model_len itself
    unless it is already the last boundary."""
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            v = mantissa * scale
            if v > max_model_len:
                if not out or out[-1] != max_model_len:
                    out.append(max_model_len)
                return out
            out.append(v)
        scale *= 10


# (vLLM name, kind, bucket key, HELP) — the per-request tier, §2 table order.
PER_REQUEST = [
    ("vllm:num_preemptions", "counter", None,
     "Cumulative number of preemption events."),
    # §3 step 3: by the preempted event's reason; a reason's series appears
    # with the label set's first preemption of that reason (no zero series).
    ("vllm:num_preemptions_by_reason", "counter", None,
     "Cumulative number of preemption events, by reason."),
    ("vllm:prompt_tokens", "counter", None,
     "Prompt tokens summed over sequences, including prefix-cache hits; each "
     "parallel-sampling child counts its prompt separately. Equals the sum of "
     "vllm:prompt_tokens_by_source_total."),
    ("vllm:prompt_tokens_by_source", "counter", None,
     "Number of prompt tokens by source."),
    ("vllm:prompt_tokens_cached", "counter", None,
     "Number of prompt tokens with prefix cache hits."),
    ("vllm:generation_tokens", "counter", None,
     "Number of generation tokens processed."),
    ("vllm:request_success", "counter", None,
     "Count of successfully processed requests."),
    ("vllm:iteration_tokens_total", "histogram", "ITER",
     "Histogram of computed prompt and generated tokens per nonempty engine output batch."),
    ("vllm:request_prompt_tokens", "histogram", "TOK",
     "Prompt length of each finished sequence; each parallel-sampling child is one observation."),
    ("vllm:request_generation_tokens", "histogram", "TOK",
     "Number of generation tokens processed."),
    ("vllm:request_max_num_generation_tokens", "histogram", "TOK",
     "Histogram of maximum number of requested generation tokens."),
    ("vllm:request_params_max_tokens", "histogram", "TOK",
     "Histogram of the max_tokens request parameter."),
    ("vllm:request_params_n", "histogram", "N",
     "Histogram of the n request parameter."),
    ("vllm:request_num_preemptions", "histogram", "PRE",
     "Histogram of the number of times a request was preempted."),
    ("vllm:request_prefill_kv_computed_tokens", "histogram", "TOK",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens)."),
    ("vllm:time_to_first_token_seconds", "histogram", "TTFT",
     "Histogram of time to first token in seconds."),
    ("vllm:inter_token_latency_seconds", "histogram", "ITL",
     "Histogram of inter-token latency in seconds."),
    ("vllm:e2e_request_latency_seconds", "histogram", "LAT",
     "Histogram of e2e request latency in seconds."),
    ("vllm:request_queue_time_seconds", "histogram", "LAT",
     "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_prefill_time_seconds", "histogram", "LAT",
     "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_decode_time_seconds", "histogram", "LAT",
     "Histogram of time spent in DECODE phase for request."),
    ("vllm:request_inference_time_seconds", "histogram", "LAT",
     "Histogram of time spent in RUNNING phase for request."),
    ("vllm:request_time_per_output_token_seconds", "histogram", "ITL",
     "Histogram of time_per_output_token_seconds per request."),
]

# The scheduler tier, §2 second table order.
SCHEDULER = [
    ("vllm:num_requests_running", "gauge", None,
     "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "gauge", None,
     "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "gauge", None,
     "KV-cache usage. 1 means 100 percent usage."),
    ("vllm:prefix_cache_queries", "counter", None,
     "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "counter", None,
     "Prefix cache hits, in terms of number of cached tokens."),
]

# The engine tier (docs/TRACE_FORMAT.md, "Engine-level records"), exposition order after the scheduler tier.
RESIDENCY = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20,
             30, 60, 120, 300, 600, 1200, 1800]
OPS = [0.01, 0.1, 1, 10, 30, 60, 120, 300, 600]
_RESIDENCY_NOTE = " Sampled metrics (controlled by --kv-cache-metrics-sample)."
_MFU_NOTE = " per GPU (for Model Flops Utilization calculations)."

ENGINE = [
    ("vllm:num_requests_waiting_by_reason", "gauge", None,
     "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
     "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
     "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting."),
    ("vllm:num_requests_kv_fetch_by_stage", "gauge", None,
     "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' "
     "= needs an async KV load that has not started; 'in_progress' = load started and not "
     "yet reported finished; 'completed_waiting' = load finished, request not running yet."),
    ("vllm:engine_sleep_state", "gauge", None,
     "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
     "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."),
    ("vllm:prompt_tokens_cached_by_source", "counter", None,
     "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
     "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
     "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
     "vllm:external_prefix_cache_hits."),
    ("vllm:external_prefix_cache_queries", "counter", None,
     "External prefix cache queries from KV connector cross-instance cache sharing, in "
     "terms of number of queried tokens."),
    ("vllm:external_prefix_cache_hits", "counter", None,
     "External prefix cache hits from KV connector cross-instance cache sharing, in terms "
     "of number of cached tokens."),
    ("vllm:mm_cache_queries", "counter", None,
     "Multi-modal cache queries, in terms of number of queried items."),
    ("vllm:mm_cache_hits", "counter", None,
     "Multi-modal cache hits, in terms of number of cached items."),
    ("vllm:kv_block_lifetime_seconds", "histogram", "RESIDENCY",
     "Histogram of KV cache block lifetime from allocation to eviction." + _RESIDENCY_NOTE),
    ("vllm:kv_block_idle_before_evict_seconds", "histogram", "RESIDENCY",
     "Histogram of idle time before KV cache block eviction." + _RESIDENCY_NOTE),
    ("vllm:kv_block_reuse_gap_seconds", "histogram", "RESIDENCY",
     "Histogram of time gaps between consecutive KV cache block accesses. Only the most "
     "recent accesses are recorded (ring buffer)." + _RESIDENCY_NOTE),
    ("vllm:estimated_flops_per_gpu", "counter", None,
     "Estimated number of floating point operations" + _MFU_NOTE),
    ("vllm:estimated_read_bytes_per_gpu", "counter", None,
     "Estimated number of bytes read from memory" + _MFU_NOTE),
    ("vllm:estimated_write_bytes_per_gpu", "counter", None,
     "Estimated number of bytes written to memory" + _MFU_NOTE),
    ("vllm:spec_decode_num_drafts", "counter", None, "Number of spec decoding drafts."),
    ("vllm:spec_decode_num_draft_tokens", "counter", None, "Number of draft tokens."),
    ("vllm:spec_decode_num_accepted_tokens", "counter", None, "Number of accepted tokens."),
    ("vllm:spec_decode_num_accepted_tokens_per_pos", "counter", None,
     "Accepted tokens per draft position."),
    ("vllm:cache_config_info", "gauge", None, "Information of the LLMEngine CacheConfig"),
    ("vllm:lora_requests_info", "gauge", None, "Running stats on lora requests."),
    ("vllm:sleep_mode_operation_duration_seconds", "histogram", "OPS",
     "Duration of one sleep-mode operation."),
    ("vllm:rl_weight_update_operation_duration_seconds", "histogram", "OPS",
     "Duration of one weight-transfer operation."),
]

# KV-connector stats (docs/SEMANTICS.md §4b), after every other vLLM family:
# vLLM 0.33.0's NixlPromMetrics, OffloadPromMetrics (CPU spec) and
# SimpleCPUOffloadPromMetrics, with their buckets and HELP texts.
NIXL_POST = [0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
NIXL_XFER = NIXL_POST[1:]                             # vLLM passes buckets[1:]: no 0.001
NIXL_BYTES = [2 ** (10 + i) for i in range(1, 25, 2)]  # 2^11, 2^13, ..., 2^33
NIXL_DESC = [10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000]
OFFLOAD_SIZE = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6]
LOOKUP_SYNC = [0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1]
LOOKUP_ASYNC = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10]
_USAGE_NOTE = " that have not yet completed (0.0 = idle, 1.0 = saturated)."

KV_CONNECTOR = [
    ("vllm:nixl_xfer_time_seconds", "histogram", "NIXL_XFER",
     "Histogram of transfer duration for NIXL KV Cache transfers."),
    ("vllm:nixl_post_time_seconds", "histogram", "NIXL_POST",
     "Histogram of transfer post time for NIXL KV Cache transfers."),
    ("vllm:nixl_bytes_transferred", "histogram", "NIXL_BYTES",
     "Histogram of bytes transferred per NIXL KV Cache transfers."),
    ("vllm:nixl_num_descriptors", "histogram", "NIXL_DESC",
     "Histogram of number of descriptors per NIXL  KV Cache transfers."),   # sic: two spaces
    ("vllm:nixl_num_failed_transfers", "counter", None,
     "Number of failed NIXL KV Cache transfers, including handshake and notification "
     "failures. NOTE: KV expiry is tracked separately in vllm:nixl_num_kv_expired_reqs."),
    ("vllm:nixl_num_failed_notifications", "counter", None,
     "Number of failed NIXL KV Cache notifications. Retained for compatibility; these "
     "failures are also included in vllm:nixl_num_failed_transfers."),
    ("vllm:nixl_num_kv_expired_reqs", "counter", None,
     "Number of requests that had their KV expire. NOTE: This metric is tracked on the "
     "P instance."),
    ("vllm:nixl_num_notifications_after_expiry", "counter", None,
     "Number of completion notifications for requests that were no longer tracked, "
     "usually because their KV lease expired. The KV blocks may have been reused before "
     "the transfer finished. Counted per notification (one per remote rank), not per "
     "request."),
    ("vllm:kv_offload_load_bytes", "counter", None,
     "Total bytes loaded from offload storage to GPU."),
    ("vllm:kv_offload_load_time", "counter", None,
     "Total load time from offload storage to GPU, in seconds."),
    ("vllm:kv_offload_load_size", "histogram", "OFFLOAD_SIZE",
     "Histogram of KV offload load operation size, in bytes."),
    ("vllm:kv_offload_store_bytes", "counter", None,
     "Total bytes stored from GPU to offload storage."),
    ("vllm:kv_offload_store_time", "counter", None,
     "Total store time from GPU to offload storage, in seconds."),
    ("vllm:kv_offload_store_size", "histogram", "OFFLOAD_SIZE",
     "Histogram of KV offload store operation size, in bytes."),
    ("vllm:kv_offload_lookup_sync_delay_seconds", "histogram", "LOOKUP_SYNC",
     "Histogram of the time spent in a single offload lookup call, in seconds."),
    ("vllm:kv_offload_lookup_async_delay_seconds", "histogram", "LOOKUP_ASYNC",
     "Histogram of time between a request's offload lookup first deferring and the "
     "following lookup resolving, or request finish, in seconds."),
    ("vllm:kv_offload_allocation_failure", "counter", None,
     "Number of KV offload store allocation attempts that failed."),
    ("vllm:kv_offload_stores_skipped", "counter", None,
     "Number of KV offload stores skipped because the reuse threshold was not reached."),
    ("vllm:kv_offload_cpu_cache_usage_perc", "gauge", None,
     "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, "
     "1.0 = saturated). Sustained high values indicate transfers (stores or promotions) "
     "may be dropped due to insufficient capacity."),
    ("vllm:kv_offload_cpu_cache_write_usage_perc", "gauge", None,
     "Fraction of CPU KV-cache space currently pinned by in-flight stores" + _USAGE_NOTE),
    ("vllm:kv_offload_cpu_cache_read_usage_perc", "gauge", None,
     "Fraction of CPU KV-cache space currently pinned by in-flight loads" + _USAGE_NOTE),
    ("vllm:simple_kv_offload_save_outcomes", "counter", None,
     "Store admission decisions in SimpleCPUOffloadConnector, by outcome. Outcomes "
     "classify eager-mode boundary hand-off stores; lazy-mode stores are not classified."),
    ("vllm:simple_kv_offload_load_blocks", "counter", None,
     "KV blocks restored to GPU from the offload pool, counted when a load finishes. "
     "This is prefill work avoided through offload cache hits."),
    ("vllm:simple_kv_offload_used_blocks", "gauge", None,
     "Offload-pool blocks currently pinned by in-flight transfers or cache hits "
     "(capacity minus free). Evictable cached blocks are not counted; capacity_blocks "
     "is on vllm:simple_kv_offload_info."),
    ("vllm:simple_kv_offload_pending_store_blocks", "gauge", None,
     "Offload blocks in pending stores: queued for dispatch, issued to workers, or "
     "awaiting release after a cache reset. A persistently growing value indicates a "
     "stuck transfer."),
]
CATALOG = PER_REQUEST + SCHEDULER + ENGINE + KV_CONNECTOR

WAIT_REASONS = ("capacity", "deferred")
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
CACHE_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
EXTERNAL_SOURCES = ("host", "p2p", "disk", "external_unspecified")
SLEEP_OPERATIONS = ("sleep", "release_kv_cache_memory", "wake")
RL_OPERATIONS = ("init", "start", "start_draft", "update", "finish")
MAX_SPEC_POSITIONS = 16
MAX_GAPS_PER_EVENT = 3
MAX_CACHE_CONFIG_KEYS = 64
U32_MAX = 2**32 - 1
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
LORA_LABELS = ("max_lora", "waiting_lora_adapters", "running_lora_adapters")

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
EVENT_TYPES = ("queued", "scheduled", "preempted")
# §5: an event's optional `reason` (absent or null: kv_full); any other value
# makes the line invalid, whatever the event type.
PREEMPTION_REASONS = ("kv_full", "priority", "prefix_cache_reset")
DEFAULT_PREEMPTION_REASON = "kv_full"
# §5: a request's optional `operation_name` (absent or null: text_completion).
OPERATION_NAMES = ("chat", "create_agent", "embeddings", "execute_tool",
                   "generate_content", "invoke_agent", "text_completion")
DEFAULT_OPERATION_NAME = "text_completion"
SUCCESS_REASONS = ("stop", "length", "repetition")     # §3c "successful"
U64_MAX = 2**64 - 1

# §4b: scheduler_stats.kv_connector_stats, one optional object per connector
# kind.  Each object's fields by type: "count" a non-negative JSON integer
# (3.0 is invalid), "seconds" a non-negative finite number (JSON integers
# allowed), "fraction" a number in [0, 1], "list" an array of at most
# MAX_KV_LIST_ENTRIES non-negative finite numbers (one observation each),
# "outcomes" a map outcome -> count.  Unknown fields, unknown outcomes and
# unknown connector kinds make the line invalid (unlike elsewhere, where
# unknown fields are ignored).
MAX_KV_LIST_ENTRIES = 65_536
SAVE_OUTCOMES = ("stored", "dropped_cpu_full", "dropped_request_gone", "dropped_null_block",
                 "dropped_not_hashed", "skipped_already_cached", "skipped_in_flight")
KV_CONNECTOR_FIELDS = {
    "nixl": {
        "transfer_duration": "list", "post_duration": "list",
        "bytes_transferred": "list", "num_descriptors": "list",
        "num_failed_transfers": "count", "num_failed_handshakes": "count",
        "num_failed_notifications": "count", "num_kv_expired_reqs": "count",
        "num_notifications_after_expiry": "count",
    },
    "offloading": {
        "load_bytes": "count", "load_time": "seconds", "load_sizes": "list",
        "store_bytes": "count", "store_time": "seconds", "store_sizes": "list",
        "lookup_sync_delays": "list", "lookup_async_delays": "list",
        "allocation_failures": "count", "stores_skipped": "count",
        "cpu_cache_usage": "fraction", "cpu_cache_write_usage": "fraction",
        "cpu_cache_read_usage": "fraction",
    },
    "simple_cpu_offload": {
        "save_outcomes": "outcomes", "load_blocks": "count",
        "used_blocks": "count", "pending_store_blocks": "count",
    },
}
# The families a field feeds (nixl's counts are combined when applied).
NIXL_HISTOGRAMS = (("transfer_duration", "vllm:nixl_xfer_time_seconds"),
                   ("post_duration", "vllm:nixl_post_time_seconds"),
                   ("bytes_transferred", "vllm:nixl_bytes_transferred"),
                   ("num_descriptors", "vllm:nixl_num_descriptors"))
NIXL_COUNTERS = (("vllm:nixl_num_failed_transfers",
                  ("num_failed_transfers", "num_failed_handshakes", "num_failed_notifications")),
                 ("vllm:nixl_num_failed_notifications", ("num_failed_notifications",)),
                 ("vllm:nixl_num_kv_expired_reqs", ("num_kv_expired_reqs",)),
                 ("vllm:nixl_num_notifications_after_expiry",
                  ("num_notifications_after_expiry",)))
OFFLOAD_FAMILIES = {
    "load_bytes": "vllm:kv_offload_load_bytes", "load_time": "vllm:kv_offload_load_time",
    "load_sizes": "vllm:kv_offload_load_size",
    "store_bytes": "vllm:kv_offload_store_bytes", "store_time": "vllm:kv_offload_store_time",
    "store_sizes": "vllm:kv_offload_store_size",
    "lookup_sync_delays": "vllm:kv_offload_lookup_sync_delay_seconds",
    "lookup_async_delays": "vllm:kv_offload_lookup_async_delay_seconds",
    "allocation_failures": "vllm:kv_offload_allocation_failure",
    "stores_skipped": "vllm:kv_offload_stores_skipped",
    "cpu_cache_usage": "vllm:kv_offload_cpu_cache_usage_perc",
    "cpu_cache_write_usage": "vllm:kv_offload_cpu_cache_write_usage_perc",
    "cpu_cache_read_usage": "vllm:kv_offload_cpu_cache_read_usage_perc",
}
SIMPLE_FAMILIES = {
    "save_outcomes": "vllm:simple_kv_offload_save_outcomes",
    "load_blocks": "vllm:simple_kv_offload_load_blocks",
    "used_blocks": "vllm:simple_kv_offload_used_blocks",
    "pending_store_blocks": "vllm:simple_kv_offload_pending_store_blocks",
}


# ---------------------------------------------------------------------------
# Trace parsing and validation (§4).  Every line is fully validated into
# plain dataclasses before anything is applied, so an invalid line changes
# nothing ("skipped entirely").
# ---------------------------------------------------------------------------

class Invalid(Exception):
    """Raised for a line that does not fit §4."""


_MISSING = object()


def _get(obj: dict, key: str, required: bool) -> Any:
    """Fetch a field.  Optional fields that are absent *or null* return
    _MISSING (resolution of an ambiguity: null is treated as absent for
    every optional field, as §4 states explicitly for max_tokens)."""
    if key not in obj:
        if required:
            raise Invalid(f"missing field `{key}`")
        return _MISSING
    value = obj[key]
    if value is None:
        if required:
            raise Invalid(f"field `{key}` is null")
        return _MISSING
    return value


def req_str(obj: dict, key: str) -> str:
    v = _get(obj, key, True)
    if not isinstance(v, str):
        raise Invalid(f"field `{key}`: expected a string")
    return v


def as_uint(v: Any, key: str) -> int:
    # bool is a subclass of int in Python: reject it explicitly.
    if isinstance(v, bool) or not isinstance(v, int):
        raise Invalid(f"field `{key}`: expected an unsigned integer")
    if v < 0 or v > U64_MAX:
        raise Invalid(f"field `{key}`: out of range for an unsigned integer")
    return v


def as_float(v: Any, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Invalid(f"field `{key}`: expected a number")
    try:
        f = float(v)
    except OverflowError:
        raise Invalid(f"field `{key}`: number out of range") from None
    if not math.isfinite(f):
        raise Invalid(f"field `{key}`: non-finite number")
    return f


def req_uint(obj: dict, key: str) -> int:
    return as_uint(_get(obj, key, True), key)


def req_float(obj: dict, key: str) -> float:
    return as_float(_get(obj, key, True), key)


def opt_uint(obj: dict, key: str) -> Optional[int]:
    v = _get(obj, key, False)
    return None if v is _MISSING else as_uint(v, key)


def opt_bool(obj: dict, key: str) -> bool:
    v = _get(obj, key, False)
    if v is _MISSING or v is None:
        return False
    if not isinstance(v, bool):
        raise Invalid(f"field `{key}`: expected a boolean")
    return v


def opt_float(obj: dict, key: str) -> Optional[float]:
    v = _get(obj, key, False)
    return None if v is _MISSING else as_float(v, key)


def opt_uint0(obj: dict, key: str) -> int:
    return opt_uint(obj, key) or 0


# Scheduler-stats numbers recorded as they are, each into one family of the
# tables above: a gauge takes the step's value, a counter adds the step's
# amount (the family's kind says which), and each is zero from its engine's
# first record. (family, field, how the field is read.)
PLAIN_SCHEDULER_NUMBERS = [
    ("vllm:num_requests_running", "num_running_reqs", req_uint),
    ("vllm:num_requests_waiting", "num_waiting_reqs", req_uint),
    ("vllm:kv_cache_usage_perc", "kv_cache_usage", req_float),
    ("vllm:prefix_cache_queries", "prefix_cache_queries", req_uint),
    ("vllm:prefix_cache_hits", "prefix_cache_hits", req_uint),
    ("vllm:external_prefix_cache_queries", "external_prefix_cache_queries", opt_uint0),
    ("vllm:external_prefix_cache_hits", "external_prefix_cache_hits", opt_uint0),
    ("vllm:mm_cache_queries", "mm_cache_queries", opt_uint0),
    ("vllm:mm_cache_hits", "mm_cache_hits", opt_uint0),
]
KIND = {name: kind for name, kind, *_ in CATALOG}


def nonneg(v: float, key: str) -> float:
    if v < 0:
        raise Invalid(f"field `{key}`: negative value {v!r}")
    return v


def bounded(value: str, what: str, max_bytes: int) -> str:
    """A label value may be at most --max-label-bytes bytes of UTF-8."""
    n = len(value.encode("utf-8", "surrogatepass"))
    if n > max_bytes:
        raise Invalid(f"{what}: {n} bytes, more than --max-label-bytes {max_bytes}")
    return value


def label_value(obj: dict, key: str, max_bytes: int) -> str:
    return bounded(req_str(obj, key), f"field `{key}`", max_bytes)


def req_obj(v: Any, what: str) -> dict:
    if not isinstance(v, dict):
        raise Invalid(f"{what}: expected an object")
    return v


def req_list(v: Any, what: str) -> list:
    if not isinstance(v, list):
        raise Invalid(f"{what}: expected an array")
    return v


@dataclass
class RequestRec:
    request_id: str
    model_name: str
    engine: int
    arrival_time: float
    prompt_len: int
    max_tokens: Optional[int]
    n: int
    operation_name: str = DEFAULT_OPERATION_NAME
    # A frontend ends a request whose stop string matched with an abort:
    # an abort of such a request counts as "stop".
    stop_strings: bool = False


@dataclass
class Event:
    type: str
    timestamp: float
    reason: str = DEFAULT_PREEMPTION_REASON     # only a preempted event's is used


@dataclass
class PrefillStats:
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0


@dataclass
class Output:
    request_id: str
    num_new_tokens: int
    events: list[Event]
    prefill_stats: Optional[PrefillStats]
    finish_reason: Optional[str]


@dataclass
class OutputsRec:
    engine: int
    timestamp: float
    received_at: float
    outputs: list[Output]


@dataclass
class AbortRec:
    request_id: str
    received_at: float


@dataclass
class EvictionEvent:
    lifetime: float
    idle: float
    gaps: list[float]


@dataclass
class SpecDecoding:
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    per_pos: list[int]


@dataclass
class SchedulerStatsRec:
    model_name: str
    engine: int
    numbers: dict                   # field -> value, of PLAIN_SCHEDULER_NUMBERS
    # Optional engine-level fields (absent = the defaults below).
    received_at: Optional[float] = None
    num_skipped_waiting_reqs: int = 0
    kv_fetch_by_stage: Optional[dict] = None          # stage -> count, all 3 stages
    external_hits_by_source: Optional[dict] = None    # as given (validated keys)
    eviction_events: list = field(default_factory=list)
    perf: tuple = (0.0, 0.0, 0.0)                     # flops, read bytes, write bytes
    spec_decoding: Optional[SpecDecoding] = None
    running_lora_adapters: Optional[list] = None
    waiting_lora_adapters: Optional[list] = None
    # §4b: connector kind -> {field: validated value}, present fields only;
    # None: kv_connector_stats absent or null.
    kv_connector_stats: Optional[dict] = None


@dataclass
class EngineConfigRec:
    model_name: str
    engine: int
    cache_config: dict          # key -> value, validated
    max_loras: Optional[int]


@dataclass
class SleepStateRec:
    model_name: str
    engine: int
    level: int


@dataclass
class OperationRec:
    operation: str
    duration: float


def _reject_constant(name: str) -> Any:
    # json accepts NaN / Infinity / -Infinity literals; §4 says non-finite
    # numbers make the line invalid (and they are not JSON anyway).
    raise Invalid(f"non-finite number literal {name}")


def parse_event(v: Any) -> Event:
    obj = req_obj(v, "event")
    etype = req_str(obj, "type")
    if etype not in EVENT_TYPES:
        raise Invalid(f"unknown event type {etype!r}")
    ts = req_float(obj, "timestamp")
    reason = _get(obj, "reason", False)          # absent or null: kv_full
    if reason is _MISSING:
        reason = DEFAULT_PREEMPTION_REASON
    elif not isinstance(reason, str):
        raise Invalid("event field `reason`: expected a string")
    elif reason not in PREEMPTION_REASONS:
        raise Invalid(f"unknown preemption reason {reason!r}")
    return Event(etype, ts, reason)


def parse_prefill_stats(v: Any) -> PrefillStats:
    obj = req_obj(v, "prefill_stats")
    ps = PrefillStats()
    for name in ("num_prompt_tokens", "num_computed_tokens", "num_cached_tokens",
                 "num_local_cached_tokens", "num_external_cached_tokens"):
        value = opt_uint(obj, name)
        if value is not None:          # fields default to 0 (§4)
            setattr(ps, name, value)
    return ps


def parse_output(v: Any) -> Output:
    obj = req_obj(v, "output")
    rid = req_str(obj, "request_id")
    tokens = req_list(_get(obj, "new_token_ids", True), "new_token_ids")
    for t in tokens:
        as_uint(t, "new_token_ids[]")
    events_raw = _get(obj, "events", False)
    events = ([] if events_raw is _MISSING
              else [parse_event(e) for e in req_list(events_raw, "events")])
    ps_raw = _get(obj, "prefill_stats", False)
    ps = None if ps_raw is _MISSING else parse_prefill_stats(ps_raw)
    fr = _get(obj, "finish_reason", False)
    if fr is _MISSING:
        fr = None
    elif not isinstance(fr, str) or fr not in FINISH_REASONS:
        raise Invalid(f"unknown finish reason {fr!r}")
    return Output(rid, len(tokens), events, ps, fr)


def parse_eviction_event(v: Any) -> EvictionEvent:
    obj = req_obj(v, "kv_cache_eviction_events[]")
    lifetime = nonneg(req_float(obj, "lifetime_seconds"), "lifetime_seconds")
    idle = nonneg(req_float(obj, "idle_seconds"), "idle_seconds")
    raw = _get(obj, "reuse_gaps_seconds", False)
    gaps = ([] if raw is _MISSING else
            [nonneg(as_float(g, "reuse_gaps_seconds[]"), "reuse_gaps_seconds[]")
             for g in req_list(raw, "reuse_gaps_seconds")])
    if len(gaps) > MAX_GAPS_PER_EVENT:
        raise Invalid(f"eviction event with {len(gaps)} reuse gaps (at most "
                      f"{MAX_GAPS_PER_EVENT})")
    if idle > lifetime:
        raise Invalid(f"eviction event idle_seconds {idle!r} > lifetime_seconds {lifetime!r}")
    return EvictionEvent(lifetime, idle, gaps)


def parse_count_map(v: Any, what: str, allowed: tuple) -> dict:
    obj = req_obj(v, what)
    out = {}
    for k, value in obj.items():
        if k not in allowed:
            raise Invalid(f"{what}: unknown key {k!r}")
        out[k] = as_uint(value, f"{what}.{k}")
    return out


def parse_adapters(obj: dict, key: str, max_bytes: int) -> Optional[list]:
    raw = _get(obj, key, False)
    if raw is _MISSING:
        return None
    names = req_list(raw, key)
    for name in names:
        if not isinstance(name, str):
            raise Invalid(f"field `{key}`: expected strings")
        if name == "" or "," in name:
            raise Invalid(f"field `{key}`: bad adapter name {name!r}")
    bounded(",".join(names), f"field `{key}` (joined)", max_bytes)
    return names


def parse_kv_field(v: Any, kind: str, what: str) -> Any:
    """One present (non-null) field of a §4b connector object."""
    if kind == "count":
        return as_uint(v, what)
    if kind == "seconds":
        return nonneg(as_float(v, what), what)
    if kind == "fraction":
        f = as_float(v, what)
        if not 0.0 <= f <= 1.0:
            raise Invalid(f"field `{what}`: fraction {f!r} outside [0, 1]")
        return f
    if kind == "list":
        items = req_list(v, what)
        if len(items) > MAX_KV_LIST_ENTRIES:
            raise Invalid(f"field `{what}`: {len(items)} entries (at most "
                          f"{MAX_KV_LIST_ENTRIES})")
        # Integers or floats alike: each is observed as a double.
        return [nonneg(as_float(x, f"{what}[]"), f"{what}[]") for x in items]
    # outcomes: outcome -> count; a null count is no data, like a null field.
    out = {}
    for outcome, n in req_obj(v, what).items():
        if outcome not in SAVE_OUTCOMES:
            raise Invalid(f"field `{what}`: unknown outcome {outcome!r}")
        if n is not None:
            out[outcome] = as_uint(n, f"{what}.{outcome}")
    return out


def parse_kv_connector_stats(v: Any) -> dict:
    """§4b: {kind: {field: value}} with the present fields only.  A connector
    object that is present (even empty) stays in the result: nixl's creates
    its label set's eight series."""
    stats = req_obj(v, "kv_connector_stats")
    out = {}
    for kind, raw in stats.items():
        fields = KV_CONNECTOR_FIELDS.get(kind)
        if fields is None:
            raise Invalid(f"kv_connector_stats: unknown connector kind {kind!r}")
        if raw is None:
            continue                           # null: no data
        obj = req_obj(raw, f"kv_connector_stats.{kind}")
        parsed = {}
        for key, value in obj.items():
            ftype = fields.get(key)
            if ftype is None:
                raise Invalid(f"kv_connector_stats.{kind}: unknown field {key!r}")
            if value is not None:
                parsed[key] = parse_kv_field(value, ftype, f"kv_connector_stats.{kind}.{key}")
        out[kind] = parsed
    return out


def parse_scheduler_stats(obj: dict, max_bytes: int) -> SchedulerStatsRec:
    rec = SchedulerStatsRec(
        model_name=label_value(obj, "model_name", max_bytes),
        engine=req_uint(obj, "engine"),
        numbers={field: read(obj, field) for _, field, read in PLAIN_SCHEDULER_NUMBERS},
    )
    n = rec.numbers
    rx = opt_float(obj, "received_at")
    rec.received_at = None if rx is None else nonneg(rx, "received_at")
    # 2. waiting by reason.
    skipped = opt_uint(obj, "num_skipped_waiting_reqs")
    rec.num_skipped_waiting_reqs = 0 if skipped is None else skipped
    if rec.num_skipped_waiting_reqs > n["num_waiting_reqs"]:
        raise Invalid(f"num_skipped_waiting_reqs {rec.num_skipped_waiting_reqs} > "
                      f"num_waiting_reqs {n['num_waiting_reqs']}")
    # 3. KV fetch stages (only when present; unknown stage keys are invalid).
    raw = _get(obj, "num_kv_fetch_reqs_by_stage", False)
    if raw is not _MISSING:
        given = parse_count_map(raw, "num_kv_fetch_reqs_by_stage", KV_FETCH_STAGES)
        rec.kv_fetch_by_stage = {s: given.get(s, 0) for s in KV_FETCH_STAGES}
    # 4. external prefix cache.
    if n["external_prefix_cache_hits"] > n["external_prefix_cache_queries"]:
        raise Invalid(f"external_prefix_cache_hits {n['external_prefix_cache_hits']} > "
                      f"external_prefix_cache_queries {n['external_prefix_cache_queries']}")
    # 5. external hits by tier (keys validated; the sum is checked when applying).
    raw = _get(obj, "external_prefix_cache_hits_by_source", False)
    if raw is not _MISSING:
        rec.external_hits_by_source = parse_count_map(
            raw, "external_prefix_cache_hits_by_source", EXTERNAL_SOURCES)
    # 6. multi-modal cache.
    if n["mm_cache_hits"] > n["mm_cache_queries"]:
        raise Invalid(f"mm_cache_hits {n['mm_cache_hits']} > "
                      f"mm_cache_queries {n['mm_cache_queries']}")
    # 7. KV block eviction events.
    raw = _get(obj, "kv_cache_eviction_events", False)
    if raw is not _MISSING:
        rec.eviction_events = [parse_eviction_event(e)
                               for e in req_list(raw, "kv_cache_eviction_events")]
    # 8. perf stats (each defaults to 0; finite, >= 0).
    raw = _get(obj, "perf_stats", False)
    if raw is not _MISSING:
        ps = req_obj(raw, "perf_stats")
        values = []
        for key in ("num_flops_per_gpu", "num_read_bytes_per_gpu", "num_write_bytes_per_gpu"):
            v = opt_float(ps, key)
            values.append(0.0 if v is None else nonneg(v, key))
        rec.perf = tuple(values)
    # 9. speculative decoding (counts default to 0, per_pos to []).
    raw = _get(obj, "spec_decoding", False)
    if raw is not _MISSING:
        sd = req_obj(raw, "spec_decoding")
        per_raw = _get(sd, "num_accepted_tokens_per_pos", False)
        per_pos = ([] if per_raw is _MISSING else
                   [as_uint(x, "num_accepted_tokens_per_pos[]")
                    for x in req_list(per_raw, "num_accepted_tokens_per_pos")])
        spec = SpecDecoding(opt_uint(sd, "num_drafts") or 0,
                            opt_uint(sd, "num_draft_tokens") or 0,
                            opt_uint(sd, "num_accepted_tokens") or 0, per_pos)
        if spec.num_accepted_tokens > spec.num_draft_tokens:
            raise Invalid(f"spec_decoding: num_accepted_tokens {spec.num_accepted_tokens} > "
                          f"num_draft_tokens {spec.num_draft_tokens}")
        if len(per_pos) > MAX_SPEC_POSITIONS:
            raise Invalid(f"spec_decoding: {len(per_pos)} positions (at most "
                          f"{MAX_SPEC_POSITIONS})")
        if sum(per_pos) != spec.num_accepted_tokens:
            raise Invalid(f"spec_decoding: num_accepted_tokens_per_pos sums to "
                          f"{sum(per_pos)}, not {spec.num_accepted_tokens}")
        rec.spec_decoding = spec
    # 10. LoRA adapters.
    rec.running_lora_adapters = parse_adapters(obj, "running_lora_adapters", max_bytes)
    rec.waiting_lora_adapters = parse_adapters(obj, "waiting_lora_adapters", max_bytes)
    # 11. KV-connector stats (§4b).
    raw = _get(obj, "kv_connector_stats", False)
    if raw is not _MISSING:
        rec.kv_connector_stats = parse_kv_connector_stats(raw)
    return rec


def parse_engine_config(obj: dict, max_bytes: int) -> EngineConfigRec:
    model = label_value(obj, "model_name", max_bytes)
    engine = req_uint(obj, "engine")
    raw = _get(obj, "cache_config", False)
    config = {} if raw is _MISSING else req_obj(raw, "cache_config")
    if len(config) > MAX_CACHE_CONFIG_KEYS:
        raise Invalid(f"cache_config has {len(config)} keys (at most {MAX_CACHE_CONFIG_KEYS})")
    for key, value in config.items():
        if not LABEL_NAME.fullmatch(key) or key.startswith("__") or key == "engine":
            raise Invalid(f"cache_config: {key!r} is not a usable label name")
        if not isinstance(value, str):
            raise Invalid(f"cache_config.{key}: expected a string")
        bounded(value, f"cache_config.{key}", max_bytes)
    max_loras = opt_uint(obj, "max_loras")
    if max_loras is not None and max_loras > U32_MAX:
        raise Invalid("field `max_loras`: out of range for u32")
    return EngineConfigRec(model, engine, dict(config), max_loras)


def parse_line(text: str, max_label_bytes: int = 256):
    """Return a record dataclass, or raise Invalid."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except Invalid:
        raise
    except (ValueError, RecursionError) as e:
        raise Invalid(f"bad JSON: {e}") from None
    obj = req_obj(value, "line")
    rtype = req_str(obj, "type")
    if rtype == "request":
        n = opt_uint(obj, "n")
        op = _get(obj, "operation_name", False)   # absent or null: text_completion
        if op is _MISSING:
            op = DEFAULT_OPERATION_NAME
        elif not isinstance(op, str):
            raise Invalid("field `operation_name`: expected a string")
        elif op not in OPERATION_NAMES:
            raise Invalid(f"unknown operation_name {op!r}")
        return RequestRec(
            request_id=req_str(obj, "request_id"),
            model_name=label_value(obj, "model_name", max_label_bytes),
            engine=req_uint(obj, "engine"),
            arrival_time=req_float(obj, "arrival_time"),
            prompt_len=req_uint(obj, "prompt_len"),
            max_tokens=opt_uint(obj, "max_tokens"),
            n=1 if n is None else n,            # n defaults to 1 (§4)
            operation_name=op,
            stop_strings=opt_bool(obj, "stop_strings"),
        )
    if rtype == "outputs":
        return OutputsRec(
            engine=req_uint(obj, "engine"),
            timestamp=req_float(obj, "timestamp"),
            received_at=req_float(obj, "received_at"),
            outputs=[parse_output(o)
                     for o in req_list(_get(obj, "outputs", True), "outputs")],
        )
    if rtype == "abort":
        return AbortRec(req_str(obj, "request_id"), req_float(obj, "received_at"))
    if rtype == "scheduler_stats":
        return parse_scheduler_stats(obj, max_label_bytes)
    if rtype == "engine_config":
        return parse_engine_config(obj, max_label_bytes)
    if rtype == "sleep_state":
        rec = SleepStateRec(label_value(obj, "model_name", max_label_bytes),
                            req_uint(obj, "engine"), req_uint(obj, "level"))
        if rec.level > 2:
            raise Invalid(f"unknown sleep level {rec.level}")
        return rec
    if rtype == "operation":
        op = req_str(obj, "operation")
        if op not in SLEEP_OPERATIONS + RL_OPERATIONS:
            raise Invalid(f"unknown operation {op!r}")
        return OperationRec(op, nonneg(req_float(obj, "duration"), "duration"))
    raise Invalid(f"unknown record type {rtype!r}")


# ---------------------------------------------------------------------------
# Metric state: counters, histograms and gauges keyed by label tuples
# (model_name, engine[, finished_reason | source]).
# ---------------------------------------------------------------------------

class Histogram:
    """Explicit-bucket histogram; `le` is inclusive (v counts in every bucket
    whose upper bound >= v).  Sum accumulates in float in observation order."""

    def __init__(self, bounds: list):
        self.bounds = bounds
        self.cumulative = [0] * len(bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.sum += float(v)
        self.count += 1
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.cumulative[i] += 1


class Metrics:
    def __init__(self, max_model_len: int):
        buckets = {"PRE": PRE, "N": N_BUCKETS, "ITER": ITER,
                   "TOK": tok_buckets(max_model_len),
                   "TTFT": TTFT, "ITL": ITL, "LAT": LAT,
                   "RESIDENCY": RESIDENCY, "OPS": OPS,
                   "NIXL_XFER": NIXL_XFER, "NIXL_POST": NIXL_POST, "NIXL_BYTES": NIXL_BYTES,
                   "NIXL_DESC": NIXL_DESC, "OFFLOAD_SIZE": OFFLOAD_SIZE,
                   "LOOKUP_SYNC": LOOKUP_SYNC, "LOOKUP_ASYNC": LOOKUP_ASYNC}
        self.bounds = {name: buckets[key]
                       for name, kind, key, _ in CATALOG if kind == "histogram"}
        # family name -> {label tuple -> value}
        self.series: dict[str, dict[tuple, Any]] = {name: {} for name, _, _, _ in CATALOG}

    # §3 "Series appear as soon as a request of that (model, engine) starts":
    # every per-request family gets its zero-valued series, request_success
    # one per finish reason (as vLLM's Python logger creates them at
    # start-up), except num_preemptions_by_reason (a reason's series appears
    # with its first preemption).
    def ensure_label_set(self, model: str, engine: int) -> None:
        labels = (model, engine)
        for name, kind, _, _ in PER_REQUEST:
            fam = self.series[name]
            if name == "vllm:num_preemptions_by_reason":
                continue                   # series per reason on first use
            if name == "vllm:request_success":
                for reason in ("stop", "length", "abort", "error", "repetition"):
                    fam.setdefault(labels + (reason,), 0)
                continue
            if name == "vllm:prompt_tokens_by_source":
                for src in SOURCES:
                    fam.setdefault(labels + (src,), 0)
            elif kind == "counter":
                fam.setdefault(labels, 0)
            else:
                if labels not in fam:
                    fam[labels] = Histogram(self.bounds[name])

    def add(self, name: str, labels: tuple, amount: int) -> None:
        fam = self.series[name]
        fam[labels] = fam.get(labels, 0) + amount

    def observe(self, name: str, labels: tuple, value: float) -> None:
        fam = self.series[name]
        if labels not in fam:          # per-request tier: cannot happen for started
            fam[labels] = Histogram(self.bounds[name])   # label sets; engine tier: first use
        fam[labels].observe(value)

    def set_gauge(self, name: str, labels: tuple, value) -> None:
        self.series[name][labels] = value

    def ensure_histogram(self, name: str, labels: tuple) -> None:
        """The series at zero count, if it does not exist yet."""
        fam = self.series[name]
        if labels not in fam:
            fam[labels] = Histogram(self.bounds[name])


# ---------------------------------------------------------------------------
# GenAI semantic-convention streams (§3c, --semconv gen_ai)
# ---------------------------------------------------------------------------

SEMCONV_DURATION = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
                    10.24, 20.48, 40.96, 81.92]
SEMCONV_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                1.0, 2.5, 5.0, 7.5, 10.0]
SEMCONV_TPOT = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
# (Prometheus name as the Collector's exporter writes it, buckets, HELP), in
# exposition order; all three come after every other family.
SEMCONV = [
    ("gen_ai_server_request_duration_seconds", SEMCONV_DURATION,
     "Generative AI server request duration such as time-to-last byte or last "
     "output token."),
    ("gen_ai_server_time_to_first_token_seconds", SEMCONV_TTFT,
     "Time to generate first token for successful responses."),
    ("gen_ai_server_time_per_output_token_seconds", SEMCONV_TPOT,
     "Time per output token generated after the first token for successful responses."),
]
# Label names, alphabetical (the exposition order); error_type only on the
# request duration of a failed request; server_* only when given.
SEMCONV_LABELS = ("error_type", "gen_ai_operation_name", "gen_ai_provider_name",
                  "gen_ai_request_model", "gen_ai_response_model", "server_address",
                  "server_port")
SEMCONV_PROVIDER = "vllm"


class Semconv:
    """The three §3c histograms.  A series is keyed by the values of
    SEMCONV_LABELS, "" for an absent label; it exists once observed.  The
    engine is not a label: one model's requests on several engines share a
    series."""

    def __init__(self, server_address: Optional[str] = None,
                 server_port: Optional[int] = None):
        self.server = ("" if server_address is None else server_address,
                       "" if server_port is None else str(server_port))
        self.series: dict[str, dict[tuple, Histogram]] = {name: {} for name, _, _ in SEMCONV}
        self.bounds = {name: bounds for name, bounds, _ in SEMCONV}

    def _observe(self, name: str, key: tuple, value: float) -> None:
        fam = self.series[name]
        if key not in fam:
            fam[key] = Histogram(self.bounds[name])
        fam[key].observe(value)

    def observe_request(self, model: str, operation: str, error_type: Optional[str],
                        e2e: float, ttft: Optional[float], tpot: Optional[float]) -> None:
        """At a request's terminal recording: the duration always (error_type
        for a failed request); TTFT and TPOT only when given (the caller
        passes them for a successful request with >= 1 / > 1 tokens)."""
        common = (operation, SEMCONV_PROVIDER, model, model) + self.server
        self._observe("gen_ai_server_request_duration_seconds",
                      ("" if error_type is None else error_type,) + common, e2e)
        if ttft is not None:
            self._observe("gen_ai_server_time_to_first_token_seconds", ("",) + common, ttft)
        if tpot is not None:
            self._observe("gen_ai_server_time_per_output_token_seconds", ("",) + common, tpot)


# ---------------------------------------------------------------------------
# Tracker (§3)
# ---------------------------------------------------------------------------

def d(end: float, start: float) -> float:
    """§3: d(end, start) = end - start if end > 0 && start > 0 && end >= start, else 0."""
    if end > 0 and start > 0 and end >= start:
        return end - start
    return 0.0


@dataclass
class RequestState:
    """Per-request state; §3: starts prefilling, all timestamps 0, counts 0."""
    rec: RequestRec
    prefilling: bool = True
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    num_tokens: int = 0
    num_preemptions: int = 0
    num_cached_tokens: int = 0
    ttft: Optional[float] = None       # the TTFT observed at the first token (§3c)

    @property
    def labels(self) -> tuple:
        return (self.rec.model_name, self.rec.engine)


class Tracker:
    def __init__(self, metrics: Metrics, semconv: Optional["Semconv"] = None):
        self.m = metrics
        self.semconv = semconv    # None: no --semconv
        self.live: dict[str, RequestState] = {}
        self.unknown_inputs = 0   # mirrors the internal self-telemetry counter
        # Engine tier, per (model_name, engine) label set.
        self.engines_seen: set[tuple] = set()
        self.max_loras: dict[tuple, Optional[int]] = {}
        self.cache_config: dict[tuple, tuple] = {}     # label set -> config items
        self.engine_labels: dict[int, tuple] = {}      # engine -> its latest label set

    # -- request start ------------------------------------------------------
    def start(self, rec: RequestRec) -> None:
        # §3: a second start for a live request id changes no metric.
        if rec.request_id in self.live:
            self.unknown_inputs += 1
            return
        self.live[rec.request_id] = RequestState(rec)
        self.m.ensure_label_set(rec.model_name, rec.engine)
        # The engine's labels, for a batch of only untracked requests.
        self.engine_labels[rec.engine] = (rec.model_name, rec.engine)

    # -- one engine-core output (§3 steps 1-5) ------------------------------
    def apply_output(self, st: RequestState, out: Output, ts: float, rx: float) -> None:
        labels = st.labels
        ps = out.prefill_stats
        # 1. prefill_stats present -> remember num_cached_tokens.
        if ps is not None:
            st.num_cached_tokens = ps.num_cached_tokens
        # 2. generation tokens, request token count.
        self.m.add("vllm:generation_tokens", labels, out.num_new_tokens)
        st.num_tokens += out.num_new_tokens
        # 3. events in order.
        for ev in out.events:
            if ev.type == "queued":
                st.queued_ts = ev.timestamp
            elif ev.type == "scheduled":
                if st.scheduled_ts == 0:
                    st.scheduled_ts = ev.timestamp
            elif ev.type == "preempted":
                st.num_preemptions += 1
                self.m.add("vllm:num_preemptions", labels, 1)
                self.m.add("vllm:num_preemptions_by_reason", labels + (ev.reason,), 1)
        # 4. token-carrying output: first token (TTFT) or ITL.
        if out.num_new_tokens > 0:
            if st.prefilling:
                if ps is not None:
                    self.m.add("vllm:prompt_tokens", labels, ps.num_prompt_tokens)
                    self.m.add("vllm:prompt_tokens_by_source", labels + ("local_compute",),
                               ps.num_computed_tokens)
                    self.m.add("vllm:prompt_tokens_by_source", labels + ("local_cache_hit",),
                               ps.num_local_cached_tokens)
                    self.m.add("vllm:prompt_tokens_by_source", labels + ("external_kv_transfer",),
                               ps.num_external_cached_tokens)
                    self.m.add("vllm:prompt_tokens_cached", labels, ps.num_cached_tokens)
                st.ttft = rx - st.rec.arrival_time
                self.m.observe("vllm:time_to_first_token_seconds", labels, st.ttft)
                st.first_token_ts = ts
                st.prefilling = False
            elif st.last_token_ts > 0:
                self.m.observe("vllm:inter_token_latency_seconds", labels,
                               ts - st.last_token_ts)
            st.last_token_ts = ts
        # 5. finish_reason present -> terminal recording at rx.
        if out.finish_reason is not None:
            self.terminate(st, out.finish_reason, rx)

    # -- one outputs batch ----------------------------------------------------
    def apply_batch(self, rec: OutputsRec) -> None:
        # Per batch: iteration tokens grouped by the requests' label set,
        # over outputs of requests known (live) at the moment they are applied;
        # observed once per label set with such an output, a sum of 0 included
        # (vLLM's Rust frontend observes every non-empty batch).
        iteration: dict[tuple, int] = {}
        for out in rec.outputs:
            st = self.live.get(out.request_id)
            if st is None:
                self.unknown_inputs += 1       # unknown / already finished
                continue
            computed = out.prefill_stats.num_computed_tokens if out.prefill_stats else 0
            iteration[st.labels] = iteration.get(st.labels, 0) + out.num_new_tokens + computed
            self.apply_output(st, out, rec.timestamp, rec.received_at)
        if rec.outputs and not iteration and rec.engine in self.engine_labels:
            # Only requests no longer tracked: vLLM's Rust frontend labels by
            # engine and still observes the batch, at 0.
            iteration[self.engine_labels[rec.engine]] = 0
        for labels, total in iteration.items():
            self.m.observe("vllm:iteration_tokens_total", labels, total)

    # -- explicit abort -------------------------------------------------------
    def abort(self, rec: AbortRec) -> None:
        st = self.live.get(rec.request_id)
        if st is None:
            self.unknown_inputs += 1
            return
        self.terminate(st, "stop" if st.rec.stop_strings else "abort", rec.received_at)

    # -- terminal recording, exactly once per request (§3) ---------------------
    def terminate(self, st: RequestState, reason: str, rx: float) -> None:
        del self.live[st.rec.request_id]       # later input for this id is unknown
        labels = st.labels
        rec = st.rec
        m = self.m
        m.add("vllm:request_success", labels + (reason,), 1)
        m.observe("vllm:request_prompt_tokens", labels, rec.prompt_len)
        m.observe("vllm:request_generation_tokens", labels, st.num_tokens)
        m.observe("vllm:request_max_num_generation_tokens", labels, st.num_tokens)
        if rec.max_tokens is not None:
            m.observe("vllm:request_params_max_tokens", labels, rec.max_tokens)
        m.observe("vllm:request_params_n", labels, rec.n)
        m.observe("vllm:request_num_preemptions", labels, st.num_preemptions)  # zero included
        m.observe("vllm:request_prefill_kv_computed_tokens", labels,
                  max(rec.prompt_len - st.num_cached_tokens, 0))
        e2e = rx - rec.arrival_time
        m.observe("vllm:e2e_request_latency_seconds", labels, e2e)
        m.observe("vllm:request_queue_time_seconds", labels, d(st.scheduled_ts, st.queued_ts))
        m.observe("vllm:request_prefill_time_seconds", labels,
                  d(st.first_token_ts, st.scheduled_ts))
        decode = d(st.last_token_ts, st.first_token_ts)
        m.observe("vllm:request_decode_time_seconds", labels, decode)
        m.observe("vllm:request_inference_time_seconds", labels,
                  d(st.last_token_ts, st.scheduled_ts))
        tpot = decode / (st.num_tokens - 1) if st.num_tokens > 1 else 0.0
        m.observe("vllm:request_time_per_output_token_seconds", labels, tpot)
        # §3c: the GenAI semantic-convention streams (only with --semconv gen_ai).
        if self.semconv is not None:
            success = reason in SUCCESS_REASONS
            self.semconv.observe_request(
                model=rec.model_name, operation=rec.operation_name,
                error_type=None if success else reason, e2e=e2e,
                ttft=st.ttft if success else None,
                tpot=tpot if success and st.num_tokens > 1 else None)

    # -- engine start-up -------------------------------------------
    def engine_startup(self, labels: tuple) -> None:
        """The first time a label set is seen by a scheduler_stats, engine_config
        or sleep_state record, its engine families come into existence with
        vLLM's start-up values."""
        if labels in self.engines_seen:
            return
        self.engines_seen.add(labels)
        m = self.m
        for name, _, read in PLAIN_SCHEDULER_NUMBERS:
            zero = 0.0 if read is req_float else 0
            if KIND[name] == "gauge":
                m.set_gauge(name, labels, zero)
            else:
                m.add(name, labels, zero)
        for reason in WAIT_REASONS:
            m.set_gauge("vllm:num_requests_waiting_by_reason", labels + (reason,), 0)
        for src in CACHE_SOURCES:
            m.add("vllm:prompt_tokens_cached_by_source", labels + (src,), 0)
        for name in ("vllm:estimated_flops_per_gpu", "vllm:estimated_read_bytes_per_gpu",
                     "vllm:estimated_write_bytes_per_gpu"):
            m.add(name, labels, 0.0)
        self.set_sleep_level(labels, 0)

    def set_sleep_level(self, labels: tuple, level: int) -> None:
        for i, state in enumerate(SLEEP_STATES):
            value = (1 if level == 0 else 0) if i == 0 else (1 if level == i else 0)
            self.m.set_gauge("vllm:engine_sleep_state", labels + (state,), value)

    # -- scheduler tier -----------------------------------------------------
    def scheduler_stats(self, rec: SchedulerStatsRec) -> None:
        labels = (rec.model_name, rec.engine)
        m = self.m
        self.engine_startup(labels)            # first sighting; the record applies on top
        # 1. Gauges take the latest value; the two counters add per-step amounts.
        n = rec.numbers
        for name, field_name, _ in PLAIN_SCHEDULER_NUMBERS:
            if KIND[name] == "gauge":
                m.set_gauge(name, labels, n[field_name])
            else:
                m.add(name, labels, n[field_name])
        # 2. waiting by reason, on every record.
        skipped = rec.num_skipped_waiting_reqs
        m.set_gauge("vllm:num_requests_waiting_by_reason", labels + ("capacity",),
                    n["num_waiting_reqs"] - skipped)
        m.set_gauge("vllm:num_requests_waiting_by_reason", labels + ("deferred",), skipped)
        # 3. KV fetch stages, only when present (all three stages).
        if rec.kv_fetch_by_stage is not None:
            for stage in KV_FETCH_STAGES:
                m.set_gauge("vllm:num_requests_kv_fetch_by_stage", labels + (stage,),
                            rec.kv_fetch_by_stage[stage])
        # 4. external prefix cache: among the plain numbers above.
        # 5. cached tokens by source: device, then the external tiers (all five added).
        by_tier = {src: 0 for src in EXTERNAL_SOURCES}
        given = rec.external_hits_by_source
        if given is not None and sum(given.values()) == n["external_prefix_cache_hits"]:
            by_tier.update(given)
        else:                                   # absent or inconsistent: vLLM's fallback
            by_tier["external_unspecified"] = n["external_prefix_cache_hits"]
        m.add("vllm:prompt_tokens_cached_by_source", labels + ("device",),
              n["prefix_cache_hits"])
        for src in EXTERNAL_SOURCES:
            m.add("vllm:prompt_tokens_cached_by_source", labels + (src,), by_tier[src])
        # 6. multi-modal cache: among the plain numbers above.
        # 7. KV block residency (series appear on their first observation).
        for ev in rec.eviction_events:
            m.observe("vllm:kv_block_lifetime_seconds", labels, ev.lifetime)
            m.observe("vllm:kv_block_idle_before_evict_seconds", labels, ev.idle)
            for gap in ev.gaps:
                m.observe("vllm:kv_block_reuse_gap_seconds", labels, gap)
        # 8. perf stats, on every record.
        flops, read_bytes, write_bytes = rec.perf
        m.add("vllm:estimated_flops_per_gpu", labels, flops)
        m.add("vllm:estimated_read_bytes_per_gpu", labels, read_bytes)
        m.add("vllm:estimated_write_bytes_per_gpu", labels, write_bytes)
        # 9. speculative decoding, only when present.
        sd = rec.spec_decoding
        if sd is not None:
            m.add("vllm:spec_decode_num_drafts", labels, sd.num_drafts)
            m.add("vllm:spec_decode_num_draft_tokens", labels, sd.num_draft_tokens)
            m.add("vllm:spec_decode_num_accepted_tokens", labels, sd.num_accepted_tokens)
            for i, n in enumerate(sd.per_pos):
                m.add("vllm:spec_decode_num_accepted_tokens_per_pos", labels + (str(i),), n)
        # 10. LoRA info: no model_name/engine labels; set to the receive time.
        if rec.running_lora_adapters is not None or rec.waiting_lora_adapters is not None:
            max_loras = self.max_loras.get(labels)
            key = ("" if max_loras is None else str(max_loras),
                   ",".join(rec.waiting_lora_adapters or []),
                   ",".join(rec.running_lora_adapters or []))
            m.set_gauge("vllm:lora_requests_info", key,
                        time.time() if rec.received_at is None else rec.received_at)
        # 11. KV-connector stats (§4b), only when present.
        if rec.kv_connector_stats is not None:
            self.kv_connector_stats(labels, rec.kv_connector_stats)

    def kv_connector_stats(self, labels: tuple, stats: dict) -> None:
        """§4b.  `stats` holds the present (non-null) connector objects, each
        with its present fields only."""
        m = self.m
        nixl = stats.get("nixl")
        if nixl is not None:
            # vLLM creates the eight NIXL series at 0 when the connector starts;
            # here they appear with the label set's first nixl object (even {}).
            for key, name in NIXL_HISTOGRAMS:
                m.ensure_histogram(name, labels)
                for v in nixl.get(key, ()):
                    m.observe(name, labels, v)
            for name, keys in NIXL_COUNTERS:
                m.add(name, labels, sum(nixl.get(k, 0) for k in keys))
        offloading = stats.get("offloading")
        if offloading is not None:
            # Each series appears with its first present value.  Choice: a
            # present list, even an empty one, creates its histogram series at
            # zero count (vLLM's OffloadPromMetrics binds the child before
            # observing the list's elements; a present count of 0 likewise
            # creates a counter series).
            for key, value in offloading.items():
                name = OFFLOAD_FAMILIES[key]
                kind = KV_CONNECTOR_FIELDS["offloading"][key]
                if kind == "list":
                    m.ensure_histogram(name, labels)
                    for v in value:
                        m.observe(name, labels, v)
                elif kind == "fraction":
                    m.set_gauge(name, labels, value)
                else:                           # count or seconds: a counter
                    m.add(name, labels, value)
        simple = stats.get("simple_cpu_offload")
        if simple is not None:
            for key, value in simple.items():
                name = SIMPLE_FAMILIES[key]
                if key == "save_outcomes":      # a series per outcome present
                    for outcome, n in value.items():
                        m.add(name, labels + (outcome,), n)
                elif key == "load_blocks":
                    m.add(name, labels, value)
                else:                           # used_blocks, pending_store_blocks
                    m.set_gauge(name, labels, value)

    def engine_config(self, rec: EngineConfigRec) -> None:
        labels = (rec.model_name, rec.engine)
        self.engine_startup(labels)
        # An empty label value is an absent label: such keys do not make a
        # different series (nor a different config).
        items = tuple(sorted((k, v) for k, v in rec.cache_config.items() if v != ""))
        fam = self.m.series["vllm:cache_config_info"]
        previous = self.cache_config.get(labels)
        if previous is not None and previous != items:
            fam[(rec.engine, previous)] = 0
        fam[(rec.engine, items)] = 1
        self.cache_config[labels] = items
        self.max_loras[labels] = rec.max_loras      # the latest start-up's value

    def sleep_state(self, rec: SleepStateRec) -> None:
        labels = (rec.model_name, rec.engine)
        self.engine_startup(labels)
        self.set_sleep_level(labels, rec.level)

    def operation(self, rec: OperationRec) -> None:
        name = ("vllm:sleep_mode_operation_duration_seconds"
                if rec.operation in SLEEP_OPERATIONS
                else "vllm:rl_weight_update_operation_duration_seconds")
        self.m.observe(name, (rec.operation,), rec.duration)

    def apply(self, rec) -> None:
        if isinstance(rec, RequestRec):
            self.start(rec)
        elif isinstance(rec, OutputsRec):
            self.apply_batch(rec)
        elif isinstance(rec, AbortRec):
            self.abort(rec)
        elif isinstance(rec, SchedulerStatsRec):
            self.scheduler_stats(rec)
        elif isinstance(rec, EngineConfigRec):
            self.engine_config(rec)
        elif isinstance(rec, SleepStateRec):
            self.sleep_state(rec)
        else:
            self.operation(rec)
    # Requests still live at end of trace are deliberately NOT recorded.


# ---------------------------------------------------------------------------
# Exposition
# ---------------------------------------------------------------------------

def escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def fmt_float(x) -> str:
    return repr(float(x))


def fmt_le(x) -> str:
    """An `le` value as §6 writes it: positional decimal notation with a
    decimal point ("1.0", "0.001", "2560.0", "0.00001", "2097152.0"),
    never an exponent; "+Inf" for infinity."""
    from decimal import Decimal
    f = float(x)
    if f == math.inf:
        return "+Inf"
    s = repr(f)
    if "e" in s or "E" in s:
        s = format(Decimal(s), "f")
    if "." not in s:
        s += ".0"
    return s


EXTRA_LABEL = {"vllm:request_success": "finished_reason",
               "vllm:prompt_tokens_by_source": "source",
               "vllm:num_preemptions_by_reason": "reason",
               "vllm:num_requests_waiting_by_reason": "reason",
               "vllm:num_requests_kv_fetch_by_stage": "stage",
               "vllm:engine_sleep_state": "sleep_state",
               "vllm:prompt_tokens_cached_by_source": "source",
               "vllm:spec_decode_num_accepted_tokens_per_pos": "position",
               "vllm:simple_kv_offload_save_outcomes": "outcome"}
# Families whose values are floats (all others are integers).
FLOAT_VALUED = {"vllm:kv_cache_usage_perc", "vllm:estimated_flops_per_gpu",
                "vllm:estimated_read_bytes_per_gpu", "vllm:estimated_write_bytes_per_gpu",
                "vllm:lora_requests_info",
                "vllm:kv_offload_load_time", "vllm:kv_offload_store_time",
                "vllm:kv_offload_cpu_cache_usage_perc",
                "vllm:kv_offload_cpu_cache_write_usage_perc",
                "vllm:kv_offload_cpu_cache_read_usage_perc"}
OPERATION_FAMILIES = {"vllm:sleep_mode_operation_duration_seconds",
                      "vllm:rl_weight_update_operation_duration_seconds"}


def label_pairs(name: str, key: tuple) -> list[tuple[str, str]]:
    """The (label name, value) pairs of one series of family `name`."""
    if name == "vllm:cache_config_info":
        engine, items = key                  # engine + the config's keys
        return [("engine", str(engine))] + list(items)
    if name == "vllm:lora_requests_info":   # empty value = absent label
        return [(n, v) for n, v in zip(LORA_LABELS, key) if v != ""]
    if name in OPERATION_FAMILIES:
        return [("operation", key[0])]
    pairs = [("model_name", key[0]), ("engine", str(key[1]))]
    extra = EXTRA_LABEL.get(name)
    if extra is not None:
        pairs.append((extra, key[2]))
    return pairs


def label_str(pairs: list, le: Optional[str] = None) -> str:
    parts = [f'{n}="{escape_label(v)}"' for n, v in pairs]
    if le is not None:
        parts.append(f'le="{le}"')
    return "{" + ",".join(parts) + "}"


def render_histogram(lines: list, name: str, pairs: list, h: Histogram) -> None:
    for b, c in zip(h.bounds, h.cumulative):
        lines.append(f"{name}_bucket{label_str(pairs, fmt_le(b))} {c}")
    lines.append(f"{name}_bucket{label_str(pairs, '+Inf')} {h.count}")
    lines.append(f"{name}_sum{label_str(pairs)} {fmt_float(h.sum)}")
    lines.append(f"{name}_count{label_str(pairs)} {h.count}")


def render(m: Metrics, semconv: Optional[Semconv] = None) -> str:
    lines: list[str] = []
    for name, kind, _, help_text in CATALOG:
        exposed = name + "_total" if kind == "counter" else name
        lines.append(f"# HELP {exposed} {help_text}")
        lines.append(f"# TYPE {exposed} {kind}")
        fmt = fmt_float if name in FLOAT_VALUED else (lambda v: str(int(v)))
        # Sorted by label values; engine is an int so it compares numerically.
        for key in sorted(m.series[name]):
            value = m.series[name][key]
            pairs = label_pairs(name, key)
            if kind == "histogram":
                render_histogram(lines, name, pairs, value)
            else:
                lines.append(f"{exposed}{label_str(pairs)} {fmt(value)}")
    if semconv is not None:
        # §3c: after every other family.  Series sorted by their label values
        # in label order, an absent label ("") first.
        for name, _, help_text in SEMCONV:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} histogram")
            fam = semconv.series[name]
            for key in sorted(fam):
                pairs = [(n, v) for n, v in zip(SEMCONV_LABELS, key) if v != ""]
                render_histogram(lines, name, pairs, fam[key])
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def run(path: str, max_model_len: int, errors, max_label_bytes: int = 256,
        semconv: Optional[Semconv] = None) -> str:
    tracker = Tracker(Metrics(max_model_len), semconv)
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for lineno, raw in enumerate(stream, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                errors(f"{path}:{lineno}: invalid UTF-8")
                continue
            if text.strip() == "":
                continue                      # blank lines are ignored
            try:
                rec = parse_line(text, max_label_bytes)
            except Invalid as e:
                errors(f"{path}:{lineno}: {e}")
                continue
            tracker.apply(rec)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    return render(tracker.m, semconv)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="JSONL trace file ('-' for stdin)")
    ap.add_argument("--max-model-len", type=int, default=131072)
    ap.add_argument("--max-label-bytes", type=int, default=256,
                    help="longest label value in bytes (model_name, cache_config values, "
                         "joined LoRA adapter lists); longer: the record is invalid")
    ap.add_argument("--quiet", action="store_true", help="do not report invalid lines on stderr")
    ap.add_argument("--semconv", choices=["gen_ai"], default=None,
                    help="also record the GenAI semantic-convention histograms (§3c) and "
                         "print them after every other family")
    ap.add_argument("--semconv-server-address", metavar="ADDR", default=None,
                    help="the server_address label of the semconv series (absent unless given)")
    ap.add_argument("--semconv-server-port", metavar="PORT", type=int, default=None,
                    help="the server_port label of the semconv series (absent unless given)")
    args = ap.parse_args(argv)
    if args.max_model_len < 1:
        ap.error("--max-model-len must be >= 1")
    if args.semconv is None and (args.semconv_server_address is not None
                                 or args.semconv_server_port is not None):
        ap.error("--semconv-server-address/--semconv-server-port need --semconv gen_ai")
    if args.semconv_server_port is not None and not 0 <= args.semconv_server_port <= 65535:
        ap.error("--semconv-server-port must be in 0..65535")
    semconv = (None if args.semconv is None else
               Semconv(args.semconv_server_address, args.semconv_server_port))
    report = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    sys.stdout.write(run(args.trace, args.max_model_len, report, args.max_label_bytes,
                         semconv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
