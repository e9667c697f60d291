//! How the two servers (`/metrics` and gRPC ingest) listen: the bounds of
//! a listener, its TLS, the bearer token it requires, and why a listener's
//! files cannot be used. A host fills these into
//! `export::prometheus::http::MetricsServer` or
//! `sources::ingest::grpc::IngestListener`.
//!
//! A listener accepts connections only while fewer than
//! [`ListenerLimits::max_connections`] are open (the rest wait in the
//! kernel's backlog, holding no file descriptor), backs off when an accept
//! fails (`EMFILE` must not spin a core), completes the optional TLS
//! handshake off the accept loop within the idle timeout, and closes a
//! connection that sends nothing for the idle timeout, or does not take
//! written bytes for the write timeout (a scraper that never reads).
//! [`ServerTls`] builds the rustls configuration from PEM files, with
//! client certificates required when a client CA is given; [`BearerToken`]
//! checks an `Authorization: Bearer` header in constant time.
//!
//! ```
//! # #[cfg(feature = "http")] {
//! use std::time::Duration;
//! use vllm_otel_metrics::export::prometheus::http::{MetricsServer, DEFAULT_LIMITS};
//! use vllm_otel_metrics::listen::{ServerTls, ServerTlsFiles};
//!
//! let mut server = MetricsServer::default();
//! server.limits.max_connections = 4;
//! server.limits.idle_timeout = Some(Duration::from_secs(10));
//! // No certificate given: plain HTTP.
//! server.tls = ServerTls::from_files(&ServerTlsFiles::default(), &[b"http/1.1"]).unwrap();
//! assert!(server.tls.is_none());
//! assert_eq!(server.limits.write_timeout, DEFAULT_LIMITS.write_timeout);
//! # }
//! ```

// The accept loop and the connection guards serve both servers: a build
// with only one of them (or `listen` alone) leaves parts of them unused.
#![cfg_attr(
    not(all(feature = "http", feature = "grpc")),
    allow(dead_code, unused_imports)
)]

mod auth;
mod conn;
mod tls;

pub use auth::BearerToken;
pub(crate) use conn::{Conn, ConnInfo, Guarded, IdleBy};
pub use tls::{ServerTls, ServerTlsFiles};

use crate::error::{Cause, Setting, Settings};
use crate::support::file::Unreadable;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{sleep, Instant};
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;

/// How long an accept error pauses the accept loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Bounds of one listener. Each server has its defaults
/// (`export::prometheus::http::DEFAULT_LIMITS`,
/// `sources::ingest::grpc::DEFAULT_LIMITS`); a host changes their fields.
///
/// ```
/// # #[cfg(feature = "grpc")] {
/// use vllm_otel_metrics::listen::ListenerLimits;
/// use vllm_otel_metrics::sources::ingest::grpc::DEFAULT_LIMITS;
///
/// let mut limits: ListenerLimits = DEFAULT_LIMITS;
/// limits.max_connections = 8;
/// // Connections that take no written byte are never closed.
/// limits.write_timeout = None;
/// assert_eq!(limits.idle_timeout, DEFAULT_LIMITS.idle_timeout);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerLimits {
    /// Connections open at once; further ones wait in the backlog.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed (before the
    /// TLS handshake and the request headers too).
    pub idle_timeout: Option<Duration>,
    /// A connection that takes no written byte for this long is closed.
    pub write_timeout: Option<Duration>,
}

/// Why a listener's TLS or token files cannot be used; names the settings
/// ([`ServerTlsFiles`]' fields, `BearerToken::from_file`'s `token_file`).
///
/// ```
/// use std::path::PathBuf;
/// use vllm_otel_metrics::listen::{ListenConfigError, ServerTls, ServerTlsFiles};
///
/// let mut files = ServerTlsFiles::default();
/// files.key = Some(PathBuf::from("key.pem"));
/// let error = ServerTls::from_files(&files, &[]).unwrap_err();
/// assert!(matches!(error, ListenConfigError::Unpaired { .. }));
/// assert_eq!(error.to_string(), "cert and key go together (and client_ca needs them)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListenConfigError {
    /// A file cannot be read.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// A file's contents are not what the setting needs.
    #[error("{setting}: {}", path.display())]
    Invalid {
        /// The setting that named it.
        setting: Setting,
        /// The file.
        path: PathBuf,
        /// What is wrong, as the TLS library says.
        #[source]
        cause: Cause,
    },
    /// A certificate file without any certificate.
    #[error("{setting}: {} holds no certificate", path.display())]
    NoCertificate {
        /// The certificate setting.
        setting: Setting,
        /// The file.
        path: PathBuf,
    },
    /// A token file with nothing in it.
    #[error("{setting}: {} is empty", path.display())]
    EmptyToken {
        /// The token setting.
        setting: Setting,
        /// The file.
        path: PathBuf,
    },
    /// A token file longer than a token may be.
    #[error("{setting}: {} is longer than {limit} bytes, the most a token file may hold", path.display())]
    TooLong {
        /// The token setting.
        setting: Setting,
        /// The file.
        path: PathBuf,
        /// The most bytes it may hold.
        limit: usize,
    },
    /// A certificate without a key (or the other way round), or a client
    /// CA without a server certificate.
    #[error("{cert} and {key} go together (and {client_ca} needs them)")]
    Unpaired {
        /// The certificate setting.
        cert: Setting,
        /// The key setting.
        key: Setting,
        /// The client CA setting.
        client_ca: Setting,
    },
    /// The certificate and key do not make a TLS configuration.
    #[error("{cert}/{key}")]
    KeyPair {
        /// The certificate setting.
        cert: Setting,
        /// The key setting.
        key: Setting,
        /// Why, as the TLS library says.
        #[source]
        cause: Cause,
    },
    /// The TLS library refused its defaults.
    #[error("TLS cannot be set up")]
    Tls(#[source] Cause),
}

impl Settings for ListenConfigError {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        match self {
            ListenConfigError::Unreadable(unreadable) => unreadable.visit_settings(visit),
            ListenConfigError::Invalid { setting, .. }
            | ListenConfigError::NoCertificate { setting, .. }
            | ListenConfigError::EmptyToken { setting, .. }
            | ListenConfigError::TooLong { setting, .. } => visit(setting),
            ListenConfigError::Unpaired {
                cert,
                key,
                client_ca,
            } => {
                visit(cert);
                visit(key);
                visit(client_ca);
            }
            ListenConfigError::KeyPair { cert, key, .. } => {
                visit(cert);
                visit(key);
            }
            ListenConfigError::Tls(_) => {}
        }
    }
}

/// Accepts from `listener` under `limits`, with TLS when given; the
/// connections come out of the returned stream (for tonic's
/// `serve_with_incoming` or a hyper loop). `idle_by` says what keeps a
/// connection from idling; `name` names the listener in warnings.
pub(crate) fn incoming(
    listener: TcpListener,
    limits: ListenerLimits,
    tls: Option<ServerTls>,
    idle_by: IdleBy,
    name: &'static str,
) -> ReceiverStream<io::Result<Conn>> {
    let (sender, receiver) = mpsc::channel(limits.max_connections.clamp(1, 64));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let acceptor = tls.map(|tls| TlsAcceptor::from(tls.0));
    tokio::spawn(async move {
        let mut warned_at: Option<Instant> = None;
        loop {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: wait instead of spinning; warn at
                    // most every 10 s.
                    if warned_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!(%error, "{name}: accepting a connection failed; retrying");
                        warned_at = Some(Instant::now());
                    }
                    drop(slot);
                    sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let guarded = Guarded::new(stream, slot, &limits, idle_by);
            let sender = sender.clone();
            match &acceptor {
                None => {
                    if sender.send(Ok(Conn::Plain(guarded))).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let acceptor = acceptor.clone();
                    // Off the accept loop: a client that never finishes its
                    // handshake hits the idle timeout alone.
                    tokio::spawn(async move {
                        match acceptor.accept(guarded).await {
                            Ok(tls) => {
                                let _ = sender.send(Ok(Conn::Tls(Box::new(tls)))).await;
                            }
                            Err(error) => {
                                tracing::debug!(%error, %peer, "{name}: TLS handshake failed");
                            }
                        }
                    });
                }
            }
        }
    });
    ReceiverStream::new(receiver)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_fields() {
        let files = ServerTlsFiles {
            key: Some(PathBuf::from("key.pem")),
            ..ServerTlsFiles::default()
        };
        assert_eq!(
            ServerTls::from_files(&files, &[]).unwrap_err().to_string(),
            "cert and key go together (and client_ca needs them)"
        );
        let missing = std::env::temp_dir().join("vllm-otel-metrics-no-such-token");
        let error = BearerToken::from_file(&missing).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("token_file: cannot read {}", missing.display())
        );
    }
}
