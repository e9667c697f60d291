//! A monotonic sum of whole numbers (OTel `Sum`, Prometheus `counter`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::data::Value;
use super::family::{Aggregation, Series};

/// A monotonic counter: one relaxed atomic add per increment.
///
/// ```
/// use vllm_otel_metrics::metrics::Counter;
/// let tokens = Counter::default();
/// tokens.add(3);
/// tokens.add(4);
/// assert_eq!(tokens.get(), 7);
/// ```
#[derive(Debug, Default)]
pub struct Counter {
    value: AtomicU64,
}

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    /// The current total.
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

impl Series for Counter {
    fn value(&self) -> Option<Value> {
        Some(Value::Counter(self.get()))
    }
}

impl Aggregation for Counter {
    fn create(_bounds: &[f64]) -> Self {
        Counter::default()
    }
}
