//! The scheduler tier: what each engine step's scheduler stats set and add.

use super::def::{counter, gauge, MetricDef, ValueType};
use super::labels::ENGINE_LABELS;

/// Requests in the running batch.
pub(crate) const NUM_REQUESTS_RUNNING: MetricDef = gauge(
    vllm!("num_requests_running"),
    "{request}",
    "Number of requests in model execution batches.",
    ValueType::Integer,
);
/// Requests in the waiting queue.
pub(crate) const NUM_REQUESTS_WAITING: MetricDef = gauge(
    vllm!("num_requests_waiting"),
    "{request}",
    "Number of requests waiting to be processed.",
    ValueType::Integer,
);
/// KV-cache usage as a fraction.
pub(crate) const KV_CACHE_USAGE: MetricDef = gauge(
    vllm!("kv_cache_usage_perc"),
    // Not UCUM "1": OTLP-to-Prometheus translators append `_ratio` for it,
    // which would break vLLM's name.
    "",
    "KV-cache usage. 1 means 100 percent usage.",
    ValueType::Float,
);
/// Tokens looked up in the prefix cache.
pub(crate) const PREFIX_CACHE_QUERIES: MetricDef = counter(
    vllm!("prefix_cache_queries"),
    "{token}",
    "Prefix cache queries, in terms of number of queried tokens.",
    ENGINE_LABELS,
);
/// Tokens found in the prefix cache.
pub(crate) const PREFIX_CACHE_HITS: MetricDef = counter(
    vllm!("prefix_cache_hits"),
    "{token}",
    "Prefix cache hits, in terms of number of cached tokens.",
    ENGINE_LABELS,
);

/// The scheduler tier, in exposition order.
pub(crate) const SCHEDULER: &[&MetricDef] = &[
    &NUM_REQUESTS_RUNNING,
    &NUM_REQUESTS_WAITING,
    &KV_CACHE_USAGE,
    &PREFIX_CACHE_QUERIES,
    &PREFIX_CACHE_HITS,
];
