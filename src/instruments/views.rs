//! The OpenTelemetry SDK Views the catalog's instruments need.
//!
//! One View per catalog family, matched by instrument name: histograms get
//! the catalog's explicit bucket boundaries (`record_min_max: false`, as
//! vLLM's histograms have no min or max), every vLLM family a cardinality
//! limit sized for [`InstrumentsConfig::max_label_sets`] label sets, and with
//! [`NameStyle::Prometheus`] the stream takes vLLM's own name. The token
//! histograms' buckets end as [`InstrumentsConfig::token_buckets`] says; a
//! bucket family in [`InstrumentsConfig::bucket_overrides`] takes the
//! boundaries given there, and with [`OtlpHistograms::Exponential`] the
//! latency histograms aggregate into base-2 exponential histograms instead.
//! A host program that brings its own `SdkMeterProvider` gets them
//! registered by [`Instruments::install`](super::Instruments::install).

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, MeterProviderBuilder, SdkMeterProvider, Stream,
};

use crate::catalog::{self, Kind, MetricDef};

use super::buckets::OtlpHistograms;
use super::config::{InstrumentsConfig, NameStyle};
use super::meters::scope;

/// The Views of every catalog family, for
/// [`MeterProviderBuilder::with_view`](opentelemetry_sdk::metrics::MeterProviderBuilder::with_view).
/// Instruments outside the catalog are left alone (the closure returns
/// `None`). Public but hidden, for the benchmarks only: a host registers them
/// through [`Instruments::install`](super::Instruments::install), which
/// builds the instruments from the same config.
pub fn views(
    config: InstrumentsConfig,
) -> impl Fn(&Instrument) -> Option<Stream> + Send + Sync + 'static {
    move |instrument: &Instrument| {
        if let Some(def) = catalog::by_otel_name(instrument.name()) {
            return stream(def, &config);
        }
        semconv_stream(catalog::semconv::by_otel_name(instrument.name())?, &config)
    }
}

/// The cardinality limit of a vLLM family: every series of `max_label_sets`
/// label sets. The label sets beyond go to the overflow series
/// (`otel.metric.overflow=true`), which the SDK does not count against the
/// limit; a family with a label besides `model_name` and `engine` keeps that
/// label on its overflow series, so it has room for one more label set.
pub(super) fn cardinality_limit(def: &MetricDef, max_label_sets: usize) -> usize {
    match catalog::series_per_label_set(def) {
        1 => max_label_sets,
        n => n * (max_label_sets + 1),
    }
}

fn stream(def: &'static MetricDef, config: &InstrumentsConfig) -> Option<Stream> {
    let mut stream = Stream::builder();
    if def.labels.starts_with(catalog::labels::ENGINE_LABELS) {
        stream = stream.with_cardinality_limit(cardinality_limit(def, config.max_label_sets));
    } else if def.labels == catalog::engine::CACHE_CONFIG_LABELS
        || def.labels == catalog::engine::LORA_INFO_LABELS.as_slice()
    {
        // Label sets of their own (a configuration, a set of adapters):
        // as many as the vLLM families have `(model_name, engine)` sets.
        stream = stream.with_cardinality_limit(config.max_label_sets);
    }
    if def.kind == Kind::Histogram {
        stream = stream.with_aggregation(histogram_aggregation(def, config));
    }
    if config.name_style == NameStyle::Prometheus {
        stream = stream.with_name(def.vllm_name);
    }
    stream.build().ok()
}

/// A catalog histogram's aggregation: exponential for a latency histogram
/// when the config asks for it, else explicit buckets, overridden or the
/// catalog's.
fn histogram_aggregation(def: &MetricDef, config: &InstrumentsConfig) -> Aggregation {
    if let OtlpHistograms::Exponential(exponential) = config.otlp_histograms {
        if catalog::is_latency_histogram(def) {
            return Aggregation::Base2ExponentialHistogram {
                max_size: exponential.max_size,
                max_scale: exponential.max_scale,
                record_min_max: false,
            };
        }
    }
    Aggregation::ExplicitBucketHistogram {
        boundaries: explicit_boundaries(def, config),
        record_min_max: false,
    }
}

/// A catalog histogram's explicit bucket bounds for `config`: overridden,
/// or the catalog's (what `/metrics` shows, whatever OTLP gets).
pub(super) fn explicit_boundaries(def: &MetricDef, config: &InstrumentsConfig) -> Vec<f64> {
    match config.bucket_overrides.boundaries(def) {
        Some(boundaries) => boundaries.to_vec(),
        None => def
            .buckets
            .boundaries_with(config.max_model_len, config.token_buckets),
    }
}

/// A semantic-convention stream: the advised buckets, and room for every
/// operation and outcome of each label set. Its name stays the
/// conventions' whatever the [`NameStyle`]: that name is its point.
fn semconv_stream(def: &'static MetricDef, config: &InstrumentsConfig) -> Option<Stream> {
    // Per label set: each operation, succeeded, aborted or failed.
    let per_label_set = crate::protocol::GenAiOperation::ALL.len() * 3;
    Stream::builder()
        .with_cardinality_limit(per_label_set * config.max_label_sets)
        .with_aggregation(Aggregation::ExplicitBucketHistogram {
            boundaries: def.buckets.boundaries(config.max_model_len),
            record_min_max: true,
        })
        .build()
        .ok()
}

/// The provider `builder` makes with the catalog's Views for `config`, and
/// the crate's meter on it: where the Views and the instruments' config meet.
pub(super) fn with_views(
    builder: MeterProviderBuilder,
    config: InstrumentsConfig,
) -> (SdkMeterProvider, Meter) {
    let provider = builder.with_view(views(config)).build();
    let meter = provider.meter_with_scope(scope());
    (provider, meter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_gets_a_view() {
        for def in catalog::all() {
            assert!(
                stream(def, &InstrumentsConfig::default()).is_some(),
                "{}",
                def.vllm_name
            );
        }
    }

    #[test]
    fn limits_leave_room_for_the_overflow_label_set() {
        assert_eq!(cardinality_limit(&catalog::REQUEST_NUM_PREEMPTIONS, 10), 10);
        assert_eq!(cardinality_limit(&catalog::REQUEST_SUCCESS, 10), 55);
        assert_eq!(
            cardinality_limit(&catalog::request::PROMPT_TOKENS_BY_SOURCE, 10),
            33
        );
        assert_eq!(
            cardinality_limit(&catalog::engine::PROMPT_TOKENS_CACHED_BY_SOURCE, 10),
            55
        );
        assert_eq!(
            cardinality_limit(
                &catalog::engine::SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS,
                10
            ),
            176
        );
    }
}
