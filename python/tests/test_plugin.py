"""The plugin inside vLLM: found by vLLM's own loader, its records built from
vLLM's own stats classes, and a wrong setting leaves vLLM running."""

import logging
import os
import types

from vllm.v1.engine import FinishReason
from vllm.v1.metrics.loggers import AggregateStatLoggerBase, load_stat_logger_plugin_factories
from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats, PrefixCacheStats, SchedulerStats

from vllm_otel_metrics import convert, stream
from vllm_otel_metrics.plugin import OtelMetricsStatLogger
from vllm_otel_metrics.v1 import ingest_pb2 as pb

import vllm_steps


def test_vllms_loader_finds_the_plugin():
    factories = load_stat_logger_plugin_factories()
    assert OtelMetricsStatLogger in factories
    assert issubclass(OtelMetricsStatLogger, AggregateStatLoggerBase)


def test_records_from_vllms_classes_become_messages():
    stats = IterationStats()
    stats.iteration_timestamp = 10.0
    stats.num_generation_tokens = 2
    stats.finished_requests.append(FinishedRequestStats(FinishReason.STOP, "r", e2e_latency=1.0,
                                                        num_preemptions=3, num_prompt_tokens=5))
    scheduler = SchedulerStats(num_running_reqs=1, num_waiting_reqs=2, num_skipped_waiting_reqs=1,
                               prefix_cache_stats=PrefixCacheStats(queries=5, hits=1))
    records = convert.StepConverter("m", False).records(scheduler, stats, None, 3, 9.0)
    messages = [stream.to_message(r, pb) for r in records]
    assert messages[0].scheduler_stats.num_waiting_reqs == 3
    assert messages[0].scheduler_stats.engine == 3
    request = messages[1].iteration_stats.finished_requests[0]
    assert (request.finish_reason, request.num_preemptions, request.request_id) == (pb.FINISH_REASON_STOP, 3, "r")
    assert not request.HasField("max_tokens_param")


def test_a_wrong_setting_is_one_log_line_and_vllm_goes_on(monkeypatch, caplog):
    monkeypatch.setenv("VLLM_OTEL_METRICS_QUEUE", "lots")
    with caplog.at_level(logging.ERROR, logger="vllm.vllm_otel_metrics"):
        plugin = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    assert [r.getMessage() for r in caplog.records] == [
        "vllm-otel-metrics: VLLM_OTEL_METRICS_QUEUE='lots' is not a whole number from 1 to 1000000; "
        "the plugin is off, vLLM goes on"
    ]
    plugin.record(None, IterationStats(), None, 0)
    plugin.record_sleep_state(1, 1)
    plugin.log_engine_initialized()
    assert plugin.streamer is None


def test_kv_connector_stats_from_vllms_scheduler_stats_become_a_message():
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats

    nixl = NixlKVConnectorStats()
    nixl.record_transfer(vllm_steps_ns(xferDuration=20_000, postDuration=1_000, totalBytes=4096, descCount=12))
    scheduler = SchedulerStats(num_running_reqs=1, num_waiting_reqs=0,
                               prefix_cache_stats=PrefixCacheStats(queries=0, hits=0),
                               kv_connector_stats=nixl.to_dict())
    records = convert.StepConverter("m", False).records(scheduler, IterationStats(), None, 0, 9.0)
    message = stream.to_message(records[0], pb).scheduler_stats.kv_connector_stats
    assert list(message.nixl.transfer_duration.values) == [0.02]
    assert list(message.nixl.num_descriptors.values) == [12.0]
    # An empty list of vLLM's stays present (the histogram series exists).
    assert message.nixl.HasField("num_kv_expired_reqs")
    assert message.nixl.num_failed_transfers == 0
    assert not message.HasField("offloading")


def test_engine_start_gives_the_kv_series_vllm_creates_at_start(monkeypatch):
    """With a MultiConnector over NIXL on KV consumers, log_engine_initialized()
    gives each engine, after its configuration, the idle scheduler record that
    creates the KV-fetch stages and NIXL's series, as vLLM's logger does."""
    # A setting that keeps the streaming thread off: the records are built all the same.
    monkeypatch.setenv("VLLM_OTEL_METRICS_QUEUE", "lots")
    kv = vllm_steps.kv_transfer_config(os.devnull, "m")
    plugin = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096, kv), [0, 2])
    records = plugin._to_records(("engine_initialized",))
    assert [(r["type"], r["engine"]) for r in records] == [
        ("engine_config", 0), ("scheduler_stats", 0), ("engine_config", 2), ("scheduler_stats", 2)]
    message = stream.to_message(records[1], pb).scheduler_stats
    assert message.kv_connector_stats.HasField("nixl")
    assert message.HasField("num_kv_fetch_reqs_by_stage")
    assert not message.kv_connector_stats.HasField("offloading")
    # Without a connector, the configuration alone.
    plain = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    assert [r["type"] for r in plain._to_records(("engine_initialized",))] == ["engine_config"]


def test_kv_connector_stats_of_the_oracles_multiconnector_reach_vllms_logger_path():
    """vllm_steps builds a MultiConnector's payload under the class names
    MultiConnector files them by, which vLLM's MultiKVConnectorPromMetrics
    looks up, and the plugin reads back the same record."""
    record = {"nixl": {"transfer_duration": [0.5], "num_failed_handshakes": 2},
              "offloading": {"load_bytes": 0, "store_sizes": [1.0e6], "cpu_cache_usage": 0.25},
              "simple_cpu_offload": {"save_outcomes": {"stored": 3}, "used_blocks": 7}}
    payload = vllm_steps.kv_connector_stats(record)
    assert sorted(payload) == ["NixlPullConnector", "OffloadingConnector", "SimpleCPUOffloadConnector"]
    back = convert.kv_connector_record(payload)
    assert back["nixl"]["transfer_duration"] == [0.5] and back["nixl"]["num_failed_handshakes"] == 2
    assert back["offloading"] == {"load_bytes": 0, "store_sizes": [1.0e6], "cpu_cache_usage": 0.25}
    assert back["simple_cpu_offload"] == {"save_outcomes": {"stored": 3}, "used_blocks": 7}
    assert vllm_steps.kv_connector_stats({"nixl": {"transfer_duration": []}}) is None


def vllm_steps_ns(**fields):
    import types

    return types.SimpleNamespace(**fields)


def test_the_sidecar_gets_the_bucket_overrides_vllm_or_the_environment_gives(monkeypatch):
    from vllm_otel_metrics import plugin as plugin_module
    from vllm_otel_metrics import sidecar

    started = []

    class Recorded:
        """Stands in for the supervisor: keeps the settings it was given."""

        def __init__(self, settings, max_model_len):
            started.append((settings, max_model_len))

        def start(self):
            return self

        def close(self):
            pass

    monkeypatch.setattr(plugin_module, "Supervisor", Recorded)
    monkeypatch.setenv("VLLM_OTEL_METRICS_SIDECAR", "auto")
    # Nothing listens there; the streamer keeps trying in the background.
    monkeypatch.setenv("VLLM_OTEL_METRICS_TARGET", "http://127.0.0.1:9")
    from_env = '{"request_latency": [0.1, 1, 10]}'
    monkeypatch.setenv("VLLM_OTEL_METRICS_CUSTOM_HISTOGRAM_BUCKETS", from_env)

    # A vLLM without the flag: the environment's value.
    first = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    # A vLLM with it (PR #48867's ObservabilityConfig.custom_histogram_buckets): vLLM's wins.
    config = vllm_steps.vllm_config("m", 4096)
    config.observability_config = types.SimpleNamespace(
        custom_histogram_buckets={"time_to_first_token": [0.05, 0.5]}
    )
    second = OtelMetricsStatLogger(config, [0])
    for plugin in (first, second):
        plugin.streamer.close()

    argvs = [sidecar.command("bin", settings, length) for settings, length in started]
    assert [argv[argv.index("--custom-histogram-buckets") :] for argv in argvs] == [
        ["--custom-histogram-buckets", from_env],
        ["--custom-histogram-buckets", '{"time_to_first_token": [0.05, 0.5]}'],
    ]
