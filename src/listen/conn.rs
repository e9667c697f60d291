//! Accepted connections and their guards: idle and write timeouts, and the
//! slot of the connection cap each one holds until it is dropped.

use super::config::ListenerLimits;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{sleep, Instant, Sleep};
use tokio_rustls::server::TlsStream;

/// An accepted connection, plain or TLS, holding its slot of the
/// connection cap until it is dropped.
#[derive(Debug)]
pub(crate) enum Conn {
    /// Plain TCP.
    Plain(Guarded),
    /// TLS over TCP.
    Tls(Box<TlsStream<Guarded>>),
}

impl Conn {
    /// The peer's address.
    pub(crate) fn peer(&self) -> Option<std::net::SocketAddr> {
        self.guarded().stream.peer_addr().ok()
    }

    fn guarded(&self) -> &Guarded {
        match self {
            Conn::Plain(io) => io,
            Conn::Tls(io) => io.get_ref().0,
        }
    }
}

/// What keeps a connection from being idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdleBy {
    /// Any byte read or written (`/metrics`: each request is bytes).
    Bytes,
    /// An open stream or a message on one (gRPC ingest): the HTTP/2 pings
    /// a connection answers are bytes, and must not keep a connection
    /// that carries no stream.
    Streams,
}

/// The streams of one connection, for [`IdleBy::Streams`]: the server
/// notes each stream it opens ([`StreamActivity::opened`]) and each message
/// ([`StreamActivity::touch`]).
#[derive(Debug, Default)]
pub(crate) struct StreamActivity {
    open: AtomicUsize,
    touched: AtomicBool,
}

impl StreamActivity {
    /// Notes a stream open until the guard is dropped.
    pub(crate) fn opened(self: &Arc<Self>) -> OpenStream {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.touch();
        OpenStream(Arc::clone(self))
    }

    /// Notes activity (a message).
    pub(crate) fn touch(&self) {
        self.touched.store(true, Ordering::Relaxed);
    }

    /// Whether a stream is open or there was activity since the last look.
    fn busy(&self) -> bool {
        self.touched.swap(false, Ordering::Relaxed) || self.open.load(Ordering::Relaxed) > 0
    }
}

/// A stream open on a connection; dropped when the stream ends.
#[derive(Debug)]
pub(crate) struct OpenStream(Arc<StreamActivity>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// What the server learns of a connection with each request (tonic puts it
/// in the request's extensions).
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    /// The connection's streams, when they are what keeps it from idling.
    pub(crate) streams: Option<Arc<StreamActivity>>,
    /// The peer's address, for the log.
    pub(crate) peer: Option<std::net::SocketAddr>,
}

/// A TCP stream with idle and write timeouts and a connection slot.
#[derive(Debug)]
pub(crate) struct Guarded {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    idle_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    read_deadline: Option<Pin<Box<Sleep>>>,
    write_deadline: Option<Pin<Box<Sleep>>>,
    /// Set when streams, not bytes, keep the connection from idling.
    streams: Option<Arc<StreamActivity>>,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

impl Guarded {
    pub(super) fn new(
        stream: TcpStream,
        slot: OwnedSemaphorePermit,
        limits: &ListenerLimits,
        idle_by: IdleBy,
    ) -> Self {
        Guarded {
            streams: match idle_by {
                IdleBy::Bytes => None,
                IdleBy::Streams => Some(Arc::default()),
            },
            read_deadline: limits.idle_timeout.map(|t| Box::pin(sleep(t))),
            stream,
            _slot: slot,
            idle_timeout: limits.idle_timeout,
            write_timeout: limits.write_timeout,
            write_deadline: None,
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if polled.is_ready() && this.streams.is_none() {
            this.reset_idle();
            return polled;
        }
        if this.idle_expired(cx) {
            return Poll::Ready(Err(timed_out(if this.streams.is_some() {
                "the connection carried no stream for the idle timeout"
            } else {
                "the peer sent nothing for the idle timeout"
            })));
        }
        polled
    }
}

impl Guarded {
    fn reset_idle(&mut self) {
        if let (Some(deadline), Some(idle)) = (&mut self.read_deadline, self.idle_timeout) {
            deadline.as_mut().reset(Instant::now() + idle);
        }
    }

    /// Whether the idle deadline passed with nothing to keep the
    /// connection (with [`IdleBy::Streams`], a deadline that passes while
    /// a stream is open or was active starts over).
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.read_deadline.as_mut() else {
            return false;
        };
        if deadline.as_mut().poll(cx).is_pending() {
            return false;
        }
        if self.streams.as_ref().is_some_and(|streams| streams.busy()) {
            self.reset_idle();
            // Registers the waker with the new deadline.
            return self.idle_expired(cx);
        }
        true
    }

    /// Notes the outcome of a write: progress resets both deadlines; a
    /// write that stays pending past the write timeout fails.
    fn guard_write(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(result) => {
                self.write_deadline = None;
                // Taking bytes is activity too: a long response is not idle
                // (with streams counted, the streams say so themselves).
                if self.streams.is_none() {
                    self.reset_idle();
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let Some(timeout) = self.write_timeout else {
                    return Poll::Pending;
                };
                let deadline = self
                    .write_deadline
                    .get_or_insert_with(|| Box::pin(sleep(timeout)));
                if deadline.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Err(timed_out(
                        "the peer took no written byte for the write timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        self.guard_write(cx, polled)
    }

    /// Vectored, so that hyper writes a response from its shared body
    /// instead of copying it into a buffer per connection.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.guard_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write(cx, data),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(io) => io.is_write_vectored(),
            Conn::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_flush(cx),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

// tonic's server asks each connection for its peer.
#[cfg(feature = "grpc")]
impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        ConnInfo {
            streams: self.guarded().streams.clone(),
            peer: self.peer(),
        }
    }
}
