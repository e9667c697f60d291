//! The metric catalog: the single table of every family this crate records.
//!
//! Each [`MetricDef`] carries a family's vLLM (Prometheus) name, its OpenTelemetry
//! instrument name, kind, unit, HELP text, label names and bucket boundaries.
//! Families and their buckets, the exporters' names, the metric table of
//! docs/CATALOG.md and the docs are all derived from here; no metric name is written anywhere else.
//!
//! ```
//! use vllm_otel_metrics::catalog::{self, Kind};
//!
//! let def = &catalog::REQUEST_NUM_PREEMPTIONS;
//! assert_eq!(def.vllm_name, "vllm:request_num_preemptions");
//! assert_eq!(def.otel_name, "vllm.request_num_preemptions");
//! assert_eq!(def.kind, Kind::Histogram);
//! assert_eq!(def.buckets.boundaries(131_072), vec![1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]);
//! ```

/// A vLLM family's name: `vllm!("num_preemptions")` is `vllm:num_preemptions`
/// on `/metrics` and `vllm.num_preemptions` over OTLP; its series by class
/// (`--attribute`) are `vllm_class:num_preemptions` on `/metrics`.
macro_rules! vllm {
    ($rest:literal) => {
        $crate::catalog::def::FamilyName::new(concat!("vllm:", $rest), concat!("vllm.", $rest))
            .with_by_class(concat!("vllm_class:", $rest))
    };
}

/// One of this crate's own families: `vllm_otel_metrics_…` / `vllm_otel_metrics.…`.
macro_rules! own {
    ($rest:literal) => {
        $crate::catalog::def::FamilyName::new(
            concat!("vllm_otel_metrics_", $rest),
            concat!("vllm_otel_metrics.", $rest),
        )
    };
}

/// A process family, as Prometheus client libraries name it: `process_…` /
/// `process.…`.
macro_rules! process {
    ($rest:literal) => {
        $crate::catalog::def::FamilyName::new(
            concat!("process_", $rest),
            concat!("process.", $rest),
        )
    };
}

mod bucket_families;
mod def;
pub(crate) mod engine;
mod families;
pub(crate) mod kv_connector;
pub(crate) mod labels;
mod reasons;
pub(crate) mod request;
pub(crate) mod scheduler;
pub mod semconv;
pub mod slo;
pub(crate) mod telemetry;

pub use bucket_families::{
    bucket_families, bucket_family, bucket_family_members, bucket_family_of, is_latency_histogram,
};
pub use def::{
    BucketFamily, Buckets, Kind, MetricDef, TokenBuckets, ValueType, DEFAULT_MAX_MODEL_LEN,
};
pub use families::{
    all, by_otel_name, by_vllm_name, exemplar_families, per_request_histograms,
    series_per_label_set,
};
pub use labels::{LORA_NAME_LABEL, NO_ADAPTER, OTHER_ADAPTER, PRIORITY_LABEL};
pub use reasons::{EvictReason, RejectReason};
// What a host program reads back from a snapshot (the command line's run
// summaries do): the headline, the finished requests, two latencies.
pub use request::{
    E2E_REQUEST_LATENCY, PREEMPTION_BUCKETS, REQUEST_NUM_PREEMPTIONS, REQUEST_SUCCESS,
    TIME_TO_FIRST_TOKEN,
};
