//! The `/metrics` HTTP endpoint.
//!
//! `GET /metrics` (and `HEAD`) answers with the bridge's exposition: text 0.0.4
//! by default, OpenMetrics 1.0 when the `Accept` header asks for
//! `application/openmetrics-text`, followed by the process families
//! (`process_*`, as Prometheus client libraries expose them). Other paths
//! get 404, other methods 405, a missing or wrong bearer token 401.
//!
//! The listener is bounded ([`crate::listen`]): a connection cap, idle and
//! write timeouts, optional TLS. Scrapes that arrive while an exposition
//! is being encoded wait for it and share that one body (reference-counted)
//! instead of each encoding and holding a copy: no scrape is answered with
//! an exposition that was finished before it arrived. The encoding runs off
//! the runtime's worker threads.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use super::{process, Format, PrometheusBridge};
use crate::listen::{self, BearerToken, ListenerLimits, ServerTls};

/// The path the exposition is served at.
pub const METRICS_PATH: &str = "/metrics";

/// Default bounds of the `/metrics` listener.
pub const DEFAULT_LIMITS: ListenerLimits = ListenerLimits {
    max_connections: 16,
    idle_timeout: Some(Duration::from_secs(60)),
    write_timeout: Some(Duration::from_secs(30)),
};

/// The `/metrics` server's configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MetricsServer {
    /// Listener bounds.
    pub limits: ListenerLimits,
    /// TLS, when configured.
    pub tls: Option<ServerTls>,
    /// The bearer token scrapes must present, when configured.
    pub token: Option<BearerToken>,
    /// Whether the process families are appended.
    pub process_metrics: bool,
}

impl Default for MetricsServer {
    fn default() -> Self {
        MetricsServer {
            limits: DEFAULT_LIMITS,
            tls: None,
            token: None,
            process_metrics: true,
        }
    }
}

/// The last encoded exposition of one format.
struct Cached {
    finished: Instant,
    body: Bytes,
}

/// What every connection of one server shares.
struct Shared {
    bridge: PrometheusBridge,
    config: MetricsServer,
    /// One slot per [`Format`]; the lock is held while encoding, so
    /// concurrent scrapes wait for one encoding and share its body.
    cached: [tokio::sync::Mutex<Option<Cached>>; 2],
}

impl Shared {
    async fn exposition(&self, format: Format) -> Bytes {
        let arrived = Instant::now();
        let slot = match format {
            Format::Text => &self.cached[0],
            Format::OpenMetrics => &self.cached[1],
        };
        let mut cached = slot.lock().await;
        // Finished after this scrape arrived: it was being encoded meanwhile.
        if let Some(c) = cached.as_ref().filter(|c| c.finished > arrived) {
            return c.body.clone();
        }
        let bridge = self.bridge.clone();
        let process_metrics = self.config.process_metrics;
        let body = tokio::task::spawn_blocking(move || {
            let process = if process_metrics {
                process::families()
            } else {
                Vec::new()
            };
            Bytes::from(bridge.encode_with(format, &process))
        })
        .await
        .unwrap_or_default();
        *cached = Some(Cached {
            finished: Instant::now(),
            body: body.clone(),
        });
        body
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn respond(shared: &Shared, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some(token) = &shared.config.token {
        let presented = request.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
        if !token.accepts(presented) {
            let mut response = plain(StatusCode::UNAUTHORIZED, "a bearer token is required\n");
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    if request.uri().path() != METRICS_PATH {
        return plain(
            StatusCode::NOT_FOUND,
            "not found; metrics are at /metrics\n",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let accept = request
        .headers()
        .get(ACCEPT)
        .and_then(|value| value.to_str().ok());
    let format = Format::negotiate(accept);
    let body = if request.method() == Method::HEAD {
        Bytes::new()
    } else {
        shared.exposition(format).await
    };
    let mut response = Response::new(Full::new(body));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    response
}

/// Serves `/metrics` on `listener` until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, bridge: PrometheusBridge, config: MetricsServer) {
    let mut incoming = listen::incoming(
        listener,
        config.limits,
        config.tls.clone(),
        listen::IdleBy::Bytes,
        "/metrics",
    );
    let header_timeout = config.limits.idle_timeout;
    let shared = Arc::new(Shared {
        bridge,
        config,
        cached: Default::default(),
    });
    while let Some(accepted) = incoming.next().await {
        let Ok(conn) = accepted else { continue };
        let peer = conn.peer();
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(respond(&shared, &request).await) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            if let Err(error) = builder.serve_connection(TokioIo::new(conn), service).await {
                tracing::debug!(%error, ?peer, "/metrics connection ended with an error");
            }
        });
    }
}

/// Binds `addr` and serves `/metrics` on the current Tokio runtime; returns
/// the bound address (useful with port 0) and the serving task. A port that
/// cannot be bound is an error naming the address.
pub async fn spawn(
    addr: SocketAddr,
    bridge: PrometheusBridge,
    config: MetricsServer,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot serve /metrics on {addr}: {e}"))
    })?;
    let local = listener.local_addr()?;
    Ok((local, tokio::spawn(serve(listener, bridge, config))))
}
