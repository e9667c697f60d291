"""vLLM's stats objects to the sidecar's records: ``Record`` messages of the
ingest protocol (``proto/vllm_otel_metrics/v1/ingest.proto``), ready to send.

Mirrors what vLLM 0.33's ``PrometheusStatLogger.record()``
(``vllm/v1/metrics/loggers.py``) reads from ``SchedulerStats``,
``IterationStats`` and ``MultiModalCacheStats`` (``vllm/v1/metrics/stats.py``),
what ``log_engine_initialized()`` reads from the cache configuration, and what
``record_sleep_state()`` is told; the KV-connector stats are
:mod:`.kv_connector`'s. This module does not import vLLM: it reads
attributes by name, and every field vLLM added after 0.30 is optional
(``getattr`` with vLLM's own default), because vLLM does not promise these
classes are stable.

The messages' field names are the JSONL keys (``docs/SEMANTICS.md`` and
docs/TRACE_FORMAT.md). Where vLLM's attribute has the message field's name
and value, the field is copied without being named here (:class:`Copied`,
from the generated descriptor): a field added to the protocol under vLLM's
name needs no code, and is optional as those vLLM added after 0.30 are.
The fields named by hand (:data:`EXPLICIT_FIELDS`) are those whose value is
vLLM's under another name or shape. Every float and double of a record is
checked to be finite, found from the descriptor too (:func:`float_sum`).
The messages are filled field by field:
the stream thread converts every engine step in vLLM's process, and the
generated classes' keyword constructors cost several times as much per
field.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import math
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from google.protobuf.descriptor import FieldDescriptor

from . import kv_connector

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor
    from google.protobuf.message import Message

    from .v1 import ingest_pb2

#: vLLM's ``FinishReason`` (an ``IntEnum``) by value, as label values.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

#: vLLM's ``KV_FETCH_STAGES``.
KV_FETCH_STAGES = ("waiting_to_start", "in_progress", "completed_waiting")

#: vLLM's ``CacheHitSource`` values other than ``device`` (the local prefix
#: cache, which the scheduler record carries as ``prefix_cache_hits``).
EXTERNAL_HIT_SOURCES = ("host", "p2p", "disk", "external_unspecified")


class _Generated:
    """The generated message classes (``vllm_otel_metrics.v1.ingest_pb2``),
    imported on first use: ``setup.py`` generates the module from ``proto/``
    when the package is built, so the sources alone (where the doctests run)
    lack it. Each name is looked up once, then is an attribute of its own."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            # What introspection asks (doctest's finder, copy, pickle) is
            # not a message class.
            raise AttributeError(name)
        value = getattr(messages(), name)
        setattr(self, name, value)
        return value


if TYPE_CHECKING:
    pb = ingest_pb2
else:
    pb = _Generated()


def messages() -> ModuleType:
    """The generated module itself (:data:`pb` stands for it here)."""
    from .v1 import ingest_pb2

    return ingest_pb2


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


_FLOATING = (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE)


if TYPE_CHECKING:
    from typing import TypeAlias

    #: A converted record: the message, or what stands in for one that
    #: cannot be sent.
    Record: TypeAlias = "ingest_pb2.Record | NotFinite | Unconvertible"


def _caster(field: FieldDescriptor) -> Callable[[Any], Any] | None:
    """The Python type a scalar field's value is made with; None for an
    enum or a message, which no attribute of vLLM's is as it is."""
    cpp = field.cpp_type
    if cpp in _FLOATING:
        return float
    if cpp == field.CPPTYPE_BOOL:
        return bool
    if cpp == field.CPPTYPE_STRING:
        return bytes if field.type == field.TYPE_BYTES else str
    if cpp in (field.CPPTYPE_ENUM, field.CPPTYPE_MESSAGE):
        return None
    return int


@dataclasses.dataclass(frozen=True, slots=True)
class Copied:
    """The fields of a message copied from vLLM's attribute of the same name:
    every scalar field (repeated or not) of the message's descriptor, other
    than the ``explicit`` ones the conversion sets itself. An attribute vLLM
    lacks, or holds as None, leaves its field at the protocol's default
    (vLLM's own default for a count), and an empty list leaves it out.

    ``copy(message, source)`` copies them and returns the sum of the floats
    it copied (``floats``, which :func:`float_sum` then leaves out). It is
    made from the field list as the code one would write by hand, a
    statement per field: the stream thread runs it for every engine step and
    finished request, and a loop over the fields costs it as much again.
    """

    scalars: tuple[tuple[str, Callable[[Any], Any]], ...]
    lists: tuple[tuple[str, Callable[[Any], Any]], ...]
    floats: frozenset[str]
    copy: Callable[[Any, object], float]

    @classmethod
    def of(cls, descriptor: Descriptor, explicit: frozenset[str]) -> Copied:
        scalars: list[tuple[str, Callable[[Any], Any]]] = []
        lists: list[tuple[str, Callable[[Any], Any]]] = []
        for field in descriptor.fields:
            cast = _caster(field)
            if cast is None or field.name in explicit:
                continue
            (lists if field.is_repeated else scalars).append((field.name, cast))
        floats = frozenset(name for name, cast in scalars + lists if cast is float)
        return cls(tuple(scalars), tuple(lists), floats, _copier(scalars, lists))


def _copier(
    scalars: list[tuple[str, Callable[[Any], Any]]],
    lists: list[tuple[str, Callable[[Any], Any]]],
) -> Callable[[Any, object], float]:
    """The function that copies these fields (see :class:`Copied`)."""
    namespace: dict[str, Any] = {}
    lines = ["def copy(message, source):", "    total = 0.0"]
    for i, (name, cast) in enumerate(scalars):
        namespace[f"cast_{i}"] = cast
        # An attribute assignment where the name allows it (one Python
        # keyword as a field name does not): a third faster than setattr.
        plain = name.isidentifier() and not keyword.iskeyword(name)
        if plain:
            # (An attribute read, its absence an exception that costs
            # nothing until raised: faster than getattr with a default.)
            lines += [
                "    try:",
                f"        value = source.{name}",
                "    except AttributeError:",
                "        value = None",
            ]
        else:
            lines.append(f"    value = getattr(source, {name!r}, None)")
        lines += [
            "    if value is not None:",
            f"        value = cast_{i}(value)",
            f"        message.{name} = value"
            if plain
            else f"        setattr(message, {name!r}, value)",
        ]
        if cast is float:
            lines.append("        total += value")
    for i, (name, cast) in enumerate(lists):
        namespace[f"each_{i}"] = cast
        lines += [
            f"    values = getattr(source, {name!r}, None)",
            "    if values:",
            f"        values = list(map(each_{i}, values))",
            f"        getattr(message, {name!r}).extend(values)",
        ]
        if cast is float:
            lines.append("        total += sum(values)")
    lines.append("    return total")
    exec("\n".join(lines), namespace)
    copy: Callable[[Any, object], float] = namespace["copy"]
    return copy


#: The fields of each message set by hand, and why (every other scalar field
#: is :class:`Copied`). A scalar field of these messages is in one of the two
#: (python/tests/test_convert.py checks it against vLLM's classes).
EXPLICIT_FIELDS: dict[str, frozenset[str]] = {
    # Labels and the time come from the plugin; waiting requests include the
    # deferred ones (the sum vLLM's gauge has); the cache counts come from
    # vLLM's PrefixCacheStats, connector stats and MultiModalCacheStats.
    "SchedulerStats": frozenset(
        {
            "model_name",
            "engine",
            "received_at",
            "num_waiting_reqs",
            "num_skipped_waiting_reqs",
            "prefix_cache_queries",
            "prefix_cache_hits",
            "external_prefix_cache_queries",
            "external_prefix_cache_hits",
            "mm_cache_queries",
            "mm_cache_hits",
        }
    ),
    # Labels from the plugin; the time is vLLM's iteration_timestamp.
    "IterationStats": frozenset({"model_name", "engine", "received_at"}),
    # vLLM's id may be None; its finish reason is an enum of its own; its
    # cached-token count may be negative (unknown).
    "FinishedRequest": frozenset({"request_id", "finish_reason", "num_cached_tokens"}),
    "PromptTokenStats": frozenset(),
}


@functools.cache
def copied(name: str) -> Copied:
    """The :class:`Copied` fields of the message ``name``."""
    return Copied.of(getattr(pb, name).DESCRIPTOR, EXPLICIT_FIELDS[name])


@functools.cache
def _finish_reason_numbers() -> dict[str, int]:
    return dict(pb.FinishReason.items())


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


@functools.cache
def _summer(descriptor: Descriptor) -> Callable[[Any], float] | None:
    """The function that sums the floats of a message of this type (see
    :func:`float_sum`), made, as :class:`Copied`'s copy is, as the code one
    would write by hand; None for a type that holds none."""
    summed = copied(descriptor.name).floats if descriptor.name in EXPLICIT_FIELDS else ()
    namespace: dict[str, Any] = {}
    lines = []
    for field in descriptor.fields:
        name = field.name
        if name in summed:
            continue
        plain = name.isidentifier() and not keyword.iskeyword(name)
        read = f"message.{name}" if plain else f"getattr(message, {name!r})"
        if field.cpp_type in _FLOATING:
            lines.append(
                f"    total += sum({read})" if field.is_repeated else f"    total += {read}"
            )
        elif field.cpp_type == field.CPPTYPE_MESSAGE and field.message_type is not None:
            # (The protocol's one map, cache_config, holds strings; and it
            # has no recursive message.)
            inner = None if _is_map(field) else _summer(field.message_type)
            if inner is None:
                continue
            namespace[f"sum_{name}"] = inner
            if field.is_repeated:
                lines += [f"    for inner in {read}:", f"        total += sum_{name}(inner)"]
            else:
                lines += [
                    f"    if message.HasField({name!r}):",
                    f"        total += sum_{name}({read})",
                ]
    if not lines:
        return None
    code = ["def float_sum(message):", "    total = 0.0", *lines, "    return total"]
    exec("\n".join(code), namespace)
    function: Callable[[Any], float] = namespace["float_sum"]
    return function


def float_sum(message: Message) -> float:
    """The sum of every float and double in the message and the messages it
    holds, found from its descriptor, but those of :class:`Copied` fields,
    which their copy summed. A number that is not finite makes it so
    (infinities and NaN absorb whatever is added)."""
    function = _summer(message.DESCRIPTOR)
    return function(message) if function is not None else 0.0


def finish_reason(reason: object) -> str:
    """The label value of a vLLM ``FinishReason`` (enum, int or string).

    >>> finish_reason(1), finish_reason("STOP")
    ('length', 'stop')
    """
    if isinstance(reason, str):
        return reason.lower()
    value = int(reason)  # type: ignore[call-overload]
    if 0 <= value < len(FINISH_REASONS):
        return FINISH_REASONS[value]
    # Unknown to this plugin: the sidecar rejects it, named, and counts it.
    return f"unknown({value})"


def finite(message: Message) -> bool:
    """Whether every float and double in the message, and in the messages
    it holds, is finite."""
    for field, value in message.ListFields():
        if field.cpp_type in _FLOATING:
            if not all(map(math.isfinite, value if field.is_repeated else (value,))):
                return False
        elif field.cpp_type == field.CPPTYPE_MESSAGE and not _is_map(field):
            # (The protocol's one map, cache_config, holds strings.)
            if not all(map(finite, value if field.is_repeated else (value,))):
                return False
    return True


def _checked(
    record: ingest_pb2.Record, message: Message, copied_sum: float, kind: str, engine: int
) -> ingest_pb2.Record | NotFinite:
    """``record``, or :class:`NotFinite` when one of the numbers of its
    ``message`` is not finite. ``copied_sum`` is the sum of its
    :class:`Copied` floats, :func:`float_sum` that of the others: a finite
    total clears the record without looking at each number again; finite
    numbers whose sum overflows are told apart by :func:`finite`."""
    if math.isfinite(copied_sum + float_sum(message)) or finite(record):
        return record
    return NotFinite(kind, engine)


def _finished_request(message: ingest_pb2.FinishedRequest, req: Any) -> float:
    """Fills a ``FinishedRequest`` from one ``FinishedRequestStats``; returns
    the sum of its :class:`Copied` floats."""
    total = copied("FinishedRequest").copy(message, req)
    message.request_id = str(getattr(req, "request_id", None) or "")
    label = finish_reason(req.finish_reason).upper()
    # UNSPECIFIED (0) for a reason the protocol lacks: the sidecar rejects
    # the record, names it and counts it.
    message.finish_reason = _finish_reason_numbers().get(  # type: ignore[assignment]
        f"FINISH_REASON_{label}", 0
    )
    message.num_cached_tokens = max(int(getattr(req, "num_cached_tokens", 0)), 0)
    return total


def iteration_record(stats: Any, model_name: str, engine: int) -> ingest_pb2.Record | NotFinite:
    """One ``IterationStats``: the per-step lists as they are, the prompt
    token breakdown and the finished requests with their values.

    ``received_at`` is the step's ``iteration_timestamp``, the wall-clock time
    vLLM's own latencies were taken against.
    """
    record = pb.Record()
    message = record.iteration_stats
    message.model_name = model_name
    message.engine = engine
    message.received_at = float(stats.iteration_timestamp)
    # (An empty list is no field on the wire, and at small batches most of
    # them are empty: only the lists that hold something are touched.)
    total = copied("IterationStats").copy(message, stats)
    prompt = stats.prompt_token_stats
    tokens = message.prompt_token_stats
    tokens.SetInParent()
    total += copied("PromptTokenStats").copy(tokens, prompt)
    finished = stats.finished_requests
    if finished:
        add = message.finished_requests.add
        for req in finished:
            total += _finished_request(add(), req)
    return _checked(record, message, total, "iteration_stats", engine)


def _dict_or_empty(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def scheduler_record(
    stats: Any,
    mm_cache_stats: Any,
    model_name: str,
    engine: int,
    received_at: float,
    lora_enabled: bool,
    kv_consumer: bool = False,
) -> ingest_pb2.Record | NotFinite:
    """One ``SchedulerStats`` (plus the step's ``MultiModalCacheStats``).

    vLLM 0.33 counts deferred requests apart from ``num_waiting_reqs``; the
    record's ``num_waiting_reqs`` includes them (the sum vLLM sets
    ``vllm:num_requests_waiting`` to) and ``num_skipped_waiting_reqs`` says how
    many of them are deferred.

    vLLM's scheduler reports ``num_kv_fetch_reqs_by_stage`` on every engine
    (all 0 without a KV connector), but its logger has
    ``vllm:num_requests_kv_fetch_by_stage`` on KV consumers only: the record
    carries the stages only when ``kv_consumer`` (see
    :func:`.kv_connector.kv_transfer_setup`).
    """
    record = pb.Record()
    message = record.scheduler_stats
    skipped = int(getattr(stats, "num_skipped_waiting_reqs", 0))
    prefix = stats.prefix_cache_stats
    message.model_name = model_name
    message.engine = engine
    message.received_at = float(received_at)
    total = copied("SchedulerStats").copy(message, stats)
    message.num_waiting_reqs = int(stats.num_waiting_reqs) + skipped
    message.num_skipped_waiting_reqs = skipped
    message.prefix_cache_queries = int(prefix.queries)
    message.prefix_cache_hits = int(prefix.hits)
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
            for name, count in split.items():
                setattr(hits, name, count)
    if mm_cache_stats is not None:
        message.mm_cache_queries = int(mm_cache_stats.queries)
        message.mm_cache_hits = int(mm_cache_stats.hits)
    for e in getattr(stats, "kv_cache_eviction_events", None) or ():
        event = message.kv_cache_eviction_events.add()
        event.lifetime_seconds = float(e.lifetime_seconds)
        event.idle_seconds = float(e.idle_seconds)
        event.reuse_gaps_seconds.extend([float(g) for g in e.reuse_gaps_seconds])
    perf = getattr(stats, "perf_stats", None)
    if perf is not None:
        work = message.perf_stats
        work.num_flops_per_gpu = float(perf.num_flops_per_gpu)
        work.num_read_bytes_per_gpu = float(perf.num_read_bytes_per_gpu)
        work.num_write_bytes_per_gpu = float(perf.num_write_bytes_per_gpu)
    spec = getattr(stats, "spec_decoding_stats", None)
    if spec is not None:
        drafts = message.spec_decoding
        drafts.num_drafts = int(spec.num_drafts)
        drafts.num_draft_tokens = int(spec.num_draft_tokens)
        drafts.num_accepted_tokens = int(spec.num_accepted_tokens)
        drafts.num_accepted_tokens_per_pos.extend(
            [int(n) for n in spec.num_accepted_tokens_per_pos]
        )
    connectors = getattr(stats, "kv_connector_stats", None)
    if connectors:
        # (A payload with nothing this tool exports leaves the field absent.)
        kv_connector.fill(message.kv_connector_stats, connectors)
    if lora_enabled:
        message.running_lora_adapters.names.extend(
            list(_dict_or_empty(getattr(stats, "running_lora_adapters", None)))
        )
        message.waiting_lora_adapters.names.extend(
            list(_dict_or_empty(getattr(stats, "waiting_lora_adapters", None)))
        )
    return _checked(record, message, total, "scheduler_stats", engine)


def engine_start_record(
    model_name: str, engine: int, received_at: float, kv_consumer: bool, nixl: bool
) -> ingest_pb2.Record | NotFinite | None:
    """The KV series vLLM's ``PrometheusStatLogger`` creates, at 0, for every
    engine when it starts (see :func:`.kv_connector.kv_transfer_setup`), as a
    scheduler record of the idle engine: ``vllm:num_requests_kv_fetch_by_stage``
    on a KV consumer, NIXL's eight families with a NIXL connector. The sidecar
    creates them with a record that carries them, so an engine whose steps
    never do (no NIXL transfer yet, or no step at all) has them as in vLLM.
    Every other value of the record is the idle engine's (0, the fields'
    default), which vLLM's logger holds then too. ``None`` when the
    configuration has neither.
    """
    if not (kv_consumer or nixl):
        return None
    record = pb.Record()
    message = record.scheduler_stats
    message.model_name = model_name
    message.engine = engine
    message.received_at = float(received_at)
    if kv_consumer:
        message.num_kv_fetch_reqs_by_stage.SetInParent()
    if nixl:
        kv_connector.idle_nixl(message.kv_connector_stats.nixl)
    return _checked(record, message, 0.0, "scheduler_stats", engine)


def engine_config_record(
    cache_config: Any, model_name: str, engine: int, max_loras: Any, max_model_len: Any
) -> ingest_pb2.Record:
    """``CacheConfig.metrics_info()`` (every value as ``str()``), as vLLM
    labels ``vllm:cache_config_info``, plus ``--max-loras`` and the model's
    context length (which the sidecar's token buckets must match)."""
    info = cache_config.metrics_info() if hasattr(cache_config, "metrics_info") else {}
    record = pb.Record()
    message = record.engine_config
    message.model_name = model_name
    message.engine = engine
    message.cache_config.update({str(k): str(v) for k, v in info.items() if k != "engine"})
    if max_loras is not None:
        message.max_loras = int(max_loras)
    if max_model_len is not None:
        message.max_model_len = int(max_model_len)
    return record


def engine_records(
    cache_config: Any,
    model_name: str,
    engine: int,
    max_loras: Any,
    max_model_len: Any,
    kv_consumer: bool,
    nixl: bool,
    received_at: float,
) -> list[ingest_pb2.Record | NotFinite]:
    """An engine's start-up records: its configuration
    (:func:`engine_config_record`) and the KV series vLLM creates at start
    (:func:`engine_start_record`), when it has any."""
    records: list[ingest_pb2.Record | NotFinite] = [
        engine_config_record(cache_config, model_name, engine, max_loras, max_model_len)
    ]
    start = engine_start_record(model_name, engine, received_at, kv_consumer, nixl)
    if start is not None:
        records.append(start)
    return records


def sleep_record(model_name: str, engine: int, sleep: int, level: int) -> ingest_pb2.Record:
    """``record_sleep_state(sleep, level)``: vLLM passes ``(1, level)`` when an
    engine goes to sleep and ``(0, 0)`` when it wakes up."""
    record = pb.Record()
    message = record.sleep_state
    message.model_name = model_name
    message.engine = engine
    message.level = int(level) if sleep == 1 else 0
    return record


class _CacheCounts:
    """Multi-modal cache queries and hits carried to the next scheduler record."""

    __slots__ = ("hits", "queries")

    def __init__(self, queries: int = 0, hits: int = 0) -> None:
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

    def __init__(self, model_name: str, lora_enabled: bool, kv_consumer: bool = False) -> None:
        self.model_name = model_name
        self.lora_enabled = lora_enabled
        self.kv_consumer = kv_consumer
        self._pending_mm: dict[int, _CacheCounts] = {}

    def records(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any,
        engine: int,
        now: float,
    ) -> Iterator[ingest_pb2.Record | NotFinite]:
        """Yields each record when it is made (a ``Record`` message, or
        :class:`NotFinite`), so that a scheduler record is sent even when its
        step's iteration stats cannot be converted."""
        if mm_cache_stats is not None and scheduler_stats is None:
            pending = self._pending_mm.setdefault(engine, _CacheCounts())
            pending.queries += int(mm_cache_stats.queries)
            pending.hits += int(mm_cache_stats.hits)
        if scheduler_stats is not None:
            carried = self._pending_mm.pop(engine, None)
            if carried is not None:
                queries = carried.queries + (int(mm_cache_stats.queries) if mm_cache_stats else 0)
                hits = carried.hits + (int(mm_cache_stats.hits) if mm_cache_stats else 0)
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
