"""vLLM's stats objects to the sidecar's records: ``Record`` messages of the
ingest protocol (``proto/vllm_otel_metrics/v1/ingest.proto``), ready to send.

Mirrors what vLLM 0.33's ``PrometheusStatLogger.record()``
(``vllm/v1/metrics/loggers.py``) reads from ``SchedulerStats``,
``IterationStats`` and ``MultiModalCacheStats`` (``vllm/v1/metrics/stats.py``),
what ``log_engine_initialized()`` reads from the cache configuration, and what
``record_sleep_state()`` is told. This module does not import vLLM: it reads
attributes by name, and every field vLLM added after 0.30 is optional
(``getattr`` with vLLM's own default), because vLLM does not promise these
classes are stable.

The messages' field names are the JSONL keys (``docs/SEMANTICS.md`` and
docs/TRACE_FORMAT.md). They are filled field by field: the stream thread
converts every engine step in vLLM's process, and the generated classes'
keyword constructors cost several times as much per field.
"""

import dataclasses
import math

#: vLLM's ``FinishReason`` (an ``IntEnum``) by value, as label values.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

#: vLLM's ``KV_FETCH_STAGES``.
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")

#: vLLM's ``CacheHitSource`` values other than ``device`` (the local prefix
#: cache, which the scheduler record carries as ``prefix_cache_hits``).
EXTERNAL_HIT_SOURCES = ("host", "p2p", "disk", "external_unspecified")

_pb = None
_finish_reason_numbers: dict = {}


def messages():
    """The generated message classes (``vllm_otel_metrics.v1.ingest_pb2``).

    Imported on first use: ``setup.py`` generates the module from ``proto/``
    when the package is built, so the sources alone (where the doctests run)
    lack it.
    """
    global _pb
    if _pb is None:
        from .v1 import ingest_pb2

        _finish_reason_numbers.update(ingest_pb2.FinishReason.items())
        _pb = ingest_pb2
    return _pb


@dataclasses.dataclass(frozen=True, slots=True)
class NotFinite:
    """In place of a record with a number that is not finite, which the
    sidecar would reject: the stream counts it among the plugin's drops and
    logs it in vLLM's process."""

    kind: str
    engine: int


@dataclasses.dataclass(frozen=True, slots=True)
class Unconvertible:
    """In place of a record that could not be built from what vLLM queued
    (an object without a field the record needs): the stream counts it
    among the plugin's drops and logs it, and sends the others."""

    kind: str
    error: str


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


def finite(message) -> bool:
    """Whether every double in the message, and in the messages it holds,
    is finite."""
    for field, value in message.ListFields():
        if field.type == field.TYPE_DOUBLE:
            if not all(map(math.isfinite, value if field.is_repeated else (value,))):
                return False
        elif field.type == field.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
            # (The protocol's one map, cache_config, holds strings.)
            if not all(map(finite, value if field.is_repeated else (value,))):
                return False
    return True


def _checked(record, total: float, kind: str, engine: int):
    """``record``, or :class:`NotFinite` when one of its doubles is not
    finite. ``total`` is the sum of them all: a number that is not finite
    makes it so (infinities and NaN absorb whatever is added), so a finite
    sum clears the record without looking at each number again. Finite
    numbers whose sum overflows are told apart by :func:`finite`."""
    if math.isfinite(total) or finite(record):
        return record
    return NotFinite(kind, engine)


def _finished_request(message, req) -> float:
    """Fills a ``FinishedRequest`` from one ``FinishedRequestStats``; returns
    the sum of its times."""
    message.request_id = str(getattr(req, "request_id", None) or "")
    label = finish_reason(req.finish_reason).upper()
    # UNSPECIFIED (0) for a reason the protocol lacks: the sidecar rejects
    # the record, names it and counts it.
    message.finish_reason = _finish_reason_numbers.get(f"FINISH_REASON_{label}", 0)
    e2e = message.e2e_latency = float(req.e2e_latency)
    queued = message.queued_time = float(req.queued_time)
    prefill = message.prefill_time = float(req.prefill_time)
    inference = message.inference_time = float(req.inference_time)
    decode = message.decode_time = float(req.decode_time)
    per_token = message.mean_time_per_output_token = float(req.mean_time_per_output_token)
    message.num_prompt_tokens = int(req.num_prompt_tokens)
    message.num_generation_tokens = int(req.num_generation_tokens)
    message.num_preemptions = int(getattr(req, "num_preemptions", 0))
    message.num_cached_tokens = max(int(getattr(req, "num_cached_tokens", 0)), 0)
    max_tokens = getattr(req, "max_tokens_param", None)
    if max_tokens is not None:
        message.max_tokens_param = int(max_tokens)
    return e2e + queued + prefill + inference + decode + per_token


def iteration_record(stats, model_name: str, engine: int):
    """One ``IterationStats``: the per-step lists as they are, the prompt
    token breakdown and the finished requests with their values.

    ``received_at`` is the step's ``iteration_timestamp``, the wall-clock time
    vLLM's own latencies were taken against.
    """
    record = (_pb or messages()).Record()
    message = record.iteration_stats
    message.model_name = model_name
    message.engine = engine
    total = message.received_at = float(stats.iteration_timestamp)
    message.num_generation_tokens = int(stats.num_generation_tokens)
    prompt = stats.prompt_token_stats
    tokens = message.prompt_token_stats
    tokens.computed = int(prompt.computed)
    tokens.local_cache_hit = int(getattr(prompt, "local_cache_hit", 0))
    tokens.external_kv_transfer = int(getattr(prompt, "external_kv_transfer", 0))
    tokens.cached_tokens = int(getattr(prompt, "cached_tokens", 0))
    tokens.total = int(prompt.total)
    message.num_preempted_reqs = int(getattr(stats, "num_preempted_reqs", 0))
    # An empty list is no field on the wire, and at small batches most of
    # them are empty: only the lists that hold something are touched.
    counts = getattr(stats, "max_num_generation_tokens_iter", None)
    if counts:
        message.max_num_generation_tokens_iter.extend(map(int, counts))
    counts = getattr(stats, "n_params_iter", None)
    if counts:
        message.n_params_iter.extend(map(int, counts))
    times = getattr(stats, "time_to_first_tokens_iter", None)
    if times:
        times = list(map(float, times))
        message.time_to_first_tokens_iter.extend(times)
        total += sum(times)
    times = getattr(stats, "inter_token_latencies_iter", None)
    if times:
        times = list(map(float, times))
        message.inter_token_latencies_iter.extend(times)
        total += sum(times)
    finished = stats.finished_requests
    if finished:
        add = message.finished_requests.add
        for req in finished:
            total += _finished_request(add(), req)
    return _checked(record, total, "iteration_stats", engine)


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
):
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
    record = (_pb or messages()).Record()
    message = record.scheduler_stats
    skipped = int(getattr(stats, "num_skipped_waiting_reqs", 0))
    prefix = stats.prefix_cache_stats
    message.model_name = model_name
    message.engine = engine
    received = message.received_at = float(received_at)
    message.num_running_reqs = int(stats.num_running_reqs)
    message.num_waiting_reqs = int(stats.num_waiting_reqs) + skipped
    message.num_skipped_waiting_reqs = skipped
    usage = message.kv_cache_usage = float(stats.kv_cache_usage)
    message.prefix_cache_queries = int(prefix.queries)
    message.prefix_cache_hits = int(prefix.hits)
    total = received + usage
    stages = _dict_or_empty(getattr(stats, "num_kv_fetch_reqs_by_stage", None))
    if kv_consumer and stages:
        by_stage = message.num_kv_fetch_reqs_by_stage
        for stage in KV_FETCH_STAGES:
            setattr(by_stage, stage, int(stages.get(stage, 0)))
    connector = getattr(stats, "connector_prefix_cache_stats", None)
    if connector is not None:
        message.external_prefix_cache_queries = int(connector.queries)
        message.external_prefix_cache_hits = int(connector.hits)
        by_source = _dict_or_empty(getattr(connector, "hits_by_source", None))
        if by_source:
            split = dict.fromkeys(EXTERNAL_HIT_SOURCES, 0)
            for source, tokens in by_source.items():
                name = getattr(source, "value", source)
                if name in split:
                    split[name] += int(tokens)
                else:
                    split["external_unspecified"] += int(tokens)
            hits = message.external_prefix_cache_hits_by_source
            for name, tokens in split.items():
                setattr(hits, name, tokens)
    if mm_cache_stats is not None:
        message.mm_cache_queries = int(mm_cache_stats.queries)
        message.mm_cache_hits = int(mm_cache_stats.hits)
    for e in getattr(stats, "kv_cache_eviction_events", None) or ():
        event = message.kv_cache_eviction_events.add()
        lifetime = event.lifetime_seconds = float(e.lifetime_seconds)
        idle = event.idle_seconds = float(e.idle_seconds)
        gaps = [float(g) for g in e.reuse_gaps_seconds]
        event.reuse_gaps_seconds.extend(gaps)
        total += lifetime + idle + sum(gaps)
    perf = getattr(stats, "perf_stats", None)
    if perf is not None:
        work = message.perf_stats
        flops = work.num_flops_per_gpu = float(perf.num_flops_per_gpu)
        read = work.num_read_bytes_per_gpu = float(perf.num_read_bytes_per_gpu)
        written = work.num_write_bytes_per_gpu = float(perf.num_write_bytes_per_gpu)
        total += flops + read + written
    spec = getattr(stats, "spec_decoding_stats", None)
    if spec is not None:
        drafts = message.spec_decoding
        drafts.num_drafts = int(spec.num_drafts)
        drafts.num_draft_tokens = int(spec.num_draft_tokens)
        drafts.num_accepted_tokens = int(spec.num_accepted_tokens)
        drafts.num_accepted_tokens_per_pos.extend([int(n) for n in spec.num_accepted_tokens_per_pos])
    connectors = getattr(stats, "kv_connector_stats", None)
    if connectors:
        total += _kv_connectors(message.kv_connector_stats, connectors)
    if lora_enabled:
        message.running_lora_adapters.names.extend(
            list(_dict_or_empty(getattr(stats, "running_lora_adapters", None)))
        )
        message.waiting_lora_adapters.names.extend(
            list(_dict_or_empty(getattr(stats, "waiting_lora_adapters", None)))
        )
    return _checked(record, total, "scheduler_stats", engine)


# vLLM's NIXL stats lists observed element by element, and its failure lists
# of 1s (sent here as counts).
_NIXL_LISTS = ("transfer_duration", "post_duration", "bytes_transferred", "num_descriptors")
_NIXL_COUNTS = ("num_failed_transfers", "num_failed_handshakes", "num_failed_notifications",
                "num_kv_expired_reqs", "num_notifications_after_expiry")
# The offloading connector's metric names -> the message's fields.
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


def _observe(message, field: str, values) -> float:
    """Sets an ``Observations`` field, in place of one an earlier connector
    of the same kind set; returns the sum of its values."""
    values = [float(v) for v in values]
    getattr(message, field).values[:] = values
    return sum(values)


def _nixl(message, payload: dict) -> float:
    """Fills a ``NixlStats``; returns the sum of its doubles."""
    total = 0.0
    for key in _NIXL_LISTS:
        if key in payload:
            total += _observe(message, key, payload[key])
    for key in _NIXL_COUNTS:
        if key in payload:
            setattr(message, key, int(sum(payload[key])))
    return total


def _metric_sections(message, payload: dict) -> float:
    """Fills the offloading and simple_cpu_offload parts of a
    ``KvConnectorStats`` from a self-describing payload (a part none of
    whose metrics is there stays absent); returns the sum of their doubles."""
    total = 0.0
    for name, values in (payload.get("data") or {}).items():
        if name in _OFFLOADING_FIELDS:
            field, kind = _OFFLOADING_FIELDS[name]
            value = _unlabeled(values)
            if value is None:
                continue
            if kind is list:
                total += _observe(message.offloading, field, value)
            else:
                value = kind(value)
                setattr(message.offloading, field, value)
                if kind is float:
                    total += value
        elif name in _SIMPLE_FIELDS:
            field, kind = _SIMPLE_FIELDS[name]
            value = _unlabeled(values)
            if value is not None:
                setattr(message.simple_cpu_offload, field, kind(value))
        elif name == _SAVE_OUTCOMES and isinstance(values, dict):
            outcomes = {}
            for labels, count in values.items():
                outcome = labels[0] if isinstance(labels, (tuple, list)) and labels else labels
                outcomes[str(outcome)] = outcomes.get(str(outcome), 0) + int(count)
            # In place of an earlier connector's outcomes; an outcome the
            # protocol has no field for fails the record.
            message.simple_cpu_offload.save_outcomes.CopyFrom(
                (_pb or messages()).SaveOutcomes(**outcomes)
            )
    return total


def _kv_connectors(message, payload) -> float:
    """Fills a ``KvConnectorStats`` from vLLM's
    ``SchedulerStats.kv_connector_stats``; returns the sum of its doubles.

    A single connector sends its own payload (NIXL's dict of lists, or the
    offloading connectors' ``{"types", "data", "info"}``); a MultiConnector
    one per connector class name, merged here by connector kind. Metrics
    this tool has no family for are left out; a payload with none leaves
    the message absent.
    """
    if not isinstance(payload, dict) or not payload:
        return 0.0
    if "transfer_duration" in payload or "data" in payload:
        parts = (payload,)
    else:
        parts = [part for part in payload.values() if isinstance(part, dict)]
    total = 0.0
    for part in parts:
        if "transfer_duration" in part:
            total += _nixl(message.nixl, part)
        elif "data" in part:
            total += _metric_sections(message, part)
    return total


def kv_connector_record(payload):
    """vLLM's ``SchedulerStats.kv_connector_stats`` as a ``KvConnectorStats``
    message (see :func:`scheduler_record`), or ``None`` when it has nothing
    this tool exports."""
    message = (_pb or messages()).KvConnectorStats()
    _kv_connectors(message, payload)
    return message if message.ListFields() else None


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
                        nixl: bool):
    """The KV series vLLM's ``PrometheusStatLogger`` creates, at 0, for every
    engine when it starts (see :func:`kv_transfer_setup`), as a scheduler
    record of the idle engine: ``vllm:num_requests_kv_fetch_by_stage`` on a KV
    consumer, NIXL's eight families with a NIXL connector. The sidecar
    creates them with a record that carries them, so an engine whose steps
    never do (no NIXL transfer yet, or no step at all) has them as in vLLM.
    Every other value of the record is the idle engine's (0, the fields'
    default), which vLLM's logger holds then too. ``None`` when the
    configuration has neither.
    """
    if not (kv_consumer or nixl):
        return None
    record = (_pb or messages()).Record()
    message = record.scheduler_stats
    message.model_name = model_name
    message.engine = engine
    received = message.received_at = float(received_at)
    if kv_consumer:
        message.num_kv_fetch_reqs_by_stage.SetInParent()
    if nixl:
        # NIXL's payload of no transfer and no failure.
        _nixl(message.kv_connector_stats.nixl, dict.fromkeys(_NIXL_LISTS + _NIXL_COUNTS, ()))
    return _checked(record, received, "scheduler_stats", engine)


def engine_config_record(cache_config, model_name: str, engine: int, max_loras, max_model_len):
    """``CacheConfig.metrics_info()`` (every value as ``str()``), as vLLM
    labels ``vllm:cache_config_info``, plus ``--max-loras`` and the model's
    context length (which the sidecar's token buckets must match)."""
    info = cache_config.metrics_info() if hasattr(cache_config, "metrics_info") else {}
    record = (_pb or messages()).Record()
    message = record.engine_config
    message.model_name = model_name
    message.engine = engine
    message.cache_config.update({str(k): str(v) for k, v in info.items() if k != "engine"})
    if max_loras is not None:
        message.max_loras = int(max_loras)
    if max_model_len is not None:
        message.max_model_len = int(max_model_len)
    return record


def engine_records(cache_config, model_name: str, engine: int, max_loras, max_model_len,
                   kv_consumer: bool, nixl: bool, received_at: float) -> list:
    """An engine's start-up records: its configuration
    (:func:`engine_config_record`) and the KV series vLLM creates at start
    (:func:`engine_start_record`), when it has any."""
    records = [engine_config_record(cache_config, model_name, engine, max_loras, max_model_len)]
    start = engine_start_record(model_name, engine, received_at, kv_consumer, nixl)
    if start is not None:
        records.append(start)
    return records


def sleep_record(model_name: str, engine: int, sleep: int, level: int):
    """``record_sleep_state(sleep, level)``: vLLM passes ``(1, level)`` when an
    engine goes to sleep and ``(0, 0)`` when it wakes up."""
    record = (_pb or messages()).Record()
    message = record.sleep_state
    message.model_name = model_name
    message.engine = engine
    message.level = int(level) if sleep == 1 else 0
    return record


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

    def records(self, scheduler_stats, iteration_stats, mm_cache_stats, engine: int, now: float):
        """Yields each record when it is made (a ``Record`` message, or
        :class:`NotFinite`), so that a scheduler record is sent even when its
        step's iteration stats cannot be converted."""
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
            yield scheduler_record(
                scheduler_stats,
                mm_cache_stats,
                self.model_name,
                engine,
                now,
                self.lora_enabled,
                self.kv_consumer,
            )
        if iteration_stats is not None:
            yield iteration_record(iteration_stats, self.model_name, engine)
