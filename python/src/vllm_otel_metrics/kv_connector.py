"""vLLM's KV-connector stats (``SchedulerStats.kv_connector_stats``) as the
ingest protocol's ``KvConnectorStats`` message, and what of vLLM's
``KVTransferConfig`` shapes its logger's KV families.

vLLM hands each connector's stats over as the payload its ``to_dict()``
makes: NIXL's dict of lists, the offloading connectors' self-describing
``{"types", "data", "info"}``, or, under a MultiConnector, one of those per
connector class name. Like :mod:`.convert`, this module does not import
vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .v1 import ingest_pb2

# vLLM's NIXL stats lists observed element by element, and its failure lists
# of 1s (sent here as counts).
NIXL_LISTS = ("transfer_duration", "post_duration", "bytes_transferred", "num_descriptors")
NIXL_COUNTS = (
    "num_failed_transfers",
    "num_failed_handshakes",
    "num_failed_notifications",
    "num_kv_expired_reqs",
    "num_notifications_after_expiry",
)
# The offloading connector's metric names -> the message's fields.
_OFFLOADING_FIELDS: dict[str, tuple[str, type]] = {
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
_SIMPLE_FIELDS: dict[str, tuple[str, type]] = {
    "vllm:simple_kv_offload_load_blocks_total": ("load_blocks", int),
    "vllm:simple_kv_offload_used_blocks": ("used_blocks", int),
    "vllm:simple_kv_offload_pending_store_blocks": ("pending_store_blocks", int),
}
_SAVE_OUTCOMES = "vllm:simple_kv_offload_save_outcomes_total"

#: vLLM's NIXL connectors (``KVConnectorFactory`` names), whose metrics are
#: ``NixlPromMetrics``.
NIXL_CONNECTORS = ("NixlConnector", "NixlPullConnector", "NixlPushConnector")


def _unlabeled(values: object) -> Any:
    """The value of a metric's unlabeled series in an offloading payload."""
    return values.get((), values.get("()")) if isinstance(values, dict) else None


def _observe(message: Any, field: str, values: Iterable[Any]) -> None:
    """Sets an ``Observations`` field, in place of one an earlier connector
    of the same kind set."""
    getattr(message, field).values[:] = [float(v) for v in values]


def nixl(message: ingest_pb2.NixlStats, payload: Mapping[str, Any]) -> None:
    """Fills a ``NixlStats`` from NIXL's payload."""
    for key in NIXL_LISTS:
        if key in payload:
            _observe(message, key, payload[key])
    for key in NIXL_COUNTS:
        if key in payload:
            setattr(message, key, int(sum(payload[key])))


def idle_nixl(message: ingest_pb2.NixlStats) -> None:
    """Fills a ``NixlStats`` as NIXL's payload of no transfer and no failure
    does: every list present and empty, every count 0."""
    nixl(message, dict.fromkeys(NIXL_LISTS + NIXL_COUNTS, ()))


def _metric_sections(message: ingest_pb2.KvConnectorStats, payload: Mapping[str, Any]) -> None:
    """Fills the offloading and simple_cpu_offload parts of a
    ``KvConnectorStats`` from a self-describing payload (a part none of
    whose metrics is there stays absent)."""
    for name, values in (payload.get("data") or {}).items():
        if name in _OFFLOADING_FIELDS:
            field, kind = _OFFLOADING_FIELDS[name]
            value = _unlabeled(values)
            if value is None:
                continue
            if kind is list:
                _observe(message.offloading, field, value)
            else:
                setattr(message.offloading, field, kind(value))
        elif name in _SIMPLE_FIELDS:
            field, kind = _SIMPLE_FIELDS[name]
            value = _unlabeled(values)
            if value is not None:
                setattr(message.simple_cpu_offload, field, kind(value))
        elif name == _SAVE_OUTCOMES and isinstance(values, dict):
            outcomes: dict[str, int] = {}
            for labels, count in values.items():
                outcome = labels[0] if isinstance(labels, (tuple, list)) and labels else labels
                outcomes[str(outcome)] = outcomes.get(str(outcome), 0) + int(count)
            # In place of an earlier connector's outcomes; an outcome the
            # protocol has no field for fails the record.
            saved = message.simple_cpu_offload.save_outcomes
            saved.CopyFrom(type(saved)(**outcomes))


def fill(message: ingest_pb2.KvConnectorStats, payload: object) -> None:
    """Fills a ``KvConnectorStats`` from vLLM's
    ``SchedulerStats.kv_connector_stats``.

    A single connector sends its own payload (NIXL's dict of lists, or the
    offloading connectors' ``{"types", "data", "info"}``); a MultiConnector
    one per connector class name, merged here by connector kind. Metrics
    this tool has no family for are left out; a payload with none leaves
    the message empty.
    """
    if not isinstance(payload, dict) or not payload:
        return
    if "transfer_duration" in payload or "data" in payload:
        parts: list[dict[str, Any]] = [payload]
    else:
        parts = [part for part in payload.values() if isinstance(part, dict)]
    for part in parts:
        if "transfer_duration" in part:
            nixl(message.nixl, part)
        elif "data" in part:
            _metric_sections(message, part)


def kv_transfer_setup(kv_transfer_config: Any) -> tuple[bool, bool]:
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
    connectors: list[dict[str, Any]] = [
        {"kv_connector": kv_transfer_config.kv_connector, "kv_connector_module_path": module_path}
    ]
    if kv_transfer_config.kv_connector == "MultiConnector":
        extra = getattr(kv_transfer_config, "kv_connector_extra_config", None) or {}
        connectors = [c for c in extra.get("connectors") or () if isinstance(c, dict)]
    # A connector loaded from a module path of its own is not vLLM's.
    uses_nixl = any(
        c.get("kv_connector") in NIXL_CONNECTORS and not c.get("kv_connector_module_path")
        for c in connectors
    )
    return consumer, uses_nixl
