//! The command line (synopses and exit statuses in docs/CLI.md):
//! argument definitions and the subcommands' runs.

mod args;
mod error;
mod flags;
mod pipeline;
mod plot;
mod replay;
mod report;
mod serve;
mod simulate;
pub(crate) mod summary;

use args::*;
use error::exit_status;
pub(crate) use error::{CliError, FinalExportFailed};
use pipeline::*;
use replay::*;
use serve::*;
use simulate::*;
use summary::SweepRow;

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand, ValueEnum};
use opentelemetry_otlp::Compression;
use opentelemetry_sdk::metrics::Temporality;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::SdkTracerProvider;
use vllm_otel_metrics::catalog::{TokenBuckets, DEFAULT_MAX_MODEL_LEN};
use vllm_otel_metrics::export::otlp::tls::TlsFiles;
use vllm_otel_metrics::export::otlp::{
    self, Destination, ExportHealth, OtlpOptions, Protocol, Signal,
};
use vllm_otel_metrics::export::prometheus::{http, Format, PrometheusBridge};
use vllm_otel_metrics::export::shared::SharedAggregation;
use vllm_otel_metrics::instruments::spans::RequestSpans;
use vllm_otel_metrics::instruments::{
    BucketOverrides, ExponentialHistograms, Instruments, NameStyle, OtlpHistograms, Semconv,
    SemconvServer, Slo, DEFAULT_MAX_LABEL_SETS,
};
use vllm_otel_metrics::listen::{BearerToken, ListenerLimits, ServerTls, ServerTlsFiles};
use vllm_otel_metrics::protocol::{InputLimits, Record};
use vllm_otel_metrics::sources::ingest::client::{RemoteSink, TargetSecurity};
use vllm_otel_metrics::sources::ingest::grpc::{self, IngestListener};
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::sources::ingest::prescan::DecodeLimits;
use vllm_otel_metrics::sources::ingest::room::MessageDeadline;
use vllm_otel_metrics::sources::ingest::service::{describe_summary, IngestLimits, IngestService};
#[cfg(unix)]
use vllm_otel_metrics::sources::ingest::socket;
use vllm_otel_metrics::sources::sim::{simulate, Progress, SimConfig};
use vllm_otel_metrics::sources::RecordSink;
use vllm_otel_metrics::tracker::{Rejection, Tracker};

/// Exit status when the final OTLP export failed.
pub(crate) const EXIT_EXPORT_FAILED: u8 = 3;
/// Exit status when input lines were invalid.
pub(crate) const EXIT_INVALID_INPUT: u8 = 2;
/// Exit status when a listen address is taken by another process.
pub(crate) const EXIT_ADDRESS_IN_USE: u8 = 4;
/// The environment variable whose JSON array of strings is appended to the
/// command line: how a supervisor passes flags that may hold secrets (an
/// OTLP header) without putting them in `/proc/PID/cmdline`, which every
/// local user can read (`/proc/PID/environ` is the owner's alone).
pub(crate) const SERVE_ARGS_ENV: &str = "VLLM_OTEL_METRICS_SERVE_ARGS";

/// vLLM's per-request lifecycle metrics on OpenTelemetry, exposed under vLLM's names.
#[derive(Debug, Parser)]
#[command(name = "vllm-otel-metrics", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a JSONL engine trace through the tracker and exporters.
    Replay(ReplayArgs),
    /// Simulate a vLLM-style engine (scheduler, KV cache, workload) feeding the pipeline.
    Simulate(Box<SimulateArgs>),
    /// Run the pipeline as a sidecar: engines stream records over gRPC.
    Serve(ServeArgs),
}

/// Sends the library's diagnostics and the OpenTelemetry crates' own to
/// stderr: warnings and errors, or what `RUST_LOG` asks for. By default the
/// SDK's and the exporter's per-export failure events are left out: the
/// tracked exporter reports failures itself, rate-limited, and recovery.
fn init_diagnostics() {
    use tracing_subscriber::filter::{filter_fn, EnvFilter, LevelFilter};
    use tracing_subscriber::prelude::*;
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .with_ansi(ansi)
        .without_time()
        .with_target(false);
    let registry = tracing_subscriber::registry();
    let installed = match EnvFilter::try_from_default_env() {
        Ok(filter) => registry.with(fmt.with_filter(filter)).try_init(),
        // One filter with its level hint: the callsites below WARN (h2's,
        // tonic's per-frame spans) are then never registered, instead of
        // being created and checked on every message.
        Err(_) => registry
            .with(
                fmt.with_filter(
                    filter_fn(|meta| {
                        let name = meta.name();
                        *meta.level() <= LevelFilter::WARN
                            && name != "PeriodicReader.ExportError"
                            && !name.starts_with("Export.Failed")
                    })
                    .with_max_level_hint(LevelFilter::WARN),
                ),
            )
            .try_init(),
    };
    // A host that installed its own subscriber keeps it.
    let _ = installed;
}

/// The process's arguments, then those of [`SERVE_ARGS_ENV`] when it is
/// set; an error names the variable, never its value (it may hold a secret).
pub(crate) fn command_line() -> Result<Vec<std::ffi::OsString>, String> {
    /// More than any flag set needs; a bound before the value is parsed.
    const MAX_BYTES: usize = 64 << 10;
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let Some(raw) = std::env::var_os(SERVE_ARGS_ENV) else {
        return Ok(argv);
    };
    if raw.len() > MAX_BYTES {
        return Err(format!("{SERVE_ARGS_ENV} is longer than {MAX_BYTES} bytes"));
    }
    let raw = raw
        .into_string()
        .map_err(|_| format!("{SERVE_ARGS_ENV} is not UTF-8"))?;
    let extra: Vec<String> = serde_json::from_str(&raw).map_err(|e| {
        format!(
            "{SERVE_ARGS_ENV} is not a JSON array of strings (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    argv.extend(extra.into_iter().map(Into::into));
    Ok(argv)
}

/// Runs the command line; returns the process exit status.
pub(crate) fn run(cli: Cli) -> ExitCode {
    init_diagnostics();
    let result = match cli.command {
        Command::Replay(args) => run_replay(args),
        Command::Simulate(args) => run_simulate(*args),
        Command::Serve(args) => run_serve(args),
    };
    result.unwrap_or_else(|e| {
        // The error and each cause under it, one after the other.
        report::line(format_args!(
            "error: {}",
            vllm_otel_metrics::error::chain(&e)
        ));
        e.exit_code()
    })
}
