//! The ingest core, which knows no transport: the state every stream and
//! connection records into ([`IngestService`]), how one message is decoded
//! ([`decode_message`]) and applied, what a stream's answer says
//! ([`Summary`]), and the limits all of it keeps ([`IngestLimits`]).
//!
//! Bounded everywhere: requests in flight are capped (the oldest is
//! terminated as `abort` beyond the cap) and requests idle longer than a
//! time-to-live are terminated as `abort` too; both are counted on
//! `vllm_otel_metrics_evicted_requests_total`. An invalid record is rejected
//! on its own and the stream goes on, as does a message refused before
//! decoding or one that does not decode. The transports, gRPC
//! ([`super::grpc`]) and the ingest socket ([`super::socket`]), read their
//! framing and hand each message here.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prost::Message;

use super::prescan::{self, DecodeLimits};
use super::proto::{pb, record_from_proto_parts};
use super::room::{Buffered, MessageDeadline};
use crate::catalog::RejectReason;
use crate::protocol::Record;
use crate::sources::tap::{Chunk, EngineSetup, FrameLimits, Layout};
use crate::sources::RecordSink;
use crate::support::clock::unix_now;
use crate::tracker::{Rejection, Tracker};

/// How many rejection messages a summary carries.
pub const FIRST_REJECTIONS: usize = 10;

/// Limits of the ingest service.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct IngestLimits {
    /// Most requests in flight; beyond it the oldest is terminated as `abort`.
    pub max_inflight_requests: usize,
    /// Requests without activity this long are terminated as `abort`.
    pub request_ttl: Option<Duration>,
    /// Largest accepted message, bytes.
    pub max_message_bytes: usize,
    /// Bounds a message is scanned against before it is decoded.
    pub decode: DecodeLimits,
    /// Most bytes held in messages that have arrived in part, over every
    /// stream and connection; lent to one message at a time
    /// ([`Buffered`]).
    pub max_buffered_bytes: usize,
    /// How long a message may take to arrive in full, waiting for room
    /// included; a message that takes longer ends its stream or
    /// connection. None: no bound.
    pub message_deadline: Option<MessageDeadline>,
    /// Most streams open at once on one HTTP/2 connection.
    pub max_streams_per_connection: u32,
}

impl Default for IngestLimits {
    fn default() -> Self {
        IngestLimits {
            max_inflight_requests: 1_000_000,
            request_ttl: Some(Duration::from_secs(600)),
            max_message_bytes: 16 << 20,
            decode: DecodeLimits::default(),
            max_buffered_bytes: 32 << 20,
            message_deadline: Some(MessageDeadline::DEFAULT),
            max_streams_per_connection: 8,
        }
    }
}

/// The shared state every stream records into.
#[derive(Clone)]
pub struct IngestService {
    tracker: Arc<Mutex<Tracker>>,
    limits: IngestLimits,
    /// Origin of the activity clock used for the time-to-live.
    clock: Instant,
    /// Set when open streams must end now (the drain deadline).
    cut: Arc<tokio::sync::watch::Sender<bool>>,
    /// Room for messages that have arrived in part.
    buffered: Buffered,
}

impl std::fmt::Debug for IngestService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestService")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl IngestService {
    /// A service recording through `tracker` (which keeps its start order for eviction).
    pub fn new(tracker: Tracker, limits: IngestLimits) -> Self {
        IngestService {
            tracker: Arc::new(Mutex::new(tracker.with_start_order())),
            limits,
            clock: Instant::now(),
            cut: Arc::new(tokio::sync::watch::channel(false).0),
            buffered: Buffered::new(limits.max_buffered_bytes),
        }
    }

    /// Ends every open stream now: each is answered `UNAVAILABLE` with the
    /// summary of what it applied in the [`SUMMARY_TRAILER`](super::grpc::SUMMARY_TRAILER), so its client
    /// can resume after the last applied record instead of sending again.
    pub fn cut_open_streams(&self) {
        self.cut.send_replace(true);
    }

    fn tracker(&self) -> MutexGuard<'_, Tracker> {
        self.tracker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.tracker().in_flight()
    }

    /// Terminates requests idle longer than the time-to-live; returns how many.
    pub fn evict_idle(&self) -> usize {
        let Some(ttl) = self.limits.request_ttl else {
            return 0;
        };
        let idle_before = self.clock.elapsed().as_secs_f64() - ttl.as_secs_f64();
        self.tracker().evict_idle(idle_before, unix_now())
    }

    /// The service's limits.
    pub(crate) fn limits(&self) -> IngestLimits {
        self.limits
    }

    /// Largest accepted message, bytes.
    pub(crate) fn max_message_bytes(&self) -> usize {
        self.limits.max_message_bytes
    }

    /// The bounds a message is scanned against before it is decoded.
    pub(crate) fn decode_limits(&self) -> DecodeLimits {
        self.limits.decode
    }

    /// Room for messages that have arrived in part.
    pub(crate) fn buffered(&self) -> &Buffered {
        &self.buffered
    }

    /// How long a message may take to arrive in full.
    pub(crate) fn message_deadline(&self) -> Option<MessageDeadline> {
        self.limits.message_deadline
    }

    /// Turns true when open streams must end now.
    pub(crate) fn cut_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.cut.subscribe()
    }

    /// Applies one message of a stream (a batch's records one by one),
    /// `position` counting the stream's records. It gives the runtime's
    /// worker back between records, so that a large batch does not hold up
    /// `/metrics` or the other streams.
    async fn apply_message(&self, message: pb::Record, position: &mut u64, summary: &mut Summary) {
        match message.record {
            Some(pb::record::Record::Batch(batch)) => {
                for record in batch.records {
                    *position += 1;
                    self.apply(record, *position, summary).await;
                    tokio::task::consume_budget().await;
                }
            }
            record => {
                *position += 1;
                self.apply(pb::Record { record }, *position, summary).await;
            }
        }
    }

    /// Applies one message as a transport decoded it ([`decode_message`]),
    /// `position` counting the stream's records: a record (a batch's one
    /// by one), or a refusal counted and named after `origin` (the
    /// transport's name for the message, such as `ingest socket, connection
    /// 2, message 7: `; empty where the record's position names it). The
    /// name is written only for a refusal: a message that applies costs
    /// no formatting.
    pub async fn apply_incoming(
        &self,
        incoming: Incoming,
        origin: impl fmt::Display + Send,
        position: &mut u64,
        summary: &mut Summary,
    ) {
        let why = match incoming {
            Incoming::Record(message) => {
                return self.apply_message(message, position, summary).await
            }
            Incoming::Refused(why) => why.to_string(),
            Incoming::Undecodable(why) => format!("cannot decode the message ({why})"),
        };
        *position += 1;
        self.reject_whole(*position, format!("{origin}{why}"), summary);
    }

    /// Applies one wire record at `position` of its stream, noting the outcome in `summary`.
    async fn apply(&self, message: pb::Record, position: u64, summary: &mut Summary) {
        if let Some(pb::record::Record::Frames(frames)) = message.record {
            self.apply_frames(&frames, position, summary).await;
            return;
        }
        let now = unix_now();
        let mut skipped = Vec::new();
        let record = match record_from_proto_parts(message, now, &mut skipped) {
            Ok(record) => record,
            Err(reason) => {
                self.reject_whole(position, reason.to_string(), summary);
                return;
            }
        };
        // A part that did not convert is rejected alone: the rest of the
        // record is applied.
        for reason in skipped {
            self.invalid(format!("record {position}: {reason}"), summary);
        }
        let whole = self.apply_record(&record, now, &format!("record {position}"), summary);
        if whole {
            summary.wire.records_rejected += 1;
        } else {
            summary.wire.records_applied += 1;
        }
    }

    /// Counts a wire record that is rejected whole.
    fn reject_whole(&self, position: u64, reason: String, summary: &mut Summary) {
        self.invalid(format!("record {position}: {reason}"), summary);
        summary.wire.records_rejected += 1;
    }

    /// Counts an input that cannot be decoded, named by `message`.
    pub(crate) fn invalid(&self, message: String, summary: &mut Summary) {
        RecordSink::invalid(&mut *self.tracker());
        summary.reject(RejectReason::InvalidRecord.as_str(), message);
    }

    /// Applies one record received at `now` (the time evictions it causes
    /// end at), its rejections named after `place`; says whether it was
    /// refused whole.
    fn apply_record(&self, record: &Record, now: f64, place: &str, summary: &mut Summary) -> bool {
        let rejections = {
            let mut tracker = self.tracker();
            tracker.set_now(self.clock.elapsed().as_secs_f64());
            // Through the sink every source uses; the lock is the one thing
            // the streams share.
            let rejections = RecordSink::apply(&mut *tracker, record);
            if matches!(record, Record::Request(_)) {
                tracker.evict_oldest(self.limits.max_inflight_requests, now);
            }
            rejections
        };
        let whole = Rejection::refuse_whole_record(&rejections);
        if !whole {
            if let Record::Outputs(batch) = record {
                summary.wire.outputs_applied += batch.outputs.len() as u64;
            }
        }
        for rejection in rejections {
            summary.reject(rejection.reason.as_str(), format!("{place}: {rejection}"));
        }
        whole
    }

    /// Applies the engine-core tap's frames (one wire record): each frame
    /// that decodes becomes its records; one that does not is counted and
    /// named (`record N, frame K`), and the frames around it are applied.
    async fn apply_frames(
        &self,
        frames: &pb::EngineCoreFrames,
        position: u64,
        summary: &mut Summary,
    ) {
        let layout = match Layout::new(
            &frames.engine_core_outputs_fields,
            &frames.engine_core_output_fields,
        ) {
            Ok(layout) => layout,
            Err(e) => {
                return self.reject_whole(position, format!("engine-core frames: {e}"), summary)
            }
        };
        let chunk = Chunk {
            setup: EngineSetup {
                model_name: &frames.model_name,
                kv_consumer: frames.kv_consumer,
                lora_enabled: frames.lora_enabled,
            },
            frames: &frames.frames,
            frame_lengths: &frames.frame_lengths,
            sent_at: &frames.sent_at,
        };
        if let Err(e) = chunk.check() {
            return self.reject_whole(position, format!("engine-core frames: {e}"), summary);
        }
        let now = unix_now();
        let limits = FrameLimits {
            max_outputs: self.limits.decode.max_outputs_per_batch,
            ..FrameLimits::default()
        };
        for (i, decoded) in chunk.frames(&layout, &limits).enumerate() {
            match decoded {
                Ok(decoded) => {
                    for skipped in decoded.skipped {
                        self.invalid(format!("record {position}, {skipped}"), summary);
                    }
                    let place = format!("record {position}, frame {}", i + 1);
                    for record in &decoded.records {
                        self.apply_record(record, now, &place, summary);
                    }
                }
                Err(e) => self.invalid(format!("record {position}, {e}"), summary),
            }
            tokio::task::consume_budget().await;
        }
        summary.wire.records_applied += 1;
    }
}

/// A stream's summary under construction: what its messages did.
#[derive(Debug, Default)]
pub struct Summary {
    wire: pb::IngestSummary,
    by_reason: HashMap<String, u64>,
}

impl Summary {
    fn reject(&mut self, reason: &str, message: String) {
        *self.by_reason.entry(reason.to_owned()).or_default() += 1;
        if self.wire.first_rejections.len() < FIRST_REJECTIONS {
            self.wire.first_rejections.push(message);
        }
    }

    /// Records applied so far.
    pub(crate) fn records_applied(&self) -> u64 {
        self.wire.records_applied
    }

    /// The summary as the stream's answer carries it.
    pub fn finish(mut self) -> pb::IngestSummary {
        self.wire.rejected_by_reason = self.by_reason;
        self.wire
    }
}

/// One message of a stream: decoded, or refused before decoding (why).
#[derive(Debug)]
// Nearly every message is a record: boxing it would allocate once more
// per message to shrink the rare refusal.
#[allow(clippy::large_enum_variant)]
pub enum Incoming {
    /// A record (a batch too).
    Record(pb::Record),
    /// A message that was not decoded, and why.
    Refused(prescan::Refusal),
    /// A message that failed to decode, and prost's reason.
    Undecodable(String),
}

/// Decodes one message of the ingest protocol as every transport does (gRPC's
/// route and the ingest socket): scanned first ([`prescan::check`]), within
/// `limits` and the decode share of the decode budget
/// ([`crate::sources::budget`]), then decoded by prost.
pub fn decode_message(bytes: &[u8], limits: &DecodeLimits) -> Incoming {
    if let Err(refusal) = prescan::check(bytes, limits) {
        return Incoming::Refused(refusal);
    }
    match pb::Record::decode(bytes) {
        Ok(record) => Incoming::Record(record),
        Err(e) => Incoming::Undecodable(e.to_string()),
    }
}

/// One line describing a summary, for people.
pub fn describe_summary(summary: &pb::IngestSummary) -> String {
    let mut reasons: Vec<_> = summary.rejected_by_reason.iter().collect();
    reasons.sort();
    let reasons: Vec<String> = reasons.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let mut text = format!(
        "{} record(s) applied ({} outputs), {} rejected",
        summary.records_applied, summary.outputs_applied, summary.records_rejected
    );
    if !reasons.is_empty() {
        text.push_str(&format!("; changed no metric: {}", reasons.join(", ")));
    }
    for message in &summary.first_rejections {
        text.push_str(&format!("\n  {message}"));
    }
    text
}
