//! The bounds a message is scanned against, and why one is refused.

use crate::sources::budget;

/// The bounds a message is scanned against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeLimits {
    /// Most records in one `RecordBatch`.
    pub max_records_per_batch: usize,
    /// Most outputs in one `OutputBatch`.
    pub max_outputs_per_batch: usize,
    /// Most memory the decoded message may take, estimated, bytes.
    pub max_decoded_bytes: usize,
}

impl Default for DecodeLimits {
    /// Room for the plugin's batches (256 records, vLLM's largest step's
    /// outputs), the decoded size bounded at twice the message size limit.
    fn default() -> Self {
        DecodeLimits {
            max_records_per_batch: 1024,
            max_outputs_per_batch: budget::DEFAULT_MAX_OUTPUTS_PER_BATCH,
            max_decoded_bytes: 32 << 20,
        }
    }
}

/// Why a message was refused before decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A batch with more records than allowed.
    #[error("a record batch of more than {limit} records (--max-records-per-batch); refused before decoding")]
    TooManyRecords {
        /// The bound.
        limit: usize,
    },
    /// An output batch with more outputs than allowed.
    #[error("an output batch of more than {limit} outputs (--max-outputs-per-batch); refused before decoding")]
    TooManyOutputs {
        /// The bound.
        limit: usize,
    },
    /// Messages nested deeper than protobuf decodes.
    #[error("messages nested more than {limit} deep; refused before decoding")]
    TooDeep {
        /// The bound.
        limit: u32,
    },
    /// Decoding would take more memory than allowed.
    #[error("decoding it would take more than {limit} bytes ({bytes} bytes of protobuf); refused")]
    TooLarge {
        /// The bound.
        limit: usize,
        /// The message's size.
        bytes: usize,
    },
    /// The bytes are not protobuf (decoding would fail as well).
    #[error("cannot decode the message (malformed protobuf in a {0})")]
    Malformed(&'static str),
}

/// prost's recursion limit: a message nested deeper does not decode.
pub(super) const MAX_DEPTH: u32 = 100;
