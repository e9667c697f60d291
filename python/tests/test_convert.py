"""The conversion from vLLM's stats objects to ingest records (protobuf
messages), without vLLM (stand-in objects with vLLM 0.33's attribute names)
and with vLLM's own classes. Each record is compared whole."""

import enum
import types

import pytest
from vllm_otel_metrics.v1 import ingest_pb2 as pb

import messages
from vllm_otel_metrics import convert, kv_connector

NS = types.SimpleNamespace


class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4


def finished(**overrides):
    values = dict(
        finish_reason=FinishReason.LENGTH,
        request_id="r1",
        e2e_latency=1.5,
        num_prompt_tokens=10,
        num_preemptions=2,
        num_generation_tokens=4,
        max_tokens_param=4,
        queued_time=0.1,
        prefill_time=0.2,
        inference_time=1.3,
        decode_time=1.1,
        mean_time_per_output_token=0.25,
        is_corrupted=False,
        num_cached_tokens=6,
    )
    values.update(overrides)
    return NS(**values)


#: The message of :func:`finished`.
FINISHED = dict(
    request_id="r1",
    finish_reason=pb.FINISH_REASON_LENGTH,
    e2e_latency=1.5,
    queued_time=0.1,
    prefill_time=0.2,
    inference_time=1.3,
    decode_time=1.1,
    mean_time_per_output_token=0.25,
    num_prompt_tokens=10,
    num_generation_tokens=4,
    num_preemptions=2,
    num_cached_tokens=6,
    max_tokens_param=4,
)


def iteration(**overrides):
    values = dict(
        iteration_timestamp=1700000000.5,
        num_generation_tokens=3,
        prompt_token_stats=NS(
            computed=4, local_cache_hit=6, external_kv_transfer=0, cached_tokens=6, total=10
        ),
        num_preempted_reqs=1,
        finished_requests=[finished()],
        max_num_generation_tokens_iter=[4],
        n_params_iter=[1],
        time_to_first_tokens_iter=[0.3],
        inter_token_latencies_iter=[0.02, 0.03],
    )
    values.update(overrides)
    return NS(**values)


#: The message of :func:`iteration` (model "m", engine 0).
ITERATION = dict(
    model_name="m",
    received_at=1700000000.5,
    num_generation_tokens=3,
    prompt_token_stats=pb.PromptTokenStats(
        computed=4, local_cache_hit=6, external_kv_transfer=0, cached_tokens=6, total=10
    ),
    num_preempted_reqs=1,
    max_num_generation_tokens_iter=[4],
    n_params_iter=[1],
    time_to_first_tokens_iter=[0.3],
    inter_token_latencies_iter=[0.02, 0.03],
    finished_requests=[pb.FinishedRequest(**FINISHED)],
)


def iteration_message(**fields):
    return pb.Record(iteration_stats=pb.IterationStats(**{**ITERATION, **fields}))


def test_iteration_record_carries_every_list_and_finished_request():
    assert convert.iteration_record(iteration(), "m", 1) == iteration_message(engine=1)


def test_missing_optional_fields_take_vllm_defaults():
    old = NS(
        iteration_timestamp=1.0,
        num_generation_tokens=0,
        prompt_token_stats=NS(computed=0, total=0),
        finished_requests=[finished(max_tokens_param=None, request_id=None)],
    )
    del old.finished_requests[0].num_preemptions
    request = {
        k: v
        for k, v in FINISHED.items()
        if k not in ("request_id", "num_preemptions", "max_tokens_param")
    }
    # The prompt tokens stay present, all 0, as vLLM's logger has them.
    assert convert.iteration_record(old, "m", 0) == pb.Record(
        iteration_stats=pb.IterationStats(
            model_name="m",
            received_at=1.0,
            prompt_token_stats=pb.PromptTokenStats(),
            finished_requests=[pb.FinishedRequest(**request)],
        )
    )


@pytest.mark.parametrize(
    "reason,label,number",
    [
        (FinishReason.STOP, "stop", pb.FINISH_REASON_STOP),
        (4, "repetition", pb.FINISH_REASON_REPETITION),
        ("ABORT", "abort", pb.FINISH_REASON_ABORT),
        (9, "unknown(9)", pb.FINISH_REASON_UNSPECIFIED),
    ],
)
def test_finish_reasons(reason, label, number):
    assert convert.finish_reason(reason) == label
    record = convert.iteration_record(
        iteration(finished_requests=[finished(finish_reason=reason)]), "m", 0
    )
    assert record == iteration_message(
        finished_requests=[pb.FinishedRequest(**{**FINISHED, "finish_reason": number})]
    )


def scheduler(**overrides):
    values = dict(
        num_running_reqs=3,
        num_waiting_reqs=4,
        num_skipped_waiting_reqs=2,
        kv_cache_usage=0.5,
        prefix_cache_stats=NS(queries=100, hits=40),
        num_kv_fetch_reqs_by_stage={},
        connector_prefix_cache_stats=None,
        kv_cache_eviction_events=[],
        spec_decoding_stats=None,
        perf_stats=None,
        running_lora_adapters={},
        waiting_lora_adapters={},
    )
    values.update(overrides)
    return NS(**values)


#: The message of :func:`scheduler` (model "m", engine 0, received at 5).
SCHEDULER = dict(
    model_name="m",
    received_at=5.0,
    num_running_reqs=3,
    num_waiting_reqs=6,
    num_skipped_waiting_reqs=2,
    kv_cache_usage=0.5,
    prefix_cache_queries=100,
    prefix_cache_hits=40,
)


def scheduler_message(**fields):
    return pb.Record(scheduler_stats=pb.SchedulerStats(**{**SCHEDULER, **fields}))


def test_waiting_includes_deferred_as_vllm_sets_its_gauge():
    record = convert.scheduler_record(scheduler(), None, "m", 0, 5.0, lora_enabled=False)
    assert record == scheduler_message()


def test_optional_scheduler_parts():
    class Source(enum.Enum):  # vLLM's CacheHitSource is a str enum
        HOST = "host"

    source = Source.HOST
    stats = scheduler(
        num_kv_fetch_reqs_by_stage={"in_progress": 2},
        connector_prefix_cache_stats=NS(
            queries=50, hits=20, hits_by_source={source: 15, "disk": 5}
        ),
        kv_cache_eviction_events=[
            NS(lifetime_seconds=3.0, idle_seconds=1.0, reuse_gaps_seconds=(0.5,))
        ],
        spec_decoding_stats=NS(
            num_drafts=2,
            num_draft_tokens=6,
            num_accepted_tokens=3,
            num_accepted_tokens_per_pos=[2, 1, 0],
        ),
        perf_stats=NS(num_flops_per_gpu=10, num_read_bytes_per_gpu=20, num_write_bytes_per_gpu=30),
        running_lora_adapters={"a": 1},
        waiting_lora_adapters={},
    )
    record = convert.scheduler_record(
        stats, NS(queries=7, hits=3), "m", 0, 5.0, lora_enabled=True, kv_consumer=True
    )
    assert record == scheduler_message(
        num_kv_fetch_reqs_by_stage=pb.KvFetchStages(in_progress=2),
        external_prefix_cache_queries=50,
        external_prefix_cache_hits=20,
        external_prefix_cache_hits_by_source=pb.ExternalHitsBySource(host=15, disk=5),
        mm_cache_queries=7,
        mm_cache_hits=3,
        kv_cache_eviction_events=[
            pb.KvCacheEvictionEvent(
                lifetime_seconds=3.0, idle_seconds=1.0, reuse_gaps_seconds=[0.5]
            )
        ],
        perf_stats=pb.PerfStats(
            num_flops_per_gpu=10.0, num_read_bytes_per_gpu=20.0, num_write_bytes_per_gpu=30.0
        ),
        spec_decoding=pb.SpecDecodingStats(
            num_drafts=2,
            num_draft_tokens=6,
            num_accepted_tokens=3,
            num_accepted_tokens_per_pos=[2, 1, 0],
        ),
        # With LoRA enabled both lists are there, empty or not.
        running_lora_adapters=pb.AdapterList(names=["a"]),
        waiting_lora_adapters=pb.AdapterList(),
    )


def test_kv_fetch_stages_only_on_a_kv_consumer():
    """vLLM's scheduler reports the stages on every engine, all 0 without a
    connector; its logger has the family on KV consumers only."""
    stats = scheduler(num_kv_fetch_reqs_by_stage=dict.fromkeys(convert.KV_FETCH_STAGES, 0))
    assert convert.scheduler_record(stats, None, "m", 0, 5.0, False) == scheduler_message()
    consumer = convert.StepConverter("m", False, kv_consumer=True).records(
        stats, None, None, 0, 5.0
    )
    assert list(consumer) == [scheduler_message(num_kv_fetch_reqs_by_stage=pb.KvFetchStages())]


def test_engine_start_record_creates_the_kv_series_vllm_creates_at_start():
    assert convert.engine_start_record("m", 0, 1.0, kv_consumer=False, nixl=False) is None
    nixl = pb.KvConnectorStats(nixl=messages.nixl_stats())
    stages = pb.KvFetchStages()

    def idle(engine, **fields):
        return pb.Record(
            scheduler_stats=pb.SchedulerStats(
                model_name="m", engine=engine, received_at=1.0, **fields
            )
        )

    assert convert.engine_start_record("m", 3, 1.0, kv_consumer=True, nixl=True) == idle(
        3, num_kv_fetch_reqs_by_stage=stages, kv_connector_stats=nixl
    )
    assert convert.engine_start_record("m", 0, 1.0, True, False) == idle(
        0, num_kv_fetch_reqs_by_stage=stages
    )
    assert convert.engine_start_record("m", 0, 1.0, False, True) == idle(0, kv_connector_stats=nixl)


def test_kv_transfer_setup_from_vllms_own_config():
    from vllm.config import KVTransferConfig

    def multi(role, *names):
        return KVTransferConfig(
            kv_connector="MultiConnector",
            kv_role=role,
            kv_connector_extra_config={
                "connectors": [{"kv_connector": n, "kv_role": role} for n in names]
            },
        )

    assert kv_connector.kv_transfer_setup(None) == (False, False)
    assert kv_connector.kv_transfer_setup(KVTransferConfig()) == (False, False)
    assert kv_connector.kv_transfer_setup(
        KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_producer")
    ) == (False, True)
    assert kv_connector.kv_transfer_setup(
        KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both")
    ) == (True, False)
    assert kv_connector.kv_transfer_setup(
        multi("kv_consumer", "NixlPushConnector", "SimpleCPUOffloadConnector")
    ) == (True, True)
    assert kv_connector.kv_transfer_setup(multi("kv_both", "OffloadingConnector")) == (True, False)
    # A connector of its own module is not vLLM's NIXL connector.
    assert kv_connector.kv_transfer_setup(
        KVTransferConfig(
            kv_connector="NixlConnector",
            kv_role="kv_both",
            kv_connector_module_path="my.connectors",
        )
    ) == (True, False)


def test_multimodal_counts_without_scheduler_stats_wait_for_the_next_scheduler_record():
    steps = convert.StepConverter("m", lora_enabled=False)
    assert list(steps.records(None, None, NS(queries=5, hits=1), 0, 1.0)) == []
    assert list(steps.records(None, iteration(), None, 0, 1.0)) == [iteration_message()]
    assert list(steps.records(scheduler(), None, NS(queries=2, hits=2), 0, 2.0)) == [
        scheduler_message(received_at=2.0, mm_cache_queries=7, mm_cache_hits=3)
    ]
    assert list(steps.records(scheduler(), None, None, 0, 3.0)) == [
        scheduler_message(received_at=3.0)
    ]


def test_a_step_whose_iteration_stats_fail_still_gives_its_scheduler_record():
    """The records come one by one: the stream has the scheduler record
    before the iteration stats (here lacking their attributes) fail."""
    records = convert.StepConverter("m", lora_enabled=False).records(
        scheduler(), NS(iteration_timestamp=1.0), None, 0, 5.0
    )
    assert next(records) == scheduler_message()
    with pytest.raises(AttributeError):
        next(records)


def test_sleep_and_engine_config():
    assert convert.sleep_record("m", 2, 1, 2) == pb.Record(
        sleep_state=pb.SleepState(model_name="m", engine=2, level=2)
    )
    assert convert.sleep_record("m", 2, 0, 0) == pb.Record(
        sleep_state=pb.SleepState(model_name="m", engine=2)
    )
    cache = NS(metrics_info=lambda: {"block_size": 16, "engine": "x"})
    assert convert.engine_config_record(cache, "m", 1, None, 4096) == pb.Record(
        engine_config=pb.EngineConfig(
            model_name="m", engine=1, cache_config={"block_size": "16"}, max_model_len=4096
        )
    )
    assert convert.engine_config_record(NS(), "m", 1, 2, None) == pb.Record(
        engine_config=pb.EngineConfig(model_name="m", engine=1, max_loras=2)
    )


def test_a_record_with_a_number_that_is_not_finite_is_not_sent():
    assert convert.finite(convert.iteration_record(iteration(), "m", 0))
    bad = convert.iteration_record(iteration(time_to_first_tokens_iter=[float("nan")]), "m", 0)
    assert bad == convert.NotFinite("iteration_stats", 0)
    bad = convert.scheduler_record(
        scheduler(
            perf_stats=NS(
                num_flops_per_gpu=float("inf"), num_read_bytes_per_gpu=0, num_write_bytes_per_gpu=0
            )
        ),
        None,
        "m",
        2,
        5.0,
        False,
    )
    assert bad == convert.NotFinite("scheduler_stats", 2)
    # Finite numbers whose sum overflows are sent.
    huge = iteration(inter_token_latencies_iter=[1e308, 1e308])
    assert convert.iteration_record(huge, "m", 0) == iteration_message(
        inter_token_latencies_iter=[1e308, 1e308]
    )
    assert not convert.finite(
        pb.Record(
            scheduler_stats=pb.SchedulerStats(
                kv_connector_stats=pb.KvConnectorStats(
                    nixl=pb.NixlStats(post_duration=pb.Observations(values=[0.1, float("-inf")]))
                )
            )
        )
    )


def test_kv_connector_stats_from_vllms_own_connector_stats():
    """vLLM's NIXL, offloading and simple-offload stats objects, as its
    scheduler hands them to the stat loggers (``to_dict()``), single and
    under a MultiConnector."""
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
        OffloadingConnectorStats,
    )
    from vllm.v1.simple_kv_offload.metrics import SimpleCPUOffloadStats

    nixl = NixlKVConnectorStats()
    nixl.record_transfer(NS(xferDuration=20_000, postDuration=1_000, totalBytes=4096, descCount=12))
    nixl.record_transfer(
        NS(xferDuration=300_000, postDuration=2_000, totalBytes=1 << 20, descCount=40)
    )
    nixl.record_failed_transfer()
    nixl.record_failed_notification()
    nixl.record_kv_expired_req()
    nixl_message = messages.nixl_stats(
        transfer_duration=pb.Observations(values=[0.02, 0.3]),
        post_duration=pb.Observations(values=[0.001, 0.002]),
        bytes_transferred=pb.Observations(values=[4096.0, 1048576.0]),
        num_descriptors=pb.Observations(values=[12.0, 40.0]),
        num_failed_transfers=1,
        num_failed_notifications=1,
        num_kv_expired_reqs=1,
    )
    assert connector_message(nixl.to_dict()) == pb.KvConnectorStats(nixl=nixl_message)

    offload = OffloadingConnectorStats()
    offload.increase_counter("vllm:kv_offload_load_bytes", 5_000_000)
    offload.increase_counter("vllm:kv_offload_load_time", 0.25)
    offload.observe_histogram("vllm:kv_offload_load_size", 5_000_000)
    offload.increase_counter("vllm:kv_offload_allocation_failure")
    offload.set_gauge("vllm:kv_offload_cpu_cache_usage_perc", 0.4)
    simple = SimpleCPUOffloadStats()
    simple.increase_counter("vllm:simple_kv_offload_save_outcomes_total", 3, ("stored",))
    simple.increase_counter("vllm:simple_kv_offload_load_blocks_total", 8)
    simple.set_gauge("vllm:simple_kv_offload_used_blocks", 12)
    offload_message = pb.OffloadingStats(
        load_bytes=5_000_000,
        load_time=0.25,
        load_sizes=pb.Observations(values=[5_000_000.0]),
        allocation_failures=1,
        cpu_cache_usage=0.4,
    )
    simple_message = pb.SimpleCpuOffloadStats(
        save_outcomes=pb.SaveOutcomes(stored=3), load_blocks=8, used_blocks=12
    )
    assert connector_message(offload.to_dict()) == pb.KvConnectorStats(offloading=offload_message)
    assert connector_message(simple.to_dict()) == pb.KvConnectorStats(
        simple_cpu_offload=simple_message
    )
    multi = {
        "OffloadingConnector": offload.to_dict(),
        "SimpleCPUOffloadConnector": simple.to_dict(),
        "NixlPullConnector": nixl.to_dict(),
    }
    assert connector_message(multi) == pb.KvConnectorStats(
        nixl=nixl_message, offloading=offload_message, simple_cpu_offload=simple_message
    )
    assert connector_message(None) == pb.KvConnectorStats()
    assert connector_message({}) == pb.KvConnectorStats()
    assert connector_message({"OtherConnector": {"x": [1]}}) == pb.KvConnectorStats()


def connector_message(payload):
    """vLLM's ``kv_connector_stats`` payload as a ``KvConnectorStats``."""
    message = pb.KvConnectorStats()
    kv_connector.fill(message, payload)
    return message


def vllm_attributes(name):
    """The attributes of vLLM's class for the message ``name``."""
    import dataclasses

    from vllm.v1.metrics import stats

    if name == "IterationStats":
        return set(vars(stats.IterationStats()))
    cls = {"FinishedRequest": stats.FinishedRequestStats}.get(name) or getattr(stats, name)
    return {field.name for field in dataclasses.fields(cls)}


@pytest.mark.parametrize("name", sorted(convert.EXPLICIT_FIELDS))
def test_every_scalar_field_is_copied_from_vllms_attribute_or_set_by_hand(name):
    """A scalar field the protocol adds under the name of vLLM's attribute
    is copied with no code; one under another name must be set by hand and
    listed in EXPLICIT_FIELDS, or the conversion would leave it at 0."""
    descriptor = getattr(pb, name).DESCRIPTOR
    explicit = convert.EXPLICIT_FIELDS[name]
    copied = convert.copied(name)
    by_copy = {field for field, _cast in copied.scalars + copied.lists}
    scalars = {f.name for f in descriptor.fields if f.cpp_type != f.CPPTYPE_MESSAGE}
    assert explicit <= {f.name for f in descriptor.fields}, "a stale explicit field"
    assert scalars <= explicit | by_copy
    assert not by_copy & explicit
    unknown_to_vllm = by_copy - vllm_attributes(name)
    assert not unknown_to_vllm, (
        f"{name} fields {sorted(unknown_to_vllm)} are no attribute of vLLM's class: "
        "set them by hand and list them in convert.EXPLICIT_FIELDS"
    )


def test_copied_scheduler_fields_take_vllms_values():
    names = [field for field, _cast in convert.copied("SchedulerStats").scalars]
    assert names, "nothing is copied"
    stats = scheduler(**{name: 7 for name in names})
    message = convert.scheduler_record(stats, None, "m", 0, 5.0, False).scheduler_stats
    assert {name: getattr(message, name) for name in names} == dict.fromkeys(names, 7)


def test_every_double_is_checked_for_finiteness():
    """The check needs no list of fields: every double of the descriptor,
    nested ones included, counts."""
    for field in pb.SchedulerStats.DESCRIPTOR.fields:
        if field.cpp_type == field.CPPTYPE_DOUBLE and not field.is_repeated:
            record = convert.scheduler_record(
                scheduler(**{field.name: float("nan")}), None, "m", 1, 5.0, False
            )
            if field.name == "received_at":
                record = convert.scheduler_record(scheduler(), None, "m", 1, float("nan"), False)
            assert record == convert.NotFinite("scheduler_stats", 1), field.name
    event = NS(lifetime_seconds=1.0, idle_seconds=1.0, reuse_gaps_seconds=(float("inf"),))
    record = convert.scheduler_record(
        scheduler(kv_cache_eviction_events=[event]), None, "m", 1, 5.0, False
    )
    assert record == convert.NotFinite("scheduler_stats", 1)
    bad = [finished(mean_time_per_output_token=float("-inf"))]
    assert convert.iteration_record(iteration(finished_requests=bad), "m", 2) == (
        convert.NotFinite("iteration_stats", 2)
    )
