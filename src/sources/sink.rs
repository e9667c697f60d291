//! [`RecordSink`]: the one way a source hands its records on.
//!
//! JSONL replay, the simulator and the gRPC ingest service each turn their
//! input into [`Record`]s and give every one to a sink; none of them records
//! a metric itself. The sink is the tracker, or whatever stands in front of
//! it (the command line's tee to a remote ingest stream, a trace recorder),
//! or any closure (tests, benchmarks, a host program collecting records).

use crate::protocol::Record;
use crate::tracker::{Rejection, Tracker};

/// Where a source's records go.
///
/// ```
/// use vllm_otel_metrics::protocol::{Abort, Record};
/// use vllm_otel_metrics::sources::RecordSink;
///
/// let mut seen = Vec::new();
/// let mut sink = |record: &Record| seen.push(record.kind().1.to_owned());
/// let abort = Record::Abort(Abort { request_id: "r1".into(), received_at: 1.0 });
/// assert!(sink.apply(&abort).is_empty());
/// assert_eq!(seen, ["r1"]);
/// ```
pub trait RecordSink {
    /// Applies a valid record; returns what changed no metric.
    fn apply(&mut self, record: &Record) -> Vec<Rejection>;
    /// Counts an input that could not be decoded.
    fn invalid(&mut self);
}

impl RecordSink for Tracker {
    fn apply(&mut self, record: &Record) -> Vec<Rejection> {
        Tracker::apply(self, record)
    }

    fn invalid(&mut self) {
        self.count_invalid_record();
    }
}

/// A closure takes every record and rejects none; it has no count of
/// undecodable input.
impl<F: FnMut(&Record)> RecordSink for F {
    fn apply(&mut self, record: &Record) -> Vec<Rejection> {
        self(record);
        Vec::new()
    }

    fn invalid(&mut self) {}
}
