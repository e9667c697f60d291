//! Sources: they only translate their input into tracker calls.

#[cfg(feature = "grpc")]
pub mod client;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod jsonl;
#[cfg(feature = "grpc")]
pub mod proto;

use crate::protocol::Record;
use crate::tracker::{Rejection, Tracker};

/// Where a source's records go: the in-process tracker, or a tee of it and a
/// remote ingest stream.
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
