//! What the OpenTelemetry SDK itself costs for the canonical request:
//!
//! - `sdk_floor`: the very calls the shipped `RequestMetrics` makes on the
//!   SDK's bound handles (same instruments, Views, reader, values and
//!   order), written down once as a [`Script`] and replayed in a straight
//!   loop with no lifecycle logic;
//! - `rules_only`: the lifecycle rules (`lifecycle_state`) recording
//!   nothing, i.e. the state machine and the loop over the outputs alone.
//!
//! The script comes from the lifecycle rules through a recording [`Sink`]
//! that emits the calls in `RequestMetrics`' order: per output the
//! generation-token add, one preemption add for the output's preemption
//! events, the prompt-token adds on the first token, the latency
//! observation; at the end `request_success`, then every terminal
//! histogram. `check_equivalence` in `lifecycle.rs` replays it into a fresh
//! provider and compares the whole exposition with `RequestMetrics`'.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::OnceLock;

use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Meter};
use opentelemetry::KeyValue;
use vllm_otel_metrics::catalog::MetricDef;
use vllm_otel_metrics::protocol::{EngineCoreOutput, FinishReason, PreemptionReason, PrefillStats};
use vllm_otel_metrics::tracker::RequestParams;

use crate::lifecycle_state::{family, prompt_token_sources, Lifecycle, Sink, Terminal};

/// The per-request histograms, in the order `RequestMetrics` records the
/// terminal ones (`max_tokens` last, when set).
fn histograms() -> [&'static MetricDef; 15] {
    [
        family("vllm:request_prompt_tokens"),
        family("vllm:request_generation_tokens"),
        family("vllm:request_max_num_generation_tokens"),
        family("vllm:request_params_n"),
        family("vllm:request_num_preemptions"),
        family("vllm:request_prefill_kv_computed_tokens"),
        family("vllm:e2e_request_latency_seconds"),
        family("vllm:request_queue_time_seconds"),
        family("vllm:request_prefill_time_seconds"),
        family("vllm:request_decode_time_seconds"),
        family("vllm:request_inference_time_seconds"),
        family("vllm:request_time_per_output_token_seconds"),
        family("vllm:request_params_max_tokens"),
        family("vllm:time_to_first_token_seconds"),
        family("vllm:inter_token_latency_seconds"),
    ]
}
const MAX_TOKENS: usize = 12;
const TTFT: usize = 13;
const ITL: usize = 14;

/// A counter of the per-request tier, by position in [`Handles::counters`].
#[derive(Debug, Clone, Copy)]
enum CounterSlot {
    GenerationTokens = 0,
    NumPreemptions = 1,
    PromptTokens = 2,
    /// Three, in the catalog's order of prompt token sources.
    PromptTokensBySource = 3,
    PromptTokensCached = 6,
}

/// One label set's bound handles of the per-request tier.
pub(crate) struct Handles {
    counters: [BoundCounter<u64>; 7],
    /// Bound on first use, as the crate binds them.
    /// Every finish reason's, bound with the label set, as the crate binds them.
    request_success: [BoundCounter<u64>; 5],
    /// Bound on a reason's first preemption, as the crate binds them.
    preemptions_by_reason: [OnceLock<BoundCounter<u64>>; 3],
    preemptions_by_reason_instrument: Counter<u64>,
    labels: Vec<KeyValue>,
    histograms: [BoundHistogram<f64>; 15],
}

impl Handles {
    /// Binds the label set on `meter`'s instruments: the same ones, with
    /// the same attributes, as the crate's instruments on that meter.
    pub(crate) fn bind(meter: &Meter, model_name: &str, engine: u32) -> Self {
        let labels = vec![
            KeyValue::new("model_name", model_name.to_owned()),
            KeyValue::new("engine", engine.to_string()),
        ];
        let with = |name: &'static str, value: &'static str| {
            let mut l = labels.clone();
            l.push(KeyValue::new(name, value));
            l
        };
        let counter = |def: &'static MetricDef| {
            meter
                .u64_counter(def.otel_name)
                .with_unit(def.unit)
                .with_description(def.help)
                .build()
        };
        let by_source = counter(family("vllm:prompt_tokens_by_source"));
        let counters = std::array::from_fn(|i| match i {
            0 => counter(family("vllm:generation_tokens")).bind(&labels),
            1 => counter(family("vllm:num_preemptions")).bind(&labels),
            2 => counter(family("vllm:prompt_tokens")).bind(&labels),
            3..=5 => by_source.bind(&with("source", prompt_token_sources()[i - 3])),
            _ => counter(family("vllm:prompt_tokens_cached")).bind(&labels),
        });
        let histograms = histograms().map(|def| {
            meter
                .f64_histogram(def.otel_name)
                .with_unit(def.unit)
                .with_description(def.help)
                .build()
                .bind(&labels)
        });
        Handles {
            counters,
            request_success: {
                let instrument = counter(family("vllm:request_success"));
                FinishReason::ALL.map(|reason| {
                    let series = instrument.bind(&with("finished_reason", reason.as_str()));
                    series.add(0);
                    series
                })
            },
            preemptions_by_reason: Default::default(),
            preemptions_by_reason_instrument: counter(family("vllm:num_preemptions_by_reason")),
            labels,
            histograms,
        }
    }

    #[inline]
    fn request_success(&self, reason: usize) -> &BoundCounter<u64> {
        &self.request_success[reason]
    }
}

impl Handles {
    #[inline]
    fn preemptions_by_reason(&self, reason: usize) -> &BoundCounter<u64> {
        self.preemptions_by_reason[reason].get_or_init(|| {
            let mut labels = self.labels.clone();
            labels.push(KeyValue::new(
                "reason",
                PreemptionReason::ALL[reason].as_str(),
            ));
            self.preemptions_by_reason_instrument.bind(&labels)
        })
    }
}

/// One SDK call.
#[derive(Debug, Clone, Copy)]
enum Call {
    Add(usize, u64),
    /// An add to `num_preemptions_by_reason` of the reason at this index.
    AddByReason(usize, u64),
    Success(usize),
    Record(usize, f64),
}

/// The SDK calls of one request, in order.
pub(crate) struct Script(Vec<Call>);

/// A [`Sink`] that writes the calls down instead of making them.
struct Recorder {
    calls: RefCell<Vec<Call>>,
    /// Where the current output's preemption add is, once it has one.
    preemption_at: RefCell<Option<usize>>,
    /// Where the current output's add of each reason is, once it has one.
    reason_at: RefCell<[Option<usize>; 3]>,
}

impl Recorder {
    fn add(&self, slot: usize, value: u64) {
        self.calls.borrow_mut().push(Call::Add(slot, value));
    }

    fn record(&self, histogram: usize, value: f64) {
        self.calls.borrow_mut().push(Call::Record(histogram, value));
    }
}

impl Sink for Recorder {
    fn generation_tokens(&self, tokens: u64) {
        // A new output: its preemptions get adds of their own.
        *self.preemption_at.borrow_mut() = None;
        *self.reason_at.borrow_mut() = [None; 3];
        if tokens > 0 {
            self.add(CounterSlot::GenerationTokens as usize, tokens);
        }
    }

    fn preemption(&self, reason: PreemptionReason) {
        let mut at = self.preemption_at.borrow_mut();
        let mut calls = self.calls.borrow_mut();
        match *at {
            Some(i) => {
                if let Call::Add(_, n) = &mut calls[i] {
                    *n += 1;
                }
            }
            None => {
                *at = Some(calls.len());
                calls.push(Call::Add(CounterSlot::NumPreemptions as usize, 1));
            }
        }
        let reason = reason as usize;
        let mut reason_at = self.reason_at.borrow_mut();
        match reason_at[reason] {
            Some(i) => {
                if let Call::AddByReason(_, n) = &mut calls[i] {
                    *n += 1;
                }
            }
            None => {
                reason_at[reason] = Some(calls.len());
                calls.push(Call::AddByReason(reason, 1));
            }
        }
    }

    fn prompt_tokens(&self, stats: &PrefillStats) {
        self.add(
            CounterSlot::PromptTokens as usize,
            u64::from(stats.num_prompt_tokens),
        );
        let by_source = [
            stats.num_computed_tokens,
            stats.num_local_cached_tokens,
            stats.num_external_cached_tokens,
        ];
        for (i, tokens) in by_source.into_iter().enumerate() {
            self.add(
                CounterSlot::PromptTokensBySource as usize + i,
                u64::from(tokens),
            );
        }
        self.add(
            CounterSlot::PromptTokensCached as usize,
            u64::from(stats.num_cached_tokens),
        );
    }

    fn time_to_first_token(&self, seconds: f64) {
        self.record(TTFT, seconds);
    }

    fn inter_token_latency(&self, seconds: f64) {
        self.record(ITL, seconds);
    }

    fn terminal(&self, t: &Terminal) {
        self.calls
            .borrow_mut()
            .push(Call::Success(t.reason.index()));
        let values = [
            t.prompt_tokens,
            t.generation_tokens,
            t.generation_tokens,
            t.n,
            t.num_preemptions,
            t.prefill_kv_computed_tokens,
            t.e2e,
            t.queue,
            t.prefill,
            t.decode,
            t.inference,
            t.time_per_output_token,
        ];
        for (histogram, value) in values.into_iter().enumerate() {
            self.record(histogram, value);
        }
        if let Some(max_tokens) = t.max_tokens {
            self.record(MAX_TOKENS, max_tokens);
        }
    }
}

impl Script {
    /// The calls of one request with these parameters and outputs.
    pub(crate) fn of(params: RequestParams, steps: &[(f64, f64, EngineCoreOutput)]) -> Script {
        let recorder = Recorder {
            calls: RefCell::new(Vec::new()),
            preemption_at: RefCell::new(None),
            reason_at: RefCell::new([None; 3]),
        };
        let mut state = Lifecycle::new(params);
        for (batch_timestamp, received_at, output) in steps {
            if state.observe_output(&recorder, *batch_timestamp, *received_at, output) {
                break;
            }
        }
        Script(recorder.calls.into_inner())
    }

    /// How many SDK calls one request makes.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Replays the script on `handles`: the SDK's cost of one request.
#[inline(never)]
pub(crate) fn sdk_floor(handles: &Handles, script: &Script) {
    for call in &script.0 {
        match *call {
            Call::Add(slot, value) => handles.counters[slot].add(value),
            Call::AddByReason(reason, value) => handles.preemptions_by_reason(reason).add(value),
            Call::Success(reason) => handles.request_success(reason).add(1),
            Call::Record(histogram, value) => handles.histograms[histogram].record(value),
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

    fn preemption(&self, _: PreemptionReason) {}

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
pub(crate) fn rules_only(params: RequestParams, steps: &[(f64, f64, EngineCoreOutput)]) {
    let mut state = Lifecycle::new(params);
    for (batch_timestamp, received_at, output) in steps {
        if state.observe_output(&Nothing, *batch_timestamp, *received_at, black_box(output)) {
            break;
        }
    }
}
