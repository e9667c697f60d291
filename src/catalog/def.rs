//! What a family is: its name, kind, unit, labels and buckets (the
//! columns of every catalog row), and the constructors the tiers' rows use.

use super::labels::ENGINE_LABELS;

/// A family's name as written once: its namespace and the rest. The
/// Prometheus name joins them with the namespace's separator (`vllm:` for
/// vLLM's families, `_` for the others), the OpenTelemetry name with a dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FamilyName {
    prometheus: &'static str,
    otel: &'static str,
    by_class: Option<&'static str>,
}

impl FamilyName {
    /// Only the catalog's naming macros (`vllm!`, `own!`, `process!`) call
    /// this, so that each name is written once.
    pub(crate) const fn new(prometheus: &'static str, otel: &'static str) -> FamilyName {
        FamilyName {
            prometheus,
            otel,
            by_class: None,
        }
    }

    /// With the name its series by class take on `/metrics` (vLLM's
    /// families only: this crate's own carry the class labels themselves).
    pub(crate) const fn with_by_class(self, by_class: &'static str) -> FamilyName {
        FamilyName {
            by_class: Some(by_class),
            ..self
        }
    }
}

/// How a family aggregates, which decides its instrument and exposition type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic sum (Prometheus `counter`, exposed with `_total`).
    Counter,
    /// Explicit-bucket histogram (`_bucket`/`_sum`/`_count`).
    Histogram,
    /// Last value (Prometheus `gauge`).
    Gauge,
}

impl Kind {
    /// The Prometheus `# TYPE` word of this kind.
    pub fn prometheus_type(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
            Kind::Gauge => "gauge",
        }
    }
}

/// How a family's sample values are written: vLLM's Rust frontend keeps counts as
/// integers and times and ratios as floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// Whole numbers, written without a decimal point.
    Integer,
    /// Floating point, written with a decimal point (`1.0`).
    Float,
}

/// Which token-histogram buckets to build: vLLM's Rust frontend's or its
/// Python logger's (`--token-buckets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenBuckets {
    /// The 1-2-5 series up to `max_model_len`, then `max_model_len` itself
    /// (vLLM's Rust frontend).
    #[default]
    Rust,
    /// The 1-2-5 series up to and including `max_model_len`, nothing
    /// appended (vLLM's Python `build_1_2_5_buckets(max_model_len)`).
    Python,
}

/// Bucket boundaries of a histogram family (upper bounds; `+Inf` is implied).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Buckets {
    /// Not a histogram.
    None,
    /// A fixed list.
    Fixed(&'static [f64]),
    /// The 1-2-5 series up to `max_model_len`, then `max_model_len` itself
    /// (vLLM's `build_1_2_5_buckets` plus the model length); with
    /// [`TokenBuckets::Python`], without the model length appended.
    Tokens,
}

impl Buckets {
    /// The boundaries for a model whose context is `max_model_len` tokens.
    ///
    /// ```
    /// use vllm_otel_metrics::catalog::Buckets;
    /// assert_eq!(Buckets::Tokens.boundaries(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 60.0]);
    /// assert_eq!(Buckets::Tokens.boundaries(50), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// ```
    pub fn boundaries(&self, max_model_len: u32) -> Vec<f64> {
        self.boundaries_with(max_model_len, TokenBuckets::Rust)
    }

    /// The boundaries for a model whose context is `max_model_len` tokens,
    /// token buckets built the `style` way.
    ///
    /// ```
    /// use vllm_otel_metrics::catalog::{Buckets, TokenBuckets};
    /// assert_eq!(Buckets::Tokens.boundaries_with(60, TokenBuckets::Python), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// assert_eq!(Buckets::Tokens.boundaries_with(50, TokenBuckets::Python), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// ```
    pub fn boundaries_with(&self, max_model_len: u32, style: TokenBuckets) -> Vec<f64> {
        match self {
            Buckets::None => Vec::new(),
            Buckets::Fixed(bounds) => bounds.to_vec(),
            Buckets::Tokens => token_buckets(max_model_len, style),
        }
    }
}

/// The 1-2-5 series up to `max_model_len`; with [`TokenBuckets::Rust`],
/// `max_model_len` appended unless it is already the last boundary.
fn token_buckets(max_model_len: u32, style: TokenBuckets) -> Vec<f64> {
    let max = u64::from(max_model_len.max(1));
    let mut bounds = Vec::new();
    let mut decade = 1u64;
    'series: loop {
        for mantissa in [1u64, 2, 5] {
            let bound = mantissa * decade;
            if bound > max {
                break 'series;
            }
            bounds.push(bound as f64);
        }
        decade *= 10;
    }
    if style == TokenBuckets::Rust && bounds.last() != Some(&(max as f64)) {
        bounds.push(max as f64);
    }
    bounds
}

/// The default `max_model_len` for the token buckets.
pub const DEFAULT_MAX_MODEL_LEN: u32 = 131_072;

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    /// The Prometheus family name as vLLM exposes it (`vllm:…`), without `_total`.
    pub vllm_name: &'static str,
    /// The OpenTelemetry instrument name (`vllm.…`).
    pub otel_name: &'static str,
    /// For vLLM's families, the name of the family that holds its series
    /// by class on `/metrics` with `--attribute` (`vllm_class:…`, without
    /// `_total`): the family itself keeps vLLM's labels alone there, the
    /// class labels summed away. `None` for this crate's own families,
    /// which carry the class labels themselves.
    pub by_class_name: Option<&'static str>,
    /// Aggregation kind.
    pub kind: Kind,
    /// UCUM unit of the instrument (never appended to Prometheus names).
    pub unit: &'static str,
    /// HELP text, exactly as exposed.
    pub help: &'static str,
    /// Label names, in exposition order.
    pub labels: &'static [&'static str],
    /// Histogram bucket boundaries.
    pub buckets: Buckets,
    /// How sample values are written.
    pub value_type: ValueType,
    /// The key of its bucket family (`--custom-histogram-buckets`); empty
    /// when it is not a histogram.
    pub bucket_family: &'static str,
    /// The values of its label beyond `model_name` and `engine`, when the
    /// catalog fixes them (a series each per label set); empty when it has
    /// no such label or its values are open.
    pub label_values: &'static [&'static str],
}

impl MetricDef {
    /// The family with the values of its further label fixed.
    pub(crate) const fn with_label_values(self, label_values: &'static [&'static str]) -> Self {
        MetricDef {
            label_values,
            ..self
        }
    }
}

/// Histograms that share one list of bucket boundaries, under the key
/// `--custom-histogram-buckets` names them by: a column of each histogram
/// (`histogram(…, family)`), so a family's members are whichever histograms
/// name it ([`crate::catalog::bucket_families`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketFamily {
    /// The key of `--custom-histogram-buckets`.
    pub key: &'static str,
    /// Its boundaries.
    pub buckets: Buckets,
}

impl BucketFamily {
    /// A family of a fixed list of boundaries.
    pub(crate) const fn fixed(key: &'static str, bounds: &'static [f64]) -> BucketFamily {
        BucketFamily {
            key,
            buckets: Buckets::Fixed(bounds),
        }
    }
}

/// A counter.
pub(crate) const fn counter(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
) -> MetricDef {
    MetricDef {
        vllm_name: name.prometheus,
        otel_name: name.otel,
        by_class_name: name.by_class,
        kind: Kind::Counter,
        unit,
        help,
        labels,
        buckets: Buckets::None,
        value_type: ValueType::Integer,
        label_values: &[],
        bucket_family: "",
    }
}

/// A histogram of `family`'s buckets.
pub(crate) const fn histogram(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
    family: BucketFamily,
) -> MetricDef {
    MetricDef {
        vllm_name: name.prometheus,
        otel_name: name.otel,
        by_class_name: name.by_class,
        kind: Kind::Histogram,
        unit,
        help,
        labels: ENGINE_LABELS,
        buckets: family.buckets,
        value_type: ValueType::Float,
        label_values: &[],
        bucket_family: family.key,
    }
}

/// A gauge.
pub(crate) const fn gauge(
    name: FamilyName,
    unit: &'static str,
    help: &'static str,
    value_type: ValueType,
) -> MetricDef {
    MetricDef {
        vllm_name: name.prometheus,
        otel_name: name.otel,
        by_class_name: name.by_class,
        kind: Kind::Gauge,
        unit,
        help,
        labels: ENGINE_LABELS,
        buckets: Buckets::None,
        value_type,
        label_values: &[],
        bucket_family: "",
    }
}

#[cfg(test)]
mod tests {
    use super::DEFAULT_MAX_MODEL_LEN;
    use super::{Buckets, TokenBuckets};

    #[test]
    fn token_buckets_follow_1_2_5_then_max_model_len() {
        let b = Buckets::Tokens.boundaries(DEFAULT_MAX_MODEL_LEN);
        assert_eq!(b.len(), 17);
        assert_eq!(&b[..6], &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(&b[14..], &[50000.0, 100000.0, 131072.0]);
        assert_eq!(Buckets::Tokens.boundaries(1), vec![1.0]);
        assert_eq!(Buckets::Tokens.boundaries(3), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn python_token_buckets_stop_at_max_model_len() {
        let python = |len| Buckets::Tokens.boundaries_with(len, TokenBuckets::Python);
        let b = python(DEFAULT_MAX_MODEL_LEN);
        assert_eq!(b.len(), 16);
        assert_eq!(&b[..6], &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(&b[13..], &[20000.0, 50000.0, 100000.0]);
        assert_eq!(python(1), vec![1.0]);
        assert_eq!(python(3), vec![1.0, 2.0]);
        assert_eq!(python(100), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(
            python(4096),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(
            Buckets::Fixed(&[1.0, 2.0, 5.0]).boundaries_with(3, TokenBuckets::Python),
            vec![1.0, 2.0, 5.0]
        );
    }
}
