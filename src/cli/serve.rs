//! `serve`: the pipeline as a sidecar fed over gRPC.

use super::*;

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// Listen for gRPC ingest streams here (`none`: no TCP listener, for a
    /// sidecar fed over --ingest-socket alone).
    #[arg(long, default_value = "127.0.0.1:50051", value_name = "ADDR|none")]
    pub(super) ingest_addr: IngestAddr,
    /// Also take ingest messages on a Unix domain socket at this path (made
    /// 0600; only this user's processes may send): the engine-core tap's
    /// transport. Each message is an ingest `Record` after its length
    /// (u32, little-endian).
    #[cfg(unix)]
    #[arg(long, value_name = "PATH")]
    pub(super) ingest_socket: Option<PathBuf>,
    /// Most requests in flight; beyond it the oldest is terminated as abort.
    #[arg(long, default_value_t = 1_000_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) max_inflight_requests: u64,
    /// Terminate requests idle this long as abort (0 disables).
    #[arg(long, default_value_t = 600.0, value_name = "SECS")]
    pub(super) request_ttl: f64,
    /// Largest accepted gRPC message, bytes.
    #[arg(long, default_value_t = IngestLimits::default().max_message_bytes, value_name = "BYTES")]
    pub(super) max_message_bytes: usize,
    /// Most records in one batch message; a larger batch is refused (and
    /// counted) before it is decoded.
    #[arg(long, default_value_t = DecodeLimits::default().max_records_per_batch, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_records_per_batch: usize,
    /// Most outputs in one output batch; a larger one is refused (and
    /// counted) before it is decoded.
    #[arg(long, default_value_t = DecodeLimits::default().max_outputs_per_batch, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_outputs_per_batch: usize,
    /// Most bytes held in messages that have arrived in part, over every
    /// ingest stream and connection: lent to one message at a time, which
    /// waits for room in turn (with --ingest-socket, the gRPC port's
    /// streams hold at most half).
    #[arg(long, default_value_t = IngestLimits::default().max_buffered_bytes, value_name = "BYTES")]
    pub(super) ingest_max_buffered_bytes: usize,
    /// A message must arrive in full within this many seconds (waiting for
    /// room in --ingest-max-buffered-bytes included), plus
    /// --ingest-message-deadline-per-mib for each MiB of its length, or its
    /// stream or connection is ended (0 disables).
    #[arg(long, default_value_t = MessageDeadline::DEFAULT.base.as_secs_f64(), value_name = "SECS")]
    pub(super) ingest_message_deadline: f64,
    /// What each MiB of a message adds to --ingest-message-deadline.
    #[arg(long, default_value_t = MessageDeadline::DEFAULT.per_mib.as_secs_f64(), value_name = "SECS")]
    pub(super) ingest_message_deadline_per_mib: f64,
    /// Most gRPC streams open at once on one ingest connection.
    #[arg(long, default_value_t = IngestLimits::default().max_streams_per_connection, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) ingest_max_streams_per_connection: u32,
    /// After SIGINT/SIGTERM, wait this long for open streams to end; then
    /// they are answered with the summary of what they applied.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub(super) drain_timeout: f64,
    /// Most ingest connections open at once.
    #[arg(long, default_value_t = grpc::DEFAULT_LIMITS.max_connections, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) ingest_max_connections: usize,
    /// Shut down as on SIGTERM when the process that started this one ends
    /// (for a supervisor such as the vLLM plugin: no sidecar outlives it,
    /// however it ends).
    #[arg(long)]
    pub(super) exit_with_parent: bool,
    /// As --exit-with-parent, for the parent with this pid: a sidecar whose
    /// parent is another process already when it starts (its supervisor
    /// died before this one ran) exits at once, holding no port.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) parent_pid: Option<u32>,
    /// Require `Authorization: Bearer <token>` on ingest streams with the
    /// token in this file, instead of --auth-token-file's: the scrape
    /// credential of `/metrics` then cannot write records.
    #[arg(long, value_name = "FILE")]
    pub(super) ingest_auth_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub(super) common: CommonArgs,
}

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
