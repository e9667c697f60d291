//! The command line (DESIGN §5): argument definitions and the subcommands' runs.

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

use crate::catalog::DEFAULT_MAX_MODEL_LEN;
use crate::export::otlp::tls::TlsFiles;
use crate::export::otlp::{self, Destination, ExportHealth, OtlpOptions, Protocol, Signal};
use crate::export::prometheus::{http, Format, PrometheusBridge};
use crate::ingest::client::{RemoteSink, TargetSecurity};
use crate::ingest::grpc::{self, IngestLimits, IngestListener, IngestService};
use crate::ingest::{jsonl, RecordSink};
use crate::instruments::{Instruments, NameStyle, DEFAULT_MAX_LABEL_SETS};
use crate::listen::{BearerToken, ListenerLimits, ServerTls, ServerTlsFiles};
use crate::protocol::{InputLimits, Record};
use crate::sim::report::{self, SweepRow};
use crate::sim::{simulate, Progress, SimConfig};
use crate::spans::RequestSpans;
use crate::tracker::{Rejection, Tracker};
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Exit status when the final OTLP export failed.
pub const EXIT_EXPORT_FAILED: u8 = 3;
/// Exit status when input lines were invalid.
pub const EXIT_INVALID_INPUT: u8 = 2;

/// vLLM's per-request lifecycle metrics on OpenTelemetry, exposed under vLLM's names.
#[derive(Debug, Parser)]
#[command(name = "vllm-otel-metrics", version, about)]
pub struct Cli {
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

#[derive(Debug, Args)]
struct ServeArgs {
    /// Listen for gRPC ingest streams here.
    #[arg(long, default_value = "127.0.0.1:50051", value_name = "ADDR")]
    ingest_addr: SocketAddr,
    /// Most requests in flight; beyond it the oldest is terminated as abort.
    #[arg(long, default_value_t = 1_000_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_inflight_requests: u64,
    /// Terminate requests idle this long as abort (0 disables).
    #[arg(long, default_value_t = 600.0, value_name = "SECS")]
    request_ttl: f64,
    /// Largest accepted gRPC message, bytes.
    #[arg(long, default_value_t = IngestLimits::default().max_message_bytes, value_name = "BYTES")]
    max_message_bytes: usize,
    /// After SIGINT/SIGTERM, wait this long for open streams to end; then
    /// they are answered with the summary of what they applied.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    drain_timeout: f64,
    /// Most ingest connections open at once.
    #[arg(long, default_value_t = grpc::DEFAULT_LIMITS.max_connections, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    ingest_max_connections: usize,
    #[command(flatten)]
    common: CommonArgs,
}

/// Where `/metrics` is served, or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsAddr(pub Option<SocketAddr>);

impl FromStr for MetricsAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("none") {
            return Ok(MetricsAddr(None));
        }
        s.parse().map(|addr| MetricsAddr(Some(addr))).map_err(|e| {
            format!("'{s}' is neither `none` nor an address like 127.0.0.1:9464 ({e})")
        })
    }
}

/// Options every subcommand shares.
#[derive(Debug, Args)]
struct CommonArgs {
    /// Serve Prometheus `/metrics` here (`none` to disable).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR|none")]
    metrics_addr: MetricsAddr,
    /// Model context length; bounds the token histograms' buckets.
    #[arg(long, default_value_t = DEFAULT_MAX_MODEL_LEN, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_model_len: u32,
    /// `(model_name, engine)` label sets kept apart; later ones share one
    /// overflow series per family (`otel_metric_overflow="true"`).
    #[arg(long, default_value_t = DEFAULT_MAX_LABEL_SETS, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_label_sets: usize,
    /// Longest accepted label value (`model_name`), bytes; a record with a
    /// longer one is invalid.
    #[arg(long, default_value_t = InputLimits::DEFAULT_MAX_LABEL_BYTES, value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_label_bytes: usize,
    /// Longest accepted request id, bytes; a record with a longer one is invalid.
    #[arg(long, default_value_t = InputLimits::DEFAULT_MAX_REQUEST_ID_BYTES, value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_request_id_bytes: usize,
    /// Also expose the OpenTelemetry resource as `target_info`.
    #[arg(long)]
    target_info: bool,
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    otlp: OtlpArgs,
}

/// Streaming to a remote `serve`.
#[derive(Debug, Args)]
struct TargetArgs {
    /// Also stream every record to a remote `serve` (e.g. http://127.0.0.1:50051).
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// PEM CA that verifies an `https://` target (default: the system's roots).
    #[arg(long, value_name = "FILE", requires = "target")]
    target_ca: Option<PathBuf>,
    /// Send `Authorization: Bearer <token>` with the token in this file.
    #[arg(long, value_name = "FILE", requires = "target")]
    target_token_file: Option<PathBuf>,
}

impl TargetArgs {
    fn security(&self) -> TargetSecurity {
        TargetSecurity {
            ca: self.target_ca.clone(),
            token_file: self.target_token_file.clone(),
        }
    }
}

/// How the servers (`/metrics`, and ingest for `serve`) listen.
#[derive(Debug, Args)]
struct ListenArgs {
    /// Serve TLS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Require client certificates that chain to this PEM CA (mutual TLS).
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Require `Authorization: Bearer <token>` with the token in this file.
    #[arg(long, value_name = "FILE")]
    auth_token_file: Option<PathBuf>,
    /// Most `/metrics` connections open at once.
    #[arg(long, default_value_t = http::DEFAULT_LIMITS.max_connections, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    metrics_max_connections: usize,
    /// Close a connection that sends nothing for this long (0 disables).
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    idle_timeout: f64,
    /// Close a connection that takes no written byte for this long (0 disables).
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    write_timeout: f64,
}

impl ListenArgs {
    fn limits(&self, max_connections: usize) -> io::Result<ListenerLimits> {
        let optional =
            |flag, value| seconds(flag, value).map(|d: Duration| (!d.is_zero()).then_some(d));
        Ok(ListenerLimits {
            max_connections,
            idle_timeout: optional("--idle-timeout", self.idle_timeout)?,
            write_timeout: optional("--write-timeout", self.write_timeout)?,
        })
    }

    /// TLS with `alpn`, and the token, as the flags say.
    fn security(&self, alpn: &[&[u8]]) -> io::Result<(Option<ServerTls>, Option<BearerToken>)> {
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        let files = ServerTlsFiles {
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        let tls = ServerTls::from_files(&files, alpn).map_err(invalid)?;
        let token = self
            .auth_token_file
            .as_deref()
            .map(BearerToken::from_file)
            .transpose()
            .map_err(invalid)?;
        Ok((tls, token))
    }
}

/// OTLP push options; each one given is set on the exporter's builder and
/// wins over its `OTEL_*` variable (headers excepted: the exporter merges the
/// header variables over the flags).
#[derive(Debug, Args)]
struct OtlpArgs {
    /// Push metrics to this OTLP endpoint (enables OTLP; or set OTEL_EXPORTER_OTLP_ENDPOINT).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// Push each terminated request's `llm_request` span to this OTLP
    /// endpoint (vLLM's flag; or set OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    /// OTEL_TRACES_EXPORTER=otlp). Off by default.
    #[arg(long, value_name = "URL")]
    otlp_traces_endpoint: Option<String>,
    /// OTLP transport (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(long, value_name = "grpc|http/protobuf")]
    otlp_protocol: Option<Protocol>,
    /// Export period in milliseconds (default: OTEL_METRIC_EXPORT_INTERVAL, else 60000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    otlp_interval_ms: Option<u64>,
    /// Time one export may take, retries included, in milliseconds (default:
    /// OTEL_EXPORTER_OTLP_TIMEOUT, else 10000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    otlp_timeout_ms: Option<u64>,
    /// Extra OTLP request header (repeatable; OTEL_EXPORTER_OTLP_HEADERS adds to them).
    /// Parsed here, not by the argument parser, so a bad value is never printed.
    #[arg(long, value_name = "K=V")]
    otlp_header: Vec<String>,
    /// Aggregation temporality (default: OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, else cumulative).
    #[arg(long, value_name = "cumulative|delta|lowmemory", value_parser = otlp::parse_temporality)]
    otlp_temporality: Option<Temporality>,
    /// Request body compression (default: OTEL_EXPORTER_OTLP_COMPRESSION, else none).
    #[arg(long, value_name = "gzip|zstd", value_parser = otlp::parse_compression)]
    otlp_compression: Option<Compression>,
    /// PEM CA certificate that verifies the Collector's TLS certificate
    /// (default: OTEL_EXPORTER_OTLP_CERTIFICATE, else the system's roots).
    #[arg(long, value_name = "FILE")]
    otlp_certificate: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (default: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE).
    #[arg(long, value_name = "FILE")]
    otlp_client_certificate: Option<PathBuf>,
    /// PEM private key of the client certificate (default: OTEL_EXPORTER_OTLP_CLIENT_KEY).
    #[arg(long, value_name = "FILE")]
    otlp_client_key: Option<PathBuf>,
    /// Metric names on the OTLP wire: `otel` (vllm.request_num_preemptions) or
    /// `prometheus` (vLLM's own vllm:request_num_preemptions).
    #[arg(long, value_enum, default_value = "otel")]
    otlp_names: OtlpNames,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OtlpNames {
    /// OpenTelemetry names (`vllm.…`).
    Otel,
    /// vLLM's Prometheus names (`vllm:…`).
    Prometheus,
}

/// Parses the `n`th `--otlp-header`; the error shows no part of the value.
fn parse_header(n: usize, s: &str) -> Result<(String, String), String> {
    let invalid =
        || format!("--otlp-header #{n}: not one KEY=VALUE header (the value is not shown)");
    let (key, value) = s.split_once('=').ok_or_else(invalid)?;
    let key = key.trim();
    let valid_key = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !valid_key || value.contains(',') || value.chars().any(char::is_control) {
        return Err(invalid());
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

impl CommonArgs {
    fn input_limits(&self) -> InputLimits {
        InputLimits {
            max_label_bytes: self.max_label_bytes,
            max_request_id_bytes: self.max_request_id_bytes,
        }
    }
}

impl OtlpArgs {
    fn options(&self) -> io::Result<OtlpOptions> {
        let headers = self
            .otlp_header
            .iter()
            .enumerate()
            .map(|(i, h)| parse_header(i + 1, h))
            .collect::<Result<_, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(OtlpOptions {
            endpoint: self.otlp_endpoint.clone(),
            traces_endpoint: self.otlp_traces_endpoint.clone(),
            protocol: self.otlp_protocol,
            interval: self.otlp_interval_ms.map(Duration::from_millis),
            timeout: self.otlp_timeout_ms.map(Duration::from_millis),
            headers,
            temporality: self.otlp_temporality,
            compression: self.otlp_compression,
            tls: TlsFiles {
                certificate: self.otlp_certificate.clone(),
                client_certificate: self.otlp_client_certificate.clone(),
                client_key: self.otlp_client_key.clone(),
            },
        })
    }

    fn name_style(&self) -> NameStyle {
        match self.otlp_names {
            OtlpNames::Otel => NameStyle::Otel,
            OtlpNames::Prometheus => NameStyle::Prometheus,
        }
    }
}

/// What to print on stdout at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text.
    Openmetrics,
    /// Nothing.
    None,
}

impl Output {
    fn format(self) -> Option<Format> {
        match self {
            Output::Prometheus => Some(Format::Text),
            Output::Openmetrics => Some(Format::OpenMetrics),
            Output::None => None,
        }
    }
}

#[derive(Debug, Args)]
struct ReplayArgs {
    /// The JSONL trace, or `-` for standard input.
    #[arg(value_name = "FILE|-")]
    file: String,
    /// Print the final exposition to stdout in this format.
    #[arg(long, value_enum, default_value = "none")]
    output: Output,
    #[command(flatten)]
    target: TargetArgs,
    /// Longest accepted trace line, bytes; a longer line is invalid.
    #[arg(long, default_value_t = jsonl::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_line_bytes: usize,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Simulated seconds during which requests arrive (the run then drains).
    #[arg(long, default_value_t = SimConfig::default().duration, value_name = "SECS")]
    duration: f64,
    /// Poisson arrival rate, requests per second.
    #[arg(long, default_value_t = SimConfig::default().rate, value_name = "RPS")]
    rate: f64,
    /// Closed loop instead of Poisson arrivals: keep N requests outstanding.
    #[arg(long, value_name = "N")]
    concurrency: Option<u32>,
    /// Seed of every random draw (same seed, same run).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the run as a JSONL trace (replayable with `replay`).
    #[arg(long, value_name = "FILE")]
    record: Option<String>,
    /// Pace the simulation to the wall clock (to watch it live).
    #[arg(long)]
    realtime: bool,
    /// Print the final exposition to stdout (the summary then goes to stderr).
    #[arg(long, value_enum, default_value = "none")]
    output: Output,
    /// KV-cache blocks per engine.
    #[arg(long, default_value_t = SimConfig::default().kv_blocks)]
    kv_blocks: u32,
    /// Tokens per KV block.
    #[arg(long, default_value_t = SimConfig::default().block_size)]
    block_size: u32,
    /// Most requests in a running batch.
    #[arg(long, default_value_t = SimConfig::default().max_num_seqs)]
    max_num_seqs: u32,
    /// Token budget per step (chunked prefill within it).
    #[arg(long, default_value_t = SimConfig::default().max_num_batched_tokens)]
    max_num_batched_tokens: u32,
    /// Share of prompt tokens found in the prefix cache (0 to 1).
    #[arg(long, default_value_t = SimConfig::default().prefix_hit_rate)]
    prefix_hit_rate: f64,
    /// Fixed time of a step, milliseconds.
    #[arg(long, default_value_t = SimConfig::default().step_base_ms)]
    step_base_ms: f64,
    /// Time per token in a step, microseconds.
    #[arg(long, default_value_t = SimConfig::default().step_per_token_us)]
    step_per_token_us: f64,
    /// Mean prompt length in tokens (lognormal).
    #[arg(long, default_value_t = SimConfig::default().prompt_len)]
    prompt_len: f64,
    /// Mean output length in tokens (lognormal).
    #[arg(long, default_value_t = SimConfig::default().output_len)]
    output_len: f64,
    /// Share of requests aborted by their client (0 to 1).
    #[arg(long, default_value_t = SimConfig::default().abort_rate)]
    abort_rate: f64,
    /// Served models (engine e serves model e % models).
    #[arg(long, default_value_t = SimConfig::default().models)]
    models: u32,
    /// Engines.
    #[arg(long, default_value_t = SimConfig::default().engines)]
    engines: u32,
    /// Share of KV blocks whose residency (lifetime, idle time, reuse gaps)
    /// is sampled, as vLLM's --kv-cache-metrics-sample; 0 samples none.
    #[arg(long, default_value_t = SimConfig::default().kv_cache_metrics_sample, value_name = "RATE")]
    kv_cache_metrics_sample: f64,
    /// Share of the prompt beyond the local prefix-cache hit that a KV
    /// connector finds in another instance's cache and loads asynchronously
    /// (0 to 1; 0: no connector).
    #[arg(long, default_value_t = SimConfig::default().external_prefix_hit_rate, value_name = "RATE")]
    external_prefix_hit_rate: f64,
    /// The KV connector's load bandwidth, GB/s.
    #[arg(long, default_value_t = SimConfig::default().kv_load_gbps, value_name = "GBPS")]
    kv_load_gbps: f64,
    /// KV-cache bytes per token (all layers, K and V), for load times and
    /// the MFU estimates.
    #[arg(long, default_value_t = SimConfig::default().kv_bytes_per_token, value_name = "BYTES")]
    kv_bytes_per_token: u64,
    /// Draft tokens per decode step (speculative decoding; 0: off).
    #[arg(long, default_value_t = SimConfig::default().num_speculative_tokens, value_name = "K")]
    num_speculative_tokens: u32,
    /// Chance that a draft token is accepted, given the previous one was.
    #[arg(long, default_value_t = SimConfig::default().spec_acceptance_rate, value_name = "RATE")]
    spec_acceptance_rate: f64,
    /// Model parameters in billions (the MFU estimates' cost model and the
    /// weight transfer times).
    #[arg(long, default_value_t = SimConfig::default().model_params_b, value_name = "B")]
    model_params_b: f64,
    /// GPUs one engine's model is split over.
    #[arg(long, default_value_t = SimConfig::default().tensor_parallel_size, value_name = "N")]
    tensor_parallel_size: u32,
    /// Serve the --models as LoRA adapters of one base model (each request
    /// picks one; vllm:lora_requests_info lists them, max_lora = --models).
    #[arg(long)]
    lora_adapters: bool,
    /// Put an engine to sleep after this many idle seconds; the next
    /// request wakes it (the weights come back first).
    #[arg(long, value_name = "SECS")]
    sleep_when_idle: Option<f64>,
    /// Sleep level: 1 offloads the weights to host memory, 2 discards them.
    #[arg(long, default_value_t = SimConfig::default().sleep_level, value_name = "LEVEL")]
    sleep_level: u8,
    /// Host-device bandwidth for offloading and restoring weights, GB/s.
    #[arg(long, default_value_t = SimConfig::default().host_transfer_gbps, value_name = "GBPS")]
    host_transfer_gbps: f64,
    /// Push new weights to every engine every this many seconds (an RL
    /// trainer); engines pause while they take them.
    #[arg(long, value_name = "SECS")]
    weight_update_interval: Option<f64>,
    /// Bandwidth of a weight update, GB/s.
    #[arg(long, default_value_t = SimConfig::default().weight_sync_gbps, value_name = "GBPS")]
    weight_sync_gbps: f64,
    /// Keep serving /metrics this many seconds after the run (so a scraper
    /// sees the final state) before exiting.
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    linger: f64,
    #[command(flatten)]
    target: TargetArgs,
    /// Capacity what-if: run the same workload at each of these KV-block
    /// counts and print one table row each (no exporters).
    #[arg(long, value_name = "A,B,C", value_delimiter = ',')]
    sweep_kv_blocks: Vec<u32>,
    #[command(flatten)]
    common: CommonArgs,
}

impl SimulateArgs {
    fn config(&self) -> SimConfig {
        SimConfig {
            seed: self.seed,
            duration: self.duration,
            rate: self.rate,
            concurrency: self.concurrency,
            kv_blocks: self.kv_blocks,
            block_size: self.block_size,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            prefix_hit_rate: self.prefix_hit_rate,
            step_base_ms: self.step_base_ms,
            step_per_token_us: self.step_per_token_us,
            prompt_len: self.prompt_len,
            output_len: self.output_len,
            max_model_len: self.common.max_model_len,
            abort_rate: self.abort_rate,
            models: self.models,
            engines: self.engines,
            realtime: self.realtime,
            kv_cache_metrics_sample: self.kv_cache_metrics_sample,
            external_prefix_hit_rate: self.external_prefix_hit_rate,
            kv_load_gbps: self.kv_load_gbps,
            kv_bytes_per_token: self.kv_bytes_per_token,
            num_speculative_tokens: self.num_speculative_tokens,
            spec_acceptance_rate: self.spec_acceptance_rate,
            model_params_b: self.model_params_b,
            tensor_parallel_size: self.tensor_parallel_size,
            lora_adapters: self.lora_adapters,
            sleep_when_idle: self.sleep_when_idle,
            sleep_level: self.sleep_level,
            host_transfer_gbps: self.host_transfer_gbps,
            weight_update_interval: self.weight_update_interval,
            weight_sync_gbps: self.weight_sync_gbps,
        }
    }
}

/// The OTLP push side of a pipeline, kept to report the final export.
struct OtlpReport {
    destination: Destination,
    health: Arc<ExportHealth>,
}

/// What a pipeline exports to, and what reports on the exports.
struct Exports {
    instruments: Instruments,
    metrics: Option<OtlpReport>,
    /// The tracer provider of the `llm_request` spans, when spans are on.
    traces: Option<(SdkTracerProvider, OtlpReport)>,
}

/// What SIGINT/SIGTERM do to a pipeline.
#[derive(Debug, Clone, Copy)]
enum OnSignal {
    /// Print the exposition in this format if any, export, exit.
    Exit { print: Option<Format> },
    /// The command handles signals itself.
    Command,
}

/// Writes to stdout; a reader that went away (`| head`) ends the output
/// quietly, so the exit status stays the documented one.
fn to_stdout(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        result => result,
    }
}

/// The metrics pipeline a subcommand runs: instruments, the bridge, OTLP
/// when configured, the runtime serving `/metrics`, and signal handling.
struct Pipeline {
    exports: Arc<Exports>,
    bridge: PrometheusBridge,
    /// Makes the `llm_request` spans, when they are exported.
    spans: Option<RequestSpans>,
    runtime: tokio::runtime::Runtime,
}

impl Pipeline {
    /// `on_signal`: what SIGINT/SIGTERM do. `bridge_read`: whether the
    /// Prometheus bridge is printed or summarised (served, it is read
    /// anyway); only then does it get a reader (each reader aggregates
    /// every measurement once more).
    fn new(common: &CommonArgs, on_signal: OnSignal, bridge_read: bool) -> io::Result<Pipeline> {
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        let env = |name: &str| std::env::var(name).ok();
        let options = common.otlp.options()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let (bridge, bridge_reader) = PrometheusBridge::builder()
            .with_target_info(common.target_info)
            .build();
        let mut builder = Instruments::builder()
            .with_max_model_len(common.max_model_len)
            .with_max_label_sets(common.max_label_sets)
            .with_name_style(common.otlp.name_style());
        if bridge_read || common.metrics_addr.0.is_some() {
            builder = builder.with_reader(bridge_reader);
        }
        let resource = otlp::resource();
        builder = builder.with_resource(resource.clone());
        let mut report = None;
        if options.enabled(Signal::Metrics, &env) {
            let push = otlp::build(&options, &env, runtime.handle()).map_err(invalid)?;
            eprintln!(
                "pushing metrics over OTLP ({}) to {} ({}){}",
                push.destination.protocol,
                push.destination,
                push.destination.source,
                options
                    .interval
                    .map(|i| format!(" every {} ms", i.as_millis()))
                    .unwrap_or_default()
            );
            builder = builder.with_reader(push.reader);
            report = Some(OtlpReport {
                destination: push.destination,
                health: push.health,
            });
        }
        let instruments = builder.build();
        let mut traces = None;
        if options.enabled(Signal::Traces, &env) {
            // The batch span processor counts the spans it exports and the
            // ones it drops at a full queue (`otel.sdk.processor.span.processed`,
            // `error.type=queue_full`) on the global meter provider: made
            // ours, the count reaches `/metrics` and OTLP beside the vLLM
            // families instead of a no-op meter.
            if let Some(provider) = instruments.meter_provider() {
                opentelemetry::global::set_meter_provider(provider.clone());
            }
            let push =
                otlp::build_traces(&options, &env, runtime.handle(), resource).map_err(invalid)?;
            eprintln!(
                "pushing llm_request spans over OTLP ({}) to {} ({})",
                push.destination.protocol, push.destination, push.destination.source,
            );
            traces = Some((
                push.provider,
                OtlpReport {
                    destination: push.destination,
                    health: push.health,
                },
            ));
        }
        let spans = traces
            .as_ref()
            .map(|(provider, _)| RequestSpans::new(provider));
        if let Some(addr) = common.metrics_addr.0 {
            let (tls, token) = common.listen.security(&[b"http/1.1"])?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            let server = http::MetricsServer {
                limits: common
                    .listen
                    .limits(common.listen.metrics_max_connections)?,
                tls,
                token,
                ..http::MetricsServer::default()
            };
            let (local, _task) = runtime.block_on(http::spawn(addr, bridge.clone(), server))?;
            eprintln!(
                "serving Prometheus metrics at {scheme}://{local}{}",
                http::METRICS_PATH
            );
        }
        let pipeline = Pipeline {
            exports: Arc::new(Exports {
                instruments,
                metrics: report,
                traces,
            }),
            bridge,
            spans,
            runtime,
        };
        if let OnSignal::Exit { print } = on_signal {
            pipeline.exit_on_signal(print);
        }
        Ok(pipeline)
    }

    /// On SIGINT or SIGTERM: print the exposition of what was applied when
    /// `print` asks for one, export what was recorded, then exit (130/143,
    /// or [`EXIT_EXPORT_FAILED`] when that export failed).
    fn exit_on_signal(&self, print: Option<Format>) {
        let exports = Arc::clone(&self.exports);
        let bridge = self.bridge.clone();
        self.runtime.spawn(async move {
            let name = wait_for_signal().await;
            eprintln!("received {name}: exporting what was recorded, then exiting");
            if let Some(format) = print {
                // Before the provider shuts down: the bridge reads it.
                let text = bridge.encode(format);
                let _ = tokio::task::spawn_blocking(move || to_stdout(text.as_bytes())).await;
            }
            // Off the runtime's worker: the final export blocks until it is
            // done, and the gRPC transport needs the worker meanwhile.
            let flushed = tokio::task::spawn_blocking(move || flush(&exports)).await;
            let code = match flushed {
                Ok(Ok(())) if name == "SIGINT" => 130,
                Ok(Ok(())) => 143,
                _ => i32::from(EXIT_EXPORT_FAILED),
            };
            std::process::exit(code);
        });
    }

    /// Stops the pipeline; `Err` when the final OTLP export failed.
    fn finish(self) -> Result<(), ()> {
        let result = flush(&self.exports);
        self.runtime.shutdown_background();
        result
    }
}

async fn wait_for_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

impl Pipeline {
    /// A tracker recording into the pipeline, with its spans and `limits`.
    fn tracker(&self, limits: InputLimits) -> Tracker {
        let tracker = Tracker::new(self.exports.instruments.clone()).with_limits(limits);
        match &self.spans {
            Some(spans) => tracker.with_spans(spans.clone()),
            None => tracker,
        }
    }
}

/// Reports on stderr what a final export did (the SDK's own error says
/// only that the shutdown failed); `Err` when it failed.
fn report_final_export(
    result: opentelemetry_sdk::error::OTelSdkResult,
    report: &OtlpReport,
) -> Result<(), ()> {
    match (result, report.health.last_error()) {
        (Ok(()) | Err(OTelSdkError::AlreadyShutdown), None) => Ok(()),
        (_, Some(error)) => {
            eprintln!(
                "error: final OTLP export to {} failed: {error}",
                report.destination
            );
            Err(())
        }
        (Err(error), None) => {
            eprintln!(
                "error: final OTLP export to {} did not complete: {error}",
                report.destination
            );
            Err(())
        }
    }
}

/// Shuts the tracer provider down (its last spans go out), then the meter
/// provider (the OTLP reader exports one last time); `Err` when a final
/// export failed.
fn flush(exports: &Exports) -> Result<(), ()> {
    let traces = match &exports.traces {
        Some((provider, report)) => report_final_export(provider.shutdown(), report),
        None => Ok(()),
    };
    let result = exports.instruments.shutdown();
    let metrics = match &exports.metrics {
        Some(report) => report_final_export(result, report),
        None => Ok(()),
    };
    traces.and(metrics)
}

/// The local tracker, plus a remote ingest stream when `--target` is given.
struct Tee {
    tracker: Tracker,
    remote: Option<RemoteSink>,
    remote_failed: bool,
}

impl Tee {
    fn new(pipeline: &Pipeline, target: &TargetArgs, common: &CommonArgs) -> io::Result<Tee> {
        let remote = match &target.target {
            Some(url) => Some(
                RemoteSink::connect(url, &target.security(), pipeline.runtime.handle())
                    .map_err(|e| io::Error::new(io::ErrorKind::ConnectionRefused, e))?,
            ),
            None => None,
        };
        Ok(Tee {
            tracker: pipeline.tracker(common.input_limits()),
            remote,
            remote_failed: false,
        })
    }

    /// Closes the remote stream and reports its summary; `Ok(true)` when the
    /// server rejected nothing.
    fn finish_remote(&mut self) -> io::Result<bool> {
        let Some(remote) = self.remote.take() else {
            return Ok(true);
        };
        let summary = remote
            .finish()
            .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e))?;
        eprintln!("remote ingest: {}", grpc::describe(&summary));
        Ok(summary.records_rejected == 0)
    }
}

impl RecordSink for Tee {
    /// Applies locally, then forwards the record unless it was refused as a
    /// whole (the remote would refuse it too).
    fn apply(&mut self, record: &Record) -> Vec<Rejection> {
        let rejections = self.tracker.apply(record);
        let refused = Rejection::refuse_whole_record(&rejections);
        if let Some(remote) = &mut self.remote {
            if !refused && !self.remote_failed && !remote.send(record) {
                self.remote_failed = true;
            }
        }
        rejections
    }

    fn invalid(&mut self) {
        self.tracker.count_invalid_record();
    }
}

fn open_trace(file: &str) -> io::Result<(Box<dyn BufRead>, String)> {
    if file == "-" {
        return Ok((Box::new(io::stdin().lock()), "<stdin>".to_owned()));
    }
    let reader = File::open(file)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {file}: {e}")))?;
    Ok((
        Box::new(BufReader::with_capacity(1 << 16, reader)),
        file.to_owned(),
    ))
}

fn run_replay(args: ReplayArgs) -> io::Result<ExitCode> {
    let (input, source) = open_trace(&args.file)?;
    let pipeline = Pipeline::new(
        &args.common,
        OnSignal::Exit {
            print: args.output.format(),
        },
        args.output.format().is_some(),
    )?;
    let mut tee = Tee::new(&pipeline, &args.target, &args.common)?;
    // Unlocked: the OTLP and signal threads report on stderr too.
    let report = jsonl::replay(
        input,
        &source,
        &mut tee,
        &mut io::stderr(),
        args.max_line_bytes,
    )?;
    let remote_clean = tee.finish_remote()?;
    let tracker = tee.tracker;
    if tracker.in_flight() > 0 {
        eprintln!(
            "{source}: {} request(s) still in flight at the end of the trace (not recorded)",
            tracker.in_flight()
        );
    }
    if let Some(format) = args.output.format() {
        to_stdout(pipeline.bridge.encode(format).as_bytes())?;
    }
    drop(tracker);
    let exported = pipeline.finish();
    Ok(if exported.is_err() {
        ExitCode::from(EXIT_EXPORT_FAILED)
    } else if report.is_clean() && remote_clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INVALID_INPUT)
    })
}

/// Shows simulation progress on stderr when it is a terminal.
fn progress_bar(enabled: bool) -> impl FnMut(Progress) {
    move |p: Progress| {
        if enabled {
            let done = (p.simulated / p.duration).min(1.0);
            let filled = (done * 30.0) as usize;
            eprint!(
                "\r[{}{}] {:>6.1}/{} s simulated, {} requests, {} preemptions ",
                "#".repeat(filled),
                " ".repeat(30 - filled),
                p.simulated,
                p.duration,
                p.requests,
                p.preemptions
            );
        }
    }
}

fn run_sweep(args: &SimulateArgs) -> io::Result<ExitCode> {
    to_stdout(format!("{}\n", SweepRow::header()).as_bytes())?;
    for &kv_blocks in &args.sweep_kv_blocks {
        let config = SimConfig {
            kv_blocks,
            realtime: false,
            ..args.config()
        };
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (bridge, reader) = PrometheusBridge::builder().build();
        let mut tracker = Tracker::new(
            Instruments::builder()
                .with_max_model_len(config.max_model_len)
                .with_reader(reader)
                .build(),
        );
        let outcome = simulate(
            &config,
            &mut |record| {
                tracker.apply(record);
            },
            &mut |_| {},
        );
        let row = SweepRow::new(kv_blocks, &outcome, &bridge.snapshot()).line();
        to_stdout(format!("{row}\n").as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A duration flag's value: zero or positive seconds, else a clear error.
fn seconds(flag: &str, value: f64) -> io::Result<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{flag} must be zero or positive seconds, not {value}"),
        )
    })
}

fn run_simulate(args: SimulateArgs) -> io::Result<ExitCode> {
    if !args.sweep_kv_blocks.is_empty() {
        return run_sweep(&args);
    }
    let config = args.config();
    config
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let linger = seconds("--linger", args.linger)?;
    let mut recorder = match &args.record {
        Some(path) => Some(io::BufWriter::new(File::create(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {path}: {e}"))
        })?)),
        None => None,
    };
    // The summary reads the bridge.
    let pipeline = Pipeline::new(
        &args.common,
        OnSignal::Exit {
            print: args.output.format(),
        },
        true,
    )?;
    let mut tee = Tee::new(&pipeline, &args.target, &args.common)?;
    let mut write_error: Option<io::Error> = None;
    let started = std::time::Instant::now();
    let show_progress = io::IsTerminal::is_terminal(&io::stderr());
    let outcome = simulate(
        &config,
        &mut |record: &Record| {
            tee.apply(record);
            if let (Some(out), None) = (recorder.as_mut(), write_error.as_ref()) {
                if let Err(e) = serde_json::to_writer(&mut *out, record)
                    .map_err(io::Error::from)
                    .and_then(|()| out.write_all(b"\n"))
                {
                    write_error = Some(e);
                }
            }
        },
        &mut progress_bar(show_progress),
    );
    if show_progress {
        eprintln!();
    }
    let wall = started.elapsed().as_secs_f64();
    let remote_clean = tee.finish_remote()?;
    if let Some(mut out) = recorder {
        if let Some(e) = write_error {
            return Err(io::Error::new(
                e.kind(),
                format!("writing the trace failed: {e}"),
            ));
        }
        out.flush()?;
    }
    let summary = report::summary(&config, &outcome, &pipeline.bridge.snapshot(), wall);
    match args.output.format() {
        Some(format) => {
            eprint!("{summary}");
            to_stdout(pipeline.bridge.encode(format).as_bytes())?;
        }
        None => to_stdout(summary.as_bytes())?,
    }
    std::thread::sleep(linger);
    drop(tee);
    Ok(match pipeline.finish() {
        Err(()) => ExitCode::from(EXIT_EXPORT_FAILED),
        Ok(()) if !remote_clean => ExitCode::from(EXIT_INVALID_INPUT),
        Ok(()) => ExitCode::SUCCESS,
    })
}

fn run_serve(args: ServeArgs) -> io::Result<ExitCode> {
    let request_ttl = seconds("--request-ttl", args.request_ttl)?;
    let drain = seconds("--drain-timeout", args.drain_timeout)?;
    let pipeline = Pipeline::new(&args.common, OnSignal::Command, false)?;
    let limits = IngestLimits {
        max_inflight_requests: usize::try_from(args.max_inflight_requests).unwrap_or(usize::MAX),
        request_ttl: (!request_ttl.is_zero()).then_some(request_ttl),
        max_message_bytes: args.max_message_bytes,
    };
    let tracker = pipeline.tracker(args.common.input_limits());
    let service = IngestService::new(tracker, limits);
    let listener = pipeline
        .runtime
        .block_on(tokio::net::TcpListener::bind(args.ingest_addr))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}", args.ingest_addr),
            )
        })?;
    let (tls, token) = args.common.listen.security(&[b"h2"])?;
    eprintln!(
        "accepting gRPC ingest streams on {}{}",
        listener.local_addr()?,
        if tls.is_some() { " (TLS)" } else { "" }
    );
    let how = IngestListener {
        limits: args.common.listen.limits(args.ingest_max_connections)?,
        tls,
        token,
    };
    let served = pipeline.runtime.block_on(async {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut server = tokio::spawn(grpc::serve(listener, service.clone(), how, async {
            let _ = stopped.await;
        }));
        tokio::select! {
            result = &mut server => return result,
            name = wait_for_signal() => {
                eprintln!("received {name}: accepting no new streams, draining open ones (up to {} s)", drain.as_secs_f64());
            }
        }
        let _ = stop.send(());
        if let Ok(result) = tokio::time::timeout(drain, &mut server).await {
            return result;
        }
        // Answer the streams still open with what they applied, so that
        // their clients resume instead of sending it again.
        eprintln!("drain timeout: ending the streams still open with their summaries");
        service.cut_open_streams();
        match tokio::time::timeout(Duration::from_secs(2), &mut server).await {
            Ok(result) => result,
            Err(_) => {
                server.abort();
                Ok(Ok(()))
            }
        }
    });
    match served {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(io::Error::other(format!("the ingest server failed: {e}"))),
        Err(e) => {
            return Err(io::Error::other(format!(
                "the ingest server task failed: {e}"
            )))
        }
    }
    eprintln!(
        "{} request(s) in flight at shutdown (not recorded)",
        service.in_flight()
    );
    drop(service);
    Ok(match pipeline.finish() {
        Ok(()) => ExitCode::SUCCESS,
        Err(()) => ExitCode::from(EXIT_EXPORT_FAILED),
    })
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
        Err(_) => registry
            .with(
                fmt.with_filter(LevelFilter::WARN)
                    .with_filter(filter_fn(|meta| {
                        let name = meta.name();
                        name != "PeriodicReader.ExportError" && !name.starts_with("Export.Failed")
                    })),
            )
            .try_init(),
    };
    // A host that installed its own subscriber keeps it.
    let _ = installed;
}

/// Runs the command line; returns the process exit status.
pub fn run(cli: Cli) -> ExitCode {
    init_diagnostics();
    let result = match cli.command {
        Command::Replay(args) => run_replay(args),
        Command::Simulate(args) => run_simulate(*args),
        Command::Serve(args) => run_serve(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}
