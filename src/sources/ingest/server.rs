//! The ingest service's gRPC route, written out instead of generated so that
//! a message is bounded before it is decoded:
//!
//! - its bytes are scanned ([`prescan`](super::prescan)) and a message that
//!   would decode into far more than its size (a batch of millions of empty
//!   records) comes out as [`Incoming::Refused`]: the stream counts it, names
//!   it and goes on with the next message;
//! - the bytes of messages that have arrived in part are bounded across all
//!   streams ([`Buffered`], `--ingest-max-buffered-bytes`): a stream whose
//!   next message would take the server past the bound ends with
//!   `RESOURCE_EXHAUSTED` as soon as the message's length is known, before
//!   its bytes are kept.
//!
//! A message that does not decode is counted and named the same way, and the
//! stream goes on: gRPC's framing tells where the next message begins.
//! Everything else is tonic's own `Grpc` server, as the generated code uses it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame};
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{ClientStreamingService, NamedService};
use tonic::{Request, Response, Status, Streaming};

use super::grpc::IngestService;
use super::prescan::{self, DecodeLimits};
use super::proto::pb;

/// The gRPC method the route serves.
pub const STREAM_PATH: &str = "/vllm_otel_metrics.v1.Ingest/Stream";

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

/// The bytes the server may hold in messages that have arrived in part,
/// shared by every stream and connection (gRPC and the ingest socket).
#[derive(Debug, Clone)]
pub struct Buffered {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl Buffered {
    /// A bound of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        let limit = limit.min(Semaphore::MAX_PERMITS);
        Buffered {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Grows `held` to `bytes`, or says why it cannot. A stream holds the
    /// largest message it has had for as long as it is open: its buffer
    /// keeps that capacity.
    pub fn hold(
        &self,
        held: &mut Option<OwnedSemaphorePermit>,
        bytes: usize,
    ) -> Result<(), String> {
        let have = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        if bytes <= have {
            return Ok(());
        }
        let more = u32::try_from(bytes - have).unwrap_or(u32::MAX);
        match Arc::clone(&self.permits).try_acquire_many_owned(more) {
            Ok(permit) => {
                match held {
                    Some(held) => held.merge(permit),
                    None => *held = Some(permit),
                }
                Ok(())
            }
            Err(_) => Err(format!(
                "a message of {bytes} bytes would take the bytes held in unfinished messages past {} (--ingest-max-buffered-bytes); send it again later",
                self.limit
            )),
        }
    }
}

/// Decodes one message of the ingest protocol as both transports do (gRPC's
/// route and the ingest socket): scanned first ([`prescan::check`]), within
/// `limits` and the protobuf share of the decode budget
/// ([`crate::sources::budget`]), then decoded by prost.
pub fn decode_message(bytes: &[u8], limits: &DecodeLimits) -> Incoming {
    match prescan::check(bytes, limits) {
        Ok(()) => decoded(pb::Record::decode(bytes)),
        Err(refusal) => Incoming::Refused(refusal),
    }
}

/// The codec of the route: protobuf, the decoder scanning first.
struct IngestCodec {
    limits: DecodeLimits,
}

impl Codec for IngestCodec {
    type Encode = pb::IngestSummary;
    type Decode = Incoming;
    type Encoder = tonic_prost::ProstEncoder<pb::IngestSummary>;
    type Decoder = IngestDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        IngestDecoder {
            limits: self.limits,
        }
    }
}

/// Scans each message, then decodes it.
struct IngestDecoder {
    limits: DecodeLimits,
}

impl Decoder for IngestDecoder {
    type Item = Incoming;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Incoming>, Status> {
        let length = buf.remaining();
        // tonic keeps a message in one contiguous buffer; copy only if not.
        let incoming = if buf.chunk().len() == length {
            decode_message(buf.chunk(), &self.limits)
        } else {
            decode_message(&buf.copy_to_bytes(length), &self.limits)
        };
        buf.advance(buf.remaining());
        Ok(Some(incoming))
    }
}

/// A decoded message, or why it did not decode: the framing is intact, so
/// the stream goes on with the next one.
fn decoded(result: Result<pb::Record, prost::DecodeError>) -> Incoming {
    match result {
        Ok(record) => Incoming::Record(record),
        Err(e) => Incoming::Undecodable(e.to_string()),
    }
}

/// The ingest route: [`STREAM_PATH`] into an [`IngestService`].
#[derive(Debug, Clone)]
pub struct IngestRoute {
    service: IngestService,
}

impl IngestRoute {
    /// The route into `service`.
    pub fn new(service: IngestService) -> Self {
        IngestRoute { service }
    }
}

impl NamedService for IngestRoute {
    const NAME: &'static str = "vllm_otel_metrics.v1.Ingest";
}

struct StreamMethod(IngestService);

impl ClientStreamingService<Incoming> for StreamMethod {
    type Response = pb::IngestSummary;
    type Future = BoxFuture<Response<pb::IngestSummary>, Status>;

    fn call(&mut self, request: Request<Streaming<Incoming>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.stream(request).await })
    }
}

impl<B> Service<http::Request<B>> for IngestRoute
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != STREAM_PATH {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        let method = StreamMethod(self.service.clone());
        let mut grpc = tonic::server::Grpc::new(IngestCodec {
            limits: self.service.decode_limits(),
        })
        .apply_max_message_size_config(Some(self.service.max_message_bytes()), None);
        let request = request.map(|body| BoundedBody {
            body: Box::pin(body),
            buffered: self.service.buffered().clone(),
            held: None,
            header: [0; 5],
            header_have: 0,
            message_left: 0,
            max_message_bytes: self.service.max_message_bytes(),
        });
        Box::pin(async move { Ok(grpc.client_streaming(method, request).await) })
    }
}

/// A request body that follows the gRPC message framing (a flag byte and a
/// big-endian `u32` length before each message) and holds, for its stream,
/// [`Buffered`] room for the largest message it has begun.
struct BoundedBody<B> {
    body: Pin<Box<B>>,
    buffered: Buffered,
    held: Option<OwnedSemaphorePermit>,
    header: [u8; 5],
    header_have: usize,
    message_left: usize,
    max_message_bytes: usize,
}

impl<B> BoundedBody<B> {
    /// Follows the framing through `data`; an error when a message begun
    /// in it does not fit the bound.
    fn follow(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            if self.message_left > 0 {
                let n = self.message_left.min(data.len());
                self.message_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.header_have).min(data.len());
            self.header[self.header_have..self.header_have + n].copy_from_slice(&data[..n]);
            self.header_have += n;
            data = &data[n..];
            if self.header_have == 5 {
                self.header_have = 0;
                let length =
                    u32::from_be_bytes(self.header[1..5].try_into().expect("4 bytes")) as usize;
                self.message_left = length;
                // One above the size limit is tonic's to refuse, on the
                // header, before it keeps a byte of it.
                if length <= self.max_message_bytes {
                    self.buffered
                        .hold(&mut self.held, length)
                        .map_err(Status::resource_exhausted)?;
                }
            }
        }
        Ok(())
    }
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<StdError>,
{
    type Data = Bytes;
    type Error = StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
        let this = &mut *self;
        match this.body.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if let Err(status) = this.follow(data) {
                        return Poll::Ready(Some(Err(Box::new(status))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
