//! The engine tier: the engine-level families of vLLM's
//! `PrometheusStatLogger` (`vllm/v1/metrics/loggers.py`) beyond the
//! scheduler gauges, and the API server's operation timings. Each entry
//! names the vLLM source that defines it; names, kinds, labels, HELP texts
//! and buckets are vLLM's.

use super::def::{counter, gauge, histogram, BucketFamily, FamilyName, MetricDef, ValueType};
use super::labels::ENGINE_LABELS;

/// Labels of `vllm:num_requests_waiting_by_reason`.
pub(crate) const WAITING_REASON_LABELS: &[&str] = &["model_name", "engine", "reason"];
/// Values of its `reason` label (`WAITING_REASON_CAPACITY`, `WAITING_REASON_DEFERRED`).
pub(crate) const WAITING_REASONS: [&str; 2] = ["capacity", "deferred"];
/// Labels of `vllm:num_requests_kv_fetch_by_stage`.
pub(crate) const KV_FETCH_STAGE_LABELS: &[&str] = &["model_name", "engine", "stage"];
/// Values of its `stage` label (`KV_FETCH_STAGES` in `vllm/v1/metrics/stats.py`).
pub(crate) const KV_FETCH_STAGES: [&str; 3] =
    ["waiting_to_start", "in_progress", "completed_waiting"];
/// Labels of `vllm:engine_sleep_state`.
pub(crate) const SLEEP_STATE_LABELS: &[&str] = &["model_name", "engine", "sleep_state"];
/// Values of its `sleep_state` label.
pub(crate) const SLEEP_STATES: [&str; 3] = ["awake", "weights_offloaded", "discard_all"];
/// Labels of `vllm:prompt_tokens_cached_by_source`.
pub(crate) const CACHE_HIT_SOURCE_LABELS: &[&str] = &["model_name", "engine", "source"];
/// Values of its `source` label (`CacheHitSource` in
/// `vllm/v1/metrics/cache_hit_source.py`): the local prefix cache first.
pub(crate) const CACHE_HIT_SOURCES: [&str; 5] =
    ["device", "host", "p2p", "disk", "external_unspecified"];
/// Labels of `vllm:spec_decode_num_accepted_tokens_per_pos`.
pub(crate) const POSITION_LABELS: &[&str] = &["model_name", "engine", "position"];
/// Values of its `position` label, one per draft position.
pub(crate) const SPEC_POSITIONS: [&str; 16] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
];
/// Labels of `vllm:cache_config_info` besides the configuration's own keys.
pub(crate) const CACHE_CONFIG_LABELS: &[&str] = &["engine"];
/// Labels of `vllm:lora_requests_info`.
pub(crate) const LORA_INFO_LABELS: [&str; 3] =
    ["max_lora", "waiting_lora_adapters", "running_lora_adapters"];
/// Labels of the operation timings.
pub(crate) const OPERATION_LABELS: &[&str] = &["operation"];

/// KV block residency (`KV_CACHE_RESIDENCY_BUCKETS`, `vllm/v1/metrics/buckets.py`).
const KV_CACHE_RESIDENCY_FAMILY: BucketFamily = BucketFamily::fixed(
    "kv_cache_residency",
    &[
        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0,
        60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
    ],
);
/// Sleep-mode and weight-transfer operations (`BUCKETS` of their metrics modules).
const OPERATION_DURATION_BUCKETS: BucketFamily = BucketFamily::fixed(
    "operation_duration",
    &[0.01, 0.1, 1.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0],
);

/// A gauge with labels beyond `model_name` and `engine`.
const fn gauge_with(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    value_type: ValueType,
) -> MetricDef {
    MetricDef {
        labels,
        ..gauge(name, unit, help, value_type)
    }
}

pub(super) const fn float_counter(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
) -> MetricDef {
    MetricDef {
        value_type: ValueType::Float,
        ..counter(name, unit, help, ENGINE_LABELS)
    }
}

const fn operation_histogram(name: FamilyName, help: &'static str) -> MetricDef {
    MetricDef {
        labels: OPERATION_LABELS,
        ..histogram(name, "s", help, OPERATION_DURATION_BUCKETS)
    }
}

/// Waiting requests by why they wait (`loggers.py`, `gauge_waiting_by_reason`):
/// `capacity` is `SchedulerStats.num_waiting_reqs`, `deferred`
/// `num_skipped_waiting_reqs`.
pub(crate) const NUM_REQUESTS_WAITING_BY_REASON: MetricDef = gauge_with(
    vllm!("num_requests_waiting_by_reason"),
    "{request}",
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
    WAITING_REASON_LABELS,
    ValueType::Integer,
)
.with_label_values(&WAITING_REASONS);
/// Waiting requests by async KV load stage (`loggers.py`,
/// `gauge_kv_fetch_by_stage`; registered on KV consumers only).
pub(crate) const NUM_REQUESTS_KV_FETCH_BY_STAGE: MetricDef = gauge_with(
    vllm!("num_requests_kv_fetch_by_stage"),
    "{request}",
    "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an async KV load that has not started; 'in_progress' = load started and not yet reported finished; 'completed_waiting' = load finished, request not running yet.",
    KV_FETCH_STAGE_LABELS,
    ValueType::Integer,
)
.with_label_values(&KV_FETCH_STAGES);
/// The engine's sleep level as three flags (`loggers.py`,
/// `gauge_engine_sleep_state`, `record_sleep_state`).
pub(crate) const ENGINE_SLEEP_STATE: MetricDef = gauge_with(
    vllm!("engine_sleep_state"),
    "",
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
    SLEEP_STATE_LABELS,
    ValueType::Integer,
)
.with_label_values(&SLEEP_STATES);
/// Prefix-cache hit tokens by tier (`loggers.py`,
/// `counter_prompt_tokens_cached_by_source`).
pub(crate) const PROMPT_TOKENS_CACHED_BY_SOURCE: MetricDef = counter(
    vllm!("prompt_tokens_cached_by_source"),
    "{token}",
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
    CACHE_HIT_SOURCE_LABELS,
)
.with_label_values(&CACHE_HIT_SOURCES);
/// Tokens queried in the KV connector's cache (`loggers.py`,
/// `counter_connector_prefix_cache_queries`).
pub(crate) const EXTERNAL_PREFIX_CACHE_QUERIES: MetricDef = counter(
    vllm!("external_prefix_cache_queries"),
    "{token}",
    "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
    ENGINE_LABELS,
);
/// Tokens found in the KV connector's cache (`loggers.py`,
/// `counter_connector_prefix_cache_hits`).
pub(crate) const EXTERNAL_PREFIX_CACHE_HITS: MetricDef = counter(
    vllm!("external_prefix_cache_hits"),
    "{token}",
    "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
    ENGINE_LABELS,
);
/// Multi-modal cache lookups (`loggers.py`, `counter_mm_cache_queries`).
pub(crate) const MM_CACHE_QUERIES: MetricDef = counter(
    vllm!("mm_cache_queries"),
    "{item}",
    "Multi-modal cache queries, in terms of number of queried items.",
    ENGINE_LABELS,
);
/// Multi-modal cache hits (`loggers.py`, `counter_mm_cache_hits`).
pub(crate) const MM_CACHE_HITS: MetricDef = counter(
    vllm!("mm_cache_hits"),
    "{item}",
    "Multi-modal cache hits, in terms of number of cached items.",
    ENGINE_LABELS,
);
/// Sampled block lifetimes (`loggers.py`, `histogram_kv_block_lifetime`;
/// events from `vllm/v1/core/kv_cache_metrics.py`).
pub(crate) const KV_BLOCK_LIFETIME: MetricDef = histogram(
    vllm!("kv_block_lifetime_seconds"),
    "s",
    "Histogram of KV cache block lifetime from allocation to eviction. Sampled metrics (controlled by --kv-cache-metrics-sample).",
    KV_CACHE_RESIDENCY_FAMILY,
);
/// Sampled blocks' idle time before eviction (`loggers.py`,
/// `histogram_kv_block_idle_before_evict`).
pub(crate) const KV_BLOCK_IDLE_BEFORE_EVICT: MetricDef = histogram(
    vllm!("kv_block_idle_before_evict_seconds"),
    "s",
    "Histogram of idle time before KV cache block eviction. Sampled metrics (controlled by --kv-cache-metrics-sample).",
    KV_CACHE_RESIDENCY_FAMILY,
);
/// Sampled blocks' gaps between accesses (`loggers.py`,
/// `histogram_kv_block_reuse_gap`).
pub(crate) const KV_BLOCK_REUSE_GAP: MetricDef = histogram(
    vllm!("kv_block_reuse_gap_seconds"),
    "s",
    "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent accesses are recorded (ring buffer). Sampled metrics (controlled by --kv-cache-metrics-sample).",
    KV_CACHE_RESIDENCY_FAMILY,
);
/// Estimated FLOPs per GPU (`vllm/v1/metrics/perf.py`, `PerfMetricsProm`).
pub(crate) const ESTIMATED_FLOPS_PER_GPU: MetricDef = float_counter(
    vllm!("estimated_flops_per_gpu"),
    "{flop}",
    "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
);
/// Estimated bytes read per GPU (`perf.py`, `PerfMetricsProm`).
pub(crate) const ESTIMATED_READ_BYTES_PER_GPU: MetricDef = float_counter(
    vllm!("estimated_read_bytes_per_gpu"),
    // Not UCUM "By": Prometheus translators append `_bytes` for it, which
    // would break vLLM's name.
    "",
    "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).",
);
/// Estimated bytes written per GPU (`perf.py`, `PerfMetricsProm`).
pub(crate) const ESTIMATED_WRITE_BYTES_PER_GPU: MetricDef = float_counter(
    vllm!("estimated_write_bytes_per_gpu"),
    // Not "By", as above.
    "",
    "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).",
);
/// Speculative-decoding drafts (`vllm/v1/spec_decode/metrics.py`, `SpecDecodingProm`).
pub(crate) const SPEC_DECODE_NUM_DRAFTS: MetricDef = counter(
    vllm!("spec_decode_num_drafts"),
    "{draft}",
    "Number of spec decoding drafts.",
    ENGINE_LABELS,
);
/// Drafted tokens (`spec_decode/metrics.py`).
pub(crate) const SPEC_DECODE_NUM_DRAFT_TOKENS: MetricDef = counter(
    vllm!("spec_decode_num_draft_tokens"),
    "{token}",
    "Number of draft tokens.",
    ENGINE_LABELS,
);
/// Accepted draft tokens (`spec_decode/metrics.py`).
pub(crate) const SPEC_DECODE_NUM_ACCEPTED_TOKENS: MetricDef = counter(
    vllm!("spec_decode_num_accepted_tokens"),
    "{token}",
    "Number of accepted tokens.",
    ENGINE_LABELS,
);
/// Accepted draft tokens by position (`spec_decode/metrics.py`).
pub(crate) const SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS: MetricDef = counter(
    vllm!("spec_decode_num_accepted_tokens_per_pos"),
    "{token}",
    "Accepted tokens per draft position.",
    POSITION_LABELS,
)
.with_label_values(&SPEC_POSITIONS);
/// The engine's cache configuration as labels, value 1 (`loggers.py`,
/// `log_metrics_info("cache_config", …)` of `CacheConfig.metrics_info()`).
pub(crate) const CACHE_CONFIG_INFO: MetricDef = gauge_with(
    vllm!("cache_config_info"),
    "",
    "Information of the LLMEngine CacheConfig",
    CACHE_CONFIG_LABELS,
    ValueType::Integer,
);
/// LoRA adapters in use, value the time of the stats (`loggers.py`,
/// `gauge_lora_info.set_to_current_time()`).
pub(crate) const LORA_REQUESTS_INFO: MetricDef = gauge_with(
    vllm!("lora_requests_info"),
    // A Unix time, but not "s": translators would append `_seconds`.
    "",
    "Running stats on lora requests.",
    &LORA_INFO_LABELS,
    ValueType::Float,
);
/// Sleep-mode operation timings (`vllm/entrypoints/serve/dev/sleep/metrics.py`).
pub(crate) const SLEEP_MODE_OPERATION_DURATION: MetricDef = operation_histogram(
    vllm!("sleep_mode_operation_duration_seconds"),
    "Duration of one sleep-mode operation.",
);
/// Weight-transfer operation timings (`vllm/entrypoints/rl/online/metrics.py`).
pub(crate) const RL_WEIGHT_UPDATE_OPERATION_DURATION: MetricDef = operation_histogram(
    vllm!("rl_weight_update_operation_duration_seconds"),
    "Duration of one weight-transfer operation.",
);

/// The engine tier, in exposition order.
pub(crate) const ENGINE: &[&MetricDef] = &[
    &NUM_REQUESTS_WAITING_BY_REASON,
    &NUM_REQUESTS_KV_FETCH_BY_STAGE,
    &ENGINE_SLEEP_STATE,
    &PROMPT_TOKENS_CACHED_BY_SOURCE,
    &EXTERNAL_PREFIX_CACHE_QUERIES,
    &EXTERNAL_PREFIX_CACHE_HITS,
    &MM_CACHE_QUERIES,
    &MM_CACHE_HITS,
    &KV_BLOCK_LIFETIME,
    &KV_BLOCK_IDLE_BEFORE_EVICT,
    &KV_BLOCK_REUSE_GAP,
    &ESTIMATED_FLOPS_PER_GPU,
    &ESTIMATED_READ_BYTES_PER_GPU,
    &ESTIMATED_WRITE_BYTES_PER_GPU,
    &SPEC_DECODE_NUM_DRAFTS,
    &SPEC_DECODE_NUM_DRAFT_TOKENS,
    &SPEC_DECODE_NUM_ACCEPTED_TOKENS,
    &SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS,
    &CACHE_CONFIG_INFO,
    &LORA_REQUESTS_INFO,
    &SLEEP_MODE_OPERATION_DURATION,
    &RL_WEIGHT_UPDATE_OPERATION_DURATION,
];
