//! `serve`: the pipeline as a sidecar fed over gRPC.

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use vllm_otel_metrics::listen::BearerToken;
use vllm_otel_metrics::sources::ingest::grpc::{self, IngestListener};
use vllm_otel_metrics::sources::ingest::prescan::DecodeLimits;
use vllm_otel_metrics::sources::ingest::room::MessageDeadline;
use vllm_otel_metrics::sources::ingest::service::{IngestLimits, IngestService};
#[cfg(unix)]
use vllm_otel_metrics::sources::ingest::socket;

use super::command::ServeArgs;
use super::error::{exit_status, CliError};
use super::pipeline::{wait_for_signal, OnSignal, Pipeline};
use super::report;
use super::settings::seconds;

/// Whether `serve` was given an ingest socket.
fn ingest_socket_given(args: &ServeArgs) -> bool {
    #[cfg(unix)]
    return args.ingest_socket.is_some();
    #[cfg(not(unix))]
    {
        let _ = args;
        false
    }
}

/// The start-up warning of a gRPC ingest listener on `addr` that takes
/// records from anyone who can connect: who can, and how to close it.
fn unauthenticated_ingest(addr: SocketAddr) -> String {
    let who = if addr.ip().is_loopback() {
        "any local user (every process on this host)".to_owned()
    } else {
        format!("anyone who can reach {addr}")
    };
    format!(
        "gRPC ingest on {addr} requires no token: {who} can write records to it, inflating or distorting every metric. \
         Require one with --ingest-auth-token-file FILE (or --auth-token-file), \
         or take ingest over the Unix socket alone: --ingest-addr none --ingest-socket PATH"
    )
}

/// Resolves when this process's parent is no longer `parent` (the kernel
/// gives an orphan a new parent); never when `parent` is None.
async fn parent_ended(parent: Option<u32>) -> u32 {
    let Some(parent) = parent else {
        return std::future::pending().await;
    };
    // A quarter second bounds how long a sidecar outlives its supervisor.
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        if current_parent() != Some(parent) {
            return parent;
        }
    }
}

/// This process's parent; None where the platform does not say.
fn current_parent() -> Option<u32> {
    #[cfg(unix)]
    return Some(std::os::unix::process::parent_id());
    #[cfg(not(unix))]
    None
}

pub(super) fn run_serve(args: ServeArgs) -> Result<ExitCode, CliError> {
    // First, before any setup: a parent that is gone already is gone for
    // good, and a sidecar started for it must not take the ports.
    let parent = match args.parent_pid {
        Some(pid) if current_parent() != Some(pid) => {
            report::line(format_args!(
                "the parent process (pid {pid}) ended before this one started: exiting"
            ));
            return Ok(ExitCode::SUCCESS);
        }
        Some(pid) => Some(pid),
        None => args.exit_with_parent.then(current_parent).flatten(),
    };
    let request_ttl = seconds("--request-ttl", args.request_ttl)?;
    let drain = seconds("--drain-timeout", args.drain_timeout)?;
    let message_deadline = MessageDeadline {
        base: seconds("--ingest-message-deadline", args.ingest_message_deadline)?,
        per_mib: seconds(
            "--ingest-message-deadline-per-mib",
            args.ingest_message_deadline_per_mib,
        )?,
    };
    let pipeline = Pipeline::new(&args.common, OnSignal::Command, false)?;
    let mut decode = DecodeLimits::default();
    decode.max_records_per_batch = args.max_records_per_batch;
    decode.max_outputs_per_batch = args.max_outputs_per_batch;
    // A message may decode into twice its bytes; more is an amplification
    // no sender needs.
    decode.max_decoded_bytes = args.max_message_bytes.saturating_mul(2);
    let mut limits = IngestLimits::default();
    limits.max_inflight_requests =
        usize::try_from(args.max_inflight_requests).unwrap_or(usize::MAX);
    limits.request_ttl = (!request_ttl.is_zero()).then_some(request_ttl);
    limits.max_message_bytes = args.max_message_bytes;
    limits.decode = decode;
    limits.max_buffered_bytes = args.ingest_max_buffered_bytes;
    limits.message_deadline = (!message_deadline.base.is_zero()).then_some(message_deadline);
    limits.max_streams_per_connection = args.ingest_max_streams_per_connection;
    // The TLS and token files are read before the port is taken: a
    // configuration error is reported as such, whatever holds the port.
    let (tls, token) = args.common.listen.security(&[b"h2"])?;
    let token = match &args.ingest_auth_token_file {
        Some(file) => Some(BearerToken::from_file(file).map_err(|e| CliError::Invalid {
            flag: "--ingest-auth-token-file",
            reason: vllm_otel_metrics::error::chain(&e).to_string(),
        })?),
        None => token,
    };
    let listener_limits = args.common.listen.limits(args.ingest_max_connections)?;
    let tracker = pipeline.tracker(args.common.input_limits());
    let service = IngestService::new(tracker, limits);
    // The socket first: a plugin that finds the TCP port answering finds
    // the socket there too (it falls back to TCP only when there is none).
    #[cfg(unix)]
    let socket = match &args.ingest_socket {
        Some(path) => {
            let socket = pipeline
                .runtime
                .block_on(socket::IngestSocket::bind(path))?;
            report::line(format_args!(
                "accepting ingest messages on the Unix socket {}",
                socket.path().display()
            ));
            Some(socket)
        }
        None => None,
    };
    let listener = match args.ingest_addr.0 {
        Some(addr) => {
            let listener = pipeline
                .runtime
                .block_on(tokio::net::TcpListener::bind(addr))
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            let addr = listener.local_addr()?;
            report::line(format_args!(
                "accepting gRPC ingest streams on {addr}{}",
                if tls.is_some() { " (TLS)" } else { "" }
            ));
            // Client certificates are a credential too.
            if token.is_none() && args.common.listen.tls_client_ca.is_none() {
                report::line(format_args!("warning: {}", unauthenticated_ingest(addr)));
            }
            Some(listener)
        }
        None => {
            report::line(format_args!(
                "no gRPC ingest listener (--ingest-addr none){}",
                if ingest_socket_given(&args) {
                    ""
                } else {
                    ": no records can be sent to this serve"
                }
            ));
            None
        }
    };
    let how = IngestListener {
        limits: listener_limits,
        tls,
        token,
    };
    let served = pipeline.runtime.block_on(async {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let stopping = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        #[cfg(unix)]
        let socket_server = socket.map(|socket| {
            tokio::spawn(socket::serve(
                socket,
                service.clone(),
                listener_limits,
                stopping(stopped.clone()),
            ))
        });
        let grpc_server = listener.map(|listener| {
            tokio::spawn(grpc::serve(
                listener,
                service.clone(),
                how,
                stopping(stopped.clone()),
            ))
        });
        let server = async {
            let served = match grpc_server {
                Some(grpc_server) => grpc_server.await,
                // Nothing to wait for but the signal.
                None => {
                    stopping(stopped).await;
                    Ok(Ok(()))
                }
            };
            #[cfg(unix)]
            if let Some(socket_server) = socket_server {
                let _ = socket_server.await;
            }
            served
        };
        tokio::pin!(server);
        tokio::select! {
            result = &mut server => return result,
            name = wait_for_signal() => {
                report::line(format_args!("received {name}: accepting no new streams, draining open ones (up to {} s)", drain.as_secs_f64()));
            }
            pid = parent_ended(parent) => {
                report::line(format_args!("the parent process (pid {pid}) ended: accepting no new streams, draining open ones (up to {} s)", drain.as_secs_f64()));
            }
        }
        let _ = stop.send(true);
        if let Ok(result) = tokio::time::timeout(drain, &mut server).await {
            return result;
        }
        // Answer the streams still open with what they applied, so that
        // their clients resume instead of sending it again.
        report::line(format_args!("drain timeout: ending the streams still open with their summaries"));
        service.cut_open_streams();
        match tokio::time::timeout(Duration::from_secs(2), &mut server).await {
            Ok(result) => result,
            // Tasks still running end with the runtime.
            Err(_) => Ok(Ok(())),
        }
    });
    match served {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(io::Error::other(format!("the ingest server failed: {e}")).into()),
        Err(e) => {
            return Err(io::Error::other(format!("the ingest server task failed: {e}")).into())
        }
    }
    report::line(format_args!(
        "{} request(s) in flight at shutdown (not recorded)",
        service.in_flight()
    ));
    drop(service);
    Ok(exit_status(pipeline.finish(), true))
}
