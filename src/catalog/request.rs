//! The per-request tier: vLLM's families of one request's lifecycle
//! (`rust/src/metrics/src/request.rs` in vLLM's Rust frontend, and the
//! Python logger's `PrometheusStatLogger`).

use super::{
    counter, histogram, Buckets, MetricDef, ENGINE_LABELS, FINISHED_REASONS,
    FINISHED_REASON_LABELS, ITERATION_BUCKETS, ITL_BUCKETS, LATENCY_BUCKETS, N_BUCKETS,
    PREEMPTION_BUCKETS, PREEMPTION_REASONS, PREEMPTION_REASON_LABELS, PROMPT_TOKEN_SOURCES,
    SOURCE_LABELS, TTFT_BUCKETS,
};

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
    Buckets::Fixed(ITERATION_BUCKETS),
);
/// Prompt length per finished request.
pub(crate) const REQUEST_PROMPT_TOKENS: MetricDef = histogram(
    vllm!("request_prompt_tokens"),
    "{token}",
    "Prompt length of each finished sequence; each parallel-sampling child is one observation.",
    Buckets::Tokens,
);
/// Generated tokens per finished request.
pub(crate) const REQUEST_GENERATION_TOKENS: MetricDef = histogram(
    vllm!("request_generation_tokens"),
    "{token}",
    "Number of generation tokens processed.",
    Buckets::Tokens,
);
/// Maximum generated tokens per finished request.
pub(crate) const REQUEST_MAX_NUM_GENERATION_TOKENS: MetricDef = histogram(
    vllm!("request_max_num_generation_tokens"),
    "{token}",
    "Histogram of maximum number of requested generation tokens.",
    Buckets::Tokens,
);
/// The `max_tokens` request parameter.
pub(crate) const REQUEST_PARAMS_MAX_TOKENS: MetricDef = histogram(
    vllm!("request_params_max_tokens"),
    "{token}",
    "Histogram of the max_tokens request parameter.",
    Buckets::Tokens,
);
/// The `n` request parameter.
pub(crate) const REQUEST_PARAMS_N: MetricDef = histogram(
    vllm!("request_params_n"),
    "{sequence}",
    "Histogram of the n request parameter.",
    Buckets::Fixed(N_BUCKETS),
);
/// Preemptions per terminated request, zero included: the headline family.
pub const REQUEST_NUM_PREEMPTIONS: MetricDef = histogram(
    vllm!("request_num_preemptions"),
    "{preemption}",
    "Histogram of the number of times a request was preempted.",
    Buckets::Fixed(PREEMPTION_BUCKETS),
);
/// KV tokens computed during prefill (cache hits excluded).
pub(crate) const REQUEST_PREFILL_KV_COMPUTED_TOKENS: MetricDef = histogram(
    vllm!("request_prefill_kv_computed_tokens"),
    "{token}",
    "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    Buckets::Tokens,
);
/// Time to first token.
pub const TIME_TO_FIRST_TOKEN: MetricDef = histogram(
    vllm!("time_to_first_token_seconds"),
    "s",
    "Histogram of time to first token in seconds.",
    Buckets::Fixed(TTFT_BUCKETS),
);
/// Inter-token latency.
pub(crate) const INTER_TOKEN_LATENCY: MetricDef = histogram(
    vllm!("inter_token_latency_seconds"),
    "s",
    "Histogram of inter-token latency in seconds.",
    Buckets::Fixed(ITL_BUCKETS),
);
/// End-to-end latency.
pub const E2E_REQUEST_LATENCY: MetricDef = histogram(
    vllm!("e2e_request_latency_seconds"),
    "s",
    "Histogram of e2e request latency in seconds.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the WAITING phase.
pub(crate) const REQUEST_QUEUE_TIME: MetricDef = histogram(
    vllm!("request_queue_time_seconds"),
    "s",
    "Histogram of time spent in WAITING phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the PREFILL phase.
pub(crate) const REQUEST_PREFILL_TIME: MetricDef = histogram(
    vllm!("request_prefill_time_seconds"),
    "s",
    "Histogram of time spent in PREFILL phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the DECODE phase.
pub(crate) const REQUEST_DECODE_TIME: MetricDef = histogram(
    vllm!("request_decode_time_seconds"),
    "s",
    "Histogram of time spent in DECODE phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Time in the RUNNING phase.
pub(crate) const REQUEST_INFERENCE_TIME: MetricDef = histogram(
    vllm!("request_inference_time_seconds"),
    "s",
    "Histogram of time spent in RUNNING phase for request.",
    Buckets::Fixed(LATENCY_BUCKETS),
);
/// Decode time per output token after the first.
pub(crate) const REQUEST_TIME_PER_OUTPUT_TOKEN: MetricDef = histogram(
    vllm!("request_time_per_output_token_seconds"),
    "s",
    "Histogram of time_per_output_token_seconds per request.",
    Buckets::Fixed(ITL_BUCKETS),
);

/// The per-request tier, in exposition order: counts and token histograms,
/// then the latency histograms.
pub(crate) const PER_REQUEST: [&MetricDef; 23] = super::concat(
    [
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
    ],
    super::LATENCY_HISTOGRAMS,
);
