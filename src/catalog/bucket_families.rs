//! Bucket families: the histograms that share one list of bucket boundaries,
//! under the key `--custom-histogram-buckets` names them by.
//!
//! vLLM PR #48867 groups its histograms the same way (a key such as
//! `request_latency` stands for every phase latency), so a JSON map written
//! for one reads the same in the other. Each catalog histogram belongs to
//! exactly one family; `request_num_preemptions` is a family of its own, so
//! no group key ever changes the headline histogram's buckets.
//!
//! ```
//! use vllm_otel_metrics::catalog::{self, bucket_family};
//!
//! let latency = bucket_family("request_latency").unwrap();
//! let e2e = catalog::by_vllm_name("vllm:e2e_request_latency_seconds").unwrap();
//! assert!(latency.members.contains(&e2e));
//! assert_eq!(
//!     catalog::bucket_family_of(&catalog::REQUEST_NUM_PREEMPTIONS).unwrap().key,
//!     "request_num_preemptions"
//! );
//! ```

use super::*;

/// Histograms that share their bucket boundaries.
#[derive(Debug, Clone, Copy)]
pub struct BucketFamily {
    /// The key of `--custom-histogram-buckets`.
    pub key: &'static str,
    /// Its histograms, in catalog order.
    pub members: &'static [&'static MetricDef],
}

/// Every bucket family, in catalog order of its first member.
pub const BUCKET_FAMILIES: [BucketFamily; 16] = [
    BucketFamily {
        key: "iteration_tokens",
        members: &[&ITERATION_TOKENS],
    },
    BucketFamily {
        key: "request_tokens",
        members: &[
            &REQUEST_PROMPT_TOKENS,
            &REQUEST_GENERATION_TOKENS,
            &REQUEST_MAX_NUM_GENERATION_TOKENS,
            &REQUEST_PARAMS_MAX_TOKENS,
            &REQUEST_PREFILL_KV_COMPUTED_TOKENS,
        ],
    },
    BucketFamily {
        key: "request_params_n",
        members: &[&REQUEST_PARAMS_N],
    },
    BucketFamily {
        key: "request_num_preemptions",
        members: &[&REQUEST_NUM_PREEMPTIONS],
    },
    BucketFamily {
        key: "time_to_first_token",
        members: &[&TIME_TO_FIRST_TOKEN],
    },
    BucketFamily {
        key: "inter_token_latency",
        members: &[&INTER_TOKEN_LATENCY, &REQUEST_TIME_PER_OUTPUT_TOKEN],
    },
    BucketFamily {
        key: "request_latency",
        members: &[
            &E2E_REQUEST_LATENCY,
            &REQUEST_QUEUE_TIME,
            &REQUEST_PREFILL_TIME,
            &REQUEST_DECODE_TIME,
            &REQUEST_INFERENCE_TIME,
        ],
    },
    BucketFamily {
        key: "kv_cache_residency",
        members: &[
            &KV_BLOCK_LIFETIME,
            &KV_BLOCK_IDLE_BEFORE_EVICT,
            &KV_BLOCK_REUSE_GAP,
        ],
    },
    BucketFamily {
        key: "operation_duration",
        members: &[
            &SLEEP_MODE_OPERATION_DURATION,
            &RL_WEIGHT_UPDATE_OPERATION_DURATION,
        ],
    },
    BucketFamily {
        key: "nixl_xfer_time",
        members: &[&NIXL_XFER_TIME],
    },
    BucketFamily {
        key: "nixl_post_time",
        members: &[&NIXL_POST_TIME],
    },
    BucketFamily {
        key: "nixl_bytes_transferred",
        members: &[&NIXL_BYTES_TRANSFERRED],
    },
    BucketFamily {
        key: "nixl_num_descriptors",
        members: &[&NIXL_NUM_DESCRIPTORS],
    },
    BucketFamily {
        key: "kv_offload_transfer_size",
        members: &[&KV_OFFLOAD_LOAD_SIZE, &KV_OFFLOAD_STORE_SIZE],
    },
    BucketFamily {
        key: "kv_offload_lookup_sync_delay",
        members: &[&KV_OFFLOAD_LOOKUP_SYNC_DELAY],
    },
    BucketFamily {
        key: "kv_offload_lookup_async_delay",
        members: &[&KV_OFFLOAD_LOOKUP_ASYNC_DELAY],
    },
];

/// The latency histograms: the ones `--otlp-histograms exponential` sends
/// over OTLP as base-2 exponential histograms.
pub(crate) const LATENCY_HISTOGRAMS: [&MetricDef; 8] = [
    &TIME_TO_FIRST_TOKEN,
    &INTER_TOKEN_LATENCY,
    &E2E_REQUEST_LATENCY,
    &REQUEST_QUEUE_TIME,
    &REQUEST_PREFILL_TIME,
    &REQUEST_DECODE_TIME,
    &REQUEST_INFERENCE_TIME,
    &REQUEST_TIME_PER_OUTPUT_TOKEN,
];

/// The bucket family `key` names.
pub fn bucket_family(key: &str) -> Option<&'static BucketFamily> {
    BUCKET_FAMILIES.iter().find(|family| family.key == key)
}

/// The bucket family `def` belongs to; `None` for a family that is not a
/// histogram.
pub fn bucket_family_of(def: &MetricDef) -> Option<&'static BucketFamily> {
    BUCKET_FAMILIES
        .iter()
        .find(|family| family.members.iter().any(|m| m.otel_name == def.otel_name))
}

/// Whether `def` is one of the [`LATENCY_HISTOGRAMS`].
pub fn is_latency_histogram(def: &MetricDef) -> bool {
    LATENCY_HISTOGRAMS
        .iter()
        .any(|m| m.otel_name == def.otel_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_histogram_is_in_exactly_one_family() {
        for def in all() {
            let families = BUCKET_FAMILIES
                .iter()
                .filter(|f| f.members.iter().any(|m| m.otel_name == def.otel_name))
                .count();
            let expected = usize::from(def.kind == Kind::Histogram);
            assert_eq!(families, expected, "{}", def.vllm_name);
        }
    }

    #[test]
    fn a_family_shares_its_buckets() {
        for family in BUCKET_FAMILIES {
            for member in family.members {
                assert_eq!(member.buckets, family.members[0].buckets, "{}", family.key);
            }
        }
    }

    #[test]
    fn latency_histograms_are_in_seconds() {
        for def in LATENCY_HISTOGRAMS {
            assert_eq!(
                (def.kind, def.unit),
                (Kind::Histogram, "s"),
                "{}",
                def.vllm_name
            );
        }
    }
}
