//! Bucket families: the histograms that share one list of bucket boundaries,
//! under the key `--custom-histogram-buckets` names them by.
//!
//! vLLM PR #48867 groups its histograms the same way (a key such as
//! `request_latency` stands for every phase latency), so a JSON map written
//! for one reads the same in the other. A histogram names its family where
//! it is declared (its row's bucket column); the families and their members
//! are read from the catalog here, never listed. `request_num_preemptions`
//! is a family of its own, so no group key ever changes the headline
//! histogram's buckets.
//!
//! ```
//! use vllm_otel_metrics::catalog::{self, bucket_family, bucket_family_members};
//!
//! let latency = bucket_family("request_latency").unwrap();
//! let e2e = catalog::by_vllm_name("vllm:e2e_request_latency_seconds").unwrap();
//! assert!(bucket_family_members(&latency).any(|m| m == e2e));
//! assert_eq!(
//!     catalog::bucket_family_of(&catalog::REQUEST_NUM_PREEMPTIONS).unwrap().key,
//!     "request_num_preemptions"
//! );
//! ```

use super::def::{BucketFamily, Kind, MetricDef};
use super::families::all;
use super::request::REQUEST_HISTOGRAMS;

/// Every bucket family, in catalog order of its first member.
pub fn bucket_families() -> Vec<BucketFamily> {
    let mut families: Vec<BucketFamily> = Vec::new();
    for family in all().filter_map(bucket_family_of) {
        if !families.iter().any(|f| f.key == family.key) {
            families.push(family);
        }
    }
    families
}

/// The bucket family `key` names.
pub fn bucket_family(key: &str) -> Option<BucketFamily> {
    all()
        .filter_map(bucket_family_of)
        .find(|family| family.key == key)
}

/// The bucket family `def` belongs to; `None` for a family that is not a
/// histogram.
pub fn bucket_family_of(def: &MetricDef) -> Option<BucketFamily> {
    (def.kind == Kind::Histogram).then_some(BucketFamily {
        key: def.bucket_family,
        buckets: def.buckets,
    })
}

/// The histograms of `family`, in catalog order.
pub fn bucket_family_members(family: &BucketFamily) -> impl Iterator<Item = &'static MetricDef> {
    let key = family.key;
    all().filter(move |def| def.kind == Kind::Histogram && def.bucket_family == key)
}

/// Whether `def` is a latency histogram: a per-request histogram in
/// seconds, one `--otlp-histograms exponential` sends over OTLP as a base-2
/// exponential histogram.
pub fn is_latency_histogram(def: &MetricDef) -> bool {
    REQUEST_HISTOGRAMS
        .iter()
        .any(|h| h.def.otel_name == def.otel_name && h.def.unit == "s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_histogram_has_a_family() {
        for def in all() {
            assert_eq!(
                !def.bucket_family.is_empty(),
                def.kind == Kind::Histogram,
                "{}",
                def.vllm_name
            );
        }
    }

    #[test]
    fn a_family_shares_its_buckets() {
        for family in bucket_families() {
            for member in bucket_family_members(&family) {
                assert_eq!(member.buckets, family.buckets, "{}", family.key);
            }
        }
    }

    #[test]
    fn the_latency_histograms_are_the_per_request_ones_in_seconds() {
        let latency: Vec<&str> = all()
            .filter(|def| is_latency_histogram(def))
            .map(|def| def.vllm_name)
            .collect();
        assert_eq!(
            latency,
            [
                "vllm:time_to_first_token_seconds",
                "vllm:inter_token_latency_seconds",
                "vllm:e2e_request_latency_seconds",
                "vllm:request_queue_time_seconds",
                "vllm:request_prefill_time_seconds",
                "vllm:request_decode_time_seconds",
                "vllm:request_inference_time_seconds",
                "vllm:request_time_per_output_token_seconds",
            ]
        );
    }
}
