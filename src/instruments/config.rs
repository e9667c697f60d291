//! What [`Instruments`](super::Instruments) are built for
//! ([`InstrumentsConfig`]).

use std::sync::Arc;

use super::attribution::Attribution;
use super::buckets::{BucketOverrides, OtlpHistograms};
use super::semconv::Semconv;
use super::slo::Slo;
use crate::catalog::{TokenBuckets, DEFAULT_MAX_MODEL_LEN};

/// Default number of `(model_name, engine)` label sets kept apart before
/// further ones share the overflow series.
pub const DEFAULT_MAX_LABEL_SETS: usize = 2048;

/// Which names the streams carry on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameStyle {
    /// OpenTelemetry names (`vllm.request_num_preemptions`).
    #[default]
    Otel,
    /// vLLM's Prometheus names (`vllm:request_num_preemptions`), set by the
    /// Views (the SDK does not allow `:` in instrument names).
    Prometheus,
}

/// What the Views and the instruments are built for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstrumentsConfig {
    /// The model context length that bounds the token histograms' buckets.
    pub max_model_len: u32,
    /// How many `(model_name, engine)` label sets are kept apart; later ones
    /// share one overflow series per family (`otel.metric.overflow=true`,
    /// plus `finished_reason` or `source` where the family has it).
    pub max_label_sets: usize,
    /// Names on the wire.
    pub name_style: NameStyle,
    /// How the token histograms' buckets end: with `max_model_len`
    /// appended (vLLM's Rust frontend) or not (its Python logger).
    pub token_buckets: TokenBuckets,
    /// Which semantic-convention streams are recorded besides vLLM's
    /// families (`--semconv`).
    pub semconv: Semconv,
    /// Bucket boundaries that replace the catalog's
    /// (`--custom-histogram-buckets`).
    pub bucket_overrides: Arc<BucketOverrides>,
    /// How the latency histograms aggregate (`--otlp-histograms`): with
    /// [`OtlpHistograms::Exponential`], exponentially for every reader of
    /// the provider except the explicit-bucket reader
    /// ([`InstrumentsBuilder::with_explicit_histogram_reader`](super::InstrumentsBuilder::with_explicit_histogram_reader)).
    pub otlp_histograms: OtlpHistograms,
    /// The latency SLO requests are judged against (`--slo`); none: no SLO
    /// family is created and nothing is judged.
    pub slo: Option<Arc<Slo>>,
    /// Whether each label set keeps exemplars of its per-request families
    /// (`--exemplars`; [`super::exemplars`]).
    pub exemplars: bool,
    /// The classes the per-request families are labelled with besides
    /// `model_name` and `engine` (`--attribute`; [`super::attribution`]);
    /// none: no label added, every series as vLLM's.
    pub attribution: Option<Attribution>,
}

impl Default for InstrumentsConfig {
    fn default() -> Self {
        InstrumentsConfig {
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            max_label_sets: DEFAULT_MAX_LABEL_SETS,
            name_style: NameStyle::Otel,
            token_buckets: TokenBuckets::Rust,
            semconv: Semconv::None,
            bucket_overrides: Arc::default(),
            otlp_histograms: OtlpHistograms::Explicit,
            slo: None,
            exemplars: false,
            attribution: None,
        }
    }
}
