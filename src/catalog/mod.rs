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

/// A family's name as written once: its namespace and the rest. The
/// Prometheus name joins them with the namespace's separator (`vllm:` for
/// vLLM's families, `_` for the others), the OpenTelemetry name with a dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FamilyName {
    prometheus: &'static str,
    otel: &'static str,
}

/// A vLLM family's name: `vllm!("num_preemptions")` is `vllm:num_preemptions`
/// on `/metrics` and `vllm.num_preemptions` over OTLP.
macro_rules! vllm {
    ($rest:literal) => {
        $crate::catalog::FamilyName::new(concat!("vllm:", $rest), concat!("vllm.", $rest))
    };
}

/// One of this crate's own families: `vllm_otel_metrics_…` / `vllm_otel_metrics.…`.
macro_rules! own {
    ($rest:literal) => {
        $crate::catalog::FamilyName::new(
            concat!("vllm_otel_metrics_", $rest),
            concat!("vllm_otel_metrics.", $rest),
        )
    };
}

/// A process family, as Prometheus client libraries name it: `process_…` /
/// `process.…`.
macro_rules! process {
    ($rest:literal) => {
        $crate::catalog::FamilyName::new(concat!("process_", $rest), concat!("process.", $rest))
    };
}

impl FamilyName {
    /// Only the macros above call this, so that each name is written once.
    pub(crate) const fn new(prometheus: &'static str, otel: &'static str) -> FamilyName {
        FamilyName { prometheus, otel }
    }
}

mod bucket_families;
mod engine;
mod kv_connector;
mod reasons;
mod request;
mod scheduler;
pub mod semconv;
pub mod slo;
mod telemetry;

pub use bucket_families::*;
pub(crate) use engine::*;
pub(crate) use kv_connector::*;
pub use reasons::{EvictReason, RejectReason};
// What a host program reads back from a snapshot (the command line's run
// summaries do): the headline, the finished requests, two latencies.
pub(crate) use request::*;
pub use request::{
    E2E_REQUEST_LATENCY, REQUEST_NUM_PREEMPTIONS, REQUEST_SUCCESS, TIME_TO_FIRST_TOKEN,
};
pub(crate) use scheduler::*;
pub(crate) use telemetry::*;

/// How a family aggregates, which decides its instrument and exposition type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic sum (Prometheus `counter`, exposed with `_total`).
    Counter,
    /// Explicit-bucket histogram (`_bucket`/`_sum`/`_count`).
    Histogram,
    /// Last value (Prometheus `gauge`).
    Gauge,
}

impl Kind {
    /// The Prometheus `# TYPE` word of this kind.
    pub fn prometheus_type(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
            Kind::Gauge => "gauge",
        }
    }
}

/// How a family's sample values are written: vLLM's Rust frontend keeps counts as
/// integers and times and ratios as floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// Whole numbers, written without a decimal point.
    Integer,
    /// Floating point, written with a decimal point (`1.0`).
    Float,
}

/// Which token-histogram buckets to build: vLLM's Rust frontend's or its
/// Python logger's (`--token-buckets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenBuckets {
    /// The 1-2-5 series up to `max_model_len`, then `max_model_len` itself
    /// (vLLM's Rust frontend).
    #[default]
    Rust,
    /// The 1-2-5 series up to and including `max_model_len`, nothing
    /// appended (vLLM's Python `build_1_2_5_buckets(max_model_len)`).
    Python,
}

/// Bucket boundaries of a histogram family (upper bounds; `+Inf` is implied).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Buckets {
    /// Not a histogram.
    None,
    /// A fixed list.
    Fixed(&'static [f64]),
    /// The 1-2-5 series up to `max_model_len`, then `max_model_len` itself
    /// (vLLM's `build_1_2_5_buckets` plus the model length); with
    /// [`TokenBuckets::Python`], without the model length appended.
    Tokens,
}

impl Buckets {
    /// The boundaries for a model whose context is `max_model_len` tokens.
    ///
    /// ```
    /// use vllm_otel_metrics::catalog::Buckets;
    /// assert_eq!(Buckets::Tokens.boundaries(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 60.0]);
    /// assert_eq!(Buckets::Tokens.boundaries(50), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// ```
    pub fn boundaries(&self, max_model_len: u32) -> Vec<f64> {
        self.boundaries_with(max_model_len, TokenBuckets::Rust)
    }

    /// The boundaries for a model whose context is `max_model_len` tokens,
    /// token buckets built the `style` way.
    ///
    /// ```
    /// use vllm_otel_metrics::catalog::{Buckets, TokenBuckets};
    /// assert_eq!(Buckets::Tokens.boundaries_with(60, TokenBuckets::Python), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// assert_eq!(Buckets::Tokens.boundaries_with(50, TokenBuckets::Python), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// ```
    pub fn boundaries_with(&self, max_model_len: u32, style: TokenBuckets) -> Vec<f64> {
        match self {
            Buckets::None => Vec::new(),
            Buckets::Fixed(bounds) => bounds.to_vec(),
            Buckets::Tokens => token_buckets(max_model_len, style),
        }
    }
}

/// The 1-2-5 series up to `max_model_len`; with [`TokenBuckets::Rust`],
/// `max_model_len` appended unless it is already the last boundary.
fn token_buckets(max_model_len: u32, style: TokenBuckets) -> Vec<f64> {
    let max = u64::from(max_model_len.max(1));
    let mut bounds = Vec::new();
    let mut decade = 1u64;
    'series: loop {
        for mantissa in [1u64, 2, 5] {
            let bound = mantissa * decade;
            if bound > max {
                break 'series;
            }
            bounds.push(bound as f64);
        }
        decade *= 10;
    }
    if style == TokenBuckets::Rust && bounds.last() != Some(&(max as f64)) {
        bounds.push(max as f64);
    }
    bounds
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    /// The Prometheus family name as vLLM exposes it (`vllm:…`), without `_total`.
    pub vllm_name: &'static str,
    /// The OpenTelemetry instrument name (`vllm.…`).
    pub otel_name: &'static str,
    /// Aggregation kind.
    pub kind: Kind,
    /// UCUM unit of the instrument (never appended to Prometheus names).
    pub unit: &'static str,
    /// HELP text, exactly as exposed.
    pub help: &'static str,
    /// Label names, in exposition order.
    pub labels: &'static [&'static str],
    /// Histogram bucket boundaries.
    pub buckets: Buckets,
    /// How sample values are written.
    pub value_type: ValueType,
    /// The values of its label beyond `model_name` and `engine`, when the
    /// catalog fixes them (a series each per label set); empty when it has
    /// no such label or its values are open.
    pub label_values: &'static [&'static str],
}

impl MetricDef {
    /// The family with the values of its further label fixed.
    pub(crate) const fn with_label_values(self, label_values: &'static [&'static str]) -> Self {
        MetricDef {
            label_values,
            ..self
        }
    }
}

/// Label names shared by every vLLM family.
pub(crate) const ENGINE_LABELS: &[&str] = &["model_name", "engine"];
/// Labels of `vllm:request_success`.
pub(crate) const FINISHED_REASON_LABELS: &[&str] = &["model_name", "engine", "finished_reason"];
/// Values of its `finished_reason` label (vLLM's `FinishReason`, as
/// `str(reason)` writes it in `vllm/v1/engine/__init__.py`).
pub(crate) const FINISHED_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];
/// Labels of `vllm:num_preemptions_by_reason`.
pub(crate) const PREEMPTION_REASON_LABELS: &[&str] = &["model_name", "engine", "reason"];
/// Values of its `reason` label (vLLM PR #58037), in the order of
/// [`PreemptionReason::ALL`](crate::protocol::PreemptionReason::ALL).
pub(crate) const PREEMPTION_REASONS: [&str; 3] = ["kv_full", "priority", "prefix_cache_reset"];
/// Labels of `vllm:prompt_tokens_by_source`.
pub(crate) const SOURCE_LABELS: &[&str] = &["model_name", "engine", "source"];
/// Labels of the self-telemetry counters.
pub(crate) const REASON_LABELS: &[&str] = &["reason"];

/// Values of the `source` label, in the order prefill stats report them:
/// computed locally, hit in the local prefix cache, transferred from an external KV store.
pub(crate) const PROMPT_TOKEN_SOURCES: [&str; 3] =
    ["local_compute", "local_cache_hit", "external_kv_transfer"];

/// Preemptions per request.
pub const PREEMPTION_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];
/// The `n` request parameter.
pub(crate) const N_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// Tokens per engine step.
pub(crate) const ITERATION_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// Time to first token.
pub(crate) const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Inter-token latency and time per output token.
pub(crate) const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// Request phase latencies.
pub(crate) const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// The default `max_model_len` for the token buckets.
pub const DEFAULT_MAX_MODEL_LEN: u32 = 131_072;

pub(crate) const fn counter(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
) -> MetricDef {
    MetricDef {
        vllm_name: name.prometheus,
        otel_name: name.otel,
        kind: Kind::Counter,
        unit,
        help,
        labels,
        buckets: Buckets::None,
        value_type: ValueType::Integer,
        label_values: &[],
    }
}

pub(crate) const fn histogram(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
    buckets: Buckets,
) -> MetricDef {
    MetricDef {
        vllm_name: name.prometheus,
        otel_name: name.otel,
        kind: Kind::Histogram,
        unit,
        help,
        labels: ENGINE_LABELS,
        buckets,
        value_type: ValueType::Float,
        label_values: &[],
    }
}

pub(crate) const fn gauge(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
    value_type: ValueType,
) -> MetricDef {
    MetricDef {
        vllm_name: name.prometheus,
        otel_name: name.otel,
        kind: Kind::Gauge,
        unit,
        help,
        labels: ENGINE_LABELS,
        buckets: Buckets::None,
        value_type,
        label_values: &[],
    }
}

/// `head` then `tail`, in a constant (`N` must be their total length).
pub(crate) const fn concat<const H: usize, const T: usize, const N: usize>(
    head: [&'static MetricDef; H],
    tail: [&'static MetricDef; T],
) -> [&'static MetricDef; N] {
    assert!(H + T == N, "the lengths must add up");
    let mut out = [head[0]; N];
    let mut at = 0;
    while at < H {
        out[at] = head[at];
        at += 1;
    }
    while at < N {
        out[at] = tail[at - H];
        at += 1;
    }
    out
}

/// Every family, in exposition order: per-request tier, scheduler tier,
/// engine tier, self-telemetry, SLO (whose instruments exist only with
/// `--slo`).
pub fn all() -> impl Iterator<Item = &'static MetricDef> {
    PER_REQUEST
        .into_iter()
        .chain(SCHEDULER.iter().copied())
        .chain(ENGINE.iter().copied())
        .chain(KV_CONNECTOR.iter().copied())
        .chain(SELF_TELEMETRY)
        .chain(slo::ALL)
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
    use super::*;

    #[test]
    fn otel_name_is_the_prometheus_name_with_a_dot() {
        for def in all().chain(PROCESS) {
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
    fn token_buckets_follow_1_2_5_then_max_model_len() {
        let b = Buckets::Tokens.boundaries(DEFAULT_MAX_MODEL_LEN);
        assert_eq!(b.len(), 17);
        assert_eq!(&b[..6], &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(&b[14..], &[50000.0, 100000.0, 131072.0]);
        assert_eq!(Buckets::Tokens.boundaries(1), vec![1.0]);
        assert_eq!(Buckets::Tokens.boundaries(3), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn python_token_buckets_stop_at_max_model_len() {
        let python = |len| Buckets::Tokens.boundaries_with(len, TokenBuckets::Python);
        let b = python(DEFAULT_MAX_MODEL_LEN);
        assert_eq!(b.len(), 16);
        assert_eq!(&b[..6], &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(&b[13..], &[20000.0, 50000.0, 100000.0]);
        assert_eq!(python(1), vec![1.0]);
        assert_eq!(python(3), vec![1.0, 2.0]);
        assert_eq!(python(100), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(
            python(4096),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(
            Buckets::Fixed(N_BUCKETS).boundaries_with(3, TokenBuckets::Python),
            N_BUCKETS.to_vec()
        );
    }

    #[test]
    fn names_are_unique() {
        let defs: Vec<&MetricDef> = all().chain(semconv::ALL).collect();
        for name in [|d: &&MetricDef| d.vllm_name, |d: &&MetricDef| d.otel_name] {
            let mut names: Vec<_> = defs.iter().map(name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), defs.len());
        }
    }
}
