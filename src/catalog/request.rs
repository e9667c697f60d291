//! The per-request tier: vLLM's families of one request's lifecycle
//! (`rust/src/metrics/src/request.rs` in vLLM's Rust frontend, and the
//! Python logger's `PrometheusStatLogger`).
//!
//! Each per-request histogram is one row of [`request_histograms!`]: its
//! name, unit, HELP, bucket family, how its value is taken (from the
//! [`TerminalValues`] both tracker paths fill at a request's end, or at its
//! tokens) and what its exemplars show ([`Exemplar`]). The instruments, the
//! handles of each label set, the recording, the exemplars and the
//! exposition all follow the table; nothing else lists them.

use super::def::{counter, histogram, BucketFamily, MetricDef};
use super::labels::{
    ENGINE_LABELS, FINISHED_REASONS, FINISHED_REASON_LABELS, PREEMPTION_REASONS,
    PREEMPTION_REASON_LABELS, PROMPT_TOKEN_SOURCES, SOURCE_LABELS,
};

/// Preemptions per request.
pub const PREEMPTION_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];

/// Tokens per engine step.
const ITERATION_TOKENS_BUCKETS: BucketFamily = BucketFamily::fixed(
    "iteration_tokens",
    &[
        1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
    ],
);
/// Token counts of a request: the 1-2-5 series up to `max_model_len`.
const REQUEST_TOKENS_BUCKETS: BucketFamily = BucketFamily {
    key: "request_tokens",
    buckets: super::def::Buckets::Tokens,
};
/// The `n` request parameter.
const REQUEST_PARAMS_N_BUCKETS: BucketFamily =
    BucketFamily::fixed("request_params_n", &[1.0, 2.0, 5.0, 10.0, 20.0]);
/// Preemptions per request: a family of its own, so that no group key ever
/// changes the headline histogram's buckets.
const REQUEST_NUM_PREEMPTIONS_BUCKETS: BucketFamily =
    BucketFamily::fixed("request_num_preemptions", PREEMPTION_BUCKETS);
/// Time to first token.
const TIME_TO_FIRST_TOKEN_BUCKETS: BucketFamily = BucketFamily::fixed(
    "time_to_first_token",
    &[
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ],
);
/// Inter-token latency and time per output token.
const INTER_TOKEN_LATENCY_BUCKETS: BucketFamily = BucketFamily::fixed(
    "inter_token_latency",
    &[
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0,
    ],
);
/// Request phase latencies.
const REQUEST_LATENCY_BUCKETS: BucketFamily = BucketFamily::fixed(
    "request_latency",
    &[
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
        240.0, 480.0, 960.0, 1920.0, 7680.0,
    ],
);

/// Engine-wide preemption events.
pub(crate) const NUM_PREEMPTIONS: MetricDef = counter(
    vllm!("num_preemptions"),
    "{preemption}",
    "Cumulative number of preemption events.",
    ENGINE_LABELS,
);
/// Preemption events by reason (vLLM PR #58037); the reasons sum to
/// `vllm:num_preemptions`.
pub(crate) const NUM_PREEMPTIONS_BY_REASON: MetricDef = counter(
    vllm!("num_preemptions_by_reason"),
    "{preemption}",
    "Cumulative number of preemption events, by reason.",
    PREEMPTION_REASON_LABELS,
)
.with_label_values(&PREEMPTION_REASONS);
/// Prompt tokens, cache hits included.
pub(crate) const PROMPT_TOKENS: MetricDef = counter(
    vllm!("prompt_tokens"),
    "{token}",
    "Prompt tokens summed over sequences, including prefix-cache hits; each parallel-sampling child counts its prompt separately. Equals the sum of vllm:prompt_tokens_by_source_total.",
    ENGINE_LABELS,
);
/// Prompt tokens by where their KV came from.
pub(crate) const PROMPT_TOKENS_BY_SOURCE: MetricDef = counter(
    vllm!("prompt_tokens_by_source"),
    "{token}",
    "Number of prompt tokens by source.",
    SOURCE_LABELS,
)
.with_label_values(&PROMPT_TOKEN_SOURCES);
/// Prompt tokens served from the prefix cache.
pub(crate) const PROMPT_TOKENS_CACHED: MetricDef = counter(
    vllm!("prompt_tokens_cached"),
    "{token}",
    "Number of prompt tokens with prefix cache hits.",
    ENGINE_LABELS,
);
/// Generated tokens.
pub(crate) const GENERATION_TOKENS: MetricDef = counter(
    vllm!("generation_tokens"),
    "{token}",
    "Number of generation tokens processed.",
    ENGINE_LABELS,
);
/// Terminated requests by finish reason.
pub const REQUEST_SUCCESS: MetricDef = counter(
    vllm!("request_success"),
    "{request}",
    "Count of successfully processed requests.",
    FINISHED_REASON_LABELS,
)
.with_label_values(&FINISHED_REASONS);
/// Tokens per engine output batch.
pub(crate) const ITERATION_TOKENS: MetricDef = histogram(
    vllm!("iteration_tokens_total"),
    "{token}",
    "Histogram of computed prompt and generated tokens per nonempty engine output batch.",
    ITERATION_TOKENS_BUCKETS,
);

/// The families of the tier recorded as outputs (or the plugin's steps)
/// come: counts, and the step's tokens. The histograms follow them on
/// `/metrics`, in [`REQUEST_HISTOGRAMS`] order.
pub(crate) const PER_REQUEST_COUNTS: &[&MetricDef] = &[
    &NUM_PREEMPTIONS,
    &NUM_PREEMPTIONS_BY_REASON,
    &PROMPT_TOKENS,
    &PROMPT_TOKENS_BY_SOURCE,
    &PROMPT_TOKENS_CACHED,
    &GENERATION_TOKENS,
    &REQUEST_SUCCESS,
    &ITERATION_TOKENS,
];

/// What a request's end reports to the per-request histograms. The engine-core
/// path (`tracker/request.rs`) fills it from the request's lifecycle, the
/// stat-logger path (`tracker/plugin.rs`) from vLLM's `FinishedRequestStats`;
/// a value one path observes per step instead is `None` there.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TerminalValues {
    /// Prompt length in tokens.
    pub(crate) prompt_tokens: u32,
    /// Prompt tokens whose KV came from a cache (local or external).
    pub(crate) cached_tokens: u32,
    /// Tokens generated.
    pub(crate) generation_tokens: u64,
    /// The most tokens a sequence of the request generated (engine path: its
    /// own count; the Python logger observes it per step).
    pub(crate) max_num_generation_tokens: Option<u64>,
    /// The `n` parameter (the Python logger observes it per step).
    pub(crate) params_n: Option<u32>,
    /// The `max_tokens` parameter, when the request set it.
    pub(crate) params_max_tokens: Option<u32>,
    /// Times the request was preempted, zero included.
    pub(crate) num_preemptions: u64,
    /// Arrival to end, seconds.
    pub(crate) e2e: f64,
    /// Queued to scheduled.
    pub(crate) queue: f64,
    /// Scheduled to the first token.
    pub(crate) prefill: f64,
    /// The first token to the last.
    pub(crate) decode: f64,
    /// Scheduled to the last token.
    pub(crate) inference: f64,
    /// Decode time per output token after the first (0 for fewer than two).
    pub(crate) time_per_output_token: f64,
    /// Arrival to the first token, when the path knows it per request and
    /// the request had one (engine path; the Python logger observes it per
    /// step from lists that name no request). Recorded per token; kept here
    /// for the exemplar.
    pub(crate) time_to_first_token: Option<f64>,
}

/// When a per-request histogram is observed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Observed {
    /// Once, at the request's end: the value [`TerminalValues`] gives, if any.
    AtEnd(fn(&TerminalValues) -> Option<f64>),
    /// As the request's tokens come (time to first token, inter-token
    /// latency), never at the end.
    PerToken,
}

/// Whether a per-request histogram carries exemplars (the request's
/// `llm_request` span, per bucket), and which of the request's values and
/// times an exemplar shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exemplar {
    /// None: the family is observed many times per request (inter-token
    /// latency), so no one observation stands for the request.
    No,
    /// The value [`Observed::AtEnd`] gives, at the request's end.
    AtEnd,
    /// The time to first token, at the first token.
    FirstToken,
}

/// One per-request histogram: its family, how its value is taken, and
/// whether it carries exemplars.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestHistogram {
    /// The family.
    pub(crate) def: &'static MetricDef,
    /// When, and from what, it is observed.
    pub(crate) observed: Observed,
    /// What its exemplars show.
    pub(crate) exemplar: Exemplar,
}

impl RequestHistogram {
    /// The value an exemplar of this family shows for a request that ended
    /// with `values`, and whether it was observed at the first token (else
    /// at the end); `None` when the family keeps no exemplar of it.
    #[inline]
    pub(crate) fn exemplar_value(&self, values: &TerminalValues) -> Option<(f64, bool)> {
        match (self.exemplar, self.observed) {
            (Exemplar::AtEnd, Observed::AtEnd(value_of)) => value_of(values).map(|v| (v, false)),
            (Exemplar::FirstToken, _) => values.time_to_first_token.map(|v| (v, true)),
            _ => None,
        }
    }
}

/// Declares each per-request histogram once: a `MetricDef` constant of the
/// row's name, and its place in [`REQUEST_HISTOGRAMS`].
macro_rules! request_histograms {
    ($(
        $(#[$doc:meta])*
        $vis:vis $name:ident: $family:expr, $unit:literal, $help:literal,
            $buckets:ident, $observed:expr, $exemplar:ident;
    )*) => {
        $(
            $(#[$doc])*
            $vis const $name: MetricDef = histogram($family, $unit, $help, $buckets);
        )*

        /// The per-request histograms, in exposition order.
        pub(crate) const REQUEST_HISTOGRAMS: &[RequestHistogram] = &[
            $(RequestHistogram {
                def: &$name,
                observed: $observed,
                exemplar: Exemplar::$exemplar,
            },)*
        ];
    };
}

request_histograms! {
    /// Prompt length per finished request.
    pub(crate) REQUEST_PROMPT_TOKENS: vllm!("request_prompt_tokens"), "{token}",
        "Prompt length of each finished sequence; each parallel-sampling child is one observation.",
        REQUEST_TOKENS_BUCKETS, Observed::AtEnd(|v| Some(f64::from(v.prompt_tokens))), AtEnd;
    /// Generated tokens per finished request.
    pub(crate) REQUEST_GENERATION_TOKENS: vllm!("request_generation_tokens"), "{token}",
        "Number of generation tokens processed.",
        REQUEST_TOKENS_BUCKETS, Observed::AtEnd(|v| Some(v.generation_tokens as f64)), AtEnd;
    /// Maximum generated tokens per finished request.
    pub(crate) REQUEST_MAX_NUM_GENERATION_TOKENS: vllm!("request_max_num_generation_tokens"),
        "{token}", "Histogram of maximum number of requested generation tokens.",
        REQUEST_TOKENS_BUCKETS, Observed::AtEnd(|v| v.max_num_generation_tokens.map(|t| t as f64)), AtEnd;
    /// The `max_tokens` request parameter, when the request set it.
    pub(crate) REQUEST_PARAMS_MAX_TOKENS: vllm!("request_params_max_tokens"), "{token}",
        "Histogram of the max_tokens request parameter.",
        REQUEST_TOKENS_BUCKETS, Observed::AtEnd(|v| v.params_max_tokens.map(f64::from)), AtEnd;
    /// The `n` request parameter.
    pub(crate) REQUEST_PARAMS_N: vllm!("request_params_n"), "{sequence}",
        "Histogram of the n request parameter.",
        REQUEST_PARAMS_N_BUCKETS, Observed::AtEnd(|v| v.params_n.map(f64::from)), AtEnd;
    /// Preemptions per terminated request, zero included: the headline family.
    pub REQUEST_NUM_PREEMPTIONS: vllm!("request_num_preemptions"), "{preemption}",
        "Histogram of the number of times a request was preempted.",
        REQUEST_NUM_PREEMPTIONS_BUCKETS, Observed::AtEnd(|v| Some(v.num_preemptions as f64)), AtEnd;
    /// KV tokens computed during prefill (cache hits excluded).
    pub(crate) REQUEST_PREFILL_KV_COMPUTED_TOKENS: vllm!("request_prefill_kv_computed_tokens"),
        "{token}", "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        REQUEST_TOKENS_BUCKETS,
        Observed::AtEnd(|v| Some(f64::from(v.prompt_tokens.saturating_sub(v.cached_tokens)))), AtEnd;
    /// Time to first token.
    pub TIME_TO_FIRST_TOKEN: vllm!("time_to_first_token_seconds"), "s",
        "Histogram of time to first token in seconds.",
        TIME_TO_FIRST_TOKEN_BUCKETS, Observed::PerToken, FirstToken;
    /// Inter-token latency.
    pub(crate) INTER_TOKEN_LATENCY: vllm!("inter_token_latency_seconds"), "s",
        "Histogram of inter-token latency in seconds.",
        INTER_TOKEN_LATENCY_BUCKETS, Observed::PerToken, No;
    /// End-to-end latency.
    pub E2E_REQUEST_LATENCY: vllm!("e2e_request_latency_seconds"), "s",
        "Histogram of e2e request latency in seconds.",
        REQUEST_LATENCY_BUCKETS, Observed::AtEnd(|v| Some(v.e2e)), AtEnd;
    /// Time in the WAITING phase.
    pub(crate) REQUEST_QUEUE_TIME: vllm!("request_queue_time_seconds"), "s",
        "Histogram of time spent in WAITING phase for request.",
        REQUEST_LATENCY_BUCKETS, Observed::AtEnd(|v| Some(v.queue)), AtEnd;
    /// Time in the PREFILL phase.
    pub(crate) REQUEST_PREFILL_TIME: vllm!("request_prefill_time_seconds"), "s",
        "Histogram of time spent in PREFILL phase for request.",
        REQUEST_LATENCY_BUCKETS, Observed::AtEnd(|v| Some(v.prefill)), AtEnd;
    /// Time in the DECODE phase.
    pub(crate) REQUEST_DECODE_TIME: vllm!("request_decode_time_seconds"), "s",
        "Histogram of time spent in DECODE phase for request.",
        REQUEST_LATENCY_BUCKETS, Observed::AtEnd(|v| Some(v.decode)), AtEnd;
    /// Time in the RUNNING phase.
    pub(crate) REQUEST_INFERENCE_TIME: vllm!("request_inference_time_seconds"), "s",
        "Histogram of time spent in RUNNING phase for request.",
        REQUEST_LATENCY_BUCKETS, Observed::AtEnd(|v| Some(v.inference)), AtEnd;
    /// Decode time per output token after the first.
    pub(crate) REQUEST_TIME_PER_OUTPUT_TOKEN: vllm!("request_time_per_output_token_seconds"), "s",
        "Histogram of time_per_output_token_seconds per request.",
        INTER_TOKEN_LATENCY_BUCKETS, Observed::AtEnd(|v| Some(v.time_per_output_token)), AtEnd;
}

/// The place of `def` in [`REQUEST_HISTOGRAMS`], found at compile time
/// (a family that is not a per-request histogram fails the build).
pub(crate) const fn request_histogram_index(def: &MetricDef) -> usize {
    let mut at = 0;
    while at < REQUEST_HISTOGRAMS.len() {
        if same_str(REQUEST_HISTOGRAMS[at].def.otel_name, def.otel_name) {
            return at;
        }
        at += 1;
    }
    panic!("not a per-request histogram");
}

const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut at = 0;
    while at < a.len() {
        if a[at] != b[at] {
            return false;
        }
        at += 1;
    }
    true
}
