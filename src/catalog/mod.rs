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
/// on `/metrics` and `vllm.num_preemptions` over OTLP.
macro_rules! vllm {
    ($rest:literal) => {
        $crate::catalog::def::FamilyName::new(concat!("vllm:", $rest), concat!("vllm.", $rest))
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
pub(crate) mod kv_connector;
pub(crate) mod labels;
mod reasons;
pub(crate) mod request;
pub(crate) mod scheduler;
pub mod semconv;
pub mod slo;
pub(crate) mod telemetry;

use engine::ENGINE;
use kv_connector::KV_CONNECTOR;
use request::{PER_REQUEST_COUNTS, REQUEST_HISTOGRAMS};
use scheduler::SCHEDULER;
use telemetry::SELF_TELEMETRY;

pub use bucket_families::{
    bucket_families, bucket_family, bucket_family_members, bucket_family_of, is_latency_histogram,
};
pub use def::{BucketFamily, Buckets, Kind, MetricDef, TokenBuckets, ValueType};
pub use reasons::{EvictReason, RejectReason};
// What a host program reads back from a snapshot (the command line's run
// summaries do): the headline, the finished requests, two latencies.
pub use request::{
    E2E_REQUEST_LATENCY, PREEMPTION_BUCKETS, REQUEST_NUM_PREEMPTIONS, REQUEST_SUCCESS,
    TIME_TO_FIRST_TOKEN,
};

/// The default `max_model_len` for the token buckets.
pub const DEFAULT_MAX_MODEL_LEN: u32 = 131_072;

/// Every family, in exposition order: per-request tier, scheduler tier,
/// engine tier, self-telemetry, SLO (whose instruments exist only with
/// `--slo`).
pub fn all() -> impl Iterator<Item = &'static MetricDef> {
    PER_REQUEST_COUNTS
        .iter()
        .copied()
        .chain(REQUEST_HISTOGRAMS.iter().map(|h| h.def))
        .chain(SCHEDULER.iter().copied())
        .chain(ENGINE.iter().copied())
        .chain(KV_CONNECTOR.iter().copied())
        .chain(SELF_TELEMETRY.iter().copied())
        .chain(slo::ALL.iter().copied())
}

/// The family `/metrics` names `vllm_name` (`vllm:request_num_preemptions`),
/// if the catalog has it.
///
/// ```
/// use vllm_otel_metrics::catalog;
///
/// let def = catalog::by_vllm_name("vllm:request_num_preemptions").unwrap();
/// assert_eq!(def.otel_name, "vllm.request_num_preemptions");
/// assert_eq!(def.buckets.boundaries(catalog::DEFAULT_MAX_MODEL_LEN), catalog::PREEMPTION_BUCKETS);
/// assert!(catalog::by_vllm_name("vllm:no_such_family").is_none());
/// ```
pub fn by_vllm_name(vllm_name: &str) -> Option<&'static MetricDef> {
    all().find(|def| def.vllm_name == vllm_name)
}

/// How many series one `(model_name, engine)` label set has in `def`: one,
/// or one per value of its further label.
pub fn series_per_label_set(def: &MetricDef) -> usize {
    def.label_values.len().max(1)
}

/// The family whose OpenTelemetry name is `otel_name`.
pub fn by_otel_name(otel_name: &str) -> Option<&'static MetricDef> {
    all().find(|def| def.otel_name == otel_name)
}

#[cfg(test)]
mod tests {
    use super::telemetry::PROCESS;
    use super::{all, semconv, MetricDef};

    #[test]
    fn otel_name_is_the_prometheus_name_with_a_dot() {
        for def in all().chain(PROCESS.iter().copied()) {
            let (namespace, rest) = [
                ("vllm:", "vllm."),
                ("vllm_otel_metrics_", "vllm_otel_metrics."),
                ("process_", "process."),
            ]
            .into_iter()
            .find_map(|(prometheus, otel)| Some((otel, def.vllm_name.strip_prefix(prometheus)?)))
            .unwrap_or_else(|| panic!("{} has no known namespace", def.vllm_name));
            assert_eq!(def.otel_name, format!("{namespace}{rest}"));
        }
        // The semantic conventions name their streams; the Prometheus names are
        // the OpenTelemetry translation of them (dots to underscores, the unit
        // appended), which a const cannot compute, so both are written there.
        for def in semconv::ALL {
            let translated = format!("{}_seconds", def.otel_name.replace('.', "_"));
            assert_eq!(def.vllm_name, translated);
        }
    }

    #[test]
    fn names_are_unique() {
        let defs: Vec<&MetricDef> = all().chain(semconv::ALL.iter().copied()).collect();
        for name in [|d: &&MetricDef| d.vllm_name, |d: &&MetricDef| d.otel_name] {
            let mut names: Vec<_> = defs.iter().map(name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), defs.len());
        }
    }
}
