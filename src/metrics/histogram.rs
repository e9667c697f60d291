//! An explicit-bucket histogram (OTel `Histogram`, Prometheus `histogram`).

use std::sync::Arc;

use super::data::{HistogramValue, Value};
use super::family::{Aggregation, Series};
use super::group::Group;

/// The bucket of `value`: the first whose upper bound is `>= value`
/// (Prometheus' `le`), or the open-ended last one.
///
/// A linear scan, not a binary search: vLLM's lists have at most a few dozen
/// bounds and most observations land in the first buckets, where the scan
/// stops after a couple of well-predicted comparisons.
///
/// ```
/// use vllm_otel_metrics::metrics::bucket_index;
/// assert_eq!([0.5, 1.0, 1.5].map(|v| bucket_index(&[1.0], v)), [0, 0, 1]);
/// ```
#[inline]
pub fn bucket_index(bounds: &[f64], value: f64) -> usize {
    bounds
        .iter()
        .position(|&bound| value <= bound)
        .unwrap_or(bounds.len())
}

/// The counts and sum of one histogram series, kept in a [`Group`]: alone in
/// a [`Histogram`], or with other series updated at the same time.
///
/// ```
/// use vllm_otel_metrics::metrics::{bucket_index, HistogramState};
/// let bounds = [0.5, 1.0];
/// let mut state = HistogramState::new(bounds.len());
/// for v in [0.25, 4.0] {
///     state.record_at(bucket_index(&bounds, v), v);
/// }
/// assert_eq!(state.snapshot().bucket_counts, vec![1, 0, 1]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramState {
    bucket_counts: Box<[u64]>,
    sum: f64,
    count: u64,
}

impl HistogramState {
    /// Empty, for a histogram with `bounds` upper bounds.
    pub fn new(bounds: usize) -> Self {
        HistogramState {
            bucket_counts: vec![0; bounds + 1].into_boxed_slice(),
            sum: 0.0,
            count: 0,
        }
    }

    /// Counts `value` in bucket `index` (from [`bucket_index`]). The caller
    /// drops non-finite values first, as [`Histogram::record`] does.
    #[inline]
    pub fn record_at(&mut self, index: usize, value: f64) {
        self.bucket_counts[index] += 1;
        self.count += 1;
        self.sum += value;
    }

    /// A copy of the counts and sum.
    pub fn snapshot(&self) -> HistogramValue {
        HistogramValue {
            bucket_counts: self.bucket_counts.to_vec(),
            sum: self.sum,
            count: self.count,
        }
    }
}

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
    state: Group<HistogramState>,
}

impl Histogram {
    /// A histogram with these (increasing, finite) upper bounds.
    pub fn new(bounds: impl Into<Arc<[f64]>>) -> Self {
        let bounds = bounds.into();
        debug_assert!(
            bounds.iter().all(|b| b.is_finite()) && bounds.windows(2).all(|w| w[0] < w[1]),
            "bucket bounds must be finite and increasing: {bounds:?}"
        );
        Histogram {
            state: Group::new(HistogramState::new(bounds.len())),
            bounds,
        }
    }

    /// Records one observation.
    #[inline]
    pub fn record(&self, value: f64) {
        if !value.is_finite() {
            return;
        }
        let index = bucket_index(&self.bounds, value);
        self.state.lock().record_at(index, value);
    }

    /// A consistent copy of the counts and sum.
    pub fn snapshot(&self) -> HistogramValue {
        self.state.lock().snapshot()
    }
}

impl Series for Histogram {
    fn value(&self) -> Option<Value> {
        Some(Value::Histogram(self.snapshot()))
    }
}

impl Aggregation for Histogram {
    fn create(bounds: &[f64]) -> Self {
        Histogram::new(bounds)
    }
}
