"""vLLM's stats objects to the sidecar's records (the JSONL form of each).

Mirrors what vLLM 0.33's ``PrometheusStatLogger.record()``
(``vllm/v1/metrics/loggers.py``) reads from ``SchedulerStats``,
``IterationStats`` and ``MultiModalCacheStats`` (``vllm/v1/metrics/stats.py``),
what ``log_engine_initialized()`` reads from the cache configuration, and what
``record_sleep_state()`` is told. This module does not import vLLM: it reads
attributes by name, and every field vLLM added after 0.30 is optional
(``getattr`` with vLLM's own default), because vLLM does not promise these
classes are stable.

Each function returns one record as a dict whose keys are the JSONL keys
(``docs/SEMANTICS.md`` and docs/TRACE_FORMAT.md), so the same dict can be
written as a JSONL line or turned into a protobuf message
(:func:`vllm_otel_metrics.stream.to_message`).
"""

import math

#: vLLM's ``FinishReason`` (an ``IntEnum``) by value, as label values.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

#: vLLM's ``KV_FETCH_STAGES``.
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")

#: vLLM's ``CacheHitSource`` values other than ``device`` (the local prefix
#: cache, which the scheduler record carries as ``prefix_cache_hits``).
EXTERNAL_HIT_SOURCES = ("host", "p2p", "disk", "external_unspecified")


def finish_reason(reason) -> str:
    """The label value of a vLLM ``FinishReason`` (enum, int or string).

    >>> finish_reason(1), finish_reason("STOP")
    ('length', 'stop')
    """
    if isinstance(reason, str):
        return reason.lower()
    value = int(reason)
    if 0 <= value < len(FINISH_REASONS):
        return FINISH_REASONS[value]
    # Unknown to this plugin: the sidecar rejects it, named, and counts it.
    return f"unknown({value})"


def _seconds(value) -> float:
    return float(value)


def finished_request(req) -> dict:
    """One ``FinishedRequestStats``."""
    max_tokens = getattr(req, "max_tokens_param", None)
    record = {
        "request_id": str(getattr(req, "request_id", None) or ""),
        "finish_reason": finish_reason(req.finish_reason),
        "e2e_latency": _seconds(req.e2e_latency),
        "queued_time": _seconds(req.queued_time),
        "prefill_time": _seconds(req.prefill_time),
        "inference_time": _seconds(req.inference_time),
        "decode_time": _seconds(req.decode_time),
        "mean_time_per_output_token": _seconds(req.mean_time_per_output_token),
        "num_prompt_tokens": int(req.num_prompt_tokens),
        "num_generation_tokens": int(req.num_generation_tokens),
        "num_preemptions": int(getattr(req, "num_preemptions", 0)),
        "num_cached_tokens": max(int(getattr(req, "num_cached_tokens", 0)), 0),
    }
    if max_tokens is not None:
        record["max_tokens_param"] = int(max_tokens)
    return record


def iteration_record(stats, model_name: str, engine: int) -> dict:
    """One ``IterationStats``: the per-step lists as they are, the prompt
    token breakdown and the finished requests with their values.

    ``received_at`` is the step's ``iteration_timestamp``, the wall-clock time
    vLLM's own latencies were taken against.
    """
    prompt = stats.prompt_token_stats
    return {
        "type": "iteration_stats",
        "model_name": model_name,
        "engine": engine,
        "received_at": float(stats.iteration_timestamp),
        "num_generation_tokens": int(stats.num_generation_tokens),
        "prompt_token_stats": {
            "computed": int(prompt.computed),
            "local_cache_hit": int(getattr(prompt, "local_cache_hit", 0)),
            "external_kv_transfer": int(getattr(prompt, "external_kv_transfer", 0)),
            "cached_tokens": int(getattr(prompt, "cached_tokens", 0)),
            "total": int(prompt.total),
        },
        "num_preempted_reqs": int(getattr(stats, "num_preempted_reqs", 0)),
        "max_num_generation_tokens_iter": [
            int(n) for n in getattr(stats, "max_num_generation_tokens_iter", ())
        ],
        "n_params_iter": [int(n) for n in getattr(stats, "n_params_iter", ())],
        "time_to_first_tokens_iter": [
            float(t) for t in getattr(stats, "time_to_first_tokens_iter", ())
        ],
        "inter_token_latencies_iter": [
            float(t) for t in getattr(stats, "inter_token_latencies_iter", ())
        ],
        "finished_requests": [finished_request(r) for r in stats.finished_requests],
    }


def _dict_or_empty(value) -> dict:
    return value if isinstance(value, dict) else {}


def scheduler_record(
    stats,
    mm_cache_stats,
    model_name: str,
    engine: int,
    received_at: float,
    lora_enabled: bool,
    kv_consumer: bool = False,
) -> dict:
    """One ``SchedulerStats`` (plus the step's ``MultiModalCacheStats``).

    vLLM 0.33 counts deferred requests apart from ``num_waiting_reqs``; the
    record's ``num_waiting_reqs`` includes them (the sum vLLM sets
    ``vllm:num_requests_waiting`` to) and ``num_skipped_waiting_reqs`` says how
    many of them are deferred.

    vLLM's scheduler reports ``num_kv_fetch_reqs_by_stage`` on every engine
    (all 0 without a KV connector), but its logger has
    ``vllm:num_requests_kv_fetch_by_stage`` on KV consumers only: the record
    carries the stages only when ``kv_consumer`` (see :func:`kv_transfer_setup`).
    """
    skipped = int(getattr(stats, "num_skipped_waiting_reqs", 0))
    prefix = stats.prefix_cache_stats
    record = {
        "type": "scheduler_stats",
        "model_name": model_name,
        "engine": engine,
        "received_at": float(received_at),
        "num_running_reqs": int(stats.num_running_reqs),
        "num_waiting_reqs": int(stats.num_waiting_reqs) + skipped,
        "num_skipped_waiting_reqs": skipped,
        "kv_cache_usage": float(stats.kv_cache_usage),
        "prefix_cache_queries": int(prefix.queries),
        "prefix_cache_hits": int(prefix.hits),
    }
    stages = _dict_or_empty(getattr(stats, "num_kv_fetch_reqs_by_stage", None))
    if kv_consumer and stages:
        record["num_kv_fetch_reqs_by_stage"] = {
            stage: int(stages.get(stage, 0)) for stage in KV_FETCH_STAGES
        }
    connector = getattr(stats, "connector_prefix_cache_stats", None)
    if connector is not None:
        record["external_prefix_cache_queries"] = int(connector.queries)
        record["external_prefix_cache_hits"] = int(connector.hits)
        by_source = _dict_or_empty(getattr(connector, "hits_by_source", None))
        if by_source:
            split = dict.fromkeys(EXTERNAL_HIT_SOURCES, 0)
            for source, tokens in by_source.items():
                name = getattr(source, "value", source)
                if name in split:
                    split[name] += int(tokens)
                else:
                    split["external_unspecified"] += int(tokens)
            record["external_prefix_cache_hits_by_source"] = split
    if mm_cache_stats is not None:
        record["mm_cache_queries"] = int(mm_cache_stats.queries)
        record["mm_cache_hits"] = int(mm_cache_stats.hits)
    evictions = getattr(stats, "kv_cache_eviction_events", None) or ()
    if evictions:
        record["kv_cache_eviction_events"] = [
            {
                "lifetime_seconds": float(e.lifetime_seconds),
                "idle_seconds": float(e.idle_seconds),
                "reuse_gaps_seconds": [float(g) for g in e.reuse_gaps_seconds],
            }
            for e in evictions
        ]
    perf = getattr(stats, "perf_stats", None)
    if perf is not None:
        record["perf_stats"] = {
            "num_flops_per_gpu": float(perf.num_flops_per_gpu),
            "num_read_bytes_per_gpu": float(perf.num_read_bytes_per_gpu),
            "num_write_bytes_per_gpu": float(perf.num_write_bytes_per_gpu),
        }
    spec = getattr(stats, "spec_decoding_stats", None)
    if spec is not None:
        record["spec_decoding"] = {
            "num_drafts": int(spec.num_drafts),
            "num_draft_tokens": int(spec.num_draft_tokens),
            "num_accepted_tokens": int(spec.num_accepted_tokens),
            "num_accepted_tokens_per_pos": [int(n) for n in spec.num_accepted_tokens_per_pos],
        }
    connectors = kv_connector_record(getattr(stats, "kv_connector_stats", None))
    if connectors is not None:
        record["kv_connector_stats"] = connectors
    if lora_enabled:
        record["running_lora_adapters"] = list(
            _dict_or_empty(getattr(stats, "running_lora_adapters", None))
        )
        record["waiting_lora_adapters"] = list(
            _dict_or_empty(getattr(stats, "waiting_lora_adapters", None))
        )
    return record


# vLLM's NIXL stats lists observed element by element, and its failure lists
# of 1s (sent here as counts).
_NIXL_LISTS = ("transfer_duration", "post_duration", "bytes_transferred", "num_descriptors")
_NIXL_COUNTS = ("num_failed_transfers", "num_failed_handshakes", "num_failed_notifications",
                "num_kv_expired_reqs", "num_notifications_after_expiry")
# The offloading connector's metric names -> the record's fields.
_OFFLOADING_FIELDS = {
    "vllm:kv_offload_load_bytes": ("load_bytes", int),
    "vllm:kv_offload_load_time": ("load_time", float),
    "vllm:kv_offload_load_size": ("load_sizes", list),
    "vllm:kv_offload_store_bytes": ("store_bytes", int),
    "vllm:kv_offload_store_time": ("store_time", float),
    "vllm:kv_offload_store_size": ("store_sizes", list),
    "vllm:kv_offload_lookup_sync_delay_seconds": ("lookup_sync_delays", list),
    "vllm:kv_offload_lookup_async_delay_seconds": ("lookup_async_delays", list),
    "vllm:kv_offload_allocation_failure": ("allocation_failures", int),
    "vllm:kv_offload_stores_skipped": ("stores_skipped", int),
    "vllm:kv_offload_cpu_cache_usage_perc": ("cpu_cache_usage", float),
    "vllm:kv_offload_cpu_cache_write_usage_perc": ("cpu_cache_write_usage", float),
    "vllm:kv_offload_cpu_cache_read_usage_perc": ("cpu_cache_read_usage", float),
}
_SIMPLE_FIELDS = {
    "vllm:simple_kv_offload_load_blocks_total": ("load_blocks", int),
    "vllm:simple_kv_offload_used_blocks": ("used_blocks", int),
    "vllm:simple_kv_offload_pending_store_blocks": ("pending_store_blocks", int),
}
_SAVE_OUTCOMES = "vllm:simple_kv_offload_save_outcomes_total"


def _unlabeled(values: dict):
    """The value of a metric's unlabeled series in an offloading payload."""
    return values.get((), values.get("()")) if isinstance(values, dict) else None


def _nixl(payload: dict) -> dict:
    out = {key: [float(v) for v in payload[key]] for key in _NIXL_LISTS if key in payload}
    for key in _NIXL_COUNTS:
        if key in payload:
            out[key] = int(sum(payload[key]))
    return out


def _metric_sections(payload: dict) -> tuple[dict, dict]:
    """(offloading fields, simple_cpu_offload fields) of a self-describing payload."""
    offloading, simple = {}, {}
    for name, values in (payload.get("data") or {}).items():
        if name in _OFFLOADING_FIELDS:
            field, kind = _OFFLOADING_FIELDS[name]
            value = _unlabeled(values)
            if value is not None:
                offloading[field] = [float(v) for v in value] if kind is list else kind(value)
        elif name in _SIMPLE_FIELDS:
            field, kind = _SIMPLE_FIELDS[name]
            value = _unlabeled(values)
            if value is not None:
                simple[field] = kind(value)
        elif name == _SAVE_OUTCOMES and isinstance(values, dict):
            outcomes = {}
            for labels, count in values.items():
                outcome = labels[0] if isinstance(labels, (tuple, list)) and labels else labels
                outcomes[str(outcome)] = outcomes.get(str(outcome), 0) + int(count)
            simple["save_outcomes"] = outcomes
    return offloading, simple


def kv_connector_record(payload) -> dict | None:
    """vLLM's ``SchedulerStats.kv_connector_stats`` as the record's
    ``kv_connector_stats``: one object per connector kind.

    A single connector sends its own payload (NIXL's dict of lists, or the
    offloading connectors' ``{"types", "data", "info"}``); a MultiConnector
    one per connector class name. Metrics this tool has no family for are
    left out.
    """
    if not isinstance(payload, dict) or not payload:
        return None
    record: dict = {}

    def merge(kind: str, fields: dict) -> None:
        if fields:
            record.setdefault(kind, {}).update(fields)

    def one(part: dict) -> None:
        if "transfer_duration" in part:
            merge("nixl", _nixl(part))
        elif "data" in part:
            offloading, simple = _metric_sections(part)
            merge("offloading", offloading)
            merge("simple_cpu_offload", simple)

    if "transfer_duration" in payload or "data" in payload:
        one(payload)
    else:
        for part in payload.values():
            if isinstance(part, dict):
                one(part)
    return record or None


#: vLLM's NIXL connectors (``KVConnectorFactory`` names), whose metrics are
#: ``NixlPromMetrics``.
NIXL_CONNECTORS = ("NixlConnector", "NixlPullConnector", "NixlPushConnector")


def kv_transfer_setup(kv_transfer_config) -> tuple[bool, bool]:
    """What of vLLM's ``KVTransferConfig`` shapes its logger's KV families:
    ``(kv_consumer, nixl)``. ``kv_consumer``: the engine consumes KV (role
    ``kv_consumer`` or ``kv_both``), the only case in which vLLM registers
    ``vllm:num_requests_kv_fetch_by_stage``. ``nixl``: a NIXL connector is
    configured, alone or among a MultiConnector's, whose eight series vLLM
    creates, at 0, for every engine when its logger starts.

    >>> import types
    >>> kv = types.SimpleNamespace(kv_connector="MultiConnector", is_kv_consumer=True,
    ...     kv_connector_extra_config={"connectors": [{"kv_connector": "NixlConnector"}]})
    >>> kv_transfer_setup(kv), kv_transfer_setup(None)
    ((True, True), (False, False))
    """
    if kv_transfer_config is None or not getattr(kv_transfer_config, "kv_connector", None):
        return False, False
    consumer = bool(getattr(kv_transfer_config, "is_kv_consumer", False))
    module_path = getattr(kv_transfer_config, "kv_connector_module_path", None)
    connectors = [
        {"kv_connector": kv_transfer_config.kv_connector, "kv_connector_module_path": module_path}
    ]
    if kv_transfer_config.kv_connector == "MultiConnector":
        extra = getattr(kv_transfer_config, "kv_connector_extra_config", None) or {}
        connectors = [c for c in extra.get("connectors") or () if isinstance(c, dict)]
    # A connector loaded from a module path of its own is not vLLM's.
    nixl = any(
        c.get("kv_connector") in NIXL_CONNECTORS and not c.get("kv_connector_module_path")
        for c in connectors
    )
    return consumer, nixl


def engine_start_record(model_name: str, engine: int, received_at: float, kv_consumer: bool,
                        nixl: bool) -> dict | None:
    """The KV series vLLM's ``PrometheusStatLogger`` creates, at 0, for every
    engine when it starts (see :func:`kv_transfer_setup`), as a scheduler
    record of the idle engine: ``vllm:num_requests_kv_fetch_by_stage`` on a KV
    consumer, NIXL's eight families with a NIXL connector. The sidecar
    creates them with a record that carries them, so an engine whose steps
    never do (no NIXL transfer yet, or no step at all) has them as in vLLM.
    Every other value of the record is the idle engine's (0), which vLLM's
    logger holds then too. ``None`` when the configuration has neither.
    """
    if not (kv_consumer or nixl):
        return None
    record = {
        "type": "scheduler_stats",
        "model_name": model_name,
        "engine": engine,
        "received_at": float(received_at),
        "num_running_reqs": 0,
        "num_waiting_reqs": 0,
        "kv_cache_usage": 0.0,
        "prefix_cache_queries": 0,
        "prefix_cache_hits": 0,
    }
    if kv_consumer:
        record["num_kv_fetch_reqs_by_stage"] = dict.fromkeys(KV_FETCH_STAGES, 0)
    if nixl:
        # NIXL's payload of no transfer and no failure.
        nothing = dict.fromkeys(_NIXL_LISTS + _NIXL_COUNTS, ())
        record["kv_connector_stats"] = {"nixl": _nixl(nothing)}
    return record


def engine_config_record(cache_config, model_name: str, engine: int, max_loras, max_model_len) -> dict:
    """``CacheConfig.metrics_info()`` (every value as ``str()``), as vLLM
    labels ``vllm:cache_config_info``, plus ``--max-loras`` and the model's
    context length (which the sidecar's token buckets must match)."""
    info = cache_config.metrics_info() if hasattr(cache_config, "metrics_info") else {}
    record = {
        "type": "engine_config",
        "model_name": model_name,
        "engine": engine,
        "cache_config": {str(k): str(v) for k, v in info.items() if k != "engine"},
    }
    if max_loras is not None:
        record["max_loras"] = int(max_loras)
    if max_model_len is not None:
        record["max_model_len"] = int(max_model_len)
    return record


def sleep_record(model_name: str, engine: int, sleep: int, level: int) -> dict:
    """``record_sleep_state(sleep, level)``: vLLM passes ``(1, level)`` when an
    engine goes to sleep and ``(0, 0)`` when it wakes up."""
    return {
        "type": "sleep_state",
        "model_name": model_name,
        "engine": engine,
        "level": int(level) if sleep == 1 else 0,
    }


def finite(record: dict) -> bool:
    """Whether every number in the record is finite. The sidecar would reject
    the rest; checked before sending so that the loss is logged in vLLM's
    process and counted among the plugin's drops."""
    stack = [record]
    while stack:
        value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                return False
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return True



class _CacheCounts:
    """Multi-modal cache queries and hits carried to the next scheduler record."""

    __slots__ = ("queries", "hits")

    def __init__(self, queries=0, hits=0):
        self.queries = queries
        self.hits = hits


class StepConverter:
    """The records of each ``record(scheduler_stats, iteration_stats,
    mm_cache_stats, engine_idx)`` call, in the order vLLM's logger applies
    them: scheduler state first, then the iteration.

    The multi-modal cache counts travel in the scheduler record. vLLM can hand
    them over in a step without scheduler stats; they are then carried to the
    engine's next scheduler record, so none is lost (the counters' totals are
    vLLM's, one step later).
    """

    def __init__(self, model_name: str, lora_enabled: bool, kv_consumer: bool = False):
        self.model_name = model_name
        self.lora_enabled = lora_enabled
        self.kv_consumer = kv_consumer
        self._pending_mm: dict[int, _CacheCounts] = {}

    def records(self, scheduler_stats, iteration_stats, mm_cache_stats, engine: int, now: float) -> list:
        out = []
        if mm_cache_stats is not None and scheduler_stats is None:
            pending = self._pending_mm.setdefault(engine, _CacheCounts())
            pending.queries += int(mm_cache_stats.queries)
            pending.hits += int(mm_cache_stats.hits)
        if scheduler_stats is not None:
            pending = self._pending_mm.pop(engine, None)
            if pending is not None:
                queries = pending.queries + (int(mm_cache_stats.queries) if mm_cache_stats else 0)
                hits = pending.hits + (int(mm_cache_stats.hits) if mm_cache_stats else 0)
                mm_cache_stats = _CacheCounts(queries, hits)
            out.append(
                scheduler_record(
                    scheduler_stats,
                    mm_cache_stats,
                    self.model_name,
                    engine,
                    now,
                    self.lora_enabled,
                    self.kv_consumer,
                )
            )
        if iteration_stats is not None:
            out.append(iteration_record(iteration_stats, self.model_name, engine))
        return out
