//! The last value set (OTel `Gauge`, Prometheus `gauge`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::data::Value;
use super::family::{Aggregation, Series};

/// Bit pattern of a gauge never set: a NaN payload `f64::to_bits` of a set
/// value cannot have, since `set` stores canonical NaNs only.
const UNSET: u64 = u64::MAX;

/// A gauge: the last value set, or nothing until the first set (a gauge
/// series is exported from its first measurement on, as with OTel gauges).
///
/// ```
/// use vllm_otel_metrics::metrics::Gauge;
/// let usage = Gauge::default();
/// assert_eq!(usage.get(), None);
/// usage.set(0.25);
/// assert_eq!(usage.get(), Some(0.25));
/// ```
#[derive(Debug)]
pub struct Gauge {
    bits: AtomicU64,
}

impl Default for Gauge {
    fn default() -> Self {
        Gauge {
            bits: AtomicU64::new(UNSET),
        }
    }
}

impl Gauge {
    /// Replaces the value.
    #[inline]
    pub fn set(&self, value: f64) {
        let value = if value.is_nan() { f64::NAN } else { value };
        self.bits.store(value.to_bits(), Ordering::Relaxed);
    }

    /// The last value set.
    pub fn get(&self) -> Option<f64> {
        match self.bits.load(Ordering::Relaxed) {
            UNSET => None,
            bits => Some(f64::from_bits(bits)),
        }
    }
}

impl Series for Gauge {
    fn value(&self) -> Option<Value> {
        self.get().map(Value::Gauge)
    }
}

impl Aggregation for Gauge {
    fn create(_bounds: &[f64]) -> Self {
        Gauge::default()
    }
}
