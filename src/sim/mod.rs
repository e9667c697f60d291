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
pub mod report;
mod rng;
mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use engine::{Engine, EngineLimits, Sequence};
use workload::Workload;

use crate::catalog::DEFAULT_MAX_MODEL_LEN;
use crate::protocol::{Abort, OutputBatch, Record, RequestStart, SchedulerStats};

/// Engine clock at simulated time 0 (a monotonic clock reads an arbitrary origin).
const ENGINE_CLOCK_ORIGIN: f64 = 1000.0;
/// Frontend wall clock at simulated time 0 in virtual-time runs (fixed so a
/// seed reproduces the same trace).
const VIRTUAL_WALL_ORIGIN: f64 = 1_700_000_000.0;
/// Engine-to-frontend transport delay of an output batch.
const TRANSPORT_DELAY: f64 = 0.0005;

/// Everything a simulation run is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Seed of every random draw.
    pub seed: u64,
    /// Simulated seconds during which requests arrive (the run then drains).
    pub duration: f64,
    /// Poisson arrival rate, requests per second (open loop).
    pub rate: f64,
    /// Closed loop instead: this many requests outstanding at all times.
    pub concurrency: Option<u32>,
    /// KV-cache blocks per engine.
    pub kv_blocks: u32,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Most requests in a running batch.
    pub max_num_seqs: u32,
    /// Token budget of one step (chunked prefill within it).
    pub max_num_batched_tokens: u32,
    /// Share of prompt tokens found in the prefix cache.
    pub prefix_hit_rate: f64,
    /// Fixed cost of a step, milliseconds.
    pub step_base_ms: f64,
    /// Cost per token in a step, microseconds.
    pub step_per_token_us: f64,
    /// Mean prompt length, tokens (lognormal).
    pub prompt_len: f64,
    /// Mean output length, tokens (lognormal).
    pub output_len: f64,
    /// Longest request (prompt plus output), tokens.
    pub max_model_len: u32,
    /// Share of requests whose client aborts.
    pub abort_rate: f64,
    /// Served models; engine `e` serves model `e % models`.
    pub models: u32,
    /// Engines.
    pub engines: u32,
    /// Pace steps to the wall clock.
    pub realtime: bool,
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
        }
    }
}

impl SimConfig {
    /// The model an engine serves.
    pub fn model_name(&self, engine: u32) -> String {
        format!("sim-model-{}", engine % self.models.max(1))
    }

    /// Checks values a run cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("--duration", self.duration),
            ("--rate", self.rate),
            ("--prompt-len", self.prompt_len),
            ("--output-len", self.output_len),
        ];
        for (name, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(format!("{name} must be a positive number, not {value}"));
            }
        }
        for (name, value) in [
            ("--prefix-hit-rate", self.prefix_hit_rate),
            ("--abort-rate", self.abort_rate),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(format!("{name} must be between 0 and 1, not {value}"));
            }
        }
        for (name, value) in [
            ("--step-base-ms", self.step_base_ms),
            ("--step-per-token-us", self.step_per_token_us),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!("{name} must be zero or positive, not {value}"));
            }
        }
        if self.step_base_ms == 0.0 && self.step_per_token_us == 0.0 {
            return Err(
                "a step must take time: --step-base-ms or --step-per-token-us above 0".into(),
            );
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
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.kv_blocks.saturating_mul(self.block_size) < 2 {
            return Err("the KV cache must hold at least 2 tokens".into());
        }
        if self.concurrency == Some(0) {
            return Err("--concurrency must be at least 1".into());
        }
        Ok(())
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
}

struct Fleet {
    engines: Vec<Engine>,
    /// When each engine's next step starts, if it has work.
    next_step: Vec<Option<f64>>,
    /// When each engine becomes free (end of its current step).
    free_at: Vec<f64>,
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
    };
    let engines = config.engines.max(1) as usize;
    let mut fleet = Fleet {
        engines: (0..engines).map(|_| Engine::new(limits)).collect(),
        next_step: vec![None; engines],
        free_at: vec![0.0; engines],
    };
    let mut workload = Workload::new(config);
    let mut outcome = SimOutcome::default();
    let wall_origin = if config.realtime {
        crate::tracker::unix_now()
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
    let mut closed_loop_due: u32 = config.concurrency.unwrap_or(0);
    let mut closed_loop_at = 0.0;
    let mut last_progress = 0.0;
    let mut now = 0.0;

    loop {
        // Closed loop: replace every departed request at the time it left.
        let arrival = if closed_loop_due > 0 && closed_loop_at < config.duration {
            Some(closed_loop_at)
        } else {
            next_arrival.filter(|t| *t < config.duration)
        };
        let step = fleet
            .next_step
            .iter()
            .enumerate()
            .filter_map(|(e, t)| t.map(|t| (e, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let next = match (arrival, step) {
            (Some(a), Some((e, s))) if s < a => Next::Step(e, s),
            (Some(a), _) => Next::Arrival(a),
            (None, Some((e, s))) => Next::Step(e, s),
            (None, None) => break,
        };
        now = match next {
            Next::Arrival(t) | Next::Step(_, t) => t,
        };
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
                if fleet.next_step[engine].is_none() {
                    fleet.next_step[engine] = Some(t.max(fleet.free_at[engine]));
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
                outcome.generated_tokens += result.outputs.len() as u64;
                outcome.peak_kv_usage = outcome.peak_kv_usage.max(engine.kv_usage());
                for sequence in &result.finished {
                    outcome.finished += 1;
                    *outcome
                        .preemptions_per_request
                        .entry(sequence.preemptions)
                        .or_default() += 1;
                }
                departed += result.finished.len() as u32;
                if !result.outputs.is_empty() {
                    sink(&Record::Outputs(OutputBatch {
                        engine: e as u32,
                        timestamp: engine_clock(end),
                        received_at: wall(end + TRANSPORT_DELAY),
                        outputs: result.outputs,
                    }));
                }
                sink(&Record::SchedulerStats(SchedulerStats {
                    model_name: config.model_name(e as u32),
                    engine: e as u32,
                    num_running_reqs: engine.running() as u64,
                    num_waiting_reqs: engine.waiting() as u64,
                    kv_cache_usage: engine.kv_usage(),
                    prefix_cache_queries: result.prefix_queries,
                    prefix_cache_hits: result.prefix_hits,
                    ..SchedulerStats::default()
                }));
                fleet.free_at[e] = end;
                fleet.next_step[e] = engine.has_work().then_some(end);
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
