//! What the tracker counted instead of applying, and why.

use crate::catalog::RejectReason;
use crate::protocol::RecordKind;

/// An input the tracker counted instead of applying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub reason: RejectReason,
    /// Which record (or output of one) carried it.
    pub record: RecordKind,
    /// The request id it named (shortened when long).
    pub request_id: String,
    /// What is wrong, for an invalid record.
    pub detail: String,
}

impl Rejection {
    /// Whether `rejections` (what [`Tracker::apply`](super::Tracker::apply) returned) refuse the
    /// record as a whole: one invalid-record rejection naming the record
    /// itself, not one of its parts ([`RecordKind::is_part`]).
    pub fn refuse_whole_record(rejections: &[Rejection]) -> bool {
        matches!(
            rejections,
            [only] if only.reason == RejectReason::InvalidRecord && !only.record.is_part()
        )
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            RejectReason::UnknownRequest => write!(
                f,
                "{} for unknown or already finished request '{}'",
                self.record, self.request_id
            ),
            RejectReason::DuplicateRequest => {
                write!(f, "second start for live request '{}'", self.request_id)
            }
            RejectReason::InvalidTraceparent => write!(
                f,
                "request '{}' has an invalid traceparent ({}); it is tracked, its span starts a new trace",
                self.request_id, self.detail
            ),
            RejectReason::InvalidRecord => {
                write!(f, "invalid {} record: {}", self.record, self.detail)
            }
        }
    }
}
