//! The gRPC transport of ingest behind `serve`: engines stream records over
//! HTTP/2 (TLS and a bearer token optional) into the [`IngestService`].
//!
//! A stream is read one message at a time (the private route's framing: HTTP/2 flow
//! control pushes back on a fast sender instead of buffering), each message
//! bounded before it is kept or decoded, and applied by the transport-neutral
//! core ([`super::service`]).

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::{Request, Status};

use crate::listen::{self, BearerToken, ListenerLimits, ServerTls};
use crate::sources::ingest::service::IngestService;
use route::IngestRoute;

mod route;

pub use route::{STREAM_PATH, SUMMARY_TRAILER};

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
    if let Some(ttl) = service.limits().request_ttl {
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
    let limits = service.limits();
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
