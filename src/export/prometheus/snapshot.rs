//! A point-in-time copy of every family, with vLLM names and label order.
//!
//! The data model the encoders write; it knows nothing of wire formats.

use std::borrow::Cow;

use crate::catalog::{Kind, ValueType};
use crate::instruments::exemplars::Exemplar;

/// One family: its metadata and its series in exposition order.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Family name as exposed (vLLM's, for catalog families), without `_total`.
    pub name: Cow<'static, str>,
    /// HELP text.
    pub help: Cow<'static, str>,
    /// Kind.
    pub kind: Kind,
    /// How values are written.
    pub value_type: ValueType,
    /// Series, sorted by label values.
    pub series: Vec<Series>,
}

/// One label set of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Label pairs, in exposition order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: Value,
    /// Exemplars, written in OpenMetrics only: a histogram's one per bucket
    /// (`+Inf` last), a counter's one; empty when it has none.
    pub exemplars: Vec<Option<Exemplar>>,
}

/// The value of a series.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Counter or gauge.
    Scalar(f64),
    /// Histogram with cumulative bucket counts; the `+Inf` bucket is `count`.
    Histogram {
        /// `(upper bound, cumulative count)` of every finite boundary.
        buckets: Vec<(f64, u64)>,
        /// Sum of observations.
        sum: f64,
        /// Number of observations.
        count: u64,
    },
}
