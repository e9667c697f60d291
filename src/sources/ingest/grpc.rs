//! The gRPC ingest service behind `serve`: engines stream records, the
//! server tracks requests across streams and records into the pipeline.
//!
//! Bounded everywhere: a stream is read one message at a time (HTTP/2 flow
//! control pushes back on a fast sender instead of buffering), messages have
//! a maximum size, requests in flight are capped (the oldest is terminated as
//! `abort` beyond the cap) and requests idle longer than a time-to-live are
//! terminated as `abort` too; both are counted on
//! `vllm_otel_metrics_evicted_requests_total`. An invalid record is rejected
//! on its own and the stream goes on, as does a message refused before
//! decoding or one that does not decode ([`server`](super::server)).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prost::Message;
use tokio::net::TcpListener;
use tonic::{Request, Status};

use super::prescan::DecodeLimits;
use super::proto::{pb, record_from_proto_parts};
use super::server::{Buffered, Incoming, IngestRoute, MessageDeadline, Messages};
use crate::catalog::RejectReason;
use crate::listen::{self, BearerToken, ListenerLimits, ServerTls};
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

/// Default bounds of the ingest listener. A connection is idle while it
/// carries no stream: answering the server's
/// HTTP/2 pings (every [`KEEPALIVE_INTERVAL`], which find dead peers) does
/// not keep it.
pub const DEFAULT_LIMITS: ListenerLimits = ListenerLimits {
    max_connections: 64,
    idle_timeout: Some(Duration::from_secs(60)),
    write_timeout: Some(Duration::from_secs(30)),
};

/// How often the server pings an HTTP/2 connection.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);

/// The trailer that carries a cut stream's [`pb::IngestSummary`]
/// (protobuf, base64 in the metadata as `-bin` keys are).
pub const SUMMARY_TRAILER: &str = "ingest-summary-bin";

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
    /// summary of what it applied in the [`SUMMARY_TRAILER`], so its client
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

    /// Largest accepted message, bytes.
    pub(super) fn max_message_bytes(&self) -> usize {
        self.limits.max_message_bytes
    }

    /// The bounds a message is scanned against before it is decoded.
    pub(super) fn decode_limits(&self) -> DecodeLimits {
        self.limits.decode
    }

    /// Room for messages that have arrived in part.
    pub(super) fn buffered(&self) -> &Buffered {
        &self.buffered
    }

    /// How long a message may take to arrive in full.
    pub(super) fn message_deadline(&self) -> Option<MessageDeadline> {
        self.limits.message_deadline
    }

    /// Turns true when open streams must end now.
    pub(super) fn cut_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.cut.subscribe()
    }

    /// Applies one message of a stream (a batch's records one by one),
    /// `position` counting the stream's records. It gives the runtime's
    /// worker back between records, so that a large batch does not hold up
    /// `/metrics` or the other streams.
    pub(super) async fn apply_message(
        &self,
        message: pb::Record,
        position: &mut u64,
        summary: &mut Summary,
    ) {
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

    /// Applies one message as a transport decoded it
    /// ([`decode_message`](super::server::decode_message)), `position`
    /// counting the stream's records: a record (a batch's one by one), or a
    /// refusal counted and named.
    pub async fn apply_incoming(
        &self,
        incoming: Incoming,
        position: &mut u64,
        summary: &mut Summary,
    ) {
        match incoming {
            Incoming::Record(message) => self.apply_message(message, position, summary).await,
            Incoming::Refused(why) => {
                *position += 1;
                self.refused(*position, &why.to_string(), summary);
            }
            Incoming::Undecodable(why) => {
                *position += 1;
                self.refused(
                    *position,
                    &format!("cannot decode the message ({why})"),
                    summary,
                );
            }
        }
    }

    /// Counts a message refused before it was decoded, at `position`.
    pub(super) fn refused(&self, position: u64, why: &str, summary: &mut Summary) {
        self.reject_whole(position, why.to_owned(), summary);
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
    pub(super) fn invalid(&self, message: String, summary: &mut Summary) {
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

    /// The summary as the stream's answer carries it.
    pub fn finish(mut self) -> pb::IngestSummary {
        self.wire.rejected_by_reason = self.by_reason;
        self.wire
    }
}

impl IngestService {
    /// One client-streaming call, the `number`th on this listener: its
    /// messages applied in order; answered, when the client closes its
    /// side, with what it did. A stream that ends on an error (a message
    /// too long, late, or without room) is counted and logged.
    pub(super) async fn stream<B>(
        &self,
        number: u64,
        connection: Option<listen::ConnInfo>,
        mut messages: Messages<B>,
    ) -> Result<pb::IngestSummary, Status>
    where
        B: http_body::Body<Data = bytes::Bytes>,
        B::Error: Into<tonic::codegen::StdError>,
    {
        // Open while this call is: the connection is not idle.
        let streams = connection.as_ref().and_then(|info| info.streams.clone());
        let _open = streams.as_ref().map(|streams| streams.opened());
        let mut summary = Summary::default();
        let mut position = 0u64;
        let mut cut = self.cut.subscribe();
        loop {
            let next = tokio::select! {
                next = messages.next() => next,
                _ = cut.wait_for(|cut| *cut) => {
                    let summary = summary.finish();
                    let mut trailers = tonic::metadata::MetadataMap::new();
                    trailers.insert_bin(
                        SUMMARY_TRAILER,
                        tonic::metadata::MetadataValue::from_bytes(&summary.encode_to_vec()),
                    );
                    return Err(Status::with_metadata(
                        tonic::Code::Unavailable,
                        format!(
                            "the server is shutting down: the first {} record(s) of this stream were read ({}); resume after them",
                            position,
                            describe_summary(&summary).lines().next().unwrap_or_default()
                        ),
                        trailers,
                    ));
                }
            };
            let incoming = match next {
                Ok(Some(incoming)) => incoming,
                Ok(None) => break,
                Err(status) => {
                    let message = format!(
                        "record {}: cannot read the message ({}); {} record(s) before it were applied",
                        position + 1,
                        status.message(),
                        summary.wire.records_applied
                    );
                    self.invalid(message.clone(), &mut summary);
                    let peer = connection
                        .as_ref()
                        .and_then(|info| info.peer)
                        .map(|peer| format!(" from {peer}"))
                        .unwrap_or_default();
                    tracing::warn!("ingest stream {number}{peer} ended: {message}");
                    let code = match status.code() {
                        code @ (tonic::Code::ResourceExhausted | tonic::Code::DeadlineExceeded) => {
                            code
                        }
                        _ => tonic::Code::InvalidArgument,
                    };
                    return Err(Status::new(code, message));
                }
            };
            if let Some(streams) = &streams {
                streams.touch();
            }
            self.apply_incoming(incoming, &mut position, &mut summary)
                .await;
        }
        Ok(summary.finish())
    }
}

/// How the ingest listener listens.
#[derive(Debug, Clone)]
pub struct IngestListener {
    /// Connection cap and timeouts.
    pub limits: ListenerLimits,
    /// TLS (ALPN `h2`), when configured.
    pub tls: Option<ServerTls>,
    /// The bearer token streams must present, when configured.
    pub token: Option<BearerToken>,
}

impl Default for IngestListener {
    fn default() -> Self {
        IngestListener {
            limits: DEFAULT_LIMITS,
            tls: None,
            token: None,
        }
    }
}

/// Serves the ingest service on `listener` until `shutdown` completes (then
/// stops accepting and waits for open streams to end), sweeping idle requests.
pub async fn serve(
    listener: TcpListener,
    service: IngestService,
    how: IngestListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    if let Some(ttl) = service.limits.request_ttl {
        let sweeper = service.clone();
        let period = (ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                sweeper.evict_idle();
            }
        });
    }
    let limits = service.limits;
    let token = how.token;
    let server = tonic::service::interceptor::InterceptedService::new(
        IngestRoute::new(service),
        move |request: Request<()>| match &token {
            Some(token)
                if !token.accepts(
                    request
                        .metadata()
                        .get("authorization")
                        .map(|v| v.as_bytes()),
                ) =>
            {
                Err(Status::unauthenticated("a bearer token is required"))
            }
            _ => Ok(request),
        },
    );
    // HTTP/2 pings are bytes: streams, not bytes, keep an ingest
    // connection from idling.
    let incoming = listen::incoming(
        listener,
        how.limits,
        how.tls,
        listen::IdleBy::Streams,
        "ingest",
    );
    // The windows bound what a connection's peer can make the server hold
    // before a stream reads it: a connection's window on every connection
    // at once stays a few hundred MiB below what 64 connections of 16 MiB
    // messages would take.
    tonic::transport::Server::builder()
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(2 << 20))
        .max_concurrent_streams(Some(limits.max_streams_per_connection))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(server)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
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
