//! The engine simulator: a vLLM-style continuous-batching engine fleet
//! (scheduler, paged KV cache, workload) that emits engine-core records.
//!
//! It drives the same pipeline as `replay`: every record goes to a sink (the
//! tracker, a JSONL recorder, a remote ingest stream). Time is virtual by
//! default (a run takes a fraction of its simulated duration); with
//! [`SimConfig::realtime`] steps are paced to the wall clock.
//!
//! ```
//! use vllm_otel_metrics::protocol::Record;
//! use vllm_otel_metrics::sim::{simulate, SimConfig};
//!
//! let config = SimConfig { duration: 5.0, ..SimConfig::default() };
//! let mut outputs = 0;
//! let outcome = simulate(&config, &mut |record: &Record| {
//!     if let Record::Outputs(batch) = record {
//!         outputs += batch.outputs.len();
//!     }
//! }, &mut |_| {});
//! assert!(outcome.finished > 0 && outputs > 0);
//! ```

mod engine;

mod residency;
mod rng;
mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use engine::{Engine, EngineLimits, Sequence};
use residency::BlockResidency;
use workload::Workload;

use crate::catalog::DEFAULT_MAX_MODEL_LEN;
use crate::protocol::{
    Abort, EngineConfig, ExternalHitsBySource, Operation, OperationKind, OutputBatch, PerfStats,
    Record, RequestStart, SchedulerStats, SleepState,
};

/// Engine clock at simulated time 0 (a monotonic clock reads an arbitrary origin).
const ENGINE_CLOCK_ORIGIN: f64 = 1000.0;
/// Frontend wall clock at simulated time 0 in virtual-time runs (fixed so a
/// seed reproduces the same trace).
const VIRTUAL_WALL_ORIGIN: f64 = 1_700_000_000.0;
/// Engine-to-frontend transport delay of an output batch.
const TRANSPORT_DELAY: f64 = 0.0005;

/// Everything a simulation run is made of.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct SimConfig {
    /// Simulated seconds during which requests arrive (the run then drains).
    #[arg(long, default_value_t = SimConfig::default().duration, value_name = "SECS")]
    pub duration: f64,
    /// Poisson arrival rate, requests per second.
    #[arg(long, default_value_t = SimConfig::default().rate, value_name = "RPS")]
    pub rate: f64,
    /// Closed loop instead of Poisson arrivals: keep N requests outstanding.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// Seed of every random draw (same seed, same run).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Pace the simulation to the wall clock (to watch it live).
    #[arg(long)]
    pub realtime: bool,
    /// KV-cache blocks per engine.
    #[arg(long, default_value_t = SimConfig::default().kv_blocks)]
    pub kv_blocks: u32,
    /// Tokens per KV block.
    #[arg(long, default_value_t = SimConfig::default().block_size)]
    pub block_size: u32,
    /// Most requests in a running batch.
    #[arg(long, default_value_t = SimConfig::default().max_num_seqs)]
    pub max_num_seqs: u32,
    /// Token budget per step (chunked prefill within it).
    #[arg(long, default_value_t = SimConfig::default().max_num_batched_tokens)]
    pub max_num_batched_tokens: u32,
    /// Share of prompt tokens found in the prefix cache (0 to 1).
    #[arg(long, default_value_t = SimConfig::default().prefix_hit_rate)]
    pub prefix_hit_rate: f64,
    /// Fixed time of a step, milliseconds.
    #[arg(long, default_value_t = SimConfig::default().step_base_ms)]
    pub step_base_ms: f64,
    /// Time per token in a step, microseconds.
    #[arg(long, default_value_t = SimConfig::default().step_per_token_us)]
    pub step_per_token_us: f64,
    /// Mean prompt length in tokens (lognormal).
    #[arg(long, default_value_t = SimConfig::default().prompt_len)]
    pub prompt_len: f64,
    /// Mean output length in tokens (lognormal).
    #[arg(long, default_value_t = SimConfig::default().output_len)]
    pub output_len: f64,
    /// Share of requests aborted by their client (0 to 1).
    #[arg(long, default_value_t = SimConfig::default().abort_rate)]
    pub abort_rate: f64,
    /// Served models (engine e serves model e % models).
    #[arg(long, default_value_t = SimConfig::default().models)]
    pub models: u32,
    /// Engines.
    #[arg(long, default_value_t = SimConfig::default().engines)]
    pub engines: u32,
    /// Share of KV blocks whose residency (lifetime, idle time, reuse gaps)
    /// is sampled, as vLLM's --kv-cache-metrics-sample; 0 samples none.
    #[arg(long, default_value_t = SimConfig::default().kv_cache_metrics_sample, value_name = "RATE")]
    pub kv_cache_metrics_sample: f64,
    /// Share of the prompt beyond the local prefix-cache hit that a KV
    /// connector finds in another instance's cache and loads asynchronously
    /// (0 to 1; 0: no connector).
    #[arg(long, default_value_t = SimConfig::default().external_prefix_hit_rate, value_name = "RATE")]
    pub external_prefix_hit_rate: f64,
    /// The KV connector's load bandwidth, GB/s.
    #[arg(long, default_value_t = SimConfig::default().kv_load_gbps, value_name = "GBPS")]
    pub kv_load_gbps: f64,
    /// KV-cache bytes per token (all layers, K and V), for load times and
    /// the MFU estimates.
    #[arg(long, default_value_t = SimConfig::default().kv_bytes_per_token, value_name = "BYTES")]
    pub kv_bytes_per_token: u64,
    /// Draft tokens per decode step (speculative decoding; 0: off).
    #[arg(long, default_value_t = SimConfig::default().num_speculative_tokens, value_name = "K")]
    pub num_speculative_tokens: u32,
    /// Chance that a draft token is accepted, given the previous one was.
    #[arg(long, default_value_t = SimConfig::default().spec_acceptance_rate, value_name = "RATE")]
    pub spec_acceptance_rate: f64,
    /// Model parameters in billions (the MFU estimates' cost model and the
    /// weight transfer times).
    #[arg(long, default_value_t = SimConfig::default().model_params_b, value_name = "B")]
    pub model_params_b: f64,
    /// GPUs one engine's model is split over.
    #[arg(long, default_value_t = SimConfig::default().tensor_parallel_size, value_name = "N")]
    pub tensor_parallel_size: u32,
    /// Serve the --models as LoRA adapters of one base model (each request
    /// picks one; vllm:lora_requests_info lists them, max_lora = --models).
    #[arg(long)]
    pub lora_adapters: bool,
    /// Put an engine to sleep after this many idle seconds; the next
    /// request wakes it (the weights come back first).
    #[arg(long, value_name = "SECS")]
    pub sleep_when_idle: Option<f64>,
    /// Sleep level: 1 offloads the weights to host memory, 2 discards them.
    #[arg(long, default_value_t = SimConfig::default().sleep_level, value_name = "LEVEL")]
    pub sleep_level: u8,
    /// Host-device bandwidth for offloading and restoring weights, GB/s.
    #[arg(long, default_value_t = SimConfig::default().host_transfer_gbps, value_name = "GBPS")]
    pub host_transfer_gbps: f64,
    /// Push new weights to every engine every this many seconds (an RL
    /// trainer); engines pause while they take them.
    #[arg(long, value_name = "SECS")]
    pub weight_update_interval: Option<f64>,
    /// Bandwidth of a weight update, GB/s.
    #[arg(long, default_value_t = SimConfig::default().weight_sync_gbps, value_name = "GBPS")]
    pub weight_sync_gbps: f64,
    /// Longest request (prompt plus output), tokens.
    #[arg(skip = crate::catalog::DEFAULT_MAX_MODEL_LEN)]
    pub max_model_len: u32,
}

impl Default for SimConfig {
    /// Defaults that preempt under the default load and finish in seconds.
    fn default() -> Self {
        SimConfig {
            seed: 0,
            duration: 120.0,
            rate: 6.0,
            concurrency: None,
            kv_blocks: 1024,
            block_size: 16,
            max_num_seqs: 64,
            max_num_batched_tokens: 2048,
            prefix_hit_rate: 0.25,
            step_base_ms: 12.0,
            step_per_token_us: 40.0,
            prompt_len: 512.0,
            output_len: 256.0,
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            abort_rate: 0.02,
            models: 1,
            engines: 1,
            realtime: false,
            kv_cache_metrics_sample: 0.01,
            external_prefix_hit_rate: 0.0,
            kv_load_gbps: 5.0,
            kv_bytes_per_token: 131_072,
            num_speculative_tokens: 0,
            spec_acceptance_rate: 0.7,
            model_params_b: 8.0,
            tensor_parallel_size: 1,
            lora_adapters: false,
            sleep_when_idle: None,
            sleep_level: 1,
            host_transfer_gbps: 20.0,
            weight_update_interval: None,
            weight_sync_gbps: 25.0,
        }
    }
}

impl SimConfig {
    /// The model an engine serves (with LoRA adapters, the one base model).
    pub fn model_name(&self, engine: u32) -> String {
        if self.lora_adapters {
            return "sim-model-0".to_owned();
        }
        format!("sim-model-{}", engine % self.models.max(1))
    }

    /// The name of LoRA adapter `index`.
    pub fn adapter_name(index: u32) -> String {
        format!("sim-lora-{index}")
    }

    /// Bytes of one GPU's share of the weights (16-bit).
    fn weight_bytes_per_gpu(&self) -> f64 {
        self.model_params_b * 1e9 * 2.0 / f64::from(self.tensor_parallel_size.max(1))
    }

    /// The engine's cache configuration as vLLM logs it
    /// (`CacheConfig.metrics_info()`, the fields the simulator has).
    fn cache_config(&self) -> BTreeMap<String, String> {
        let python_bool = |b: bool| if b { "True" } else { "False" };
        [
            ("block_size", self.block_size.to_string()),
            ("cache_dtype", "auto".to_owned()),
            (
                "enable_prefix_caching",
                python_bool(self.prefix_hit_rate > 0.0).to_owned(),
            ),
            ("num_gpu_blocks", self.kv_blocks.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The step's estimated work per GPU: 2 FLOPs per parameter per token
    /// computed (attention's own FLOPs left out); the weights read once
    /// per step plus the KV of the context read by attention; the KV of
    /// the tokens computed written.
    fn perf_stats(&self, tokens: u32, context_tokens_read: u64) -> PerfStats {
        if tokens == 0 {
            // Nothing scheduled (every request waits for its KV): no forward pass.
            return PerfStats::default();
        }
        let tp = f64::from(self.tensor_parallel_size.max(1));
        let params = self.model_params_b * 1e9;
        let kv = self.kv_bytes_per_token as f64;
        PerfStats {
            num_flops_per_gpu: 2.0 * params * f64::from(tokens) / tp,
            num_read_bytes_per_gpu: self.weight_bytes_per_gpu()
                + context_tokens_read as f64 * kv / tp,
            num_write_bytes_per_gpu: f64::from(tokens) * kv / tp,
        }
    }

    /// Checks values a run cannot work with.
    pub fn validate(&self) -> Result<(), SimConfigError> {
        let positive = [
            ("--duration", self.duration),
            ("--rate", self.rate),
            ("--prompt-len", self.prompt_len),
            ("--output-len", self.output_len),
            ("--kv-load-gbps", self.kv_load_gbps),
            ("--model-params-b", self.model_params_b),
            ("--host-transfer-gbps", self.host_transfer_gbps),
            ("--weight-sync-gbps", self.weight_sync_gbps),
        ];
        for (name, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(invalid(name, format!("a positive number, not {value}")));
            }
        }
        for (name, value) in [
            ("--prefix-hit-rate", self.prefix_hit_rate),
            ("--abort-rate", self.abort_rate),
            ("--kv-cache-metrics-sample", self.kv_cache_metrics_sample),
            ("--external-prefix-hit-rate", self.external_prefix_hit_rate),
            ("--spec-acceptance-rate", self.spec_acceptance_rate),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(invalid(name, format!("between 0 and 1, not {value}")));
            }
        }
        for (name, value) in [
            ("--step-base-ms", self.step_base_ms),
            ("--step-per-token-us", self.step_per_token_us),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(invalid(name, format!("zero or positive, not {value}")));
            }
        }
        if self.step_base_ms == 0.0 && self.step_per_token_us == 0.0 {
            return Err(SimConfigError::StepTakesNoTime);
        }
        let counts = [
            ("--kv-blocks", self.kv_blocks),
            ("--block-size", self.block_size),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--models", self.models),
            ("--engines", self.engines),
            ("--max-model-len", self.max_model_len),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(invalid(name, "at least 1".to_owned()));
            }
        }
        if self.kv_blocks.saturating_mul(self.block_size) < 2 {
            return Err(SimConfigError::KvCacheTooSmall);
        }
        if self.concurrency == Some(0) {
            return Err(invalid("--concurrency", "at least 1".to_owned()));
        }
        if self.num_speculative_tokens as usize > crate::protocol::MAX_SPEC_POSITIONS {
            return Err(invalid(
                "--num-speculative-tokens",
                format!("at most {}", crate::protocol::MAX_SPEC_POSITIONS),
            ));
        }
        if !(1..=2).contains(&self.sleep_level) {
            return Err(invalid("--sleep-level", "1 or 2".to_owned()));
        }
        for (name, value) in [
            ("--sleep-when-idle", self.sleep_when_idle),
            ("--weight-update-interval", self.weight_update_interval),
        ] {
            if value.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(invalid(name, "a positive number of seconds".to_owned()));
            }
        }
        if self.kv_bytes_per_token == 0 || self.tensor_parallel_size == 0 {
            return Err(invalid(
                "--kv-bytes-per-token and --tensor-parallel-size",
                "at least 1".to_owned(),
            ));
        }
        Ok(())
    }
}

/// Why a simulator configuration cannot run; names the setting (flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimConfigError {
    /// A setting outside what a run can work with.
    #[error("{setting} must be {requirement}")]
    Invalid {
        /// The flag.
        setting: &'static str,
        /// What it must be (and what it was).
        requirement: String,
    },
    /// Both step costs are zero.
    #[error("a step must take time: --step-base-ms or --step-per-token-us above 0")]
    StepTakesNoTime,
    /// Fewer than two tokens of KV cache.
    #[error("the KV cache must hold at least 2 tokens")]
    KvCacheTooSmall,
}

fn invalid(setting: &'static str, requirement: String) -> SimConfigError {
    SimConfigError::Invalid {
        setting,
        requirement,
    }
}

/// What a run did, beyond the records it emitted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimOutcome {
    /// Requests that arrived.
    pub requests: u64,
    /// Requests that finished (any reason but a client abort).
    pub finished: u64,
    /// Requests aborted by their client.
    pub aborted: u64,
    /// Preemption events.
    pub preemptions: u64,
    /// Engine steps.
    pub steps: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Simulated seconds until the last request left.
    pub simulated_seconds: f64,
    /// Highest KV-cache usage any engine reached (0 to 1).
    pub peak_kv_usage: f64,
    /// Preemptions per terminated request, by count (for tests and reports).
    pub preemptions_per_request: BTreeMap<u32, u64>,
}

/// Progress of a running simulation, for progress displays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Simulated seconds so far.
    pub simulated: f64,
    /// Of [`SimConfig::duration`].
    pub duration: f64,
    /// Requests so far.
    pub requests: u64,
    /// Preemptions so far.
    pub preemptions: u64,
}

/// The next thing that happens in simulated time.
enum Next {
    Arrival(f64),
    Step(usize, f64),
    /// An idle engine's sleep timer fires.
    Sleep(usize, f64),
    /// New weights are pushed to every engine.
    WeightUpdate(f64),
}

/// Setup cost of a weight-transfer call besides moving the weights, seconds.
const WEIGHT_CALL_SECONDS: f64 = 0.01;
/// Setup of the weight-transfer engine (the first update), seconds.
const WEIGHT_INIT_SECONDS: f64 = 0.05;
/// Releasing (discarding) the weights for sleep level 2, seconds.
const DISCARD_SECONDS: f64 = 0.05;

struct Fleet {
    engines: Vec<Engine>,
    /// When each engine's next step starts, if it has work.
    next_step: Vec<Option<f64>>,
    /// When each engine becomes free (end of its current step).
    free_at: Vec<f64>,
    /// Until when each engine cannot step (waking up, taking new weights).
    ready_at: Vec<f64>,
    /// When each idle engine goes to sleep, if it stays idle.
    sleep_at: Vec<Option<f64>>,
    asleep: Vec<bool>,
}

impl Fleet {
    /// Schedules engine `e`'s next step for `t` at the earliest.
    fn wake_step(&mut self, e: usize, t: f64) {
        if self.next_step[e].is_none() {
            self.next_step[e] = Some(t.max(self.free_at[e]).max(self.ready_at[e]));
        }
    }
}

/// Runs a simulation, handing every record to `sink` in time order and
/// progress to `progress` about every simulated second.
pub fn simulate(
    config: &SimConfig,
    sink: &mut dyn FnMut(&Record),
    progress: &mut dyn FnMut(Progress),
) -> SimOutcome {
    let limits = EngineLimits {
        kv_blocks: config.kv_blocks,
        block_size: config.block_size,
        max_num_seqs: config.max_num_seqs,
        max_num_batched_tokens: config.max_num_batched_tokens,
        prefix_hit_rate: config.prefix_hit_rate,
        external_hit_rate: config.external_prefix_hit_rate,
        load_seconds_per_token: config.kv_bytes_per_token as f64 / (config.kv_load_gbps * 1e9),
        num_speculative_tokens: config.num_speculative_tokens,
        spec_acceptance_rate: config.spec_acceptance_rate,
    };
    let engines = config.engines.max(1) as usize;
    let engine_seed = |e: usize, stream: u64| {
        config
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add((e as u64) << 8 | stream)
    };
    let mut fleet = Fleet {
        engines: (0..engines)
            .map(|e| {
                let residency = BlockResidency::new(
                    config.kv_blocks,
                    config.kv_cache_metrics_sample,
                    engine_seed(e, 1),
                );
                Engine::new(limits, residency, engine_seed(e, 2))
            })
            .collect(),
        next_step: vec![None; engines],
        free_at: vec![0.0; engines],
        ready_at: vec![0.0; engines],
        sleep_at: vec![None; engines],
        asleep: vec![false; engines],
    };
    let mut workload = Workload::new(config);
    let mut outcome = SimOutcome::default();
    let wall_origin = if config.realtime {
        crate::clock::unix_now()
    } else {
        VIRTUAL_WALL_ORIGIN
    };
    let started = Instant::now();
    let wall = |t: f64| wall_origin + t;
    let engine_clock = |t: f64| ENGINE_CLOCK_ORIGIN + t;
    // Pending client aborts: (time, request id, engine).
    let mut aborts: Vec<(f64, String, usize)> = Vec::new();
    let mut next_arrival = match config.concurrency {
        Some(_) => None,
        None => Some(workload.interarrival()),
    };
    let mut next_update = config.weight_update_interval;
    let mut updates = 0u64;
    let mut closed_loop_due: u32 = config.concurrency.unwrap_or(0);
    let mut closed_loop_at = 0.0;
    let mut last_progress = 0.0;
    let mut now = 0.0;

    for e in 0..engines {
        sink(&Record::EngineConfig(EngineConfig {
            model_name: config.model_name(e as u32),
            engine: e as u32,
            cache_config: config.cache_config(),
            max_loras: config.lora_adapters.then_some(config.models.max(1)),
        }));
    }

    loop {
        // Closed loop: replace every departed request at the time it left.
        let arrival = if closed_loop_due > 0 && closed_loop_at < config.duration {
            Some(closed_loop_at)
        } else {
            next_arrival.filter(|t| *t < config.duration)
        };
        let earliest = |times: &[Option<f64>]| {
            times
                .iter()
                .enumerate()
                .filter_map(|(e, t)| t.map(|t| (e, t)))
                .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        };
        let mut candidates: Vec<Next> = Vec::with_capacity(4);
        if let Some(t) = arrival {
            candidates.push(Next::Arrival(t));
        }
        if let Some((e, t)) = earliest(&fleet.next_step) {
            candidates.push(Next::Step(e, t));
        }
        // Sleep timers and updates only matter while something else is due.
        if !candidates.is_empty() {
            if let Some((e, t)) = earliest(&fleet.sleep_at) {
                candidates.push(Next::Sleep(e, t));
            }
            if let Some(t) = next_update.filter(|t| *t < config.duration) {
                candidates.push(Next::WeightUpdate(t));
            }
        }
        // Earliest first; on a tie an arrival goes before a step.
        let rank = |n: &Next| match n {
            Next::Arrival(t) => (*t, 0),
            Next::Step(_, t) => (*t, 1),
            Next::Sleep(_, t) => (*t, 2),
            Next::WeightUpdate(t) => (*t, 3),
        };
        let Some(next) = candidates.into_iter().min_by(|a, b| {
            let (ta, ra) = rank(a);
            let (tb, rb) = rank(b);
            ta.total_cmp(&tb).then(ra.cmp(&rb))
        }) else {
            break;
        };
        now = rank(&next).0;
        if config.realtime {
            let due = started + Duration::from_secs_f64(now);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        if now - last_progress >= 1.0 {
            last_progress = now;
            progress(Progress {
                simulated: now,
                duration: config.duration,
                requests: outcome.requests,
                preemptions: outcome.preemptions,
            });
        }

        match next {
            Next::Arrival(t) => {
                if closed_loop_due > 0 {
                    closed_loop_due -= 1;
                } else {
                    next_arrival = Some(t + workload.interarrival());
                }
                let request = workload.request(t);
                outcome.requests += 1;
                let engine = request.engine as usize;
                sink(&Record::Request(RequestStart {
                    request_id: request.id.clone(),
                    model_name: config.model_name(request.engine),
                    engine: request.engine,
                    arrival_time: wall(t),
                    prompt_len: request.prompt_len,
                    max_tokens: Some(request.max_tokens),
                    n: 1,
                    traceparent: None,
                }));
                if let Some(at) = request.abort_at {
                    aborts.push((at, request.id.clone(), engine));
                }
                fleet.engines[engine].enqueue(Sequence::new(request, engine_clock(t)));
                fleet.sleep_at[engine] = None;
                if std::mem::take(&mut fleet.asleep[engine]) {
                    // Woken by the request: the weights come back first.
                    let wake = config.weight_bytes_per_gpu() / (config.host_transfer_gbps * 1e9);
                    sink(&Record::Operation(Operation {
                        operation: OperationKind::Wake,
                        duration: wake,
                    }));
                    sink(&Record::SleepState(SleepState {
                        model_name: config.model_name(engine as u32),
                        engine: engine as u32,
                        level: 0,
                    }));
                    fleet.ready_at[engine] = fleet.ready_at[engine].max(t + wake);
                }
                fleet.wake_step(engine, t);
            }
            Next::Sleep(e, t) => {
                fleet.sleep_at[e] = None;
                if fleet.next_step[e].is_none() && !fleet.asleep[e] {
                    fleet.asleep[e] = true;
                    let duration = match config.sleep_level {
                        1 => config.weight_bytes_per_gpu() / (config.host_transfer_gbps * 1e9),
                        _ => DISCARD_SECONDS,
                    };
                    sink(&Record::Operation(Operation {
                        operation: OperationKind::Sleep,
                        duration,
                    }));
                    sink(&Record::SleepState(SleepState {
                        model_name: config.model_name(e as u32),
                        engine: e as u32,
                        level: config.sleep_level,
                    }));
                    fleet.ready_at[e] = fleet.ready_at[e].max(t + duration);
                }
            }
            Next::WeightUpdate(t) => {
                next_update = config.weight_update_interval.map(|i| t + i);
                let transfer = config.weight_bytes_per_gpu() / (config.weight_sync_gbps * 1e9);
                let mut calls = Vec::new();
                if updates == 0 {
                    calls.push((OperationKind::Init, WEIGHT_INIT_SECONDS));
                }
                calls.push((OperationKind::Start, WEIGHT_CALL_SECONDS));
                if config.num_speculative_tokens > 0 {
                    calls.push((OperationKind::StartDraft, WEIGHT_CALL_SECONDS));
                }
                calls.push((OperationKind::Update, transfer));
                calls.push((OperationKind::Finish, WEIGHT_CALL_SECONDS));
                updates += 1;
                let pause: f64 = calls.iter().map(|(_, d)| d).sum();
                for (operation, duration) in calls {
                    sink(&Record::Operation(Operation {
                        operation,
                        duration,
                    }));
                }
                for e in 0..engines {
                    fleet.ready_at[e] = fleet.ready_at[e].max(t + pause);
                    if let Some(step) = fleet.next_step[e].as_mut() {
                        *step = step.max(fleet.ready_at[e]);
                    }
                }
            }
            Next::Step(e, t) => {
                // Client aborts that happened by now, on this engine.
                let mut departed = 0;
                aborts.retain(|(at, id, engine)| {
                    if *engine != e || *at > t {
                        return true;
                    }
                    if let Some(sequence) = fleet.engines[e].remove(id) {
                        sink(&Record::Abort(Abort {
                            request_id: id.clone(),
                            received_at: wall(*at),
                        }));
                        outcome.aborted += 1;
                        *outcome
                            .preemptions_per_request
                            .entry(sequence.preemptions)
                            .or_default() += 1;
                        departed += 1;
                    }
                    false
                });
                let engine = &mut fleet.engines[e];
                if !engine.has_work() {
                    fleet.next_step[e] = None;
                    fleet.sleep_at[e] = config.sleep_when_idle.map(|idle| t + idle);
                    closed_loop_due += if config.concurrency.is_some() {
                        departed
                    } else {
                        0
                    };
                    closed_loop_at = t;
                    continue;
                }
                let result = engine.step(engine_clock(t), || workload.token());
                let duration = (config.step_base_ms * 1e-3
                    + config.step_per_token_us * 1e-6 * f64::from(result.tokens))
                .max(1e-6);
                let end = t + duration;
                outcome.steps += 1;
                outcome.preemptions += u64::from(result.preemptions);
                outcome.generated_tokens += result
                    .outputs
                    .iter()
                    .map(|o| o.new_token_ids.len() as u64)
                    .sum::<u64>();
                outcome.peak_kv_usage = outcome.peak_kv_usage.max(engine.kv_usage());
                for sequence in &result.finished {
                    outcome.finished += 1;
                    *outcome
                        .preemptions_per_request
                        .entry(sequence.preemptions)
                        .or_default() += 1;
                }
                departed += result.finished.len() as u32;
                let perf_stats = config.perf_stats(result.tokens, result.context_tokens_read);
                if !result.outputs.is_empty() {
                    sink(&Record::Outputs(OutputBatch {
                        engine: e as u32,
                        timestamp: engine_clock(end),
                        received_at: wall(end + TRANSPORT_DELAY),
                        outputs: result.outputs,
                    }));
                }
                let (running_adapters, waiting_adapters) = if config.lora_adapters {
                    let (running, waiting) = engine.adapters(SimConfig::adapter_name);
                    (Some(running), Some(waiting))
                } else {
                    (None, None)
                };
                sink(&Record::SchedulerStats(Box::new(SchedulerStats {
                    model_name: config.model_name(e as u32),
                    engine: e as u32,
                    num_running_reqs: engine.running() as u64,
                    num_waiting_reqs: engine.waiting() as u64,
                    kv_cache_usage: engine.kv_usage(),
                    prefix_cache_queries: result.prefix_queries,
                    prefix_cache_hits: result.prefix_hits,
                    received_at: config.lora_adapters.then(|| wall(end + TRANSPORT_DELAY)),
                    num_skipped_waiting_reqs: engine.deferred() as u64,
                    num_kv_fetch_reqs_by_stage: engine.kv_fetch_stages(),
                    external_prefix_cache_queries: result.external_queries,
                    external_prefix_cache_hits: result.external_hits,
                    // The simulated connector shares KV between instances.
                    external_prefix_cache_hits_by_source: (result.external_hits > 0).then_some(
                        ExternalHitsBySource {
                            p2p: result.external_hits,
                            ..ExternalHitsBySource::default()
                        },
                    ),
                    kv_cache_eviction_events: engine.drain_evictions(),
                    perf_stats: Some(perf_stats),
                    spec_decoding: result.spec,
                    running_lora_adapters: running_adapters,
                    waiting_lora_adapters: waiting_adapters,
                    ..SchedulerStats::default()
                })));
                fleet.free_at[e] = end;
                fleet.next_step[e] = engine.has_work().then_some(end.max(fleet.ready_at[e]));
                if fleet.next_step[e].is_none() {
                    fleet.sleep_at[e] = config.sleep_when_idle.map(|idle| end + idle);
                }
                if config.concurrency.is_some() && departed > 0 {
                    closed_loop_due += departed;
                    closed_loop_at = end;
                }
            }
        }
    }
    // Aborts due after the last request left change nothing: their requests are gone.
    outcome.simulated_seconds = now;
    progress(Progress {
        simulated: now,
        duration: config.duration,
        requests: outcome.requests,
        preemptions: outcome.preemptions,
    });
    outcome
}
