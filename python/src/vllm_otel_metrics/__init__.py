"""vLLM stat-logger plugin for the vllm-otel-metrics sidecar.

vLLM loads :class:`vllm_otel_metrics.plugin.OtelMetricsStatLogger` through the
``vllm.stat_logger_plugins`` entry point. Its ``record()`` only enqueues vLLM's
stats objects; a background thread converts them (:mod:`.convert`) and streams
them to ``vllm-otel-metrics serve`` over its ingest socket or gRPC
(:mod:`.stream`), which :mod:`.sidecar` starts and supervises when none of
this user's runs on this host. Only :mod:`.plugin` imports vLLM, so the rest
can be used and tested without it.
"""

__version__ = "0.3.0"
