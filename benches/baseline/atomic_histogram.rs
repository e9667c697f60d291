//! Anchor: a lock-free histogram as vLLM's Rust frontend describes its own
//! (`rust/src/metrics/src/histogram.rs`): one atomic counter per bucket and
//! an atomic sum (two atomic operations per observation; the count is the
//! buckets' total when encoded), because `prometheus-client`'s histogram "takes an exclusive
//! lock for every observation". Written here from that description; it plugs
//! into `prometheus-client` families, so the `vllm_rust_atomic` variant is
//! the `prometheus_client` tracker with only the histogram changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

use crate::prometheus_client_tracker::TrackerHistogram;

/// Buckets, count and sum as atomics; clones share them.
#[derive(Clone, Debug)]
pub(crate) struct AtomicHistogram(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Upper bounds, ascending; the last bucket (`+Inf`) has none.
    bounds: Vec<f64>,
    /// One counter per bound, plus `+Inf` (as `f64::MAX`, as `prometheus-client`
    /// encodes it): observations in that bucket alone.
    buckets: Vec<AtomicU64>,
    /// The sum's `f64` bits, updated by compare-and-swap.
    sum_bits: AtomicU64,
}

impl TrackerHistogram for AtomicHistogram {
    fn with_bounds(bounds: &[f64]) -> Self {
        AtomicHistogram(Arc::new(Inner {
            bounds: bounds.to_vec(),
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }))
    }

    #[inline]
    fn observe(&self, value: f64) {
        let inner = &*self.0;
        let bucket = inner.bounds.partition_point(|bound| *bound < value);
        inner.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let mut current = inner.sum_bits.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(current) + value).to_bits();
            match inner.sum_bits.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = &*self.0;
        let buckets: Vec<(f64, u64)> = inner
            .bounds
            .iter()
            .copied()
            .chain([f64::MAX])
            .zip(inner.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        let sum = f64::from_bits(inner.sum_bits.load(Ordering::Relaxed));
        // The count is the buckets' total: no third atomic per observation.
        let count = buckets.iter().map(|(_, n)| n).sum();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
