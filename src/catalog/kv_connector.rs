//! The KV-connector tier: the families of vLLM's KV connectors, recorded
//! from `scheduler_stats.kv_connector_stats` (docs/SEMANTICS.md §4b).
//!
//! Three connectors define them in vLLM 0.33.0, each entry naming its file:
//! NIXL (disaggregated prefill/decode, `NixlPromMetrics`), the
//! OffloadingConnector with its CPU spec (`OffloadPromMetrics`,
//! `CPUOffloadingSpec`) and the SimpleCPUOffloadConnector
//! (`SimpleCPUOffloadPromMetrics`). Names, kinds, labels, HELP texts and
//! buckets are vLLM's, the double space in one HELP text included.

use super::def::{counter, gauge, histogram, BucketFamily, MetricDef, ValueType};
use super::engine::float_counter;
use super::labels::ENGINE_LABELS;

/// Labels of `vllm:simple_kv_offload_save_outcomes`.
pub(crate) const SAVE_OUTCOME_LABELS: &[&str] = &["model_name", "engine", "outcome"];
/// Values of its `outcome` label (`OUTCOME_TO_FIELD` in
/// `vllm/v1/simple_kv_offload/metrics.py`).
pub(crate) const SAVE_OUTCOMES: [&str; 7] = [
    "stored",
    "dropped_cpu_full",
    "dropped_request_gone",
    "dropped_null_block",
    "dropped_not_hashed",
    "skipped_already_cached",
    "skipped_in_flight",
];

/// NIXL post times (`nixl/stats.py`).
const NIXL_POST_TIME_BUCKETS: BucketFamily = BucketFamily::fixed(
    "nixl_post_time",
    &[
        0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
    ],
);
/// NIXL transfer durations: the post-time buckets without the first.
const NIXL_XFER_TIME_BUCKETS: BucketFamily = BucketFamily::fixed(
    "nixl_xfer_time",
    &[
        0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
    ],
);
/// NIXL bytes per transfer: `2 ** (10 + i) for i in range(1, 25, 2)`.
const NIXL_BYTES_BUCKETS: BucketFamily = BucketFamily::fixed(
    "nixl_bytes_transferred",
    &[
        2048.0,
        8192.0,
        32768.0,
        131072.0,
        524288.0,
        2097152.0,
        8388608.0,
        33554432.0,
        134217728.0,
        536870912.0,
        2147483648.0,
        8589934592.0,
    ],
);
/// NIXL descriptors per transfer.
const NIXL_DESCRIPTOR_BUCKETS: BucketFamily = BucketFamily::fixed(
    "nixl_num_descriptors",
    &[
        10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0, 10000.0,
        20000.0, 50000.0,
    ],
);
/// KV offload transfer sizes (`TRANSFER_SIZE_BUCKETS`, `offloading/metrics.py`).
const OFFLOAD_TRANSFER_SIZE_BUCKETS: BucketFamily = BucketFamily::fixed(
    "kv_offload_transfer_size",
    &[1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6],
);
/// One offload lookup call.
const OFFLOAD_LOOKUP_SYNC_BUCKETS: BucketFamily = BucketFamily::fixed(
    "kv_offload_lookup_sync_delay",
    &[
        0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0,
    ],
);
/// A deferred offload lookup until it resolves.
const OFFLOAD_LOOKUP_ASYNC_BUCKETS: BucketFamily = BucketFamily::fixed(
    "kv_offload_lookup_async_delay",
    &[
        0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
    ],
);

// ---- NIXL: vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py ----

/// NIXL transfer durations.
pub(crate) const NIXL_XFER_TIME: MetricDef = histogram(
    vllm!("nixl_xfer_time_seconds"),
    "s",
    "Histogram of transfer duration for NIXL KV Cache transfers.",
    NIXL_XFER_TIME_BUCKETS,
);
/// NIXL transfer post times.
pub(crate) const NIXL_POST_TIME: MetricDef = histogram(
    vllm!("nixl_post_time_seconds"),
    "s",
    "Histogram of transfer post time for NIXL KV Cache transfers.",
    NIXL_POST_TIME_BUCKETS,
);
/// NIXL bytes per transfer.
pub(crate) const NIXL_BYTES_TRANSFERRED: MetricDef = histogram(
    vllm!("nixl_bytes_transferred"),
    "By",
    "Histogram of bytes transferred per NIXL KV Cache transfers.",
    NIXL_BYTES_BUCKETS,
);
/// NIXL descriptors per transfer.
pub(crate) const NIXL_NUM_DESCRIPTORS: MetricDef = histogram(
    vllm!("nixl_num_descriptors"),
    "{descriptor}",
    "Histogram of number of descriptors per NIXL  KV Cache transfers.",
    NIXL_DESCRIPTOR_BUCKETS,
);
/// Failed NIXL transfers, handshakes and notifications.
pub(crate) const NIXL_NUM_FAILED_TRANSFERS: MetricDef = counter(
    vllm!("nixl_num_failed_transfers"),
    "{failure}",
    "Number of failed NIXL KV Cache transfers, including handshake and notification failures. NOTE: KV expiry is tracked separately in vllm:nixl_num_kv_expired_reqs.",
    ENGINE_LABELS,
);
/// Failed NIXL notifications (also in the failed transfers).
pub(crate) const NIXL_NUM_FAILED_NOTIFICATIONS: MetricDef = counter(
    vllm!("nixl_num_failed_notifications"),
    "{failure}",
    "Number of failed NIXL KV Cache notifications. Retained for compatibility; these failures are also included in vllm:nixl_num_failed_transfers.",
    ENGINE_LABELS,
);
/// Requests whose KV lease expired (on the prefill instance).
pub(crate) const NIXL_NUM_KV_EXPIRED_REQS: MetricDef = counter(
    vllm!("nixl_num_kv_expired_reqs"),
    "{request}",
    "Number of requests that had their KV expire. NOTE: This metric is tracked on the P instance.",
    ENGINE_LABELS,
);
/// Completion notifications after the KV lease expired.
pub(crate) const NIXL_NUM_NOTIFICATIONS_AFTER_EXPIRY: MetricDef = counter(
    vllm!("nixl_num_notifications_after_expiry"),
    "{notification}",
    "Number of completion notifications for requests that were no longer tracked, usually because their KV lease expired. The KV blocks may have been reused before the transfer finished. Counted per notification (one per remote rank), not per request.",
    ENGINE_LABELS,
);

// ---- OffloadingConnector: .../v1/offloading/metrics.py, vllm/v1/kv_offload/cpu/spec.py ----

/// Bytes loaded from offload storage.
pub(crate) const KV_OFFLOAD_LOAD_BYTES: MetricDef = counter(
    vllm!("kv_offload_load_bytes"),
    "By",
    "Total bytes loaded from offload storage to GPU.",
    ENGINE_LABELS,
);
/// Seconds spent loading from offload storage.
pub(crate) const KV_OFFLOAD_LOAD_TIME: MetricDef = float_counter(
    vllm!("kv_offload_load_time"),
    "s",
    "Total load time from offload storage to GPU, in seconds.",
);
/// Bytes per load operation.
pub(crate) const KV_OFFLOAD_LOAD_SIZE: MetricDef = histogram(
    vllm!("kv_offload_load_size"),
    "By",
    "Histogram of KV offload load operation size, in bytes.",
    OFFLOAD_TRANSFER_SIZE_BUCKETS,
);
/// Bytes stored to offload storage.
pub(crate) const KV_OFFLOAD_STORE_BYTES: MetricDef = counter(
    vllm!("kv_offload_store_bytes"),
    "By",
    "Total bytes stored from GPU to offload storage.",
    ENGINE_LABELS,
);
/// Seconds spent storing to offload storage.
pub(crate) const KV_OFFLOAD_STORE_TIME: MetricDef = float_counter(
    vllm!("kv_offload_store_time"),
    "s",
    "Total store time from GPU to offload storage, in seconds.",
);
/// Bytes per store operation.
pub(crate) const KV_OFFLOAD_STORE_SIZE: MetricDef = histogram(
    vllm!("kv_offload_store_size"),
    "By",
    "Histogram of KV offload store operation size, in bytes.",
    OFFLOAD_TRANSFER_SIZE_BUCKETS,
);
/// One offload lookup call.
pub(crate) const KV_OFFLOAD_LOOKUP_SYNC_DELAY: MetricDef = histogram(
    vllm!("kv_offload_lookup_sync_delay_seconds"),
    "s",
    "Histogram of the time spent in a single offload lookup call, in seconds.",
    OFFLOAD_LOOKUP_SYNC_BUCKETS,
);
/// A deferred offload lookup until it resolves or the request finishes.
pub(crate) const KV_OFFLOAD_LOOKUP_ASYNC_DELAY: MetricDef = histogram(
    vllm!("kv_offload_lookup_async_delay_seconds"),
    "s",
    "Histogram of time between a request's offload lookup first deferring and the following lookup resolving, or request finish, in seconds.",
    OFFLOAD_LOOKUP_ASYNC_BUCKETS,
);
/// Store allocations that failed.
pub(crate) const KV_OFFLOAD_ALLOCATION_FAILURE: MetricDef = counter(
    vllm!("kv_offload_allocation_failure"),
    "{failure}",
    "Number of KV offload store allocation attempts that failed.",
    ENGINE_LABELS,
);
/// Stores skipped below the reuse threshold (`store_threshold` ≥ 2 only).
pub(crate) const KV_OFFLOAD_STORES_SKIPPED: MetricDef = counter(
    vllm!("kv_offload_stores_skipped"),
    "{store}",
    "Number of KV offload stores skipped because the reuse threshold was not reached.",
    ENGINE_LABELS,
);
/// CPU KV cache pinned by active transfers, a fraction.
pub(crate) const KV_OFFLOAD_CPU_CACHE_USAGE: MetricDef = gauge(
    vllm!("kv_offload_cpu_cache_usage_perc"),
    "",
    "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated). Sustained high values indicate transfers (stores or promotions) may be dropped due to insufficient capacity.",
    ValueType::Float,
);
/// CPU KV cache pinned by in-flight stores, a fraction.
pub(crate) const KV_OFFLOAD_CPU_CACHE_WRITE_USAGE: MetricDef = gauge(
    vllm!("kv_offload_cpu_cache_write_usage_perc"),
    "",
    "Fraction of CPU KV-cache space currently pinned by in-flight stores that have not yet completed (0.0 = idle, 1.0 = saturated).",
    ValueType::Float,
);
/// CPU KV cache pinned by in-flight loads, a fraction.
pub(crate) const KV_OFFLOAD_CPU_CACHE_READ_USAGE: MetricDef = gauge(
    vllm!("kv_offload_cpu_cache_read_usage_perc"),
    "",
    "Fraction of CPU KV-cache space currently pinned by in-flight loads that have not yet completed (0.0 = idle, 1.0 = saturated).",
    ValueType::Float,
);

// ---- SimpleCPUOffloadConnector: vllm/v1/simple_kv_offload/metrics.py ----

/// Store admission decisions by outcome.
pub(crate) const SIMPLE_KV_OFFLOAD_SAVE_OUTCOMES: MetricDef = counter(
    vllm!("simple_kv_offload_save_outcomes"),
    "{store}",
    "Store admission decisions in SimpleCPUOffloadConnector, by outcome. Outcomes classify eager-mode boundary hand-off stores; lazy-mode stores are not classified.",
    SAVE_OUTCOME_LABELS,
)
.with_label_values(&SAVE_OUTCOMES);
/// Blocks restored to GPU from the offload pool.
pub(crate) const SIMPLE_KV_OFFLOAD_LOAD_BLOCKS: MetricDef = counter(
    vllm!("simple_kv_offload_load_blocks"),
    "{block}",
    "KV blocks restored to GPU from the offload pool, counted when a load finishes. This is prefill work avoided through offload cache hits.",
    ENGINE_LABELS,
);
/// Offload-pool blocks pinned by transfers or hits.
pub(crate) const SIMPLE_KV_OFFLOAD_USED_BLOCKS: MetricDef = gauge(
    vllm!("simple_kv_offload_used_blocks"),
    "{block}",
    "Offload-pool blocks currently pinned by in-flight transfers or cache hits (capacity minus free). Evictable cached blocks are not counted; capacity_blocks is on vllm:simple_kv_offload_info.",
    ValueType::Integer,
);
/// Offload blocks in pending stores.
pub(crate) const SIMPLE_KV_OFFLOAD_PENDING_STORE_BLOCKS: MetricDef = gauge(
    vllm!("simple_kv_offload_pending_store_blocks"),
    "{block}",
    "Offload blocks in pending stores: queued for dispatch, issued to workers, or awaiting release after a cache reset. A persistently growing value indicates a stuck transfer.",
    ValueType::Integer,
);

/// The KV-connector tier, in exposition order.
pub(crate) const KV_CONNECTOR: &[&MetricDef] = &[
    &NIXL_XFER_TIME,
    &NIXL_POST_TIME,
    &NIXL_BYTES_TRANSFERRED,
    &NIXL_NUM_DESCRIPTORS,
    &NIXL_NUM_FAILED_TRANSFERS,
    &NIXL_NUM_FAILED_NOTIFICATIONS,
    &NIXL_NUM_KV_EXPIRED_REQS,
    &NIXL_NUM_NOTIFICATIONS_AFTER_EXPIRY,
    &KV_OFFLOAD_LOAD_BYTES,
    &KV_OFFLOAD_LOAD_TIME,
    &KV_OFFLOAD_LOAD_SIZE,
    &KV_OFFLOAD_STORE_BYTES,
    &KV_OFFLOAD_STORE_TIME,
    &KV_OFFLOAD_STORE_SIZE,
    &KV_OFFLOAD_LOOKUP_SYNC_DELAY,
    &KV_OFFLOAD_LOOKUP_ASYNC_DELAY,
    &KV_OFFLOAD_ALLOCATION_FAILURE,
    &KV_OFFLOAD_STORES_SKIPPED,
    &KV_OFFLOAD_CPU_CACHE_USAGE,
    &KV_OFFLOAD_CPU_CACHE_WRITE_USAGE,
    &KV_OFFLOAD_CPU_CACHE_READ_USAGE,
    &SIMPLE_KV_OFFLOAD_SAVE_OUTCOMES,
    &SIMPLE_KV_OFFLOAD_LOAD_BLOCKS,
    &SIMPLE_KV_OFFLOAD_USED_BLOCKS,
    &SIMPLE_KV_OFFLOAD_PENDING_STORE_BLOCKS,
];
