//! What a message may take while it arrives, on every transport: room in
//! the bytes held for messages that have arrived in part ([`Buffered`],
//! `--ingest-max-buffered-bytes`), lent to one message at a time, first come
//! first served, and given back once it has been applied; and time
//! ([`MessageDeadline`]): a sender that announces a large message and stalls
//! holds its room for that long at most.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a message may take to arrive in full: `base`, plus `per_mib`
/// for each MiB of its length. The time runs from the message's first byte
/// (or, when that byte came with the message before it, from when that one
/// had been applied), and covers a wait for room in [`Buffered`].
///
/// ```
/// use std::time::Duration;
/// use vllm_otel_metrics::sources::ingest::room::MessageDeadline;
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
    pub(crate) async fn lend(&self, transport: Transport, bytes: usize) -> Result<Room, NoRoom> {
        let cap = match transport {
            Transport::Tcp => self.tcp_limit(),
            Transport::Socket => self.limit,
        };
        let n = match u32::try_from(bytes) {
            Ok(n) if bytes <= cap => n,
            _ => {
                return Err(NoRoom::TooLarge {
                    bytes,
                    cap,
                    halved: transport == Transport::Tcp && cap < self.limit,
                })
            }
        };
        let closed = |_| NoRoom::ShuttingDown;
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

/// Why a message gets no room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoRoom {
    /// More than its transport may ever hold (`cap` bytes; `halved`: the
    /// gRPC port's half, the other half kept for the socket).
    TooLarge {
        bytes: usize,
        cap: usize,
        halved: bool,
    },
    /// The server closed the budget while the message waited.
    ShuttingDown,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoRoom::TooLarge {
                bytes,
                cap,
                halved: true,
            } => write!(
                f,
                "a message of {bytes} bytes is more than the {cap} bytes the gRPC port's streams may hold at once (half of --ingest-max-buffered-bytes, the other half kept for --ingest-socket)"
            ),
            NoRoom::TooLarge { bytes, cap, .. } => write!(
                f,
                "a message of {bytes} bytes is more than the {cap} bytes of --ingest-max-buffered-bytes"
            ),
            NoRoom::ShuttingDown => f.write_str("the server is shutting down"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

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
            .to_string()
            .contains("more than the 100 bytes of --ingest-max-buffered-bytes"));
        drop(second);
    }

    #[tokio::test]
    async fn with_the_socket_served_the_port_holds_at_most_half() {
        let buffered = Buffered::new(100);
        buffered.keep_half_for_socket().await;
        assert_eq!(buffered.tcp_limit(), 50);
        let error = buffered
            .lend(Transport::Tcp, 51)
            .await
            .unwrap_err()
            .to_string();
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
