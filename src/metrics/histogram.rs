//! An explicit-bucket histogram (OTel `Histogram`, Prometheus `histogram`).

use std::sync::{Arc, Mutex, PoisonError};

use super::data::{HistogramValue, Value};
use super::family::Aggregation;

/// Explicit-bucket histogram of one series: per-bucket counts, count and sum.
///
/// Buckets are upper-inclusive (`value <= bound`, Prometheus' `le`), the
/// last one open-ended. Non-finite values are ignored, as OpenTelemetry SDKs
/// do, so one bad measurement cannot turn `sum` into NaN for good.
///
/// ```
/// use vllm_otel_metrics::metrics::Histogram;
/// let ttft = Histogram::new(vec![0.5, 1.0]);
/// for v in [0.25, 0.5, 0.75, 4.0, f64::NAN] {
///     ttft.record(v);
/// }
/// let h = ttft.snapshot();
/// assert_eq!((h.bucket_counts, h.sum, h.count), (vec![2, 1, 1], 5.5, 4));
/// ```
#[derive(Debug)]
pub struct Histogram {
    bounds: Arc<[f64]>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    bucket_counts: Box<[u64]>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// A histogram with these (increasing, finite) upper bounds.
    pub fn new(bounds: impl Into<Arc<[f64]>>) -> Self {
        let bounds = bounds.into();
        let buckets = bounds.len() + 1;
        Histogram {
            bounds,
            state: Mutex::new(State {
                bucket_counts: vec![0; buckets].into_boxed_slice(),
                sum: 0.0,
                count: 0,
            }),
        }
    }

    /// Records one observation.
    #[inline]
    pub fn record(&self, value: f64) {
        if !value.is_finite() {
            return;
        }
        // A linear scan, not a binary search: vLLM's lists have at most a few
        // dozen bounds and most observations land in the first buckets, where
        // the scan stops after a couple of well-predicted comparisons.
        let index = self
            .bounds
            .iter()
            .position(|&bound| value <= bound)
            .unwrap_or(self.bounds.len());
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.bucket_counts[index] += 1;
        state.count += 1;
        state.sum += value;
    }

    /// The upper bounds.
    pub fn bounds(&self) -> &[f64] {
        &self.bounds
    }

    /// A consistent copy of the counts and sum.
    pub fn snapshot(&self) -> HistogramValue {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        HistogramValue {
            bucket_counts: state.bucket_counts.to_vec(),
            sum: state.sum,
            count: state.count,
        }
    }
}

impl Aggregation for Histogram {
    fn create(bounds: &[f64]) -> Self {
        Histogram::new(bounds)
    }

    fn value(&self) -> Option<Value> {
        Some(Value::Histogram(self.snapshot()))
    }
}
