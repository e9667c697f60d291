//! What the command line takes: [`Cli`], the parser main.rs runs, and the
//! arguments of each subcommand. Definitions only (replay.rs, simulate.rs
//! and serve.rs run the subcommands), so that flags.rs can read every flag
//! from here without an import circle.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use vllm_otel_metrics::sources::ingest::grpc;
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::sources::ingest::prescan::DecodeLimits;
use vllm_otel_metrics::sources::ingest::room::MessageDeadline;
use vllm_otel_metrics::sources::ingest::service::IngestLimits;
use vllm_otel_metrics::sources::sim::SimConfig;

use super::args::{CommonArgs, IngestAddr, Output, TargetArgs};
use super::sim_args::SimArgs;

/// vLLM's per-request lifecycle metrics on OpenTelemetry, exposed under vLLM's names.
#[derive(Debug, Parser)]
#[command(name = "vllm-otel-metrics", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

/// The subcommands, each with its arguments.
#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Replay a JSONL engine trace through the tracker and exporters.
    Replay(ReplayArgs),
    /// Simulate a vLLM-style engine (scheduler, KV cache, workload) feeding the pipeline.
    Simulate(Box<SimulateArgs>),
    /// Run the pipeline as a sidecar: engines stream records over gRPC.
    Serve(ServeArgs),
}

/// `replay`'s arguments.
#[derive(Debug, Args)]
pub(super) struct ReplayArgs {
    /// The JSONL trace, or `-` for standard input.
    #[arg(value_name = "FILE|-")]
    pub(super) file: String,
    /// Print the final exposition to stdout in this format.
    #[arg(long, value_enum, default_value = "none")]
    pub(super) output: Output,
    #[command(flatten)]
    pub(super) target: TargetArgs,
    /// Longest accepted trace line, bytes; a longer line is invalid.
    #[arg(long, default_value_t = jsonl::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_line_bytes: usize,
    #[command(flatten)]
    pub(super) common: CommonArgs,
}

/// `simulate`'s arguments.
#[derive(Debug, Args)]
pub(super) struct SimulateArgs {
    /// The simulated engines and workload.
    #[command(flatten)]
    pub(super) sim: SimArgs,
    /// Write the run as a JSONL trace (replayable with `replay`).
    #[arg(long, value_name = "FILE")]
    pub(super) record: Option<String>,
    /// Print the final exposition to stdout (the summary then goes to stderr).
    #[arg(long, value_enum, default_value = "none")]
    pub(super) output: Output,
    /// Keep serving /metrics this many seconds after the run (so a scraper
    /// sees the final state) before exiting.
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    pub(super) linger: f64,
    #[command(flatten)]
    pub(super) target: TargetArgs,
    /// Capacity what-if: run the same workload at each of these KV-block
    /// counts and print one table row each (no exporters).
    #[arg(long, value_name = "A,B,C", value_delimiter = ',')]
    pub(super) sweep_kv_blocks: Vec<u32>,
    /// With --sweep-kv-blocks: also draw the sweep into this SVG file
    /// (preemptions per request, throughput and, with --slo, goodput and
    /// attainment against the KV blocks).
    #[arg(long, value_name = "FILE.svg", requires = "sweep_kv_blocks")]
    pub(super) plot: Option<PathBuf>,
    #[command(flatten)]
    pub(super) common: CommonArgs,
}

impl SimulateArgs {
    /// The simulator's configuration: its own flags and --max-model-len.
    pub(super) fn config(&self) -> SimConfig {
        self.sim.config(self.common.max_model_len)
    }
}

/// `serve`'s arguments.
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
