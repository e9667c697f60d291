"""The plugin inside vLLM: found by vLLM's own loader, its records built from
vLLM's own stats classes, and a wrong setting leaves vLLM running."""

import logging

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
    with caplog.at_level(logging.ERROR, logger="vllm_otel_metrics"):
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


def vllm_steps_ns(**fields):
    import types

    return types.SimpleNamespace(**fields)
