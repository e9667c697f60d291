//! The physical floor of the lifecycle workload: the same lifecycle rules
//! (`lifecycle_state`) recording into plain, pre-resolved, statically
//! dispatched instruments — no label lookup, no trait objects, no SDK. What
//! remains is the state machine plus the observations themselves: one
//! uncontended atomic add per counter increment and, per histogram
//! observation, either three uncontended atomic RMWs (bucket, count, sum) or
//! one short uncontended mutex section. Buckets are found by a linear scan
//! from the first bound (branch-predictable, and short for the low buckets
//! where latencies and small counts fall).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use vllm_otel_metrics::catalog::{self, MetricDef};
use vllm_otel_metrics::metrics::bucket_index;
use vllm_otel_metrics::protocol::{EngineCoreOutput, PrefillStats};
use vllm_otel_metrics::tracker::RequestParams;

use crate::lifecycle_state::{Lifecycle, Sink, Terminal};

/// A histogram a recording thread can update without any lock.
pub struct AtomicHistogram {
    bounds: Vec<f64>,
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_bits: AtomicU64,
}

/// A histogram behind one mutex (the SDK's shape).
pub struct MutexHistogram {
    bounds: Vec<f64>,
    state: Mutex<(Vec<u64>, u64, f64)>,
}

pub trait Observe {
    fn new(bounds: Vec<f64>) -> Self;
    fn observe(&self, value: f64);
}

impl Observe for AtomicHistogram {
    fn new(bounds: Vec<f64>) -> Self {
        AtomicHistogram {
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            bounds,
            count: AtomicU64::new(0),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    #[inline]
    fn observe(&self, value: f64) {
        let index = bucket_index(&self.bounds, value);
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }
}

impl Observe for MutexHistogram {
    fn new(bounds: Vec<f64>) -> Self {
        MutexHistogram {
            state: Mutex::new((vec![0; bounds.len() + 1], 0, 0.0)),
            bounds,
        }
    }

    #[inline]
    fn observe(&self, value: f64) {
        let index = bucket_index(&self.bounds, value);
        let mut state = self.state.lock().unwrap();
        state.0[index] += 1;
        state.1 += 1;
        state.2 += value;
    }
}

/// Every per-request family as raw instruments of one label set.
pub struct Instruments<H> {
    num_preemptions: AtomicU64,
    prompt_tokens: AtomicU64,
    prompt_tokens_by_source: [AtomicU64; 3],
    prompt_tokens_cached: AtomicU64,
    generation_tokens: AtomicU64,
    request_success: [AtomicU64; 5],
    histograms: [H; 15],
}

const TERMINAL_HISTOGRAMS: [&MetricDef; 13] = [
    &catalog::REQUEST_PROMPT_TOKENS,
    &catalog::REQUEST_GENERATION_TOKENS,
    &catalog::REQUEST_MAX_NUM_GENERATION_TOKENS,
    &catalog::REQUEST_PARAMS_MAX_TOKENS,
    &catalog::REQUEST_PARAMS_N,
    &catalog::REQUEST_NUM_PREEMPTIONS,
    &catalog::REQUEST_PREFILL_KV_COMPUTED_TOKENS,
    &catalog::E2E_REQUEST_LATENCY,
    &catalog::REQUEST_QUEUE_TIME,
    &catalog::REQUEST_PREFILL_TIME,
    &catalog::REQUEST_DECODE_TIME,
    &catalog::REQUEST_INFERENCE_TIME,
    &catalog::REQUEST_TIME_PER_OUTPUT_TOKEN,
];
const TTFT: usize = 13;
const ITL: usize = 14;

impl<H: Observe> Instruments<H> {
    pub fn new(max_model_len: u32) -> Self {
        let defs: [&MetricDef; 15] = std::array::from_fn(|i| match i {
            TTFT => &catalog::TIME_TO_FIRST_TOKEN,
            ITL => &catalog::INTER_TOKEN_LATENCY,
            i => TERMINAL_HISTOGRAMS[i],
        });
        Instruments {
            num_preemptions: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            prompt_tokens_by_source: Default::default(),
            prompt_tokens_cached: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            request_success: Default::default(),
            histograms: defs.map(|d| H::new(d.buckets.boundaries(max_model_len))),
        }
    }
}

impl<H: Observe> Sink for Instruments<H> {
    #[inline]
    fn generation_tokens(&self, tokens: u64) {
        self.generation_tokens.fetch_add(tokens, Ordering::Relaxed);
    }

    #[inline]
    fn preemption(&self) {
        self.num_preemptions.fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    fn prompt_tokens(&self, stats: &PrefillStats) {
        let add = |a: &AtomicU64, v: u32| {
            a.fetch_add(u64::from(v), Ordering::Relaxed);
        };
        add(&self.prompt_tokens, stats.num_prompt_tokens);
        add(&self.prompt_tokens_by_source[0], stats.num_computed_tokens);
        add(
            &self.prompt_tokens_by_source[1],
            stats.num_local_cached_tokens,
        );
        add(
            &self.prompt_tokens_by_source[2],
            stats.num_external_cached_tokens,
        );
        add(&self.prompt_tokens_cached, stats.num_cached_tokens);
    }

    #[inline]
    fn time_to_first_token(&self, seconds: f64) {
        self.histograms[TTFT].observe(seconds);
    }

    #[inline]
    fn inter_token_latency(&self, seconds: f64) {
        self.histograms[ITL].observe(seconds);
    }

    fn terminal(&self, t: &Terminal) {
        self.request_success[t.reason.index()].fetch_add(1, Ordering::Relaxed);
        let h = &self.histograms;
        h[0].observe(t.prompt_tokens);
        h[1].observe(t.generation_tokens);
        h[2].observe(t.generation_tokens);
        if let Some(max_tokens) = t.max_tokens {
            h[3].observe(max_tokens);
        }
        h[4].observe(t.n);
        h[5].observe(t.num_preemptions);
        h[6].observe(t.prefill_kv_computed_tokens);
        h[7].observe(t.e2e);
        h[8].observe(t.queue);
        h[9].observe(t.prefill);
        h[10].observe(t.decode);
        h[11].observe(t.inference);
        h[12].observe(t.time_per_output_token);
    }
}

/// Runs one request through the lifecycle rules into `instruments`.
#[inline]
pub fn request<H: Observe>(
    instruments: &Instruments<H>,
    params: RequestParams,
    steps: &[(f64, f64, EngineCoreOutput)],
) {
    let mut state = Lifecycle::new(params);
    for (batch_timestamp, received_at, output) in steps {
        if state.observe_output(
            instruments,
            *batch_timestamp,
            *received_at,
            black_box(output),
        ) {
            break;
        }
    }
}

/// Records nothing: what the lifecycle rules and the loop over the outputs
/// cost alone.
struct Nothing;

impl Sink for Nothing {
    fn generation_tokens(&self, tokens: u64) {
        black_box(tokens);
    }

    fn preemption(&self) {}

    fn prompt_tokens(&self, stats: &PrefillStats) {
        black_box(stats);
    }

    fn time_to_first_token(&self, seconds: f64) {
        black_box(seconds);
    }

    fn inter_token_latency(&self, seconds: f64) {
        black_box(seconds);
    }

    fn terminal(&self, terminal: &Terminal) {
        black_box(terminal);
    }
}

/// Runs one request through the lifecycle rules, recording nothing.
pub fn rules_only(params: RequestParams, steps: &[(f64, f64, EngineCoreOutput)]) {
    let mut state = Lifecycle::new(params);
    for (batch_timestamp, received_at, output) in steps {
        if state.observe_output(&Nothing, *batch_timestamp, *received_at, black_box(output)) {
            break;
        }
    }
}
