//! The engine-core tap's frames: what vLLM's engine core sent its frontend,
//! decoded here instead of in vLLM's process.
//!
//! The tap (`python/src/vllm_otel_metrics/tap.py`, a `vllm.general_plugins`
//! entry point running in each engine-core process) copies the bytes vLLM's
//! output thread has already encoded for its frontend, one msgpack
//! `EngineCoreOutputs` per engine step, and ships them in chunks with the
//! wall-clock time each was sent at. Decoding them in Python would cost the
//! engine core more than vLLM's own encode (docs/PERFORMANCE.md); here it
//! costs the sidecar a walk over the bytes.
//!
//! A chunk becomes records of the engine-core path: per frame, one
//! `outputs` record and, when the engine logs stats, one `scheduler_stats`
//! record, which the tracker applies with the Rust frontend's rules
//! (docs/SEMANTICS.md §3). A frame that does not decode is reported with its
//! place and skipped; the frames around it are applied.

mod frame;
mod msgpack;

pub use frame::{decode, EngineSetup, Frame, FrameLimits, Layout, LayoutError, REQUIRED_FIELDS};
pub use msgpack::MsgpackError;

use crate::protocol::Record;

/// One chunk of frames from one engine, as the tap sends it.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    /// How the engine is set up (its model name, KV consumer, LoRA).
    pub setup: EngineSetup<'a>,
    /// The frames, back to back.
    pub frames: &'a [u8],
    /// Each frame's length in bytes, in order.
    pub frame_lengths: &'a [u32],
    /// Each frame's send time: wall clock, seconds.
    pub sent_at: &'a [f64],
}

/// A chunk, or one of its frames, that cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TapError {
    /// The chunk's framing does not add up; nothing of it is applied.
    #[error("{0}")]
    Framing(String),
    /// One frame does not decode; the other frames are applied.
    #[error("frame {index} ({len} bytes): {source}")]
    Frame {
        /// The frame's position in the chunk, from 1.
        index: usize,
        /// Its length.
        len: usize,
        /// What is wrong, and where.
        source: MsgpackError,
    },
}

impl<'a> Chunk<'a> {
    /// Checks that the lengths and the times describe the bytes.
    pub fn check(&self) -> Result<(), TapError> {
        if self.frame_lengths.len() != self.sent_at.len() {
            return Err(TapError::Framing(format!(
                "{} frame lengths but {} send times",
                self.frame_lengths.len(),
                self.sent_at.len()
            )));
        }
        let total: u64 = self.frame_lengths.iter().map(|&n| u64::from(n)).sum();
        if total != self.frames.len() as u64 {
            return Err(TapError::Framing(format!(
                "the frame lengths add up to {total} bytes, the frames are {} bytes",
                self.frames.len()
            )));
        }
        Ok(())
    }

    /// Each frame's records in order (its outputs, then its scheduler
    /// stats), or why that frame cannot be read. Call [`Chunk::check`] first.
    /// Frames are decoded one at a time, as the iterator is advanced, each
    /// within `limits` and its own memory budget.
    ///
    /// ```
    /// use vllm_otel_metrics::sources::tap::{Chunk, EngineSetup, FrameLimits, Layout};
    /// let layout = Layout::new(
    ///     &["engine_index", "outputs", "scheduler_stats", "timestamp"],
    ///     &["request_id", "new_token_ids", "finish_reason", "events"],
    /// ).unwrap();
    /// // EngineCoreOutputs(engine_index=0, outputs=[("r1", [7])], None, 1.5)
    /// let frame = [0x94, 0x00, 0x91, 0x92, 0xa2, b'r', b'1', 0x91, 0x07, 0xc0,
    ///              0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0];
    /// let chunk = Chunk {
    ///     setup: EngineSetup { model_name: "m", ..Default::default() },
    ///     frames: &frame, frame_lengths: &[frame.len() as u32], sent_at: &[100.0],
    /// };
    /// chunk.check().unwrap();
    /// let frames: Vec<_> = chunk.frames(&layout, &FrameLimits::default()).collect();
    /// let decoded = frames[0].as_ref().unwrap();
    /// assert_eq!((decoded.records.len(), decoded.skipped.len()), (1, 0));
    /// ```
    pub fn frames<'l>(
        &self,
        layout: &'l Layout,
        limits: &'l FrameLimits,
    ) -> impl Iterator<Item = Result<FrameRecords, TapError>> + use<'a, 'l> {
        let chunk = *self;
        let mut start = 0usize;
        chunk
            .frame_lengths
            .iter()
            .zip(chunk.sent_at)
            .enumerate()
            .map(move |(i, (&len, &sent_at))| {
                let len = len as usize;
                let bytes = &chunk.frames[start..start + len];
                start += len;
                let located = |source| TapError::Frame {
                    index: i + 1,
                    len,
                    source,
                };
                let frame = decode(bytes, layout, chunk.setup, sent_at, limits).map_err(located)?;
                let mut records = Vec::with_capacity(2);
                // A utility call's answer carries no outputs: no batch.
                if !frame.batch.outputs.is_empty() {
                    records.push(Record::Outputs(frame.batch));
                }
                if let Some(stats) = frame.scheduler_stats {
                    records.push(Record::SchedulerStats(Box::new(stats)));
                }
                Ok(FrameRecords {
                    records,
                    skipped: frame.skipped.into_iter().map(located).collect(),
                })
            })
    }
}

/// What one frame of a chunk became.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameRecords {
    /// Its records: the outputs, then the scheduler stats.
    pub records: Vec<Record>,
    /// The outputs left out of them, each with its place and why.
    pub skipped: Vec<TapError>,
}
