"""The plugin inside vLLM: found by vLLM's own loader, its records built from
vLLM's own stats classes, and a wrong setting leaves vLLM running."""

import logging
import os
import threading
import types

import pytest
import vllm_steps
from vllm.v1.engine import FinishReason
from vllm.v1.metrics.loggers import AggregateStatLoggerBase, load_stat_logger_plugin_factories
from vllm.v1.metrics.stats import (
    FinishedRequestStats,
    IterationStats,
    PrefixCacheStats,
    SchedulerStats,
)
from vllm_otel_metrics.v1 import ingest_pb2 as pb

import messages
from vllm_otel_metrics import convert, kv_connector
from vllm_otel_metrics import plugin as plugin_module
from vllm_otel_metrics.plugin import OtelMetricsStatLogger


def test_vllms_loader_finds_the_plugin():
    factories = load_stat_logger_plugin_factories()
    assert OtelMetricsStatLogger in factories
    assert issubclass(OtelMetricsStatLogger, AggregateStatLoggerBase)


def test_records_from_vllms_classes_become_messages():
    stats = IterationStats()
    stats.iteration_timestamp = 10.0
    stats.num_generation_tokens = 2
    stats.finished_requests.append(
        FinishedRequestStats(
            FinishReason.STOP, "r", e2e_latency=1.0, num_preemptions=3, num_prompt_tokens=5
        )
    )
    scheduler = SchedulerStats(
        num_running_reqs=1,
        num_waiting_reqs=2,
        num_skipped_waiting_reqs=1,
        prefix_cache_stats=PrefixCacheStats(queries=5, hits=1),
    )
    records = convert.StepConverter("m", False).records(scheduler, stats, None, 3, 9.0)
    assert list(records) == [
        # vLLM's scheduler reports the KV-fetch stages, all 0; without a KV
        # consumer the record leaves them out.
        pb.Record(
            scheduler_stats=pb.SchedulerStats(
                model_name="m",
                engine=3,
                received_at=9.0,
                num_running_reqs=1,
                num_waiting_reqs=3,
                num_skipped_waiting_reqs=1,
                prefix_cache_queries=5,
                prefix_cache_hits=1,
            )
        ),
        # No max_tokens_param: the request set none.
        pb.Record(
            iteration_stats=pb.IterationStats(
                model_name="m",
                engine=3,
                received_at=10.0,
                num_generation_tokens=2,
                prompt_token_stats=pb.PromptTokenStats(),
                finished_requests=[
                    pb.FinishedRequest(
                        request_id="r",
                        finish_reason=pb.FINISH_REASON_STOP,
                        e2e_latency=1.0,
                        num_prompt_tokens=5,
                        num_preemptions=3,
                    )
                ],
            )
        ),
    ]


def test_a_wrong_setting_is_one_log_line_and_vllm_goes_on(monkeypatch, caplog):
    monkeypatch.setenv("VLLM_OTEL_METRICS_QUEUE", "lots")
    with caplog.at_level(logging.ERROR, logger="vllm.vllm_otel_metrics"):
        plugin = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    assert here(caplog) == [
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
    nixl.record_transfer(
        vllm_steps_ns(xferDuration=20_000, postDuration=1_000, totalBytes=4096, descCount=12)
    )
    scheduler = SchedulerStats(
        num_running_reqs=1,
        num_waiting_reqs=0,
        prefix_cache_stats=PrefixCacheStats(queries=0, hits=0),
        kv_connector_stats=nixl.to_dict(),
    )
    iteration = IterationStats()
    iteration.iteration_timestamp = 10.0
    records = list(convert.StepConverter("m", False).records(scheduler, iteration, None, 0, 9.0))
    # vLLM's empty lists stay present (their histogram series exist), and
    # its failure lists are counts, 0 included.
    assert records[0] == pb.Record(
        scheduler_stats=pb.SchedulerStats(
            model_name="m",
            received_at=9.0,
            num_running_reqs=1,
            kv_connector_stats=pb.KvConnectorStats(
                nixl=messages.nixl_stats(
                    transfer_duration=pb.Observations(values=[0.02]),
                    post_duration=pb.Observations(values=[0.001]),
                    bytes_transferred=pb.Observations(values=[4096.0]),
                    num_descriptors=pb.Observations(values=[12.0]),
                )
            ),
        )
    )
    assert records[1:] == [
        pb.Record(
            iteration_stats=pb.IterationStats(
                model_name="m", received_at=10.0, prompt_token_stats=pb.PromptTokenStats()
            )
        )
    ]


def test_engine_start_gives_the_kv_series_vllm_creates_at_start(monkeypatch):
    """With a MultiConnector over NIXL on KV consumers, log_engine_initialized()
    gives each engine, after its configuration, the idle scheduler record that
    creates the KV-fetch stages and NIXL's series, as vLLM's logger does."""
    # A setting that keeps the streaming thread off: the records are built all the same.
    monkeypatch.setenv("VLLM_OTEL_METRICS_QUEUE", "lots")
    # The idle record's received_at is the plugin's clock at the call.
    monkeypatch.setattr(plugin_module, "time", types.SimpleNamespace(time=lambda: 100.0))
    kv = vllm_steps.kv_transfer_config(os.devnull, "m")
    config = vllm_steps.vllm_config("m", 4096, kv)
    plugin = OtelMetricsStatLogger(config, [0, 2])
    cache_config = {
        k: str(v) for k, v in config.cache_config.metrics_info().items() if k != "engine"
    }
    nixl = messages.nixl_stats()
    expected = []
    for engine in (0, 2):
        expected += [
            pb.Record(
                engine_config=pb.EngineConfig(
                    model_name="m", engine=engine, cache_config=cache_config, max_model_len=4096
                )
            ),
            pb.Record(
                scheduler_stats=pb.SchedulerStats(
                    model_name="m",
                    engine=engine,
                    received_at=100.0,
                    num_kv_fetch_reqs_by_stage=pb.KvFetchStages(),
                    kv_connector_stats=pb.KvConnectorStats(nixl=nixl),
                )
            ),
        ]
    assert plugin._to_records(plugin_module.EngineInitialized()) == expected
    # Without a connector, the configuration alone.
    plain = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    assert plain._to_records(plugin_module.EngineInitialized()) == expected[:1]
    # Items are matched by type: a tagged tuple is no engine start.
    with pytest.raises(TypeError, match="not an item this plugin queues"):
        plain._to_records(("engine_initialized",))


def test_kv_connector_stats_of_the_oracles_multiconnector_reach_vllms_logger_path():
    """vllm_steps builds a MultiConnector's payload under the class names
    MultiConnector files them by, which vLLM's MultiKVConnectorPromMetrics
    looks up, and the plugin reads back the same record."""
    record = {
        "nixl": {"transfer_duration": [0.5], "num_failed_handshakes": 2},
        "offloading": {"load_bytes": 0, "store_sizes": [1.0e6], "cpu_cache_usage": 0.25},
        "simple_cpu_offload": {"save_outcomes": {"stored": 3}, "used_blocks": 7},
    }
    payload = vllm_steps.kv_connector_stats(record)
    assert sorted(payload) == [
        "NixlPullConnector",
        "OffloadingConnector",
        "SimpleCPUOffloadConnector",
    ]
    # vLLM's NIXL stats carry every list, so the lists the record lacks
    # come back empty, and its counts 0.
    assert connector_message(payload) == pb.KvConnectorStats(
        nixl=messages.nixl_stats(
            transfer_duration=pb.Observations(values=[0.5]), num_failed_handshakes=2
        ),
        offloading=pb.OffloadingStats(
            load_bytes=0, store_sizes=pb.Observations(values=[1.0e6]), cpu_cache_usage=0.25
        ),
        simple_cpu_offload=pb.SimpleCpuOffloadStats(
            save_outcomes=pb.SaveOutcomes(stored=3), used_blocks=7
        ),
    )
    assert vllm_steps.kv_connector_stats({"nixl": {"transfer_duration": []}}) is None


def vllm_steps_ns(**fields):
    import types

    return types.SimpleNamespace(**fields)


def here(caplog):
    """The log lines of this test's own thread (another test's streaming
    thread may still be logging)."""
    return [r.getMessage() for r in caplog.records if r.thread == threading.get_ident()]


def test_the_sidecar_gets_the_bucket_overrides_vllm_or_the_environment_gives(
    monkeypatch, started_supervisors, tmp_path
):
    from vllm_otel_metrics import sidecar

    started = started_supervisors(plugin_module)
    monkeypatch.setenv("VLLM_OTEL_METRICS_SIDECAR", "auto")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
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

    argvs = [sidecar.command("bin", *args) for args in started]
    assert [argv[argv.index("--custom-histogram-buckets") :] for argv in argvs] == [
        ["--custom-histogram-buckets", from_env],
        ["--custom-histogram-buckets", '{"time_to_first_token": [0.05, 0.5]}'],
    ]


def test_with_the_tap_as_source_the_plugin_starts_the_sidecar_and_sends_nothing(
    monkeypatch, started_supervisors, tmp_path
):
    started = started_supervisors(plugin_module)
    monkeypatch.setenv("VLLM_OTEL_METRICS_SIDECAR", "auto")
    monkeypatch.setenv("VLLM_OTEL_METRICS_SOURCE", "engine_core")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    plugin = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    # Started here (this process ends the normal way), fed by the tap.
    assert [(max_model_len, buckets) for _settings, max_model_len, buckets in started] == [
        (4096, "python")
    ]
    assert plugin.streamer is None
    plugin.record(None, IterationStats(), None, 0)


@pytest.mark.parametrize("planted", ["private directory", "lock file"])
def test_a_private_directory_or_lock_file_not_this_users_is_one_line_and_the_plugin_off(
    monkeypatch, tmp_path, caplog, planted
):
    """Before: a private directory that was not this user's was a warning,
    and the plugin streamed over gRPC to the TCP port (whoever held it);
    the lock file was opened in /tmp following links. After: one error
    line naming the path and what is wrong; no sidecar, no streaming; vLLM
    goes on."""
    monkeypatch.setenv("VLLM_OTEL_METRICS_SIDECAR", "auto")
    monkeypatch.setenv("VLLM_OTEL_METRICS_TARGET", "http://127.0.0.1:9")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "theirs").mkdir()
    private = tmp_path / "vllm-otel-metrics"
    if planted == "private directory":
        private.symlink_to(tmp_path / "theirs")
        path, why = private, "is a symbolic link"
    else:
        private.mkdir(mode=0o700)
        (private / "sidecar-9.lock").symlink_to(tmp_path / "theirs" / "x")
        path, why = private / "sidecar-9.lock", "is a symbolic link"
    with caplog.at_level(logging.INFO, logger="vllm.vllm_otel_metrics"):
        plugin = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    lines = here(caplog)
    assert len(lines) == 1, lines
    assert lines[0].startswith("vllm-otel-metrics: ") and f"{path} {why}" in lines[0]
    assert lines[0].endswith("; the plugin is off, vLLM goes on")
    assert [r.levelname for r in caplog.records if r.thread == threading.get_ident()] == ["ERROR"]
    assert (plugin.streamer, plugin.supervisor) == (None, None)
    plugin.record(None, IterationStats(), None, 0)
    assert os.listdir(tmp_path / "theirs") == []


def connector_message(payload):
    """vLLM's ``kv_connector_stats`` payload as a ``KvConnectorStats``."""
    message = pb.KvConnectorStats()
    kv_connector.fill(message, payload)
    return message


def test_without_xdg_runtime_dir_a_taken_private_directory_is_one_line_saying_what_to_set(
    monkeypatch, tmp_path, caplog
):
    """The plugin's line for a private directory in the temporary directory
    that is not this user's alone says what docs/OPERATIONS.md says: set
    XDG_RUNTIME_DIR or TMPDIR to a directory of this user's alone."""
    import tempfile

    monkeypatch.setenv("VLLM_OTEL_METRICS_SIDECAR", "auto")
    monkeypatch.setenv("VLLM_OTEL_METRICS_TARGET", "http://127.0.0.1:9")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    taken = tmp_path / f"vllm-otel-metrics-{os.getuid()}"
    taken.mkdir(mode=0o700)
    taken.chmod(0o755)
    with caplog.at_level(logging.INFO, logger="vllm.vllm_otel_metrics"):
        plugin = OtelMetricsStatLogger(vllm_steps.vllm_config("m", 4096), [0])
    assert here(caplog) == [
        f"vllm-otel-metrics: the private directory {taken} is open to others (mode 755): it must "
        "be a directory of this user's alone (mode 0700). XDG_RUNTIME_DIR is not set, so it is "
        "in the temporary directory, where another local user can make it first; set "
        f"XDG_RUNTIME_DIR (systemd's /run/user/{os.getuid()}) or TMPDIR to a directory of this "
        "user's alone, or remove it; the plugin is off, vLLM goes on"
    ]
    assert (plugin.streamer, plugin.supervisor) == (None, None)
