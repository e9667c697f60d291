//! The reasons the self-telemetry families count by: the values of their
//! `reason` label, as enums the tracker and the instruments share.

/// Why an input changed no vLLM metric (label `reason` of the self-telemetry counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Not a valid record (bad JSON, missing field, non-finite number, …).
    InvalidRecord = 0,
    /// An output or abort for a request that is unknown or already terminated.
    UnknownRequest = 1,
    /// A start for a request id that is still live.
    DuplicateRequest = 2,
    /// A request start whose `traceparent` is not a W3C trace context (the
    /// request is tracked; its span starts a new trace).
    InvalidTraceparent = 3,
}

impl RejectReason {
    /// Every reason, in label-value order.
    pub const ALL: [RejectReason; 4] = [
        RejectReason::InvalidRecord,
        RejectReason::UnknownRequest,
        RejectReason::DuplicateRequest,
        RejectReason::InvalidTraceparent,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::InvalidRecord => "invalid_record",
            RejectReason::UnknownRequest => "unknown_request",
            RejectReason::DuplicateRequest => "duplicate_request",
            RejectReason::InvalidTraceparent => "invalid_traceparent",
        }
    }
}

/// Why a live request was terminated by the tracker itself (label `reason`
/// of the eviction counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvictReason {
    /// More requests in flight than allowed: the oldest went.
    InflightLimit = 0,
    /// No activity for longer than the time-to-live.
    Ttl = 1,
}

impl EvictReason {
    /// Every reason, in label-value order.
    pub const ALL: [EvictReason; 2] = [EvictReason::InflightLimit, EvictReason::Ttl];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EvictReason::InflightLimit => "inflight_limit",
            EvictReason::Ttl => "ttl",
        }
    }
}
