//! The ingest service's gRPC route, written out instead of generated so that
//! a message is bounded before it is kept, and before it is decoded:
//!
//! - its length is checked against `--max-message-bytes` as soon as its
//!   header arrives;
//! - the bytes of messages that have arrived in part are bounded across all
//!   streams and connections ([`Buffered`], `--ingest-max-buffered-bytes`):
//!   room is lent to one message at a time, first come first served, and
//!   given back once the message has been applied;
//! - a message must arrive in full within its deadline ([`MessageDeadline`]),
//!   waiting for room included, or its stream ends: a sender that announces
//!   a large message and stalls holds its room for that long at most;
//! - its bytes are scanned ([`prescan`](super::super::prescan)) and a message that
//!   would decode into far more than its size (a batch of millions of empty
//!   records) comes out as [`Incoming::Refused`]: the stream counts it,
//!   names it and goes on with the next message.
//!
//! A message that does not decode is counted and named the same way, and the
//! stream goes on: gRPC's framing tells where the next message begins. The
//! framing is read here, not by tonic's `Streaming`, whose buffer would keep
//! the capacity of the largest message a stream ever had for as long as the
//! stream is open; a message is read into a buffer of exactly its length,
//! freed once it is decoded. The route still runs under tonic's server
//! (HTTP/2, TLS, the token's interceptor).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame};
use prost::Message;
use tokio::time::Instant;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::NamedService;
use tonic::Status;

use crate::listen;
use crate::sources::ingest::prescan::DecodeLimits;
use crate::sources::ingest::proto::pb;
use crate::sources::ingest::room::{Buffered, MessageDeadline, Room, Transport};
use crate::sources::ingest::service::{
    decode_message, describe_summary, Incoming, IngestService, Summary,
};

/// The trailer that carries a cut stream's [`pb::IngestSummary`]
/// (protobuf, base64 in the metadata as `-bin` keys are).
pub const SUMMARY_TRAILER: &str = "ingest-summary-bin";

/// The gRPC method the route serves.
pub const STREAM_PATH: &str = "/vllm_otel_metrics.v1.Ingest/Stream";

/// One client-streaming call, the `number`th on this listener: its
/// messages applied in order; answered, when the client closes its
/// side, with what it did. A stream that ends on an error (a message
/// too long, late, or without room) is counted and logged.
async fn stream<B>(
    service: &IngestService,
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
    let mut cut = service.cut_signal();
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
                    summary.records_applied()
                );
                service.invalid(message.clone(), &mut summary);
                let peer = connection
                    .as_ref()
                    .and_then(|info| info.peer)
                    .map(|peer| format!(" from {peer}"))
                    .unwrap_or_default();
                tracing::warn!("ingest stream {number}{peer} ended: {message}");
                let code = match status.code() {
                    code @ (tonic::Code::ResourceExhausted | tonic::Code::DeadlineExceeded) => code,
                    _ => tonic::Code::InvalidArgument,
                };
                return Err(Status::new(code, message));
            }
        };
        if let Some(streams) = &streams {
            streams.touch();
        }
        service
            .apply_incoming(incoming, "", &mut position, &mut summary)
            .await;
    }
    Ok(summary.finish())
}

/// The ingest route: [`STREAM_PATH`] into an [`IngestService`].
#[derive(Debug, Clone)]
pub(super) struct IngestRoute {
    service: IngestService,
    /// Numbers the streams, for the log.
    numbers: Arc<AtomicU64>,
}

impl IngestRoute {
    /// The route into `service`.
    pub(super) fn new(service: IngestService) -> Self {
        IngestRoute {
            service,
            numbers: Arc::default(),
        }
    }
}

impl NamedService for IngestRoute {
    const NAME: &'static str = "vllm_otel_metrics.v1.Ingest";
}

impl<B> Service<http::Request<B>> for IngestRoute
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != STREAM_PATH {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        if let Some(encoding) = request
            .headers()
            .get("grpc-encoding")
            .filter(|encoding| encoding.as_bytes() != b"identity")
        {
            let status = Status::unimplemented(format!(
                "messages compressed with {} are not accepted; send them uncompressed",
                String::from_utf8_lossy(encoding.as_bytes())
            ));
            return Box::pin(async { Ok(status.into_http()) });
        }
        let service = self.service.clone();
        let number = self.numbers.fetch_add(1, Ordering::Relaxed) + 1;
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let connection = parts.extensions.get::<crate::listen::ConnInfo>().cloned();
            let messages = Messages::new(body, &service);
            Ok(match stream(&service, number, connection, messages).await {
                Ok(summary) => answer(&summary),
                Err(status) => status.into_http(),
            })
        })
    }
}

/// The answer to a stream: its summary, then `grpc-status: 0`.
fn answer(summary: &pb::IngestSummary) -> http::Response<tonic::body::Body> {
    let message = summary.encode_to_vec();
    let mut frame = Vec::with_capacity(5 + message.len());
    frame.push(0);
    frame.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    frame.extend_from_slice(&message);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let mut response = http::Response::new(tonic::body::Body::new(Answer {
        data: Some(Bytes::from(frame)),
        trailers: Some(trailers),
    }));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// The body of [`answer`]: one message, then the trailers.
struct Answer {
    data: Option<Bytes>,
    trailers: Option<http::HeaderMap>,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(data) = this.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

/// What reading a request body gave.
enum Read {
    Data(Bytes),
    End,
    /// The message's deadline passed first.
    Late,
}

/// A stream's messages, read from its request body one at a time.
struct Messages<B> {
    body: Pin<Box<B>>,
    /// What was read of the body and not yet taken.
    pending: Bytes,
    buffered: Buffered,
    deadline: Option<MessageDeadline>,
    max_message_bytes: usize,
    decode: DecodeLimits,
    /// The room of the message returned last: given back when the next
    /// one is asked for, once that one has been applied.
    room: Option<Room>,
}

impl<B> Messages<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<StdError>,
{
    fn new(body: B, service: &IngestService) -> Self {
        Messages {
            body: Box::pin(body),
            pending: Bytes::new(),
            buffered: service.buffered().clone(),
            deadline: service.message_deadline(),
            max_message_bytes: service.max_message_bytes(),
            decode: service.decode_limits(),
            room: None,
        }
    }

    /// The next message; None when the client has closed its side (or
    /// cancelled the call). An error ends the stream: the framing is lost,
    /// the message is too long, it missed its deadline, or the client
    /// broke the stream.
    pub(super) async fn next(&mut self) -> Result<Option<Incoming>, Status> {
        self.room = None;
        match self.read_message().await {
            Err(status) if status.code() == tonic::Code::Cancelled => Ok(None),
            read => read,
        }
    }

    async fn read_message(&mut self) -> Result<Option<Incoming>, Status> {
        // Bytes of this message already read came with the message before
        // it: its time runs from now, when it is read on.
        let mut began = (!self.pending.is_empty()).then(Instant::now);
        let mut header = [0u8; 5];
        let mut have = 0;
        while have < 5 {
            if self.pending.is_empty() {
                let until = began.and_then(|began| self.until(began, 0));
                match self.read(until).await? {
                    Read::Data(data) => {
                        self.pending = data;
                        began.get_or_insert_with(Instant::now);
                    }
                    Read::End if have == 0 => return Ok(None),
                    Read::End => {
                        return Err(Status::invalid_argument(
                            "the stream ended inside a message's header",
                        ))
                    }
                    Read::Late => return Err(self.late(0, have, true)),
                }
            }
            let n = (5 - have).min(self.pending.len());
            header[have..have + n].copy_from_slice(&self.pending[..n]);
            self.pending.advance(n);
            have += n;
        }
        let began = began.unwrap_or_else(Instant::now);
        if header[0] != 0 {
            return Err(Status::invalid_argument(
                "a compressed message, and no compression was agreed",
            ));
        }
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if length > self.max_message_bytes {
            return Err(Status::invalid_argument(format!(
                "a message of {length} bytes, above the {} of --max-message-bytes",
                self.max_message_bytes
            )));
        }
        // Whole in what was read already (at most one HTTP/2 frame): no
        // room to lend, nothing to copy.
        if self.pending.len() >= length {
            let message = self.pending.split_to(length);
            return Ok(Some(decode_message(&message, &self.decode)));
        }
        let until = self.until(began, length);
        let lend = self.buffered.lend(Transport::Tcp, length);
        let room = match until {
            Some(until) => tokio::time::timeout_at(until, lend)
                .await
                .map_err(|_| self.late(length, 0, false))?,
            None => lend.await,
        }
        .map_err(|no_room| Status::resource_exhausted(no_room.to_string()))?;
        // Exactly the message's length: nothing kept beyond the room lent.
        let mut message = Vec::with_capacity(length);
        message.extend_from_slice(&self.pending);
        self.pending = Bytes::new();
        while message.len() < length {
            match self.read(until).await? {
                Read::Data(mut data) => {
                    let n = (length - message.len()).min(data.len());
                    message.extend_from_slice(&data[..n]);
                    data.advance(n);
                    self.pending = data;
                }
                Read::End => {
                    return Err(Status::invalid_argument(format!(
                        "the stream ended inside a message ({} of its {length} bytes arrived)",
                        message.len()
                    )))
                }
                Read::Late => return Err(self.late(length, message.len(), true)),
            }
        }
        let decoded = decode_message(&message, &self.decode);
        drop(message);
        self.room = Some(room);
        Ok(Some(decoded))
    }

    /// When a message of `length` bytes begun at `began` is late.
    fn until(&self, began: Instant, length: usize) -> Option<Instant> {
        self.deadline
            .map(|deadline| began + deadline.for_length(length))
    }

    /// Why a message of `length` bytes (0: its header) is late, `have`
    /// of them having arrived; `lent` says whether it had its room.
    fn late(&self, length: usize, have: usize, lent: bool) -> Status {
        let within = self
            .deadline
            .map_or(0.0, |deadline| deadline.for_length(length).as_secs_f64());
        Status::deadline_exceeded(if !lent {
            format!(
                "no room for its {length} bytes within its deadline of {within:.1} s: the unfinished messages of other streams held --ingest-max-buffered-bytes"
            )
        } else if length == 0 {
            format!(
                "{have} of its 5 header bytes arrived within its deadline of {within:.1} s (--ingest-message-deadline)"
            )
        } else {
            format!(
                "{have} of its {length} bytes arrived within its deadline of {within:.1} s (--ingest-message-deadline, --ingest-message-deadline-per-mib)"
            )
        })
    }

    /// The next bytes of the body, or its end, or [`Read::Late`] at `until`.
    async fn read(&mut self, until: Option<Instant>) -> Result<Read, Status> {
        loop {
            let next = std::future::poll_fn(|cx| self.body.as_mut().poll_frame(cx));
            let next = match until {
                None => next.await,
                Some(until) => match tokio::time::timeout_at(until, next).await {
                    Ok(next) => next,
                    Err(_) => return Ok(Read::Late),
                },
            };
            match next {
                None => return Ok(Read::End),
                Some(Err(e)) => return Err(Status::from_error(e.into())),
                Some(Ok(frame)) => {
                    // Trailers, and empty frames, carry no message bytes.
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            return Ok(Read::Data(data));
                        }
                    }
                }
            }
        }
    }
}
