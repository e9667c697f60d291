//! The sources: where records come from before the tracker sees them.
//!
//! - [`ingest`]: a JSONL trace (`replay`) and the gRPC ingest service
//!   (`serve`), plus the client that streams to it (`--target`);
//! - [`tap`]: the engine-core tap's frames (vLLM's msgpack `EngineCoreOutputs`);
//! - `sim` (feature `sim`): the engine simulator (`simulate`).
//!
//! Each turns its input into [`crate::protocol::Record`]s and hands them to
//! a [`RecordSink`]; none of them records a metric itself.

pub mod budget;
pub mod ingest;
#[cfg(feature = "sim")]
pub mod sim;
mod sink;
pub mod tap;

pub use sink::RecordSink;
