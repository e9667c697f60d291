//! The `/metrics` HTTP endpoint.
//!
//! `GET /metrics` (and `HEAD`) answers with the bridge's exposition: text 0.0.4
//! by default, OpenMetrics 1.0 when the `Accept` header asks for
//! `application/openmetrics-text`. Other paths get 404, other methods 405.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::{Format, PrometheusBridge};

/// The path the exposition is served at.
pub const METRICS_PATH: &str = "/metrics";

fn respond(bridge: &PrometheusBridge, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, text: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    };
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
        Bytes::from(bridge.encode(format))
    };
    let mut response = Response::new(Full::new(body));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    response
}

/// Serves `/metrics` on `listener` until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, bridge: PrometheusBridge) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a /metrics connection failed");
                continue;
            }
        };
        let bridge = bridge.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = respond(&bridge, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, %peer, "/metrics connection ended with an error");
            }
        });
    }
}

/// Binds `addr` and serves `/metrics` on the current Tokio runtime; returns the
/// bound address (useful with port 0) and the serving task.
pub async fn spawn(
    addr: SocketAddr,
    bridge: PrometheusBridge,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((local, tokio::spawn(serve(listener, bridge))))
}
