//! The ingest socket: a Unix domain socket over which a process of this
//! host's user sends the records the gRPC service takes, without gRPC.
//!
//! Why a second transport: the engine-core tap runs inside vLLM's engine
//! core, where every microsecond of Python holds the GIL against the step
//! loop. Over this socket the tap hands vLLM's encoded frames to the kernel
//! as they are (one `sendmsg` of a hand-built record around them, the copy
//! done with the GIL released); gRPC's Python layer and protobuf's copies
//! cost about as much as vLLM's own encode of the step (docs/PERFORMANCE.md).
//!
//! The wire: each message is a protobuf
//! [`pb::Record`](super::proto::pb::Record) (a batch too) after
//! its length, a little-endian `u32`. The sidecar writes back once, when it
//! shuts down with the connection open: the number of messages it read, a
//! little-endian `u64`; the sender sends the messages after those to the
//! next sidecar. Without that answer (a sidecar killed) what was in flight
//! may be lost, as on gRPC.
//!
//! Who may send: the socket file is made `0600` (the plugin keeps it in a
//! `0700` directory of its own), and a connection whose peer runs under
//! another user is closed before anything is read from it. Bounded like the
//! gRPC listener: connections at once, an idle timeout, the message size
//! (checked on the length, before anything is allocated), the bytes held in
//! unfinished messages (room lent by the budget shared with gRPC), the time
//! a message may take to arrive (its deadline), and what a message decodes
//! into (scanned before decoding, as on gRPC). A message that does not
//! decode, or is refused by the scan, is counted and named (`ingest socket,
//! connection N, message M`) and the connection goes on; one longer than
//! the limit, one that finds no room or misses its deadline ends its
//! connection (the stream cannot be resynchronised without reading it).

use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::room::{MessageDeadline, Room, Transport};
use super::service::{decode_message, describe_summary, IngestService, Summary};
use crate::listen::ListenerLimits;

/// A bound ingest socket: its listener, its path and the user it admits.
#[derive(Debug)]
pub struct IngestSocket {
    listener: UnixListener,
    path: PathBuf,
    owner: u32,
}

impl IngestSocket {
    /// Binds `path`, mode `0600`. A socket file already there is replaced
    /// when it is this user's and refuses connections (left by a sidecar
    /// that was killed); anything else there (a live socket, even one too
    /// busy to take a connection, another user's, a link, a file) is an
    /// error naming the path. Nothing at the path is followed: it is
    /// examined with `lstat`.
    ///
    /// The socket is bound under a temporary name in the same directory,
    /// made `0600` there and only then linked to `path`, so that no one
    /// can connect through `path` while its mode is the umask's.
    pub async fn bind(path: &Path) -> io::Result<IngestSocket> {
        let named = |e: io::Error, what: &str| {
            io::Error::new(
                e.kind(),
                format!("ingest socket {}: {what}: {e}", path.display()),
            )
        };
        // Removed however this ends; after the link, `path` names the socket.
        let (listener, temporary) = bind_private(path).map_err(|e| named(e, "cannot listen"))?;
        // The file was made by this process: its owner is this process's user.
        let owner = std::fs::symlink_metadata(&temporary.0)
            .map_err(|e| named(e, "cannot read it back"))?
            .uid();
        if let Ok(existing) = std::fs::symlink_metadata(path) {
            if !existing.file_type().is_socket() {
                return Err(named(
                    io::Error::from(io::ErrorKind::AlreadyExists),
                    "something other than a socket is there",
                ));
            }
            if existing.uid() != owner {
                return Err(named(
                    io::Error::from(io::ErrorKind::PermissionDenied),
                    &format!(
                        "the socket there belongs to uid {}, not {owner}",
                        existing.uid()
                    ),
                ));
            }
            match UnixStream::connect(path).await {
                Ok(_) => {
                    return Err(named(
                        io::Error::from(io::ErrorKind::AddrInUse),
                        "another process listens there",
                    ))
                }
                // Nothing listens: left by a sidecar that was killed.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                // A full backlog (EAGAIN) is a live socket too busy to
                // answer; whatever else it is, it is not known to be stale.
                Err(e) => {
                    return Err(named(
                        io::Error::new(io::ErrorKind::AddrInUse, e),
                        "a socket is there and may be in use (it did not refuse a connection)",
                    ))
                }
            }
            std::fs::remove_file(path).map_err(|e| named(e, "cannot remove the stale socket"))?;
        }
        // A link fails if anything appeared at `path` meanwhile: another
        // sidecar's socket is never replaced.
        std::fs::hard_link(&temporary.0, path).map_err(|e| named(e, "cannot listen"))?;
        drop(temporary);
        Ok(IngestSocket {
            listener,
            path: path.to_owned(),
            owner,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A path removed when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A listener bound in `path`'s directory under a temporary name, made
/// `0600` (checked without following a link), and that name.
fn bind_private(path: &Path) -> io::Result<(UnixListener, Removed)> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let pid = std::process::id();
    let mut attempt = 0u32;
    loop {
        // Short: it must fit in a socket address wherever `path` does
        // (unless `path`'s own name is shorter still).
        let temporary = directory.join(format!(".{pid:x}.{attempt}"));
        let listener = match UnixListener::bind(&temporary) {
            Ok(listener) => listener,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && attempt < 8 => {
                attempt += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let temporary = Removed(temporary);
        std::fs::set_permissions(&temporary.0, std::fs::Permissions::from_mode(0o600))?;
        let made = std::fs::symlink_metadata(&temporary.0)?;
        if !made.file_type().is_socket() || made.mode() & 0o777 != 0o600 {
            return Err(io::Error::other(format!(
                "{} changed under it while it was made private",
                temporary.0.display()
            )));
        }
        return Ok((listener, temporary));
    }
}

impl Drop for IngestSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves `socket` into `service` until `shutdown` completes; then accepts
/// no more and lets open connections read on until they end, or until the
/// service cuts open streams ([`IngestService::cut_open_streams`]).
pub async fn serve(
    socket: IngestSocket,
    service: IngestService,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()>,
) {
    // The gRPC port, which other users can reach, keeps off half of the
    // room for unfinished messages: this user's senders have it.
    service.buffered().keep_half_for_socket().await;
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let numbers = AtomicU64::new(0);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = socket.listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "ingest socket: accepting a connection failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let number = numbers.fetch_add(1, Ordering::Relaxed) + 1;
        match stream.peer_cred() {
            Ok(peer) if peer.uid() == socket.owner => {}
            Ok(peer) => {
                tracing::warn!(
                    "ingest socket, connection {number}: refused, its process (pid {:?}) runs as uid {}, not {}",
                    peer.pid(),
                    peer.uid(),
                    socket.owner
                );
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "ingest socket, connection {number}: refused, its peer is unknown");
                continue;
            }
        }
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(
                "ingest socket, connection {number}: refused, {} connections are open (--ingest-max-connections)",
                limits.max_connections
            );
            continue;
        };
        let service = service.clone();
        let idle = limits.idle_timeout;
        connections.spawn(async move {
            read_connection(stream, &service, number, idle).await;
            drop(slot);
        });
        // Finished connections are reaped as new ones come.
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

/// What a connection's buffer holds while no message longer than it is
/// being read: small messages arrive whole in it and borrow no room.
const BUFFER: usize = 64 * 1024;

/// The socket's name for a message, in what its refusal says.
struct SocketMessage {
    connection: u64,
    message: u64,
}

impl std::fmt::Display for SocketMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ingest socket, connection {}, message {}: ",
            self.connection, self.message
        )
    }
}

/// Reads one connection's messages into `service` until it ends, idles past
/// `idle`, sends what cannot be read on, misses a message's deadline, or
/// the service cuts open streams. Cut, it answers with the number of
/// messages it read (a `u64`, little-endian) before it closes: its sender
/// sends the rest again to the next sidecar, as a gRPC client does after
/// the `ingest-summary-bin` trailer.
///
/// A message longer than [`BUFFER`] is read into a buffer grown to exactly
/// its length once [`Buffered`](super::room::Buffered) lends room for it;
/// when it has been applied the room is given back and the buffer shrinks
/// to [`BUFFER`] again.
async fn read_connection(
    mut stream: UnixStream,
    service: &IngestService,
    number: u64,
    idle: Option<Duration>,
) {
    let max = service.max_message_bytes();
    let deadline = service.message_deadline();
    let mut cut = service.cut_signal();
    let mut summary = Summary::default();
    let mut position = 0u64;
    let mut message = 0u64;
    // Bytes read and not yet applied; `read_buf` into it is cancel-safe, so
    // the cut can interrupt a read without losing what it had read.
    let mut buffer: Vec<u8> = Vec::with_capacity(BUFFER);
    // The room lent for the message at the front of `buffer`.
    let mut room: Option<Room> = None;
    // When the message at the front of `buffer` began: its first byte, or
    // the end of the messages applied before it.
    let mut began: Option<Instant> = None;
    let ended = 'connection: loop {
        let mut start = 0;
        while let Some(header) = buffer.get(start..start + 4) {
            let length = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
            if length > max {
                service.invalid(
                    format!("ingest socket, connection {number}, message {}: {length} bytes, above the {max} of --max-message-bytes; the connection is closed", message + 1),
                    &mut summary,
                );
                break 'connection "a message was too long";
            }
            let Some(body) = buffer.get(start + 4..start + 4 + length) else {
                break;
            };
            message += 1;
            service
                .apply_incoming(
                    decode_message(body, &service.decode_limits()),
                    SocketMessage {
                        connection: number,
                        message,
                    },
                    &mut position,
                    &mut summary,
                )
                .await;
            start += 4 + length;
        }
        if start > 0 {
            buffer.drain(..start);
            began = None;
            if room.take().is_some() {
                buffer.shrink_to(BUFFER);
            }
        }
        // What the message at the front needs in all: its header, then
        // (its length known) its bytes. Its deadline runs from now if
        // part of it is here already.
        let length = buffer
            .get(..4)
            .map(|header| u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize);
        let needs = length.map_or(4, |length| 4 + length);
        let until = if buffer.is_empty() {
            None
        } else {
            let began = *began.get_or_insert_with(Instant::now);
            deadline.map(|deadline| began + deadline.for_length(length.unwrap_or(0)))
        };
        if needs > buffer.capacity() {
            let lend = service.buffered().lend(Transport::Socket, needs);
            let lent = tokio::select! {
                lent = at_most(until, lend) => Some(lent),
                _ = cut.wait_for(|cut| *cut) => None,
            };
            let Some(lent) = lent else {
                answer_cut(&mut stream, message).await;
                break "the server shut down";
            };
            match lent {
                Some(Ok(lent)) => room = Some(lent),
                Some(Err(why)) => {
                    service.invalid(
                        format!("ingest socket, connection {number}, message {}: {why}; the connection is closed", message + 1),
                        &mut summary,
                    );
                    break "the message could not be held";
                }
                None => {
                    service.invalid(
                        format!("ingest socket, connection {number}, message {}: no room for its {needs} bytes within its deadline of {:.1} s: the unfinished messages of other connections and streams held --ingest-max-buffered-bytes; the connection is closed", message + 1, within(deadline, length)),
                        &mut summary,
                    );
                    break "a message found no room in time";
                }
            }
            // Exactly what was lent: the reads below never grow it.
            buffer.reserve_exact(needs - buffer.len());
        }
        let read = tokio::select! {
            read = read_within(&mut stream, &mut buffer, idle, until) => Some(read),
            _ = cut.wait_for(|cut| *cut) => None,
        };
        let Some(read) = read else {
            // What was read and not applied is a part of a message: its
            // sender sends it again, whole.
            answer_cut(&mut stream, message).await;
            break "the server shut down";
        };
        match read {
            Ok(0) if buffer.is_empty() => break "",
            // The sender went away inside a message: it sends the whole
            // message again on its next connection.
            Ok(0) => break "it ended inside a message",
            Ok(_) => {}
            Err(Stop::Idle) => break "it was idle too long",
            Err(Stop::Late) => {
                let what = match length {
                    Some(length) => format!("{} of its {length} bytes", buffer.len() - 4),
                    None => format!("{} of its 4 header bytes", buffer.len()),
                };
                service.invalid(
                    format!(
                        "ingest socket, connection {number}, message {}: {what} arrived within its deadline of {:.1} s (--ingest-message-deadline, --ingest-message-deadline-per-mib); the connection is closed",
                        message + 1,
                        within(deadline, length)
                    ),
                    &mut summary,
                );
                break "a message missed its deadline";
            }
            Err(Stop::Failed) => break "it failed",
        }
    };
    let summary = summary.finish();
    if summary.records_rejected > 0 || !summary.first_rejections.is_empty() {
        tracing::warn!(
            "ingest socket, connection {number}: {}",
            describe_summary(&summary)
        );
    }
    if !ended.is_empty() {
        tracing::debug!("ingest socket, connection {number} closed: {ended}");
    }
}

/// Tells a connection cut at shutdown how many messages were read.
async fn answer_cut(stream: &mut UnixStream, read: u64) {
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(&read.to_le_bytes()),
    )
    .await;
}

/// A message's deadline, seconds (its length unknown: its header's).
fn within(deadline: Option<MessageDeadline>, length: Option<usize>) -> f64 {
    deadline.map_or(0.0, |deadline| {
        deadline.for_length(length.unwrap_or(0)).as_secs_f64()
    })
}

/// `future`'s output, or None when `until` passes first.
async fn at_most<T>(until: Option<Instant>, future: impl Future<Output = T>) -> Option<T> {
    match until {
        None => Some(future.await),
        Some(until) => tokio::time::timeout_at(until, future).await.ok(),
    }
}

/// Why a read stopped short.
enum Stop {
    /// Nothing arrived for the idle timeout.
    Idle,
    /// The message being read missed its deadline.
    Late,
    /// The connection failed.
    Failed,
}

/// Reads into `buffer`'s spare capacity (which it never grows), within
/// `idle` and before `until`.
async fn read_within(
    stream: &mut UnixStream,
    buffer: &mut Vec<u8>,
    idle: Option<Duration>,
    until: Option<Instant>,
) -> Result<usize, Stop> {
    debug_assert!(buffer.len() < buffer.capacity());
    let idle_at = idle.map(|idle| Instant::now() + idle);
    let (at, late) = match (idle_at, until) {
        (Some(idle_at), Some(until)) if until <= idle_at => (Some(until), true),
        (Some(idle_at), _) => (Some(idle_at), false),
        (None, until) => (until, true),
    };
    let read = stream.read_buf(buffer);
    let read = match at {
        None => read.await,
        Some(at) => match tokio::time::timeout_at(at, read).await {
            Ok(read) => read,
            Err(_) => return Err(if late { Stop::Late } else { Stop::Idle }),
        },
    };
    read.map_err(|_| Stop::Failed)
}
