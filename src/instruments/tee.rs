//! One histogram recorded into two meter providers, for a family whose
//! readers need different aggregations.
//!
//! The SDK applies a provider's Views to every reader of it (the Rust SDK
//! has no per-reader aggregation selector), so an exponential histogram for
//! OTLP and vLLM's explicit buckets for the Prometheus bridge cannot come
//! from one provider. With `--otlp-histograms exponential` the latency
//! histograms are therefore instruments on two providers: the main one
//! (exponential, read by OTLP) and one whose only reader feeds the bridge
//! (explicit). [`TeeHistogram`] records each measurement into both, through
//! handles bound once per label set like every other handle. Each
//! measurement is aggregated twice, once per aggregation, as two readers
//! of one provider aggregate it twice; docs/PERFORMANCE.md has the cost.

use std::sync::Arc;

use opentelemetry::metrics::{BoundHistogram, BoundSyncInstrument, Histogram, SyncInstrument};
use opentelemetry::KeyValue;

/// Two histograms of one family, on two providers.
pub(super) struct TeeHistogram {
    first: Histogram<f64>,
    second: Histogram<f64>,
}

impl TeeHistogram {
    /// One API histogram recording into `first` and `second`.
    pub(super) fn histogram(first: Histogram<f64>, second: Histogram<f64>) -> Histogram<f64> {
        Histogram::new(Arc::new(TeeHistogram { first, second }))
    }
}

impl SyncInstrument<f64> for TeeHistogram {
    fn measure(&self, measurement: f64, attributes: &[KeyValue]) {
        self.first.record(measurement, attributes);
        self.second.record(measurement, attributes);
    }

    fn bind(&self, attributes: &[KeyValue]) -> Box<dyn BoundSyncInstrument<f64> + Send + Sync> {
        Box::new(BoundTee {
            first: self.first.bind(attributes),
            second: self.second.bind(attributes),
        })
    }
}

/// The two bound handles of one label set.
struct BoundTee {
    first: BoundHistogram<f64>,
    second: BoundHistogram<f64>,
}

impl BoundSyncInstrument<f64> for BoundTee {
    fn measure(&self, measurement: f64) {
        self.first.record(measurement);
        self.second.record(measurement);
    }
}
