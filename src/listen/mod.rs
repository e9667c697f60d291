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
mod config;
mod conn;
mod tls;

pub use auth::BearerToken;
pub use config::{ListenConfigError, ListenerLimits};
pub(crate) use conn::{Conn, ConnInfo, Guarded, IdleBy};
pub use tls::{ServerTls, ServerTlsFiles};

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{sleep, Instant};
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;

/// How long an accept error pauses the accept loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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
    use std::path::PathBuf;

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
