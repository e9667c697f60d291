//! The metric catalog: the single table of every family this crate records.
//!
//! Each [`MetricDef`] carries a family's vLLM (Prometheus) name, its OpenTelemetry
//! instrument name, kind, unit, HELP text, label names and bucket boundaries.
//! Families and their buckets, the exporters' names, the metric table of
//! docs/CATALOG.md and the docs are all derived from here; no metric name is written anywhere else.
//!
//! ```
//! use vllm_otel_metrics::catalog::{self, Kind};
//!
//! let def = &catalog::REQUEST_NUM_PREEMPTIONS;
//! assert_eq!(def.vllm_name, "vllm:request_num_preemptions");
//! assert_eq!(def.otel_name, "vllm.request_num_preemptions");
//! assert_eq!(def.kind, Kind::Histogram);
//! assert_eq!(def.buckets.boundaries(131_072), vec![1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]);
//! ```

mod engine;
mod kv_connector;
mod reasons;
pub mod semconv;

pub use engine::*;
pub use kv_connector::*;
pub use reasons::{EvictReason, RejectReason};

/// How a family aggregates, which decides its instrument and exposition type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic sum (Prometheus `counter`, exposed with `_total`).
    Counter,
    /// Explicit-bucket histogram (`_bucket`/`_sum`/`_count`).
    Histogram,
    /// Last value (Prometheus `gauge`).
    Gauge,
}

impl Kind {
    /// The Prometheus `# TYPE` word of this kind.
    pub fn prometheus_type(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
            Kind::Gauge => "gauge",
        }
    }
}

/// How a family's sample values are written: vLLM's Rust frontend keeps counts as
/// integers and times and ratios as floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// Whole numbers, written without a decimal point.
    Integer,
    /// Floating point, written with a decimal point (`1.0`).
    Float,
}

/// Which token-histogram buckets to build: vLLM's Rust frontend's or its
/// Python logger's (`--token-buckets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenBuckets {
    /// The 1-2-5 series up to `max_model_len`, then `max_model_len` itself
    /// (vLLM's Rust frontend).
    #[default]
    Rust,
    /// The 1-2-5 series up to and including `max_model_len`, nothing
    /// appended (vLLM's Python `build_1_2_5_buckets(max_model_len)`).
    Python,
}

/// Bucket boundaries of a histogram family (upper bounds; `+Inf` is implied).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Buckets {
    /// Not a histogram.
    None,
    /// A fixed list.
    Fixed(&'static [f64]),
    /// The 1-2-5 series up to `max_model_len`, then `max_model_len` itself
    /// (vLLM's `build_1_2_5_buckets` plus the model length); with
    /// [`TokenBuckets::Python`], without the model length appended.
    Tokens,
}

impl Buckets {
    /// The boundaries for a model whose context is `max_model_len` tokens.
    ///
    /// ```
    /// use vllm_otel_metrics::catalog::Buckets;
    /// assert_eq!(Buckets::Tokens.boundaries(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 60.0]);
    /// assert_eq!(Buckets::Tokens.boundaries(50), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// ```
    pub fn boundaries(&self, max_model_len: u32) -> Vec<f64> {
        self.boundaries_with(max_model_len, TokenBuckets::Rust)
    }

    /// The boundaries for a model whose context is `max_model_len` tokens,
    /// token buckets built the `style` way.
    ///
    /// ```
    /// use vllm_otel_metrics::catalog::{Buckets, TokenBuckets};
    /// assert_eq!(Buckets::Tokens.boundaries_with(60, TokenBuckets::Python), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// assert_eq!(Buckets::Tokens.boundaries_with(50, TokenBuckets::Python), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    /// ```
    pub fn boundaries_with(&self, max_model_len: u32, style: TokenBuckets) -> Vec<f64> {
        match self {
            Buckets::None => Vec::new(),
            Buckets::Fixed(bounds) => bounds.to_vec(),
            Buckets::Tokens => token_buckets(max_model_len, style),
        }
    }
}

/// The 1-2-5 series up to `max_model_len`; with [`TokenBuckets::Rust`],
/// `max_model_len` appended unless it is already the last boundary.
fn token_buckets(max_model_len: u32, style: TokenBuckets) -> Vec<f64> {
    let max = u64::from(max_model_len.max(1));
    let mut bounds = Vec::new();
    let mut decade = 1u64;
    'series: loop {
        for mantissa in [1u64, 2, 5] {
            let bound = mantissa * decade;
            if bound > max {
                break 'series;
            }
            bounds.push(bound as f64);
        }
        decade *= 10;
    }
    if style == TokenBuckets::Rust && bounds.last() != Some(&(max as f64)) {
        bounds.push(max as f64);
    }
    bounds
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    /// The Prometheus family name as vLLM exposes it (`vllm:…`), without `_total`.
    pub vllm_name: &'static str,
    /// The OpenTelemetry instrument name (`vllm.…`).
    pub otel_name: &'static str,
    /// Aggregation kind.
    pub kind: Kind,
    /// UCUM unit of the instrument (never appended to Prometheus names).
    pub unit: &'static str,
    /// HELP text, exactly as exposed.
    pub help: &'static str,
    /// Label names, in exposition order.
    pub labels: &'static [&'static str],
    /// Histogram bucket boundaries.
    pub buckets: Buckets,
    /// How sample values are written.
    pub value_type: ValueType,
}

/// Label names shared by every vLLM family.
pub const ENGINE_LABELS: &[&str] = &["model_name", "engine"];
/// Labels of `vllm:request_success`.
pub const FINISHED_REASON_LABELS: &[&str] = &["model_name", "engine", "finished_reason"];
/// Values of its `finished_reason` label (vLLM's `FinishReason`, as
/// `str(reason)` writes it in `vllm/v1/engine/__init__.py`).
pub const FINISHED_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];
/// Labels of `vllm:num_preemptions_by_reason`.
pub const PREEMPTION_REASON_LABELS: &[&str] = &["model_name", "engine", "reason"];
/// Values of its `reason` label (vLLM PR #58037), in the order of
/// [`PreemptionReason::ALL`](crate::protocol::PreemptionReason::ALL).
pub const PREEMPTION_REASONS: [&str; 3] = ["kv_full", "priority", "prefix_cache_reset"];
/// Labels of `vllm:prompt_tokens_by_source`.
pub const SOURCE_LABELS: &[&str] = &["model_name", "engine", "source"];
/// Labels of the self-telemetry counters.
pub const REASON_LABELS: &[&str] = &["reason"];

/// Values of the `source` label, in the order prefill stats report them:
/// computed locally, hit in the local prefix cache, transferred from an external KV store.
pub const PROMPT_TOKEN_SOURCES: [&str; 3] =
    ["local_compute", "local_cache_hit", "external_kv_transfer"];

/// Preemptions per request.
pub const PREEMPTION_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];
/// The `n` request parameter.
pub const N_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
/// Tokens per engine step.
pub const ITERATION_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// Time to first token.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Inter-token latency and time per output token.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// Request phase latencies.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// The default `max_model_len` for the token buckets.
pub const DEFAULT_MAX_MODEL_LEN: u32 = 131_072;

pub(crate) const fn counter(
    vllm_name: &'static str,
    otel_name: &'static str,
    unit: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
) -> MetricDef {
    MetricDef {
        vllm_name,
        otel_name,
        kind: Kind::Counter,
        unit,
        help,
        labels,
        buckets: Buckets::None,
        value_type: ValueType::Integer,
    }
}

pub(crate) const fn histogram(
    vllm_name: &'static str,
    otel_name: &'static str,
    unit: &'static str,
    help: &'static str,
    buckets: Buckets,
) -> MetricDef {
    MetricDef {
        vllm_name,
        otel_name,
        kind: Kind::Histogram,
        unit,
        help,
        labels: ENGINE_LABELS,
        buckets,
        value_type: ValueType::Float,
    }
}

pub(crate) const fn gauge(
    vllm_name: &'static str,
    otel_name: &'static str,
    unit: &'static str,
    help: &'static str,
    value_type: ValueType,
) -> MetricDef {
    MetricDef {
        vllm_name,
        otel_name,
        kind: Kind::Gauge,
        unit,
        help,
        labels: ENGINE_LABELS,
        buckets: Buckets::None,
        value_type,
    }
}

// ---- per-request tier ----

/// Engine-wide preemption events.
pub const NUM_PREEMPTIONS: MetricDef = counter(
    "vllm:num_preemptions",
    "vllm.num_preemptions",
    "{preemption}",
    "Cumulative number of preemption events.",
    ENGINE_LABELS,
);
/// Preemption events by reason (vLLM PR #58037); the reasons sum to
/// `vllm:num_preemptions`.
pub const NUM_PREEMPTIONS_BY_REASON: MetricDef = counter(
    "vllm:num_preemptions_by_reason",
    "vllm.num_preemptions_by_reason",
    "{preemption}",
    "Cumulative number of preemption events, by reason.",
    PREEMPTION_REASON_LABELS,
);
/// Prompt tokens, cache hits included.
pub const PROMPT_TOKENS: MetricDef = counter(
    "vllm:prompt_tokens",
    "vllm.prompt_tokens",
    "{token}",
    "Prompt tokens summed over sequences, including prefix-cache hits; each parallel-sampling child counts its prompt separately. Equals the sum of vllm:prompt_tokens_by_source_total.",
    ENGINE_LABELS,
);
/// Prompt tokens by where their KV came from.
pub const PROMPT_TOKENS_BY_SOURCE: MetricDef = counter(
    "vllm:prompt_tokens_by_source",
    "vllm.prompt_tokens_by_source",
    "{token}",
    "Number of prompt tokens by source.",
    SOURCE_LABELS,
);
/// Prompt tokens served from the prefix cache.
pub const PROMPT_TOKENS_CACHED: MetricDef = counter(
    "vllm:prompt_tokens_cached",
    "vllm.prompt_tokens_cached",
    "{token}",
    "Number of prompt tokens with prefix cache hits.",
    ENGINE_LABELS,
);
/// Generated tokens.
pub const GENERATION_TOKENS: MetricDef = counter(
    "vllm:generation_tokens",
    "vllm.generation_tokens",
    "{token}",
    "Number of generation tokens processed.",
    ENGINE_LABELS,
);
/// Terminated requests by finish reason.
pub const REQUEST_SUCCESS: MetricDef = counter(
    "vllm:request_success",
    "vllm.request_success",
    "{request}",
    "Count of successfully processed requests.",
    FINISHED_REASON_LABELS,
);
/// Tokens per engine output batch.
pub const ITERATION_TOKENS: MetricDef = histogram(
    "vllm:iteration_tokens_total",
    "vllm.iteration_tokens_total",
    "{token}",
    "Histogram of computed prompt and generated tokens per nonempty engine output batch.",
    Buckets::Fixed(ITERATION_BUCKETS),
);
/// Prompt length per finished request.
pub const REQUEST_PROMPT_TOKENS: MetricDef = histogram(
    "vllm:request_prompt_tokens",
    "vllm.request_prompt_tokens",
    "{token}",
    "Prompt length of each finished sequence; each parallel-sampling child is one observation.",
    Buckets::Tokens,
);
/// Generated tokens per finished request.
pub const REQUEST_GENERATION_TOKENS: MetricDef = histogram(
    "vllm:request_generation_tokens",
    "vllm.request_generation_tokens",
    "{token}",
    "Number of generation tokens processed.",
    Buckets::Tokens,
);
/// Maximum generated tokens per finished request.
pub const REQUEST_MAX_NUM_GENERATION_TOKENS: MetricDef = histogram(
    "vllm:request_max_num_generation_tokens",
    "vllm.request_max_num_generation_tokens",
    "{token}",
    "Histogram of maximum number of requested generation tokens.",
    Buckets::Tokens,
);
/// The `max_tokens` request parameter.
pub const REQUEST_PARAMS_MAX_TOKENS: MetricDef = histogram(
    "vllm:request_params_max_tokens",
    "vllm.request_params_max_tokens",
    "{token}",
    "Histogram of the max_tokens request parameter.",
    Buckets::Tokens,
);
/// The `n` request parameter.
pub const REQUEST_PARAMS_N: MetricDef = histogram(
    "vllm:request_params_n",
    "vllm.request_params_n",
    "{sequence}",
    "Histogram of the n request parameter.",
    Buckets::Fixed(N_BUCKETS),
);
/// Preemptions per terminated request, zero included: the headline family.
pub const REQUEST_NUM_PREEMPTIONS: MetricDef = histogram(
    "vllm:request_num_preemptions",
    "vllm.request_num_preemptions",
    "{preemption}",
    "Histogram of the number of times a request was preempted.",
    Buckets::Fixed(PREEMPTION_BUCKETS),
);
/// KV tokens computed during prefill (cache hits excluded).
pub const REQUEST_PREFILL_KV_COMPUTED_TOKENS: MetricDef = histogram(
    "vllm:request_prefill_kv_computed_tokens",
    "vllm.request_prefill_kv_computed_tokens",
    "{token}",
    "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    Buckets::Tokens,
);
/// Time to first token.
pub const TIME_TO_FIRST_TOKEN: MetricDef = histogram(
    "vllm:time_to_first_token_seconds",
    "vllm.time_to_first_token_seconds",
    "s",
    "Histogram of time to first token in seconds.",
    Buckets::Fixed(TTFT_BUCKETS),
);
/// Inter-token latency.
pub const INTER_TOKEN_LATENCY: MetricDef = histogram(
    "vllm:inter_token_latency_seconds",
    "vllm.inter_token_latency_seconds",
    "s",
    "Histogram of inter-token latency in seconds.",
    Buckets::Fixed(ITL_BUCKETS),
);
/// End-to-end latency.
pub const E2E_REQUEST_LATENCY: MetricDef = histogram(
    "vllm:e2e_request_latency_seconds",
    "vllm.e2e_request_latency_seconds",
    "s",
    "Histogram of e2e request latency in seconds.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the WAITING phase.
pub const REQUEST_QUEUE_TIME: MetricDef = histogram(
    "vllm:request_queue_time_seconds",
    "vllm.request_queue_time_seconds",
    "s",
    "Histogram of time spent in WAITING phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the PREFILL phase.
pub const REQUEST_PREFILL_TIME: MetricDef = histogram(
    "vllm:request_prefill_time_seconds",
    "vllm.request_prefill_time_seconds",
    "s",
    "Histogram of time spent in PREFILL phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the DECODE phase.
pub const REQUEST_DECODE_TIME: MetricDef = histogram(
    "vllm:request_decode_time_seconds",
    "vllm.request_decode_time_seconds",
    "s",
    "Histogram of time spent in DECODE phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the RUNNING phase.
pub const REQUEST_INFERENCE_TIME: MetricDef = histogram(
    "vllm:request_inference_time_seconds",
    "vllm.request_inference_time_seconds",
    "s",
    "Histogram of time spent in RUNNING phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Decode time per output token after the first.
pub const REQUEST_TIME_PER_OUTPUT_TOKEN: MetricDef = histogram(
    "vllm:request_time_per_output_token_seconds",
    "vllm.request_time_per_output_token_seconds",
    "s",
    "Histogram of time_per_output_token_seconds per request.",
    Buckets::Fixed(ITL_BUCKETS),
);

// ---- scheduler tier ----

/// Requests in the running batch.
pub const NUM_REQUESTS_RUNNING: MetricDef = gauge(
    "vllm:num_requests_running",
    "vllm.num_requests_running",
    "{request}",
    "Number of requests in model execution batches.",
    ValueType::Integer,
);
/// Requests in the waiting queue.
pub const NUM_REQUESTS_WAITING: MetricDef = gauge(
    "vllm:num_requests_waiting",
    "vllm.num_requests_waiting",
    "{request}",
    "Number of requests waiting to be processed.",
    ValueType::Integer,
);
/// KV-cache usage as a fraction.
pub const KV_CACHE_USAGE: MetricDef = gauge(
    "vllm:kv_cache_usage_perc",
    "vllm.kv_cache_usage_perc",
    // Not UCUM "1": OTLP-to-Prometheus translators append `_ratio` for it,
    // which would break vLLM's name.
    "",
    "KV-cache usage. 1 means 100 percent usage.",
    ValueType::Float,
);
/// Tokens looked up in the prefix cache.
pub const PREFIX_CACHE_QUERIES: MetricDef = counter(
    "vllm:prefix_cache_queries",
    "vllm.prefix_cache_queries",
    "{token}",
    "Prefix cache queries, in terms of number of queried tokens.",
    ENGINE_LABELS,
);
/// Tokens found in the prefix cache.
pub const PREFIX_CACHE_HITS: MetricDef = counter(
    "vllm:prefix_cache_hits",
    "vllm.prefix_cache_hits",
    "{token}",
    "Prefix cache hits, in terms of number of cached tokens.",
    ENGINE_LABELS,
);

// ---- self-telemetry ----

/// Input that changed no vLLM metric (this crate's own family, never `vllm:`).
pub const REJECTED_INPUTS: MetricDef = counter(
    "vllm_otel_metrics_rejected_inputs",
    "vllm_otel_metrics.rejected_inputs",
    "{input}",
    "Input records or outputs that changed no vLLM metric, by reason.",
    REASON_LABELS,
);

/// Requests the tracker terminated itself (in-flight limit, time-to-live).
pub const EVICTED_REQUESTS: MetricDef = counter(
    "vllm_otel_metrics_evicted_requests",
    "vllm_otel_metrics.evicted_requests",
    "{request}",
    "Live requests terminated as abort by the tracker itself, by reason.",
    REASON_LABELS,
);

/// Records the vLLM stat-logger plugin reported dropping (this crate's own
/// family, never `vllm:`; no labels).
pub const PLUGIN_DROPPED_RECORDS: MetricDef = counter(
    "vllm_otel_metrics_plugin_dropped_records",
    "vllm_otel_metrics.plugin_dropped_records",
    "{record}",
    "Records the vLLM stat-logger plugin dropped because its queue was full or the sidecar unreachable.",
    &[],
);

// ---- process (served on /metrics only) ----

const fn process_gauge(
    name: &'static str,
    otel_name: &'static str,
    help: &'static str,
) -> MetricDef {
    MetricDef {
        vllm_name: name,
        otel_name,
        kind: Kind::Gauge,
        unit: "",
        help,
        labels: &[],
        buckets: Buckets::None,
        value_type: ValueType::Float,
    }
}

/// Virtual memory of the process.
pub const PROCESS_VIRTUAL_MEMORY: MetricDef = process_gauge(
    "process_virtual_memory_bytes",
    "process.virtual_memory_bytes",
    "Virtual memory size in bytes.",
);
/// Resident memory of the process.
pub const PROCESS_RESIDENT_MEMORY: MetricDef = process_gauge(
    "process_resident_memory_bytes",
    "process.resident_memory_bytes",
    "Resident memory size in bytes.",
);
/// When the process started.
pub const PROCESS_START_TIME: MetricDef = process_gauge(
    "process_start_time_seconds",
    "process.start_time_seconds",
    "Start time of the process since unix epoch in seconds.",
);
/// CPU time of the process.
pub const PROCESS_CPU: MetricDef = MetricDef {
    kind: Kind::Counter,
    ..process_gauge(
        "process_cpu_seconds",
        "process.cpu_seconds",
        "Total user and system CPU time spent in seconds.",
    )
};
/// Open file descriptors.
pub const PROCESS_OPEN_FDS: MetricDef = process_gauge(
    "process_open_fds",
    "process.open_fds",
    "Number of open file descriptors.",
);
/// The file descriptor limit.
pub const PROCESS_MAX_FDS: MetricDef = process_gauge(
    "process_max_fds",
    "process.max_fds",
    "Maximum number of open file descriptors.",
);

/// The process families `/metrics` serves after the catalog's, with the
/// names and HELP texts of Prometheus client libraries (vLLM's dashboards
/// query `process_start_time_seconds`). They are read from the operating
/// system at each scrape, not recorded, so they are not OTel instruments.
pub const PROCESS: [&MetricDef; 6] = [
    &PROCESS_VIRTUAL_MEMORY,
    &PROCESS_RESIDENT_MEMORY,
    &PROCESS_START_TIME,
    &PROCESS_CPU,
    &PROCESS_OPEN_FDS,
    &PROCESS_MAX_FDS,
];

/// The per-request tier, in exposition order.
pub const PER_REQUEST: [&MetricDef; 23] = [
    &NUM_PREEMPTIONS,
    &NUM_PREEMPTIONS_BY_REASON,
    &PROMPT_TOKENS,
    &PROMPT_TOKENS_BY_SOURCE,
    &PROMPT_TOKENS_CACHED,
    &GENERATION_TOKENS,
    &REQUEST_SUCCESS,
    &ITERATION_TOKENS,
    &REQUEST_PROMPT_TOKENS,
    &REQUEST_GENERATION_TOKENS,
    &REQUEST_MAX_NUM_GENERATION_TOKENS,
    &REQUEST_PARAMS_MAX_TOKENS,
    &REQUEST_PARAMS_N,
    &REQUEST_NUM_PREEMPTIONS,
    &REQUEST_PREFILL_KV_COMPUTED_TOKENS,
    &TIME_TO_FIRST_TOKEN,
    &INTER_TOKEN_LATENCY,
    &E2E_REQUEST_LATENCY,
    &REQUEST_QUEUE_TIME,
    &REQUEST_PREFILL_TIME,
    &REQUEST_DECODE_TIME,
    &REQUEST_INFERENCE_TIME,
    &REQUEST_TIME_PER_OUTPUT_TOKEN,
];

/// The scheduler tier, in exposition order.
pub const SCHEDULER: [&MetricDef; 5] = [
    &NUM_REQUESTS_RUNNING,
    &NUM_REQUESTS_WAITING,
    &KV_CACHE_USAGE,
    &PREFIX_CACHE_QUERIES,
    &PREFIX_CACHE_HITS,
];

/// This crate's own families.
pub const SELF_TELEMETRY: [&MetricDef; 3] =
    [&REJECTED_INPUTS, &EVICTED_REQUESTS, &PLUGIN_DROPPED_RECORDS];

/// Every family, in exposition order: per-request tier, scheduler tier,
/// engine tier, self-telemetry.
pub fn all() -> impl Iterator<Item = &'static MetricDef> {
    PER_REQUEST
        .into_iter()
        .chain(SCHEDULER)
        .chain(ENGINE)
        .chain(KV_CONNECTOR)
        .chain(SELF_TELEMETRY)
}

/// How many series one `(model_name, engine)` label set has in `def`: one,
/// or one per value of its further label.
pub fn series_per_label_set(def: &MetricDef) -> usize {
    match def.vllm_name {
        name if name == REQUEST_SUCCESS.vllm_name => FINISHED_REASONS.len(),
        name if name == NUM_PREEMPTIONS_BY_REASON.vllm_name => PREEMPTION_REASONS.len(),
        name if name == SIMPLE_KV_OFFLOAD_SAVE_OUTCOMES.vllm_name => SAVE_OUTCOMES.len(),
        name if name == PROMPT_TOKENS_BY_SOURCE.vllm_name => PROMPT_TOKEN_SOURCES.len(),
        name if name == NUM_REQUESTS_WAITING_BY_REASON.vllm_name => WAITING_REASONS.len(),
        name if name == NUM_REQUESTS_KV_FETCH_BY_STAGE.vllm_name => KV_FETCH_STAGES.len(),
        name if name == ENGINE_SLEEP_STATE.vllm_name => SLEEP_STATES.len(),
        name if name == PROMPT_TOKENS_CACHED_BY_SOURCE.vllm_name => CACHE_HIT_SOURCES.len(),
        name if name == SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS.vllm_name => SPEC_POSITIONS.len(),
        _ => 1,
    }
}

/// The family whose OpenTelemetry name is `otel_name`.
pub fn by_otel_name(otel_name: &str) -> Option<&'static MetricDef> {
    all().find(|def| def.otel_name == otel_name)
}

/// The catalog as a Markdown table (docs/CATALOG.md's metric table is this text).
pub fn markdown_table(max_model_len: u32) -> String {
    let mut out = String::from(
        "| vLLM name | OTel name | kind | unit | labels | buckets | HELP |\n|---|---|---|---|---|---|---|\n",
    );
    for def in all() {
        let buckets = def
            .buckets
            .boundaries(max_model_len)
            .iter()
            .map(|b| format!("{b:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let unit = if def.unit.is_empty() {
            String::new()
        } else {
            format!("`{}`", def.unit)
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} | {} | {} |\n",
            def.vllm_name,
            def.otel_name,
            def.kind.prometheus_type(),
            unit,
            def.labels.join(", "),
            buckets,
            def.help
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otel_name_is_vllm_name_with_dot() {
        for def in PER_REQUEST
            .iter()
            .chain(SCHEDULER.iter())
            .chain(ENGINE.iter())
        {
            let rest = def.vllm_name.strip_prefix("vllm:").unwrap();
            assert_eq!(def.otel_name, format!("vllm.{rest}"));
        }
        for def in SELF_TELEMETRY {
            assert!(!def.vllm_name.starts_with("vllm:"));
        }
    }

    #[test]
    fn token_buckets_follow_1_2_5_then_max_model_len() {
        let b = Buckets::Tokens.boundaries(DEFAULT_MAX_MODEL_LEN);
        assert_eq!(b.len(), 17);
        assert_eq!(&b[..6], &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(&b[14..], &[50000.0, 100000.0, 131072.0]);
        assert_eq!(Buckets::Tokens.boundaries(1), vec![1.0]);
        assert_eq!(Buckets::Tokens.boundaries(3), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn python_token_buckets_stop_at_max_model_len() {
        let python = |len| Buckets::Tokens.boundaries_with(len, TokenBuckets::Python);
        let b = python(DEFAULT_MAX_MODEL_LEN);
        assert_eq!(b.len(), 16);
        assert_eq!(&b[..6], &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert_eq!(&b[13..], &[20000.0, 50000.0, 100000.0]);
        assert_eq!(python(1), vec![1.0]);
        assert_eq!(python(3), vec![1.0, 2.0]);
        assert_eq!(python(100), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(
            python(4096),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        assert_eq!(
            Buckets::Fixed(N_BUCKETS).boundaries_with(3, TokenBuckets::Python),
            N_BUCKETS.to_vec()
        );
    }

    #[test]
    fn names_are_unique() {
        let defs: Vec<&MetricDef> = all().chain(semconv::ALL).collect();
        for name in [|d: &&MetricDef| d.vllm_name, |d: &&MetricDef| d.otel_name] {
            let mut names: Vec<_> = defs.iter().map(name).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), defs.len());
        }
        assert_eq!(all().count(), 78);
    }
}
