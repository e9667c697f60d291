//! One decode budget for every input, whatever its transport or kind: a
//! message, line or frame of `N` bytes may raise the process's heap by at
//! most [`bound`]`(N)` = 4 × `N` + 8 MiB while it is decoded and applied
//! (docs/OPERATIONS.md, "What one input may cost").
//!
//! The bound is enforced where memory is taken, in shares:
//!
//! - protobuf (gRPC and the ingest socket) and JSONL: a scan refuses a
//!   message or line whose decoding it estimates above [`DECODE_PER_BYTE`]
//!   × `N` + [`DECODE_BASE`] before prost or serde decodes it (the
//!   protobuf scan `ingest::prescan`,
//!   [`json_scan`](crate::sources::ingest::json_scan)); the conversion into
//!   records moves what was decoded, one record at a time;
//! - engine-core frames (inside a protobuf message): each frame of `F`
//!   bytes is decoded against [`FRAME_PER_BYTE`] × `F` + [`FRAME_BASE`],
//!   charged before each allocation, one frame at a time; its outputs are
//!   counted against `--max-outputs-per-batch` too;
//! - what the tracker returns (a rejection per output it cannot apply) is
//!   bounded by the outputs of one batch.
//!
//! The shares add up below the bound: the input's own bytes (`N`: a
//! transport's buffer, a line's), what it decodes into (`2N + 2 MiB`), one
//! frame's budget (`2F + 1 MiB`, `F ≤ N`, while the message holding it is
//! `N` as decoded) and the rejections of one batch (one per output the
//! tracker cannot apply, bounded by the outputs the decode admitted). `tests/decode_budget.rs` measures the heap of
//! thousands of hostile inputs against [`bound`].

/// What the heap may grow by per input byte.
pub const PER_BYTE: usize = 4;
/// What the heap may grow by for any input, however small.
pub const BASE: usize = 8 << 20;

/// The most one input of `input_bytes` may raise the heap by.
///
/// ```
/// use vllm_otel_metrics::sources::budget;
/// assert_eq!(budget::bound(1 << 20), (4 << 20) + (8 << 20));
/// ```
pub const fn bound(input_bytes: usize) -> usize {
    input_bytes.saturating_mul(PER_BYTE).saturating_add(BASE)
}

/// The decode's share (protobuf or JSON), per message or line byte.
pub const DECODE_PER_BYTE: usize = 2;
/// The decode's share (protobuf or JSON) for any message or line.
pub const DECODE_BASE: usize = 2 << 20;
/// One engine-core frame's share, per frame byte.
pub const FRAME_PER_BYTE: usize = 2;
/// One engine-core frame's share for any frame.
pub const FRAME_BASE: usize = 1 << 20;

/// Most outputs in one engine step, by default (`--max-outputs-per-batch`):
/// an `outputs` record's, and an engine-core frame's.
pub const DEFAULT_MAX_OUTPUTS_PER_BATCH: usize = 16_384;

/// What a decoder has spent of one input's share: charged before each
/// allocation (or, by a scan, for each one decoding would make). Once a
/// charge goes past the limit, every later one fails too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Allowance {
    spent: usize,
    limit: usize,
}

impl Allowance {
    /// Nothing spent of `limit` bytes.
    pub(crate) const fn new(limit: usize) -> Self {
        Allowance { spent: 0, limit }
    }

    /// Adds `bytes` to what is spent; false when that is past the limit.
    pub(crate) fn charge(&mut self, bytes: usize) -> bool {
        self.spent = self.spent.saturating_add(bytes);
        !self.exceeded()
    }

    /// Whether what is spent is past the limit.
    pub(crate) fn exceeded(&self) -> bool {
        self.spent > self.limit
    }

    /// The limit, bytes.
    pub(crate) const fn limit(&self) -> usize {
        self.limit
    }
}

/// The share of `bytes` at `per_byte` and `base`.
pub(crate) const fn share(bytes: usize, per_byte: usize, base: usize) -> usize {
    bytes.saturating_mul(per_byte).saturating_add(base)
}
