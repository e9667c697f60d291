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
//! - its bytes are scanned ([`prescan`]) and a message that
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::{Body, Frame};
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::NamedService;
use tonic::Status;

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

/// Decodes one message of the ingest protocol as both transports do (gRPC's
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

/// How long a message may take to arrive in full: `base`, plus `per_mib`
/// for each MiB of its length. The time runs from the message's first byte
/// (or, when that byte came with the message before it, from when that one
/// had been applied), and covers a wait for room in [`Buffered`].
///
/// ```
/// use std::time::Duration;
/// use vllm_otel_metrics::sources::ingest::server::MessageDeadline;
///
/// let deadline = MessageDeadline::DEFAULT;
/// assert_eq!(deadline.for_length(0), Duration::from_secs(5));
/// // The largest message by default, 16 MiB: 5 s + 16 × 2 s.
/// assert_eq!(deadline.for_length(16 << 20), Duration::from_secs(37));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageDeadline {
    /// The time any message may take, its header included.
    pub base: Duration,
    /// The time added for each MiB of the message's length.
    pub per_mib: Duration,
}

impl MessageDeadline {
    /// 5 s, and 2 s a MiB: a 16 MiB message may take 37 s, which a sender
    /// at 0.5 MiB/s (4 Mbit/s) still meets. The vLLM plugin sends over a
    /// local socket at hundreds of MiB/s.
    pub const DEFAULT: MessageDeadline = MessageDeadline {
        base: Duration::from_secs(5),
        per_mib: Duration::from_secs(2),
    };

    /// The deadline of a message of `bytes` bytes.
    pub fn for_length(&self, bytes: usize) -> Duration {
        self.base + self.per_mib.mul_f64(bytes as f64 / f64::from(1u32 << 20))
    }
}

/// Which listener a message came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// The gRPC port.
    Tcp,
    /// The ingest socket.
    #[cfg_attr(not(unix), allow(dead_code))]
    Socket,
}

/// The bytes the server may hold in messages that have arrived in part,
/// shared by every stream and connection (gRPC and the ingest socket).
///
/// Room is lent to one message at a time: a stream or connection asks for
/// a message's length when its header arrives, waits for it first come,
/// first served (reading nothing more meanwhile), and gives it back once
/// the message has been applied. When the ingest socket is served too
/// ([`Buffered::keep_half_for_socket`]), the gRPC port's streams together
/// hold at most half of the bound: the port is open to every local user
/// (or further), the socket to this user alone, and senders on the port
/// cannot take the room the socket's senders need.
#[derive(Debug, Clone)]
pub struct Buffered {
    /// Every message's room.
    budget: Arc<Semaphore>,
    /// The gRPC port's room (within `budget`).
    tcp: Arc<Semaphore>,
    /// What `tcp` holds in all.
    tcp_limit: Arc<AtomicUsize>,
    /// Whether half was kept for the socket.
    halved: Arc<AtomicBool>,
    limit: usize,
}

/// Room lent to one message; given back when dropped.
#[derive(Debug)]
pub(crate) struct Room {
    _tcp: Option<OwnedSemaphorePermit>,
    _budget: OwnedSemaphorePermit,
}

impl Buffered {
    /// A bound of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        let limit = limit.min(Semaphore::MAX_PERMITS);
        Buffered {
            budget: Arc::new(Semaphore::new(limit)),
            tcp: Arc::new(Semaphore::new(limit)),
            tcp_limit: Arc::new(AtomicUsize::new(limit)),
            halved: Arc::new(AtomicBool::new(false)),
            limit,
        }
    }

    /// The bound, bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// What the gRPC port's streams may hold together, bytes: the bound,
    /// or half of it once the socket is served.
    pub fn tcp_limit(&self) -> usize {
        self.tcp_limit.load(Ordering::Relaxed)
    }

    /// Keeps half of the bound from the gRPC port's streams, for the
    /// ingest socket's connections (the first time only; waits for room
    /// the port's streams hold beyond it to be given back).
    pub async fn keep_half_for_socket(&self) {
        if self.halved.swap(true, Ordering::Relaxed) {
            return;
        }
        let kept = self.limit - self.limit / 2;
        self.tcp_limit.store(self.limit / 2, Ordering::Relaxed);
        let mut left = kept;
        while left > 0 {
            let n = u32::try_from(left).unwrap_or(u32::MAX);
            if let Ok(permit) = self.tcp.acquire_many(n).await {
                permit.forget();
            }
            left -= n as usize;
        }
    }

    /// Room for a message of `bytes` bytes on `transport`: waits for it,
    /// first come first served; an error at once when the message is more
    /// than its transport may ever hold.
    pub(crate) async fn lend(&self, transport: Transport, bytes: usize) -> Result<Room, String> {
        let cap = match transport {
            Transport::Tcp => self.tcp_limit(),
            Transport::Socket => self.limit,
        };
        let n = match u32::try_from(bytes) {
            Ok(n) if bytes <= cap => n,
            _ => {
                return Err(match transport {
                    Transport::Tcp if cap < self.limit => format!(
                        "a message of {bytes} bytes is more than the {cap} bytes the gRPC port's streams may hold at once (half of --ingest-max-buffered-bytes, the other half kept for --ingest-socket)"
                    ),
                    _ => format!(
                        "a message of {bytes} bytes is more than the {} bytes of --ingest-max-buffered-bytes",
                        self.limit
                    ),
                })
            }
        };
        let closed = |_| "the server is shutting down".to_owned();
        let tcp = match transport {
            Transport::Tcp => Some(
                Arc::clone(&self.tcp)
                    .acquire_many_owned(n)
                    .await
                    .map_err(closed)?,
            ),
            Transport::Socket => None,
        };
        let budget = Arc::clone(&self.budget)
            .acquire_many_owned(n)
            .await
            .map_err(closed)?;
        Ok(Room {
            _tcp: tcp,
            _budget: budget,
        })
    }
}

/// The ingest route: [`STREAM_PATH`] into an [`IngestService`].
#[derive(Debug, Clone)]
pub struct IngestRoute {
    service: IngestService,
    /// Numbers the streams, for the log.
    numbers: Arc<AtomicU64>,
}

impl IngestRoute {
    /// The route into `service`.
    pub fn new(service: IngestService) -> Self {
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
            Ok(match service.stream(number, connection, messages).await {
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
pub(super) struct Messages<B> {
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
        .map_err(Status::resource_exhausted)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn room_is_lent_first_come_first_served_and_given_back() {
        let buffered = Buffered::new(100);
        let first = buffered.lend(Transport::Socket, 60).await.unwrap();
        // The second waits for the first's room.
        let second = buffered.lend(Transport::Socket, 60);
        tokio::pin!(second);
        assert!(futures_poll(&mut second).is_none());
        drop(first);
        let second = second.await.unwrap();
        assert!(buffered
            .lend(Transport::Socket, 101)
            .await
            .unwrap_err()
            .contains("more than the 100 bytes of --ingest-max-buffered-bytes"));
        drop(second);
    }

    #[tokio::test]
    async fn with_the_socket_served_the_port_holds_at_most_half() {
        let buffered = Buffered::new(100);
        buffered.keep_half_for_socket().await;
        assert_eq!(buffered.tcp_limit(), 50);
        let error = buffered.lend(Transport::Tcp, 51).await.unwrap_err();
        assert!(
            error.contains("half of --ingest-max-buffered-bytes"),
            "{error}"
        );
        let port = buffered.lend(Transport::Tcp, 50).await.unwrap();
        // The port's streams wait; the socket's connections do not.
        let more = buffered.lend(Transport::Tcp, 1);
        tokio::pin!(more);
        assert!(futures_poll(&mut more).is_none());
        let socket = buffered.lend(Transport::Socket, 50).await.unwrap();
        drop((port, socket));
        more.await.unwrap();
    }

    /// Polls `future` once.
    fn futures_poll<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match Pin::new(future).poll(&mut Context::from_waker(waker)) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        }
    }
}
