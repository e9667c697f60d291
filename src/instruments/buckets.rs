//! What a histogram's Views aggregate into besides the catalog's buckets:
//! bucket overrides per bucket family (`--custom-histogram-buckets`) and
//! base-2 exponential histograms for the latency families over OTLP
//! (`--otlp-histograms exponential`).
//!
//! ```
//! use vllm_otel_metrics::catalog;
//! use vllm_otel_metrics::instruments::BucketOverrides;
//!
//! let overrides = BucketOverrides::parse(r#"{"request_latency": [0.05, 0.1, 0.5, 1, 5]}"#).unwrap();
//! assert_eq!(
//!     overrides.boundaries(catalog::by_vllm_name("vllm:request_queue_time_seconds").unwrap()),
//!     Some(&[0.05, 0.1, 0.5, 1.0, 5.0][..])
//! );
//! // The headline histogram keeps its buckets unless named itself.
//! assert_eq!(overrides.boundaries(&catalog::REQUEST_NUM_PREEMPTIONS), None);
//!
//! let error = BucketOverrides::parse(r#"{"request_latency": [1, 0.5]}"#).unwrap_err();
//! assert_eq!(
//!     error.to_string(),
//!     r#""request_latency": boundaries must be strictly increasing (0.5 follows 1)"#
//! );
//! ```

use std::collections::BTreeMap;
use std::fmt;

use crate::catalog::{self, Kind, MetricDef};

/// Bucket boundaries that replace the catalog's, by bucket family
/// ([`catalog::bucket_families`]) or by a single histogram's vLLM name. A
/// name wins over its family's key. Every list is non-empty, finite and
/// strictly increasing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BucketOverrides {
    /// By the catalog family's OpenTelemetry name.
    by_family: BTreeMap<&'static str, Vec<f64>>,
}

/// Why a `--custom-histogram-buckets` value cannot be used. Its text names
/// the offending key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BucketOverrideError(String);

impl BucketOverrides {
    /// Parses the JSON object of vLLM PR #48867's `--custom-histogram-buckets`:
    /// bucket-family key (or a histogram's `vllm:` name) to its boundaries.
    pub fn parse(json: &str) -> Result<BucketOverrides, BucketOverrideError> {
        let fail = |message: String| Err(BucketOverrideError(message));
        let object: serde_json::Map<String, serde_json::Value> = match serde_json::from_str(json) {
            Ok(object) => object,
            Err(e) => {
                return fail(format!(
                    "not a JSON object of bucket family to boundaries: {e}"
                ))
            }
        };
        let mut by_key: Vec<(Vec<&'static MetricDef>, bool, Vec<f64>)> = Vec::new();
        for (key, value) in &object {
            let (members, by_name) = match catalog::bucket_family(key) {
                Some(family) => (catalog::bucket_family_members(&family).collect(), false),
                None => match histogram_named(key) {
                    Some(def) => (vec![def], true),
                    None => return fail(format!("{key:?}: not a bucket family ({})", known())),
                },
            };
            let boundaries = boundaries(key, value)?;
            by_key.push((members, by_name, boundaries));
        }
        // Family keys first, so that a histogram's own name wins.
        by_key.sort_by_key(|(_, by_name, _)| *by_name);
        let mut by_family = BTreeMap::new();
        for (members, _, boundaries) in by_key {
            for def in members {
                by_family.insert(def.otel_name, boundaries.clone());
            }
        }
        Ok(BucketOverrides { by_family })
    }

    /// The boundaries that replace `def`'s, if any.
    pub fn boundaries(&self, def: &MetricDef) -> Option<&[f64]> {
        self.by_family.get(def.otel_name).map(Vec::as_slice)
    }
}

// Validated boundaries are finite, so equality is an equivalence.
impl Eq for BucketOverrides {}

/// The catalog histogram whose vLLM name is `name` (every member of a
/// bucket family is a histogram).
fn histogram_named(name: &str) -> Option<&'static MetricDef> {
    catalog::all().find(|def| def.kind == Kind::Histogram && def.vllm_name == name)
}

/// The keys a user may give, for the unknown-key error.
fn known() -> String {
    let keys: Vec<&str> = catalog::bucket_families().iter().map(|f| f.key).collect();
    format!(
        "known: {}; or a histogram's vLLM name, such as {}",
        keys.join(", "),
        catalog::E2E_REQUEST_LATENCY.vllm_name
    )
}

fn boundaries(key: &str, value: &serde_json::Value) -> Result<Vec<f64>, BucketOverrideError> {
    let fail = |what: fmt::Arguments| Err(BucketOverrideError(format!("{key:?}: {what}")));
    let Some(items) = value.as_array() else {
        return fail(format_args!("boundaries must be a JSON array of numbers"));
    };
    if items.is_empty() {
        return fail(format_args!("boundaries are empty"));
    }
    let mut bounds = Vec::with_capacity(items.len());
    for item in items {
        let bound = match item {
            serde_json::Value::Number(n) => n.as_f64(),
            // "+Inf", "NaN": what a Prometheus user may write; never usable.
            serde_json::Value::String(s) => match s.trim().parse::<f64>() {
                Ok(parsed) if !parsed.is_finite() => {
                    return fail(format_args!("boundaries must be finite, not {s:?}"))
                }
                _ => None,
            },
            _ => None,
        };
        let Some(bound) = bound else {
            return fail(format_args!(
                "boundaries must be a JSON array of numbers, not {item}"
            ));
        };
        if !bound.is_finite() {
            return fail(format_args!("boundaries must be finite, not {item}"));
        }
        if let Some(&last) = bounds.last() {
            if bound <= last {
                return fail(format_args!(
                    "boundaries must be strictly increasing ({item} follows {})",
                    items[bounds.len() - 1]
                ));
            }
        }
        bounds.push(bound);
    }
    Ok(bounds)
}

/// How the latency histograms go over OTLP (`--otlp-histograms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OtlpHistograms {
    /// vLLM's explicit buckets, as on `/metrics` (the default).
    #[default]
    Explicit,
    /// Base-2 exponential histograms ([`catalog::is_latency_histogram`]);
    /// the other histograms keep their explicit buckets.
    Exponential(ExponentialHistograms),
}

/// The two settings of the SDK's base-2 exponential histogram aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExponentialHistograms {
    /// Most buckets per series (positive range); the SDK lowers the scale
    /// to keep the observed range within them.
    pub max_size: u32,
    /// The finest scale (resolution 2^(2^-scale)) a series starts at.
    pub max_scale: i8,
}

impl ExponentialHistograms {
    /// The OpenTelemetry specification's defaults, which the SDK uses too:
    /// 160 buckets cover a 1 ms to 100 s spread (17 octaves) at scale 3, a
    /// bucket 9 % wide, and narrower spreads at finer scales.
    pub const DEFAULT: ExponentialHistograms = ExponentialHistograms {
        max_size: 160,
        max_scale: 20,
    };
    /// The smallest `max_size` the SDK accepts for a useful histogram.
    pub const MIN_SIZE: u32 = 2;
    /// The range of scales the OpenTelemetry data model defines.
    pub const SCALES: std::ops::RangeInclusive<i8> = -10..=20;
}

impl Default for ExponentialHistograms {
    fn default() -> Self {
        ExponentialHistograms::DEFAULT
    }
}
