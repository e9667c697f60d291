//! What a collection yields: every family's series and their values at one
//! instant, in the OpenTelemetry data model. Readers turn it into wire formats.

use std::sync::Arc;

use crate::catalog::MetricDef;

use super::family::Labels;

/// One family's series.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// The catalog entry: names, kind, unit, HELP, label order.
    pub def: &'static MetricDef,
    /// Histogram upper bounds (empty for other kinds).
    pub bounds: Arc<[f64]>,
    /// The series that have a value, in no particular order.
    pub points: Vec<DataPoint>,
}

/// One series' labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct DataPoint {
    /// Label pairs in the family's label order.
    pub labels: Labels,
    /// The cumulative value (counters, histograms) or last value (gauges).
    pub value: Value,
}

/// A series' value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Monotonic cumulative sum.
    Counter(u64),
    /// Last value set.
    Gauge(f64),
    /// Cumulative explicit-bucket histogram.
    Histogram(HistogramValue),
}

/// Cumulative state of one histogram series.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramValue {
    /// Count per bucket (not cumulative); one more than there are bounds.
    pub bucket_counts: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}
