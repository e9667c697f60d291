//! One aggregation for both sinks: a reader that hands the SDK pipeline it
//! is registered with to two readers, so that OTLP push and the Prometheus
//! bridge read the same aggregated state.
//!
//! The SDK aggregates every measurement once per registered reader (a
//! `Pipeline` each, and one `BoundMeasure` per pipeline in every bound
//! handle). Registered as one reader, [`SharedAggregation`] gets one
//! pipeline and passes it on to both of its readers: `opentelemetry-otlp`'s
//! exporter under the SDK's own `PeriodicReader` (interval, timeout,
//! shutdown and final export unchanged) and `opentelemetry-prometheus`'s
//! pull reader. A recording costs what it costs with one reader.
//!
//! Sharing needs one temporality: a cumulative reader cannot read a delta
//! aggregation (which the SDK resets at every collect). Readers that
//! disagree for any instrument kind are given back, each to be registered
//! on its own (and to aggregate on its own).
//!
//! ```
//! use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};
//! use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
//! use vllm_otel_metrics::export::shared::SharedAggregation;
//! use vllm_otel_metrics::instruments::Instruments;
//!
//! let exporter = InMemoryMetricExporter::default();
//! let (bridge, bridge_reader) = PrometheusBridge::builder().build();
//! let shared = SharedAggregation::try_new(PeriodicReader::builder(exporter.clone()).build(), bridge_reader)
//!     .expect("both cumulative");
//! let instruments = Instruments::builder().with_reader(shared).build();
//! instruments.label_set("llama", 0);
//! instruments.force_flush().unwrap();
//! // Both sinks see the series of the label set.
//! assert!(bridge.encode(Format::Text).contains("vllm:num_preemptions_total{model_name=\"llama\",engine=\"0\"} 0\n"));
//! assert!(!exporter.get_finished_metrics().unwrap().is_empty());
//! # instruments.shutdown().unwrap();
//! ```

use std::fmt;
use std::sync::Weak;
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, Pipeline, Temporality};

/// Every instrument kind, for comparing two readers' temporalities.
const INSTRUMENT_KINDS: [InstrumentKind; 7] = [
    InstrumentKind::Counter,
    InstrumentKind::UpDownCounter,
    InstrumentKind::Histogram,
    InstrumentKind::ObservableCounter,
    InstrumentKind::ObservableUpDownCounter,
    InstrumentKind::Gauge,
    InstrumentKind::ObservableGauge,
];

/// Two readers of one aggregation, registered with the meter provider as one
/// reader (see the [module docs](self)).
pub struct SharedAggregation {
    /// Decides the temporality, collects on [`MetricReader::collect`] and
    /// is flushed first (the push side: its final export is the outcome).
    primary: Box<dyn MetricReader>,
    /// Reads the same pipeline on its own schedule (the pull side).
    secondary: Box<dyn MetricReader>,
}

impl fmt::Debug for SharedAggregation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedAggregation")
            .field("primary", &self.primary)
            .field("secondary", &self.secondary)
            .finish()
    }
}

/// Whether `a` and `b` ask the SDK for the same temporality for every kind
/// of instrument, so that one aggregation serves both.
pub fn same_temporality(a: &dyn MetricReader, b: &dyn MetricReader) -> bool {
    INSTRUMENT_KINDS
        .iter()
        .all(|&kind| a.temporality(kind) == b.temporality(kind))
}

impl SharedAggregation {
    /// One aggregation read by `primary` and `secondary`. Gives both back
    /// when they disagree on a temporality ([`same_temporality`]).
    pub fn try_new<P: MetricReader, S: MetricReader>(
        primary: P,
        secondary: S,
    ) -> Result<SharedAggregation, (P, S)> {
        if !same_temporality(&primary, &secondary) {
            return Err((primary, secondary));
        }
        Ok(SharedAggregation {
            primary: Box::new(primary),
            secondary: Box::new(secondary),
        })
    }
}

impl MetricReader for SharedAggregation {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.primary.register_pipeline(Weak::clone(&pipeline));
        self.secondary.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.primary.collect(rm)
    }

    // Both readers are flushed and shut down; the outcome is the primary's
    // error when both fail.
    fn force_flush(&self) -> OTelSdkResult {
        let primary = self.primary.force_flush();
        primary.and(self.secondary.force_flush())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let primary = self.primary.shutdown_with_timeout(timeout);
        primary.and(self.secondary.shutdown_with_timeout(timeout))
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.primary.temporality(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::prometheus::{Format, PrometheusBridge};
    use crate::instruments::Instruments;
    use crate::tracker::{RequestMetrics, RequestParams};
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};

    fn attributes<'a>(kvs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> String {
        let mut kvs: Vec<String> = kvs.map(|kv| format!("{}={}", kv.key, kv.value)).collect();
        kvs.sort();
        kvs.join(",")
    }

    /// Every data point of a metric without its timestamps (the two
    /// providers start at different times): name, attributes and values.
    fn points_of(name: &str, data: &AggregatedMetrics) -> Vec<String> {
        match data {
            AggregatedMetrics::F64(data) => points(name, data),
            AggregatedMetrics::U64(data) => points(name, data),
            AggregatedMetrics::I64(data) => points(name, data),
        }
    }

    fn points<T: std::fmt::Debug + Copy>(name: &str, data: &MetricData<T>) -> Vec<String> {
        match data {
            MetricData::Histogram(h) => h
                .data_points()
                .map(|p| {
                    format!(
                        "{name}{{{}}} bounds={:?} counts={:?} count={} sum={:?}",
                        attributes(p.attributes()),
                        p.bounds().collect::<Vec<_>>(),
                        p.bucket_counts().collect::<Vec<_>>(),
                        p.count(),
                        p.sum()
                    )
                })
                .collect(),
            MetricData::Sum(s) => s
                .data_points()
                .map(|p| format!("{name}{{{}}} {:?}", attributes(p.attributes()), p.value()))
                .collect(),
            MetricData::Gauge(g) => g
                .data_points()
                .map(|p| format!("{name}{{{}}} {:?}", attributes(p.attributes()), p.value()))
                .collect(),
            MetricData::ExponentialHistogram(_) => vec![format!("{name}: exponential")],
        }
    }

    fn params() -> RequestParams {
        RequestParams {
            arrival_time: 100.0,
            prompt_len: 16,
            max_tokens: None,
            n: 1,
        }
    }

    #[test]
    fn a_delta_reader_and_the_bridge_are_given_back() {
        let delta = PeriodicReader::builder(
            opentelemetry_sdk::metrics::InMemoryMetricExporterBuilder::new()
                .with_temporality(Temporality::Delta)
                .build(),
        )
        .build();
        let (_bridge, reader) = PrometheusBridge::builder().build();
        assert!(SharedAggregation::try_new(delta, reader).is_err());
    }

    /// The shared pipeline gives each sink exactly what a reader of its own
    /// would: the exposition is the same text, the pushed data the same points.
    #[test]
    fn both_sinks_read_what_readers_of_their_own_read() {
        let shared_export = InMemoryMetricExporter::default();
        let (shared_bridge, shared_bridge_reader) = PrometheusBridge::builder().build();
        let shared = Instruments::builder()
            .with_reader(
                SharedAggregation::try_new(
                    PeriodicReader::builder(shared_export.clone()).build(),
                    shared_bridge_reader,
                )
                .unwrap(),
            )
            .build();
        let own_export = InMemoryMetricExporter::default();
        let (own_bridge, own_bridge_reader) = PrometheusBridge::builder().build();
        let own = Instruments::builder()
            .with_reader(PeriodicReader::builder(own_export.clone()).build())
            .with_reader(own_bridge_reader)
            .build();
        for instruments in [&shared, &own] {
            let mut request = RequestMetrics::start(instruments, "llama", 0, params());
            request.abort(101.5);
            instruments.force_flush().unwrap();
        }
        assert_eq!(
            shared_bridge.encode(Format::Text),
            own_bridge.encode(Format::Text)
        );
        let points = |export: &InMemoryMetricExporter| {
            let exported = export.get_finished_metrics().unwrap();
            let mut lines: Vec<String> = exported
                .last()
                .unwrap()
                .scope_metrics()
                .flat_map(|s| s.metrics())
                .flat_map(|m| points_of(m.name(), m.data()))
                .collect();
            lines.sort();
            lines
        };
        assert_eq!(points(&shared_export), points(&own_export));
        shared.shutdown().unwrap();
        own.shutdown().unwrap();
    }
}
