"""vLLM's own stats objects from a JSONL trace.

Builds vLLM's real ``IterationStats`` (``update_from_output``, which calls
``update_from_events``, and ``update_from_finished_request``),
``RequestStateStats``, ``SchedulerStats`` and ``PrefixCacheStats`` from vLLM's
own ``EngineCoreOutput`` and ``EngineCoreEvent`` objects, the way
``OutputProcessor.process_outputs`` does, and yields the ``record()`` calls
AsyncLLM's output handler would make. With a KV connector configured
(:func:`kv_transfer_config`), a record's ``kv_connector_stats`` becomes the
payload a MultiConnector's stats give the scheduler, built by the connectors'
own stats classes. Used by the oracle test and by the plugin's ``record()``
benchmark.
"""

import functools
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reference"))
import reference  # noqa: E402  (the independent reference: which lines are valid)

from vllm.config import CacheConfig, KVTransferConfig, ObservabilityConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiKVConnectorStats
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
    OffloadingConnectorStats,
    _ConnectorMetricName,
    _TransferMetricName,
)
from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, FinishReason
from vllm.v1.kv_offload.cpu.common import CPUOffloadingMetrics
from vllm.v1.metrics.cache_hit_source import CacheHitSource
from vllm.v1.metrics.stats import (
    KV_FETCH_STAGES,
    IterationStats,
    LoRARequestStates,
    MultiModalCacheStats,
    PrefillStats,
    PrefixCacheStats,
    RequestStateStats,
    SchedulerStats,
)
from vllm.v1.simple_kv_offload.metrics import MetricName as SimpleMetricName
from vllm.v1.simple_kv_offload.metrics import SimpleCPUOffloadStats

EVENTS = {
    "queued": EngineCoreEventType.QUEUED,
    "scheduled": EngineCoreEventType.SCHEDULED,
    "preempted": EngineCoreEventType.PREEMPTED,
}
REASONS = {r.name.lower(): r for r in FinishReason}


def vllm_config(model: str, max_model_len: int, kv_transfer_config=None):
    """What ``PrometheusStatLogger`` reads of a ``VllmConfig``. vLLM's own
    ``ObservabilityConfig``, ``CacheConfig`` and ``KVTransferConfig`` (none:
    no KV connector); a ``ModelConfig`` needs a model's files, so the three
    fields read of it stand in for it."""
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(
            served_model_name=model, max_model_len=max_model_len, is_diffusion=False
        ),
        observability_config=ObservabilityConfig(),
        cache_config=CacheConfig(),
        speculative_config=None,
        kv_transfer_config=kv_transfer_config,
        ec_transfer_config=None,
        lora_config=None,
        watermark_config=None,
    )


#: The connectors of :func:`kv_transfer_config`, by their ``KVConnectorFactory``
#: names.
NIXL = "NixlConnector"
OFFLOADING = "OffloadingConnector"
SIMPLE_CPU_OFFLOAD = "SimpleCPUOffloadConnector"


@functools.cache
def stats_key(connector: str) -> str:
    """The key under which ``MultiConnector.get_kv_connector_stats`` files a
    connector's stats: its class's ``__name__`` (``NixlConnector`` is vLLM's
    alias of ``NixlPullConnector``, so its stats go under the latter, where
    ``MultiKVConnectorPromMetrics`` looks for them)."""
    return KVConnectorFactory.get_connector_class_by_name(connector).__name__


def kv_transfer_config(trace, model) -> KVTransferConfig:
    """vLLM's ``KVTransferConfig`` of a MultiConnector over the three
    connectors whose stats the trace's ``kv_connector_stats`` carry: NIXL, the
    OffloadingConnector with its default CPU spec, and the
    SimpleCPUOffloadConnector. ``PrometheusStatLogger`` builds their metrics
    from it through vLLM's own path (``KVConnectorProm`` ->
    ``KVConnectorFactory.get_connector_class(...).build_prom_metrics``), which
    reads nothing but this config: no GPU or model is needed.

    ``kv_both``: the engines consume KV too, so vLLM registers
    ``vllm:num_requests_kv_fetch_by_stage`` (on KV consumers only) and the
    comparison covers it. The OffloadingConnector's ``store_threshold`` is 2
    when the model's records carry ``stores_skipped`` (vLLM registers
    ``vllm:kv_offload_stores_skipped`` only with a threshold of 2 or more,
    and its connector reports skipped stores only then), else vLLM's default.
    """
    skipped = any(
        ((r.get("kv_connector_stats") or {}).get("offloading") or {}).get("stores_skipped")
        is not None
        for r in records(trace, model)
        if r["type"] == "scheduler_stats"
    )
    offloading = {"cpu_bytes_to_use": 8 << 30}
    if skipped:
        offloading["store_threshold"] = 2
    connectors = [
        {"kv_connector": NIXL, "kv_role": "kv_both"},
        {"kv_connector": OFFLOADING, "kv_role": "kv_both", "kv_connector_extra_config": offloading},
        {
            "kv_connector": SIMPLE_CPU_OFFLOAD,
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 8 << 30},
        },
    ]
    return KVTransferConfig(
        kv_connector="MultiConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"connectors": connectors},
    )


# The record's kv_connector_stats fields -> vLLM's metric names in the
# offloading connectors' self-describing payloads.
_OFFLOADING_COUNTERS = {
    "load_bytes": _TransferMetricName.LOAD_BYTES,
    "load_time": _TransferMetricName.LOAD_TIME,
    "store_bytes": _TransferMetricName.STORE_BYTES,
    "store_time": _TransferMetricName.STORE_TIME,
    "allocation_failures": _ConnectorMetricName.ALLOCATION_FAILURE,
    "stores_skipped": CPUOffloadingMetrics.STORES_SKIPPED,
}
_OFFLOADING_HISTOGRAMS = {
    "load_sizes": _TransferMetricName.LOAD_SIZE,
    "store_sizes": _TransferMetricName.STORE_SIZE,
    "lookup_sync_delays": _ConnectorMetricName.LOOKUP_SYNC_DELAY,
    "lookup_async_delays": _ConnectorMetricName.LOOKUP_ASYNC_DELAY,
}
_OFFLOADING_GAUGES = {
    "cpu_cache_usage": CPUOffloadingMetrics.CPU_CACHE_USAGE_PERC,
    "cpu_cache_write_usage": CPUOffloadingMetrics.CPU_CACHE_WRITE_USAGE_PERC,
    "cpu_cache_read_usage": CPUOffloadingMetrics.CPU_CACHE_READ_USAGE_PERC,
}
_SIMPLE_GAUGES = {
    "used_blocks": SimpleMetricName.USED_BLOCKS,
    "pending_store_blocks": SimpleMetricName.PENDING_STORE_BLOCKS,
}
_NIXL_LISTS = ("transfer_duration", "post_duration", "bytes_transferred", "num_descriptors")
_NIXL_EVENTS = {
    "num_failed_transfers": NixlKVConnectorStats.record_failed_transfer,
    "num_failed_handshakes": NixlKVConnectorStats.record_failed_handshake,
    "num_failed_notifications": NixlKVConnectorStats.record_failed_notification,
    "num_kv_expired_reqs": NixlKVConnectorStats.record_kv_expired_req,
    "num_notifications_after_expiry": NixlKVConnectorStats.record_notification_after_expiry,
}


def kv_connector_stats(k) -> dict | None:
    """The record's ``kv_connector_stats`` as the dict vLLM's scheduler puts
    into ``SchedulerStats.kv_connector_stats`` for the MultiConnector of
    :func:`kv_transfer_config`: ``MultiKVConnectorStats.to_dict()``, one
    payload per connector class that has stats this step (as
    ``MultiConnector.get_kv_connector_stats`` files them), each built by the
    connector's own stats class. A connector whose stats hold nothing is left
    out, as the scheduler leaves out empty stats; none at all is ``None``.
    """
    if k is None:
        return None
    multi = MultiKVConnectorStats()
    nixl = k.get("nixl")
    if nixl is not None:
        stats = NixlKVConnectorStats()
        # The worker's record_transfer() appends seconds (it divides NIXL's
        # microseconds by 1e6), bytes and descriptors; the record carries
        # those lists as they are.
        for key in _NIXL_LISTS:
            stats.data[key].extend(nixl.get(key) or ())
        for key, record_event in _NIXL_EVENTS.items():
            for _ in range(nixl.get(key) or 0):
                record_event(stats)
        # Left out when it holds nothing (the worker's get_kv_connector_stats
        # gives None then); NIXL's is_empty() looks at transfers and failures
        # only, and the record's post times or bytes alone are data too.
        if any(stats.data.values()):
            multi[stats_key(NIXL)] = stats
    offloading = k.get("offloading")
    if offloading is not None:
        stats = OffloadingConnectorStats()
        for key, name in _OFFLOADING_COUNTERS.items():
            if offloading.get(key) is not None:
                stats.increase_counter(name, offloading[key])
        for key, name in _OFFLOADING_HISTOGRAMS.items():
            for value in offloading.get(key) or ():
                stats.observe_histogram(name, value)
        for key, name in _OFFLOADING_GAUGES.items():
            if offloading.get(key) is not None:
                stats.set_gauge(name, offloading[key])
        if not stats.is_empty():
            multi[stats_key(OFFLOADING)] = stats
    simple = k.get("simple_cpu_offload")
    if simple is not None:
        stats = SimpleCPUOffloadStats()
        for outcome, count in (simple.get("save_outcomes") or {}).items():
            if count is not None:
                stats.increase_counter(SimpleMetricName.SAVE_OUTCOMES, count, (outcome,))
        if simple.get("load_blocks") is not None:
            stats.increase_counter(SimpleMetricName.LOAD_BLOCKS, simple["load_blocks"])
        for key, name in _SIMPLE_GAUGES.items():
            if simple.get(key) is not None:
                stats.set_gauge(name, simple[key])
        if not stats.is_empty():
            multi[stats_key(SIMPLE_CPU_OFFLOAD)] = stats
    return multi.to_dict() if multi.data else None


class Request:
    """What ``OutputProcessor`` keeps per request (``RequestState``)."""

    def __init__(self, start):
        self.stats = RequestStateStats(arrival_time=start["arrival_time"])
        self.prompt_len = start["prompt_len"]
        self.max_tokens = start.get("max_tokens")
        self.n = start.get("n") or 1
        self.engine = start["engine"]
        self.is_prefilling = True
        self.num_cached_tokens = 0


def engine_core_output(o) -> EngineCoreOutput:
    prefill = o.get("prefill_stats")
    stats = None
    if prefill is not None:
        stats = PrefillStats(
            num_prompt_tokens=prefill.get("num_prompt_tokens", 0),
            num_computed_tokens=prefill.get("num_computed_tokens", 0),
            num_cached_tokens=prefill.get("num_cached_tokens", 0),
            num_local_cached_tokens=prefill.get("num_local_cached_tokens", 0),
            num_external_cached_tokens=prefill.get("num_external_cached_tokens", 0),
        )
    reason = o.get("finish_reason")
    return EngineCoreOutput(
        request_id=o["request_id"],
        new_token_ids=list(o.get("new_token_ids") or []),
        finish_reason=REASONS[reason] if reason else None,
        events=[EngineCoreEvent(EVENTS[e["type"]], e["timestamp"]) for e in o.get("events") or []]
        or None,
        prefill_stats=stats,
    )


def scheduler_stats(r, kv_fetch_counts=None, kv_connector=False) -> tuple:
    """vLLM's ``SchedulerStats`` (and ``MultiModalCacheStats``) of a
    record. ``kv_fetch_counts`` is the engine's ``_kv_fetch_counts``, which
    vLLM's scheduler always reports (all stages 0 without a connector); with
    a KV connector configured, a record's ``num_kv_fetch_reqs_by_stage``
    updates it (an absent field leaves it as it was, as the sidecar leaves
    the gauges) and its ``kv_connector_stats`` become the connectors'."""
    skipped = r.get("num_skipped_waiting_reqs") or 0
    if kv_fetch_counts is None:
        kv_fetch_counts = dict.fromkeys(KV_FETCH_STAGES, 0)
    if kv_connector and r.get("num_kv_fetch_reqs_by_stage") is not None:
        stages = r["num_kv_fetch_reqs_by_stage"]
        kv_fetch_counts.update({stage: stages.get(stage, 0) for stage in KV_FETCH_STAGES})
    stats = SchedulerStats(
        num_running_reqs=r["num_running_reqs"],
        # vLLM 0.33 counts deferred requests apart; the trace's count includes them.
        num_waiting_reqs=r["num_waiting_reqs"] - skipped,
        num_skipped_waiting_reqs=skipped,
        num_kv_fetch_reqs_by_stage=dict(kv_fetch_counts),
        kv_cache_usage=r["kv_cache_usage"],
        prefix_cache_stats=PrefixCacheStats(
            queries=r["prefix_cache_queries"], hits=r["prefix_cache_hits"]
        ),
        kv_connector_stats=(
            kv_connector_stats(r.get("kv_connector_stats")) if kv_connector else None
        ),
    )
    queries = r.get("external_prefix_cache_queries") or 0
    if queries:
        # As the scheduler records a KV connector's lookups: the hits come
        # with the tiers the connector names (the trace's split, else the
        # base connector's answer, all unspecified).
        hits = r.get("external_prefix_cache_hits") or 0
        split = r.get("external_prefix_cache_hits_by_source") or {
            "external_unspecified": hits
        }
        stats.connector_prefix_cache_stats = PrefixCacheStats()
        stats.connector_prefix_cache_stats.record(
            num_tokens=queries,
            num_hits=hits,
            preempted=False,
            hits_by_source={CacheHitSource(k): v for k, v in split.items()} if hits else None,
        )
    mm = None
    if r.get("mm_cache_queries"):
        mm = MultiModalCacheStats(queries=r["mm_cache_queries"], hits=r.get("mm_cache_hits", 0))
    return stats, mm


def records(path, model):
    """The trace's valid records of one model, in order. A line is valid as
    the independent reference (``tests/reference/reference.py``, whose
    verdicts on the golden traces' invalid lines are the sidecar's) parses
    it: a line the sidecar rejects reaches neither side."""
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            try:
                reference.parse_line(line)
            except reference.Invalid:
                continue
            r = json.loads(line)
            kind = r["type"]
            if kind in ("outputs", "abort") or (
                kind in ("request", "scheduler_stats") and r.get("model_name") == model
            ):
                yield r


def steps(trace, model, counts=None, kv_connector=False):
    """The ``record()`` calls the trace makes, as AsyncLLM's output handler
    makes them: ``(scheduler_stats, iteration_stats, mm_cache_stats,
    engine_idx)``, built by vLLM's own classes. ``counts`` (a dict), when
    given, receives the number of steps and finished requests.
    ``kv_connector``: the engines run the KV connectors of
    :func:`kv_transfer_config` (else the trace's connector stats and KV-fetch
    stages are none a vLLM without a connector could have)."""
    counts = {} if counts is None else counts
    counts.update(steps=0, finished=0)
    live: dict[str, Request] = {}
    kv_fetch_counts: dict[int, dict[str, int]] = {}
    lora_states = LoRARequestStates(log_stats=False)
    for r in records(trace, model):
        kind = r["type"]
        if kind == "request":
            if r["request_id"] not in live:
                live[r["request_id"]] = Request(r)
        elif kind == "abort":
            # The Python frontend forgets an aborted request without stats.
            live.pop(r.get("request_id"), None)
        elif kind == "scheduler_stats":
            fetch = kv_fetch_counts.setdefault(r["engine"], dict.fromkeys(KV_FETCH_STAGES, 0))
            stats, mm = scheduler_stats(r, dict(fetch), kv_connector)
            fetch.update(stats.num_kv_fetch_reqs_by_stage)
            yield stats, None, mm, r["engine"]
        else:  # outputs
            outputs = [o for o in r.get("outputs") or [] if o.get("request_id") in live]
            if not outputs:
                continue
            iteration = IterationStats()
            iteration.iteration_timestamp = r["received_at"]
            for o in outputs:
                req = live[o["request_id"]]
                output = engine_core_output(o)
                iteration.update_from_output(
                    output, r["timestamp"], req.is_prefilling, req.stats, lora_states, None
                )
                if req.is_prefilling:
                    if output.prefill_stats is not None:
                        req.num_cached_tokens = output.prefill_stats.num_cached_tokens
                    req.is_prefilling = False
                if output.finish_reason is not None:
                    del live[o["request_id"]]
                    iteration.update_from_finished_request(
                        finish_reason=output.finish_reason,
                        request_id=o["request_id"],
                        num_prompt_tokens=req.prompt_len,
                        max_tokens_param=req.max_tokens,
                        req_stats=req.stats,
                        num_cached_tokens=req.num_cached_tokens,
                    )
                    # ParentRequest.observe_finished_request for a request whose
                    # n samples were tracked as one (the trace has one stream).
                    iteration.max_num_generation_tokens_iter.append(req.stats.num_generation_tokens)
                    iteration.n_params_iter.append(req.n)
                    counts["finished"] += 1
            counts["steps"] += 1
            yield None, iteration, None, r["engine"]
