//! Accepted connections and their guards: idle and write timeouts, and the
//! slot of the connection cap each one holds until it is dropped.

use super::ListenerLimits;
use std::future::Future;
use std::io;
use std::pin::Pin;
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
pub enum Conn {
    /// Plain TCP.
    Plain(Guarded),
    /// TLS over TCP.
    Tls(Box<TlsStream<Guarded>>),
}

impl Conn {
    /// The peer's address.
    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        match self {
            Conn::Plain(io) => io.stream.peer_addr().ok(),
            Conn::Tls(io) => io.get_ref().0.stream.peer_addr().ok(),
        }
    }
}

/// A TCP stream with idle and write timeouts and a connection slot.
#[derive(Debug)]
pub struct Guarded {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    idle_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    read_deadline: Option<Pin<Box<Sleep>>>,
    write_deadline: Option<Pin<Box<Sleep>>>,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

impl Guarded {
    pub(super) fn new(
        stream: TcpStream,
        slot: OwnedSemaphorePermit,
        limits: &ListenerLimits,
    ) -> Self {
        Guarded {
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
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if let (Some(deadline), Some(idle)) = (&mut this.read_deadline, this.idle_timeout) {
                    deadline.as_mut().reset(Instant::now() + idle);
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let expired = this
                    .read_deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    Poll::Ready(Err(timed_out("the peer sent nothing for the idle timeout")))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl Guarded {
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
                // Taking bytes is activity too: a long response is not idle.
                if let (Some(deadline), Some(idle)) = (&mut self.read_deadline, self.idle_timeout) {
                    deadline.as_mut().reset(Instant::now() + idle);
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
    type ConnectInfo = Option<std::net::SocketAddr>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.peer()
    }
}
