"""vLLM stat-logger plugin for the vllm-otel-metrics sidecar.

vLLM loads :class:`vllm_otel_metrics.plugin.OtelMetricsStatLogger` through the
``vllm.stat_logger_plugins`` entry point, and under its Rust frontend
:func:`vllm_otel_metrics.tap.register` (the engine-core tap) through
``vllm.general_plugins``. Their producers only enqueue; a background thread
converts and streams the records to ``vllm-otel-metrics serve``, which
:mod:`.sidecar` starts and supervises when none of this user's runs on this
host. One module per concern:

- :mod:`.plugin`: the stat-logger plugin (vLLM's stats objects, queued);
- :mod:`.tap`: the engine-core tap (vLLM's encoded steps and requests, queued);
- :mod:`.bounded_queue`: the bounded queues, their policies and counters;
- :mod:`.outbox`: the conversion of what is queued into records waiting to
  be sent, and what cannot be sent, counted;
- :mod:`.stream`: the streaming thread: transport choice and back-off;
- :mod:`.socket_transport`: the ingest socket to a started sidecar;
- :mod:`.grpc_transport`: gRPC to a sidecar run by other means;
- :mod:`.resend`: the resend window, for a sidecar that shuts down;
- :mod:`.wire`: the wire encoding (messages, batches, hand-built frames
  chunks, the socket's length prefix, the shutdown summary);
- :mod:`.convert` and :mod:`.kv_connector`: vLLM's stats objects to records;
- :mod:`.config`: the settings, read from the environment;
- :mod:`.slo`: the SLO setting, checked;
- :mod:`.private`: the user's private directory and files;
- :mod:`.errors`: the error a setting that cannot be used raises;
- :mod:`.sidecar`: the sidecar's supervisor and the ``vllm-otel-metrics``
  command.

Only :mod:`.plugin` and :mod:`.tap` import vLLM, so the rest can be used and
tested without it (python/tests/test_imports.py checks it).
"""

__version__ = "0.3.0"
