//! Arguments the subcommands share: where metrics go (bridge, OTLP,
//! target), how listeners are bounded and secured, the output format.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{Args, ValueEnum};
use opentelemetry_otlp::Compression;
use opentelemetry_sdk::metrics::Temporality;
use vllm_otel_metrics::catalog::{TokenBuckets, DEFAULT_MAX_MODEL_LEN};
use vllm_otel_metrics::export::otlp::{self, Protocol};
use vllm_otel_metrics::export::prometheus::{http, Format};
use vllm_otel_metrics::instruments::attribution::{
    DEFAULT_ADAPTER_MIN_REQUESTS, DEFAULT_MAX_ADAPTERS, MAX_ADAPTERS,
};
use vllm_otel_metrics::instruments::{
    Attribution, AttributionError, ExponentialHistograms, PriorityClasses, DEFAULT_MAX_LABEL_SETS,
};
use vllm_otel_metrics::protocol::InputLimits;

/// Where `/metrics` is served, or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MetricsAddr(pub(super) Option<SocketAddr>);

/// Where `serve` listens for gRPC ingest, or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IngestAddr(pub(super) Option<SocketAddr>);

/// An address flag's value that is neither `none` nor a socket address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{value}' is neither `none` nor an address like {example} ({reason})")]
pub(super) struct InvalidAddr {
    value: String,
    example: &'static str,
    reason: String,
}

/// `s` as a socket address, or None for `none`.
fn address_or_none(s: &str, example: &'static str) -> Result<Option<SocketAddr>, InvalidAddr> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|e: std::net::AddrParseError| InvalidAddr {
            value: s.to_owned(),
            example,
            reason: e.to_string(),
        })
}

impl FromStr for MetricsAddr {
    type Err = InvalidAddr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        address_or_none(s, "127.0.0.1:9464").map(MetricsAddr)
    }
}

impl FromStr for IngestAddr {
    type Err = InvalidAddr;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        address_or_none(s, "127.0.0.1:50051").map(IngestAddr)
    }
}

/// Options every subcommand shares.
#[derive(Debug, Args)]
pub(super) struct CommonArgs {
    /// Serve Prometheus `/metrics` here (`none` to disable).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR|none")]
    pub(super) metrics_addr: MetricsAddr,
    /// Model context length; bounds the token histograms' buckets.
    #[arg(long, default_value_t = DEFAULT_MAX_MODEL_LEN, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) max_model_len: u32,
    /// How the token histograms' buckets end: `rust` (vLLM's Rust frontend:
    /// the 1-2-5 series up to --max-model-len, then --max-model-len) or
    /// `python` (vLLM's Python logger: the 1-2-5 series up to
    /// --max-model-len, nothing appended).
    #[arg(long, value_enum, default_value = "rust")]
    pub(super) token_buckets: TokenBucketsArg,
    /// `(model_name, engine)` label sets kept apart; later ones share one
    /// overflow series per family (`otel_metric_overflow="true"`).
    #[arg(long, default_value_t = DEFAULT_MAX_LABEL_SETS, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_label_sets: usize,
    /// Longest accepted label value (`model_name`), bytes; a record with a
    /// longer one is invalid.
    #[arg(long, default_value_t = InputLimits::DEFAULT_MAX_LABEL_BYTES, value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_label_bytes: usize,
    /// Longest accepted request id, bytes; a record with a longer one is invalid.
    #[arg(long, default_value_t = InputLimits::DEFAULT_MAX_REQUEST_ID_BYTES, value_name = "BYTES", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) max_request_id_bytes: usize,
    /// Also expose the OpenTelemetry resource as `target_info`.
    #[arg(long)]
    pub(super) target_info: bool,
    /// Replace bucket boundaries, per bucket family: a JSON object as vLLM's
    /// `--custom-histogram-buckets`, e.g. '{"request_latency": [0.1, 0.5, 1, 5]}'.
    /// Keys: the bucket families of docs/CLI.md, or one histogram's vLLM
    /// name (which wins over its family). Both /metrics and OTLP use them.
    #[arg(long, value_name = "JSON")]
    pub(super) custom_histogram_buckets: Option<String>,
    /// Judge each finished request against a latency SLO and count the
    /// outcomes and the goodput tokens: a JSON object of bounds in seconds,
    /// '{"ttft": 0.5, "tpot": 0.05, "e2e": 30, "models": {"NAME": {"ttft": 2}}}'
    /// (every key optional; a model's bounds override the default's).
    #[arg(long, value_name = "JSON")]
    pub(super) slo: Option<String>,
    /// Exemplars on the per-request histograms and the SLO counter in
    /// OpenMetrics scrapes: each bucket's latest request, linked to its
    /// `llm_request` span (`# {trace_id="…",span_id="…"} value time`).
    /// Default: on when spans are exported (--otlp-traces-endpoint); `on`
    /// without spans links a request to its caller's `traceparent`.
    #[arg(long, value_enum, value_name = "on|off")]
    pub(super) exemplars: Option<Switch>,
    #[command(flatten)]
    pub(super) attribution: AttributionArgs,
    #[command(flatten)]
    pub(super) semconv: SemconvArgs,
    #[command(flatten)]
    pub(super) listen: ListenArgs,
    #[command(flatten)]
    pub(super) otlp: OtlpArgs,
}

/// Which classes each request is recorded with (docs/SEMANTICS.md §6d).
#[derive(Debug, Args)]
pub(super) struct AttributionArgs {
    /// Record each request with its class: `lora` (its adapter,
    /// `lora_name`), `priority` (its priority class, `priority`), or both
    /// (`lora,priority`). `/metrics` keeps vLLM's families as they are and
    /// adds their series by class as `vllm_class:` families; over OTLP the
    /// class is an attribute of vLLM's metrics. Default: neither, every
    /// series as vLLM's.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "lora,priority")]
    pub(super) attribute: Vec<Dimension>,
    /// With `--attribute priority`: the boundaries that cut priorities into
    /// classes, increasing (the default gives `<-1`, `-1`, `0`, `1`, `>1`).
    #[arg(long, default_value = "-1,0,1,2", value_name = "B1,B2,…", value_parser = parse_priority_classes, allow_hyphen_values = true)]
    pub(super) priority_classes: PriorityClasses,
    /// With `--attribute lora`: adapters with a `lora_name` of their own;
    /// the others' requests carry `lora_name="other"`.
    #[arg(long, default_value_t = DEFAULT_MAX_ADAPTERS, value_name = "K", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_ADAPTERS as u64))]
    pub(super) max_adapters: usize,
    /// With `--attribute lora`: requests an adapter shows before it gets a
    /// `lora_name` of its own (while fewer than --max-adapters have one).
    #[arg(long, default_value_t = DEFAULT_ADAPTER_MIN_REQUESTS, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) adapter_min_requests: u32,
}

/// A class dimension of `--attribute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Dimension {
    /// The request's LoRA adapter.
    Lora,
    /// The request's priority class.
    Priority,
}

fn parse_priority_classes(text: &str) -> Result<PriorityClasses, String> {
    text.parse().map_err(|e: AttributionError| e.to_string())
}

impl AttributionArgs {
    /// What `--attribute` and its bounds ask for.
    pub(super) fn attribution(&self) -> Attribution {
        let mut attribution = Attribution::default()
            .with_max_adapters(self.max_adapters)
            .with_adapter_min_requests(self.adapter_min_requests);
        if self.attribute.contains(&Dimension::Lora) {
            attribution = attribution.with_lora();
        }
        if self.attribute.contains(&Dimension::Priority) {
            attribution = attribution.with_priority(self.priority_classes.clone());
        }
        attribution
    }
}

/// A feature set on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

/// The semantic-convention streams (docs/SEMANTICS.md §3c).
#[derive(Debug, Args)]
pub(super) struct SemconvArgs {
    /// Also record these semantic conventions' streams: `gen_ai` (the
    /// GenAI model-server histograms `gen_ai.server.request.duration`,
    /// `gen_ai.server.time_to_first_token`, `gen_ai.server.time_per_output_token`).
    /// They go out over OTLP; `/metrics` shows them with --semconv-prometheus.
    #[arg(long, value_enum, default_value = "none")]
    pub(super) semconv: SemconvArg,
    /// Also expose the --semconv streams on `/metrics` and --output, named
    /// as the Collector's Prometheus exporter names them.
    #[arg(long, requires = "semconv")]
    pub(super) semconv_prometheus: bool,
    /// `server.address` of the --semconv streams (the API server's host).
    #[arg(long, value_name = "HOST", requires = "semconv", value_parser = bounded_label)]
    pub(super) semconv_server_address: Option<String>,
    /// `server.port` of the --semconv streams (the API server's port).
    #[arg(long, value_name = "PORT", requires = "semconv")]
    pub(super) semconv_server_port: Option<u16>,
}

/// The values of `--semconv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum SemconvArg {
    /// vLLM's families only.
    None,
    /// The GenAI semantic conventions' model-server histograms.
    #[value(name = "gen_ai")]
    GenAi,
}

/// A label value given on the command line, bounded like one from input.
fn bounded_label(value: &str) -> Result<String, String> {
    let max = InputLimits::DEFAULT_MAX_LABEL_BYTES;
    if value.len() > max {
        return Err(format!("{} bytes, more than {max}", value.len()));
    }
    Ok(value.to_owned())
}

/// Streaming to a remote `serve`.
#[derive(Debug, Args)]
pub(super) struct TargetArgs {
    /// Also stream every record to a remote `serve` (e.g. http://127.0.0.1:50051).
    #[arg(long, value_name = "URL")]
    pub(super) target: Option<String>,
    /// PEM CA that verifies an `https://` target (default: the system's roots).
    #[arg(long, value_name = "FILE", requires = "target")]
    pub(super) target_ca: Option<PathBuf>,
    /// Send `Authorization: Bearer <token>` with the token in this file.
    #[arg(long, value_name = "FILE", requires = "target")]
    pub(super) target_token_file: Option<PathBuf>,
}

/// How the servers (`/metrics`, and ingest for `serve`) listen.
#[derive(Debug, Args)]
pub(super) struct ListenArgs {
    /// Serve TLS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE")]
    pub(super) tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub(super) tls_key: Option<PathBuf>,
    /// Require client certificates that chain to this PEM CA (mutual TLS).
    #[arg(long, value_name = "FILE")]
    pub(super) tls_client_ca: Option<PathBuf>,
    /// Require `Authorization: Bearer <token>` with the token in this file.
    #[arg(long, value_name = "FILE")]
    pub(super) auth_token_file: Option<PathBuf>,
    /// Most `/metrics` connections open at once.
    #[arg(long, default_value_t = http::DEFAULT_LIMITS.max_connections, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(super) metrics_max_connections: usize,
    /// Close a connection that sends nothing for this long (0 disables).
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub(super) idle_timeout: f64,
    /// Close a connection that takes no written byte for this long (0 disables).
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub(super) write_timeout: f64,
}

/// OTLP push options; each one given is set on the exporter's builder and
/// wins over its `OTEL_*` variable (headers excepted: the exporter merges the
/// header variables over the flags).
#[derive(Debug, Args)]
pub(super) struct OtlpArgs {
    /// Push metrics to this OTLP endpoint (enables OTLP; or set OTEL_EXPORTER_OTLP_ENDPOINT).
    #[arg(long, value_name = "URL")]
    pub(super) otlp_endpoint: Option<String>,
    /// Push each terminated request's `llm_request` span to this OTLP
    /// endpoint (vLLM's flag; or set OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    /// OTEL_TRACES_EXPORTER=otlp). Off by default.
    #[arg(long, value_name = "URL")]
    pub(super) otlp_traces_endpoint: Option<String>,
    /// OTLP transport (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(long, value_name = "grpc|http/protobuf")]
    pub(super) otlp_protocol: Option<Protocol>,
    /// Export period in milliseconds (default: OTEL_METRIC_EXPORT_INTERVAL, else 60000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) otlp_interval_ms: Option<u64>,
    /// Time one export may take, retries included, in milliseconds (default:
    /// OTEL_EXPORTER_OTLP_TIMEOUT, else 10000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) otlp_timeout_ms: Option<u64>,
    /// Extra OTLP request header (repeatable; OTEL_EXPORTER_OTLP_HEADERS adds to them).
    /// Parsed here, not by the argument parser, so a bad value is never printed.
    #[arg(long, value_name = "K=V")]
    pub(super) otlp_header: Vec<String>,
    /// Aggregation temporality (default: OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, else cumulative).
    #[arg(long, value_name = "cumulative|delta|lowmemory", value_parser = otlp::parse_temporality)]
    pub(super) otlp_temporality: Option<Temporality>,
    /// Request body compression (default: OTEL_EXPORTER_OTLP_COMPRESSION, else none).
    #[arg(long, value_name = "gzip|zstd", value_parser = otlp::parse_compression)]
    pub(super) otlp_compression: Option<Compression>,
    /// PEM CA certificate that verifies the Collector's TLS certificate
    /// (default: OTEL_EXPORTER_OTLP_CERTIFICATE, else the system's roots).
    #[arg(long, value_name = "FILE")]
    pub(super) otlp_certificate: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (default: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE).
    #[arg(long, value_name = "FILE")]
    pub(super) otlp_client_certificate: Option<PathBuf>,
    /// PEM private key of the client certificate (default: OTEL_EXPORTER_OTLP_CLIENT_KEY).
    #[arg(long, value_name = "FILE")]
    pub(super) otlp_client_key: Option<PathBuf>,
    /// Metric names on the OTLP wire: `otel` (vllm.request_num_preemptions) or
    /// `prometheus` (vLLM's own vllm:request_num_preemptions).
    #[arg(long, value_enum, default_value = "otel")]
    pub(super) otlp_names: OtlpNames,
    /// How the latency histograms (TTFT, ITL, e2e, queue, prefill, decode,
    /// inference, time per output token) go over OTLP: `explicit` (vLLM's
    /// buckets) or `exponential` (base-2 exponential histograms, Prometheus
    /// native histograms through remote write). /metrics keeps vLLM's buckets.
    #[arg(long, value_enum, default_value = "explicit")]
    pub(super) otlp_histograms: OtlpHistogramsArg,
    /// Most buckets of an exponential histogram series.
    #[arg(long, default_value_t = ExponentialHistograms::DEFAULT.max_size, value_name = "N", value_parser = clap::value_parser!(u32).range(i64::from(ExponentialHistograms::MIN_SIZE)..=16384))]
    pub(super) otlp_histogram_max_size: u32,
    /// Finest scale an exponential histogram series starts at (-10 to 20).
    #[arg(long, default_value_t = ExponentialHistograms::DEFAULT.max_scale, value_name = "N", value_parser = clap::value_parser!(i8).range(i64::from(*ExponentialHistograms::SCALES.start())..=i64::from(*ExponentialHistograms::SCALES.end())), allow_negative_numbers = true)]
    pub(super) otlp_histogram_max_scale: i8,
}

/// The values of `--otlp-histograms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum OtlpHistogramsArg {
    /// vLLM's explicit buckets.
    Explicit,
    /// Base-2 exponential histograms for the latency families.
    Exponential,
}

/// The values of `--token-buckets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum TokenBucketsArg {
    /// vLLM's Rust frontend: `max_model_len` appended to the 1-2-5 series.
    Rust,
    /// vLLM's Python logger: `build_1_2_5_buckets(max_model_len)`.
    Python,
}

impl From<TokenBucketsArg> for TokenBuckets {
    fn from(arg: TokenBucketsArg) -> Self {
        match arg {
            TokenBucketsArg::Rust => TokenBuckets::Rust,
            TokenBucketsArg::Python => TokenBuckets::Python,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum OtlpNames {
    /// OpenTelemetry names (`vllm.…`).
    Otel,
    /// vLLM's Prometheus names (`vllm:…`).
    Prometheus,
}

/// What to print on stdout at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Output {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text.
    Openmetrics,
    /// Nothing.
    None,
}

impl Output {
    pub(super) fn format(self) -> Option<Format> {
        match self {
            Output::Prometheus => Some(Format::Text),
            Output::Openmetrics => Some(Format::OpenMetrics),
            Output::None => None,
        }
    }
}
