"""vLLM's own stats objects from a JSONL trace.

Builds vLLM's real ``IterationStats`` (``update_from_output``, which calls
``update_from_events``, and ``update_from_finished_request``),
``RequestStateStats``, ``SchedulerStats`` and ``PrefixCacheStats`` from vLLM's
own ``EngineCoreOutput`` and ``EngineCoreEvent`` objects, the way
``OutputProcessor.process_outputs`` does, and yields the ``record()`` calls
AsyncLLM's output handler would make. Used by the oracle test and by the
plugin's ``record()`` benchmark.
"""

import json
import math
import types

from vllm.config import CacheConfig, ObservabilityConfig
from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, FinishReason
from vllm.v1.metrics.cache_hit_source import CacheHitSource
from vllm.v1.metrics.stats import (
    IterationStats,
    LoRARequestStates,
    MultiModalCacheStats,
    PrefillStats,
    PrefixCacheStats,
    RequestStateStats,
    SchedulerStats,
)

EVENTS = {
    "queued": EngineCoreEventType.QUEUED,
    "scheduled": EngineCoreEventType.SCHEDULED,
    "preempted": EngineCoreEventType.PREEMPTED,
}
REASONS = {r.name.lower(): r for r in FinishReason}


def vllm_config(model: str, max_model_len: int):
    """What ``PrometheusStatLogger`` reads of a ``VllmConfig``. vLLM's own
    ``ObservabilityConfig`` and ``CacheConfig``; a ``ModelConfig`` needs a
    model's files, so the three fields read of it stand in for it."""
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(
            served_model_name=model, max_model_len=max_model_len, is_diffusion=False
        ),
        observability_config=ObservabilityConfig(),
        cache_config=CacheConfig(),
        speculative_config=None,
        kv_transfer_config=None,
        ec_transfer_config=None,
        lora_config=None,
        watermark_config=None,
    )


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


def scheduler_stats(r) -> tuple:
    skipped = r.get("num_skipped_waiting_reqs") or 0
    stats = SchedulerStats(
        num_running_reqs=r["num_running_reqs"],
        # vLLM 0.33 counts deferred requests apart; the trace's count includes them.
        num_waiting_reqs=r["num_waiting_reqs"] - skipped,
        num_skipped_waiting_reqs=skipped,
        kv_cache_usage=r["kv_cache_usage"],
        prefix_cache_stats=PrefixCacheStats(
            queries=r["prefix_cache_queries"], hits=r["prefix_cache_hits"]
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
    """The trace's valid records of one model, in order (lines that are not
    JSON objects are skipped: the sidecar's replay rejects them too)."""
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if not isinstance(r, dict):
                continue
            engine = r.get("engine", 0)
            if not isinstance(engine, int) or isinstance(engine, bool) or engine < 0:
                continue  # invalid (the golden traces have some); the sidecar rejects it too
            kind = r.get("type")
            if kind in ("outputs", "abort") or (
                kind in ("request", "scheduler_stats") and r.get("model_name") == model
            ):
                yield r


def steps(trace, model, counts=None):
    """The ``record()`` calls the trace makes, as AsyncLLM's output handler
    makes them: ``(scheduler_stats, iteration_stats, mm_cache_stats,
    engine_idx)``, built by vLLM's own classes. ``counts`` (a dict), when
    given, receives the number of steps and finished requests."""
    counts = {} if counts is None else counts
    counts.update(steps=0, finished=0)
    live: dict[str, Request] = {}
    lora_states = LoRARequestStates(log_stats=False)
    for r in records(trace, model):
        kind = r["type"]
        if kind == "request":
            try:
                if r["request_id"] not in live and math.isfinite(r["arrival_time"]):
                    live[r["request_id"]] = Request(r)
            except (KeyError, TypeError, ValueError):
                continue  # an invalid start (the golden traces have some)
        elif kind == "abort":
            # The Python frontend forgets an aborted request without stats.
            live.pop(r.get("request_id"), None)
        elif kind == "scheduler_stats":
            try:
                stats, mm = scheduler_stats(r)
            except (KeyError, TypeError, ValueError):
                continue
            yield stats, None, mm, r["engine"]
        else:  # outputs
            outputs = [o for o in r.get("outputs") or [] if o.get("request_id") in live]
            if not outputs:
                continue
            iteration = IterationStats()
            iteration.iteration_timestamp = r["received_at"]
            for o in outputs:
                req = live[o["request_id"]]
                try:
                    output = engine_core_output(o)
                except (KeyError, TypeError, ValueError):
                    continue
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
