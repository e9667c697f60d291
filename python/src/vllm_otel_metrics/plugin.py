"""The vLLM stat-logger plugin: with :mod:`.tap`, the only module that
imports vLLM.

vLLM's ``load_stat_logger_plugin_factories()`` finds
:class:`OtelMetricsStatLogger` through the ``vllm.stat_logger_plugins`` entry
point and ``StatLoggerManager`` builds it once for all data-parallel engines
(it is an ``AggregateStatLoggerBase``). vLLM keeps collecting stats whenever a
plugin is present, even with ``--disable-log-stats``.

It stands in for vLLM's own ``PrometheusStatLogger`` on the way out of the
process: labels are vLLM's (``model_name`` = the served model name, ``engine``
= the engine index) and the sidecar applies each record with the Python
logger's rules (``docs/SEMANTICS.md``, plugin path). With a loopback
``http://`` target it also starts that sidecar (:mod:`.sidecar`).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import time
from collections.abc import Iterable
from typing import Any

from vllm.v1.metrics.loggers import AggregateStatLoggerBase

from . import config, convert, kv_connector
from .bounded_queue import RecordQueue
from .sidecar import Supervisor, planned
from .stream import Streamer

# Under vLLM's own logger, so that vLLM's log configuration shows the
# plugin's lines (the sidecar's pid and log file among them) beside vLLM's.
log = logging.getLogger("vllm.vllm_otel_metrics")


def served_model_name(vllm_config: Any) -> str:
    """The ``model_name`` label vLLM gives an engine's series."""
    name = vllm_config.model_config.served_model_name
    # vLLM labels with the first name when several are served.
    if isinstance(name, (list, tuple)):
        name = name[0] if name else ""
    return str(name)


# The queued items are made on vLLM's event loop, one per call: not frozen,
# because a frozen dataclass's __init__ (object.__setattr__ per field) costs
# about four times a plain one's (600 against 160 ns), and nothing changes
# an item once queued.
@dataclasses.dataclass(slots=True)
class Step:
    """A queued ``record()`` call: one engine step's stats objects."""

    engine: int
    scheduler_stats: Any
    iteration_stats: Any
    mm_cache_stats: Any
    at: float


@dataclasses.dataclass(slots=True)
class SleepState:
    """A queued ``record_sleep_state()`` call."""

    sleep: int
    level: int


@dataclasses.dataclass(slots=True)
class EngineInitialized:
    """A queued ``log_engine_initialized()`` call."""


#: What the stat-logger plugin queues.
Item = Step | SleepState | EngineInitialized


class OtelMetricsStatLogger(AggregateStatLoggerBase):
    """Streams every engine's stats to ``vllm-otel-metrics serve``.

    ``record()`` enqueues the stats objects as they are (vLLM builds fresh
    ones every step and does not touch them after ``record()``); a
    background thread converts and sends them. A wrong setting is logged once
    at start-up and the plugin does nothing; vLLM keeps serving.
    """

    def __init__(self, vllm_config: Any, engine_indexes: Iterable[int] | None = None) -> None:
        self.vllm_config = vllm_config
        self.engine_indexes = list(engine_indexes) if engine_indexes else [0]
        self.model_name = served_model_name(vllm_config)
        lora_config = getattr(vllm_config, "lora_config", None)
        self.max_loras = getattr(lora_config, "max_loras", None) if lora_config else None
        self.kv_consumer, self.nixl = kv_connector.kv_transfer_setup(
            getattr(vllm_config, "kv_transfer_config", None)
        )
        self.steps = convert.StepConverter(
            self.model_name, lora_config is not None, self.kv_consumer
        )
        self.streamer: Streamer[Item] | None = None
        #: The streamer's queue, which record() fills.
        self.queue: RecordQueue[Item] | None = None
        self.supervisor: Supervisor | None = None
        try:
            settings = config.from_env()
            source = config.engine_source()
            if settings.sidecar is not None:
                from_env = settings.sidecar.custom_histogram_buckets
                sidecar, max_model_len, token_buckets = planned(
                    settings.sidecar, vllm_config, False
                )
                if from_env and sidecar.custom_histogram_buckets != from_env:
                    log.warning(
                        "vllm-otel-metrics: vLLM's --custom-histogram-buckets wins over "
                        "VLLM_OTEL_METRICS_CUSTOM_HISTOGRAM_BUCKETS"
                    )
                # Opens the lock and log files now: one that is not this
                # user's turns the plugin off before anything streams.
                self.supervisor = Supervisor(sidecar, max_model_len, token_buckets)
        except config.ConfigError as e:
            log.error("vllm-otel-metrics: %s; the plugin is off, vLLM goes on", e)
            return
        if self.supervisor is not None:
            self.supervisor.start()
            # Registered first, so it runs after the streamer's close: the
            # sidecar is stopped once what was queued had its chance to arrive.
            atexit.register(self.supervisor.close)
        if source != "stat_logger":
            # The engine-core tap in each engine core sends these engines'
            # records: an engine is counted once. The sidecar is started
            # here all the same: an engine core's process tree is killed
            # (SIGKILL) when vLLM stops, this process ends the normal way.
            log.info(
                "vllm-otel-metrics: the engine-core tap is the source of %s "
                "(VLLM_OTEL_METRICS_SOURCE=%s); the stat-logger plugin sends nothing",
                self.model_name,
                source,
            )
            return
        self.queue = RecordQueue(settings.queue, self._records_in)
        self.streamer = Streamer[Item](
            settings,
            self.queue,
            self._to_records,
            admit=self.supervisor.admits if self.supervisor is not None else None,
        ).start()
        # At exit, what is queued gets up to 2 s to reach the sidecar.
        atexit.register(self.streamer.close)
        log.info(
            "vllm-otel-metrics: streaming %s (engines %s) to %s",
            self.model_name,
            self.engine_indexes,
            (settings.sidecar and settings.sidecar.ingest_socket) or settings.address,
        )

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        """Once per engine step: enqueue, never block."""
        if self.queue is not None:
            # The weight inline (_records_in's rule): no call on vLLM's loop.
            self.queue.submit(
                Step(engine_idx, scheduler_stats, iteration_stats, mm_cache_stats, time.time()),
                (scheduler_stats is not None) + (iteration_stats is not None),
            )

    def record_sleep_state(self, sleep: int = 0, level: int = 0) -> None:
        if self.queue is not None:
            self.queue.submit(SleepState(sleep, level))

    def log_engine_initialized(self) -> None:
        if self.queue is not None:
            self.queue.submit(EngineInitialized())

    def log(self) -> None:
        """vLLM's periodic log call: nothing to print; the sidecar exports."""

    def _records_in(self, item: Item) -> int:
        """How many records :meth:`_to_records` makes of ``item`` (counted
        when the full queue drops it; the engine start's are at least its
        configuration records)."""
        if type(item) is Step:
            return (item.scheduler_stats is not None) + (item.iteration_stats is not None)
        return len(self.engine_indexes)

    def _to_records(self, item: Item) -> Iterable[convert.Record]:
        """Runs on the streaming thread."""
        if type(item) is Step:
            return self.steps.records(
                item.scheduler_stats,
                item.iteration_stats,
                item.mm_cache_stats,
                item.engine,
                item.at,
            )
        if type(item) is SleepState:
            return [
                convert.sleep_record(self.model_name, engine, item.sleep, item.level)
                for engine in self.engine_indexes
            ]
        if type(item) is not EngineInitialized:
            raise TypeError(f"not an item this plugin queues: {item!r}")
        max_model_len = getattr(self.vllm_config.model_config, "max_model_len", None)
        records: list[convert.Record] = []
        for engine in self.engine_indexes:
            records += convert.engine_records(
                self.vllm_config.cache_config,
                self.model_name,
                engine,
                self.max_loras,
                max_model_len,
                self.kv_consumer,
                self.nixl,
                time.time(),
            )
        return records
