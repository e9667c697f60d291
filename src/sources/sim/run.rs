//! One simulation run's state and the steps [`super::simulate`] loops over:
//! pick the next event, advance the clock, then an arrival, an engine step,
//! a sleep timer or a weight update.

use std::time::{Duration, Instant};

use super::config::{KvOffloadConnector, SimConfig};
use super::engine::Engine;
use super::limits::EngineLimits;
use super::nixl::NixlStep;
use super::offload::OffloadStep;
use super::outcome::{Progress, SimOutcome};
use super::residency::BlockResidency;
use super::sequence::Sequence;
use super::workload::Workload;
use crate::protocol::{
    Abort, EngineConfig, ExternalHitsBySource, KvConnectorStats, NixlStats, OffloadingStats,
    Operation, OperationKind, OutputBatch, Record, RequestStart, SaveOutcomes, SchedulerStats,
    SimpleCpuOffloadStats, SleepState,
};
use crate::sources::RecordSink;

/// Engine clock at simulated time 0 (a monotonic clock reads an arbitrary origin).
const ENGINE_CLOCK_ORIGIN: f64 = 1000.0;
/// Frontend wall clock at simulated time 0 in virtual-time runs (fixed so a
/// seed reproduces the same trace).
const VIRTUAL_WALL_ORIGIN: f64 = 1_700_000_000.0;
/// Engine-to-frontend transport delay of an output batch.
const TRANSPORT_DELAY: f64 = 0.0005;

/// The next thing that happens in simulated time.
pub(super) enum Next {
    /// A request arrives.
    Arrival(f64),
    /// An engine steps.
    Step(usize, f64),
    /// An idle engine's sleep timer fires.
    Sleep(usize, f64),
    /// New weights are pushed to every engine.
    WeightUpdate(f64),
}

impl Next {
    /// When it happens, and its rank among events at the same time: an
    /// arrival goes before a step.
    fn rank(&self) -> (f64, u8) {
        match self {
            Next::Arrival(t) => (*t, 0),
            Next::Step(_, t) => (*t, 1),
            Next::Sleep(_, t) => (*t, 2),
            Next::WeightUpdate(t) => (*t, 3),
        }
    }
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

/// The earliest of per-engine times, lowest engine first on a tie.
fn earliest(times: &[Option<f64>]) -> Option<(usize, f64)> {
    times
        .iter()
        .enumerate()
        .filter_map(|(e, t)| t.map(|t| (e, t)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
}

/// A run in progress.
pub(super) struct Run<'a> {
    config: &'a SimConfig,
    fleet: Fleet,
    workload: Workload,
    outcome: SimOutcome,
    /// The wall-clock time of simulated time 0.
    wall_origin: f64,
    started: Instant,
    /// Pending client aborts: (time, request id, engine).
    aborts: Vec<(f64, String, usize)>,
    next_arrival: Option<f64>,
    next_update: Option<f64>,
    updates: u64,
    /// Closed loop: requests to start at `closed_loop_at` to replace departed ones.
    closed_loop_due: u32,
    closed_loop_at: f64,
    last_progress: f64,
    now: f64,
}

impl<'a> Run<'a> {
    pub(super) fn new(config: &'a SimConfig) -> Run<'a> {
        let limits = EngineLimits::new(config);
        let engines = config.engines.max(1) as usize;
        let engine_seed = |e: usize, stream: u64| {
            config
                .seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add((e as u64) << 8 | stream)
        };
        let fleet = Fleet {
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
        let next_arrival = match config.concurrency {
            Some(_) => None,
            None => Some(workload.interarrival()),
        };
        Run {
            config,
            fleet,
            workload,
            outcome: SimOutcome::default(),
            wall_origin: if config.realtime {
                crate::support::clock::unix_now()
            } else {
                VIRTUAL_WALL_ORIGIN
            },
            started: Instant::now(),
            aborts: Vec::new(),
            next_arrival,
            next_update: config.weight_update_interval,
            updates: 0,
            closed_loop_due: config.concurrency.unwrap_or(0),
            closed_loop_at: 0.0,
            last_progress: 0.0,
            now: 0.0,
        }
    }

    /// The frontend's wall clock at simulated time `t`.
    fn wall(&self, t: f64) -> f64 {
        self.wall_origin + t
    }

    /// The engines' monotonic clock at simulated time `t`.
    fn engine_clock(t: f64) -> f64 {
        ENGINE_CLOCK_ORIGIN + t
    }

    /// Every engine's start-up: its cache configuration.
    pub(super) fn announce_engines(&self, sink: &mut dyn RecordSink) {
        let config = self.config;
        for e in 0..self.fleet.engines.len() {
            sink.apply(&Record::EngineConfig(EngineConfig {
                model_name: config.model_name(e as u32),
                engine: e as u32,
                cache_config: config.cache_config(),
                max_loras: config.lora_adapters.then_some(config.models.max(1)),
                max_model_len: None,
            }));
        }
    }

    /// The next event, or `None` when nothing is left to happen.
    pub(super) fn next_event(&self) -> Option<Next> {
        let config = self.config;
        // Closed loop: replace every departed request at the time it left.
        let arrival = if self.closed_loop_due > 0 && self.closed_loop_at < config.duration {
            Some(self.closed_loop_at)
        } else {
            self.next_arrival.filter(|t| *t < config.duration)
        };
        let mut candidates: Vec<Next> = Vec::with_capacity(4);
        if let Some(t) = arrival {
            candidates.push(Next::Arrival(t));
        }
        if let Some((e, t)) = earliest(&self.fleet.next_step) {
            candidates.push(Next::Step(e, t));
        }
        // Sleep timers and updates only matter while something else is due.
        if !candidates.is_empty() {
            if let Some((e, t)) = earliest(&self.fleet.sleep_at) {
                candidates.push(Next::Sleep(e, t));
            }
            if let Some(t) = self.next_update.filter(|t| *t < config.duration) {
                candidates.push(Next::WeightUpdate(t));
            }
        }
        candidates.into_iter().min_by(|a, b| {
            let (ta, ra) = a.rank();
            let (tb, rb) = b.rank();
            ta.total_cmp(&tb).then(ra.cmp(&rb))
        })
    }

    /// Moves simulated time to `next` (waiting for the wall clock in real
    /// time) and reports progress about every simulated second.
    pub(super) fn advance_to(&mut self, next: &Next, progress: &mut dyn FnMut(Progress)) {
        self.now = next.rank().0;
        if self.config.realtime {
            let due = self.started + Duration::from_secs_f64(self.now);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        if self.now - self.last_progress >= 1.0 {
            self.last_progress = self.now;
            progress(self.progress());
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            simulated: self.now,
            duration: self.config.duration,
            requests: self.outcome.requests,
            preemptions: self.outcome.preemptions,
        }
    }

    /// A request arrives at `t`; it wakes its engine if asleep.
    pub(super) fn arrive(&mut self, t: f64, sink: &mut dyn RecordSink) {
        let config = self.config;
        if self.closed_loop_due > 0 {
            self.closed_loop_due -= 1;
        } else {
            self.next_arrival = Some(t + self.workload.interarrival());
        }
        let request = self.workload.request(t);
        self.outcome.requests += 1;
        let engine = request.engine as usize;
        sink.apply(&Record::Request(RequestStart {
            request_id: request.id.clone(),
            model_name: config.model_name(request.engine),
            engine: request.engine,
            arrival_time: self.wall(t),
            prompt_len: request.prompt_len,
            max_tokens: Some(request.max_tokens),
            n: 1,
            traceparent: None,
            operation_name: None,
            stop_strings: false,
            lora_name: request.adapter.map(SimConfig::adapter_name),
            // vLLM's priorities: lower first, 0 by default. Without priority
            // scheduling every request has the default.
            priority: (config.priority_fraction > 0.0).then_some(if request.high_priority {
                0
            } else {
                1
            }),
        }));
        if let Some(at) = request.abort_at {
            self.aborts.push((at, request.id.clone(), engine));
        }
        let fleet = &mut self.fleet;
        fleet.engines[engine].enqueue(Sequence::new(request, Self::engine_clock(t)));
        fleet.sleep_at[engine] = None;
        if std::mem::take(&mut fleet.asleep[engine]) {
            // Woken by the request: the weights come back first.
            let wake = config.weight_bytes_per_gpu() / (config.host_transfer_gbps * 1e9);
            sink.apply(&Record::Operation(Operation {
                operation: OperationKind::Wake,
                duration: wake,
            }));
            sink.apply(&Record::SleepState(SleepState {
                model_name: config.model_name(engine as u32),
                engine: engine as u32,
                level: 0,
            }));
            fleet.ready_at[engine] = fleet.ready_at[engine].max(t + wake);
        }
        fleet.wake_step(engine, t);
    }

    /// Engine `e`'s sleep timer fires at `t`: it sleeps if still idle.
    pub(super) fn sleep(&mut self, e: usize, t: f64, sink: &mut dyn RecordSink) {
        let config = self.config;
        let fleet = &mut self.fleet;
        fleet.sleep_at[e] = None;
        if fleet.next_step[e].is_none() && !fleet.asleep[e] {
            fleet.asleep[e] = true;
            let duration = match config.sleep_level {
                1 => config.weight_bytes_per_gpu() / (config.host_transfer_gbps * 1e9),
                _ => DISCARD_SECONDS,
            };
            sink.apply(&Record::Operation(Operation {
                operation: OperationKind::Sleep,
                duration,
            }));
            sink.apply(&Record::SleepState(SleepState {
                model_name: config.model_name(e as u32),
                engine: e as u32,
                level: config.sleep_level,
            }));
            fleet.ready_at[e] = fleet.ready_at[e].max(t + duration);
        }
    }

    /// An RL trainer pushes new weights at `t`: every engine pauses for the
    /// transfer calls.
    pub(super) fn update_weights(&mut self, t: f64, sink: &mut dyn RecordSink) {
        let config = self.config;
        self.next_update = config.weight_update_interval.map(|i| t + i);
        let transfer = config.weight_bytes_per_gpu() / (config.weight_sync_gbps * 1e9);
        let mut calls = Vec::new();
        if self.updates == 0 {
            calls.push((OperationKind::Init, WEIGHT_INIT_SECONDS));
        }
        calls.push((OperationKind::Start, WEIGHT_CALL_SECONDS));
        if config.num_speculative_tokens > 0 {
            calls.push((OperationKind::StartDraft, WEIGHT_CALL_SECONDS));
        }
        calls.push((OperationKind::Update, transfer));
        calls.push((OperationKind::Finish, WEIGHT_CALL_SECONDS));
        self.updates += 1;
        let pause: f64 = calls.iter().map(|(_, d)| d).sum();
        for (operation, duration) in calls {
            sink.apply(&Record::Operation(Operation {
                operation,
                duration,
            }));
        }
        let fleet = &mut self.fleet;
        for e in 0..fleet.engines.len() {
            fleet.ready_at[e] = fleet.ready_at[e].max(t + pause);
            if let Some(step) = fleet.next_step[e].as_mut() {
                *step = step.max(fleet.ready_at[e]);
            }
        }
    }

    /// Client aborts due by `t` on engine `e` take their requests out;
    /// returns how many left.
    fn take_aborts(&mut self, e: usize, t: f64, sink: &mut dyn RecordSink) -> u32 {
        let mut departed = 0;
        let wall_origin = self.wall_origin;
        let (fleet, outcome) = (&mut self.fleet, &mut self.outcome);
        self.aborts.retain(|(at, id, engine)| {
            if *engine != e || *at > t {
                return true;
            }
            if let Some(sequence) = fleet.engines[e].remove(id, *at) {
                sink.apply(&Record::Abort(Abort {
                    request_id: id.clone(),
                    received_at: wall_origin + *at,
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
        departed
    }

    /// Engine `e` steps at `t`: its outputs and its scheduler snapshot.
    pub(super) fn step(&mut self, e: usize, t: f64, sink: &mut dyn RecordSink) {
        let config = self.config;
        let mut departed = self.take_aborts(e, t, sink);
        let engine = &mut self.fleet.engines[e];
        if !engine.has_work() {
            self.fleet.next_step[e] = None;
            self.fleet.sleep_at[e] = config.sleep_when_idle.map(|idle| t + idle);
            self.closed_loop_due += if config.concurrency.is_some() {
                departed
            } else {
                0
            };
            self.closed_loop_at = t;
            return;
        }
        let workload = &mut self.workload;
        let result = engine.step(Self::engine_clock(t), || workload.token());
        let duration = (config.step_base_ms * 1e-3
            + config.step_per_token_us * 1e-6 * f64::from(result.tokens))
        .max(1e-6);
        let end = t + duration;
        let end_wall = self.wall_origin + (end + TRANSPORT_DELAY);
        let outcome = &mut self.outcome;
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
            sink.apply(&Record::Outputs(OutputBatch {
                engine: e as u32,
                timestamp: Self::engine_clock(end),
                received_at: end_wall,
                outputs: result.outputs,
            }));
        }
        let (running_adapters, waiting_adapters) = if config.lora_adapters {
            let (running, waiting) = engine.adapters(SimConfig::adapter_name);
            (Some(running), Some(waiting))
        } else {
            (None, None)
        };
        sink.apply(&Record::SchedulerStats(Box::new(SchedulerStats {
            model_name: config.model_name(e as u32),
            engine: e as u32,
            num_running_reqs: engine.running() as u64,
            num_waiting_reqs: engine.waiting() as u64,
            kv_cache_usage: engine.kv_usage(),
            prefix_cache_queries: result.prefix_queries,
            prefix_cache_hits: result.prefix_hits,
            received_at: config.lora_adapters.then_some(end_wall),
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
            kv_connector_stats: connector_stats(result.offload, result.nixl, config),
            ..SchedulerStats::default()
        })));
        let has_work = engine.has_work();
        let fleet = &mut self.fleet;
        fleet.free_at[e] = end;
        fleet.next_step[e] = has_work.then_some(end.max(fleet.ready_at[e]));
        if fleet.next_step[e].is_none() {
            fleet.sleep_at[e] = config.sleep_when_idle.map(|idle| end + idle);
        }
        if config.concurrency.is_some() && departed > 0 {
            self.closed_loop_due += departed;
            self.closed_loop_at = end;
        }
    }

    /// The run's outcome, after a last progress report. Aborts due after
    /// the last request left change nothing: their requests are gone.
    pub(super) fn finish(mut self, progress: &mut dyn FnMut(Progress)) -> SimOutcome {
        self.outcome.simulated_seconds = self.now;
        progress(self.progress());
        self.outcome
    }
}

/// The step's KV-connector stats, when a connector is simulated.
fn connector_stats(
    offload: Option<OffloadStep>,
    nixl: Option<NixlStep>,
    config: &SimConfig,
) -> Option<KvConnectorStats> {
    if offload.is_none() && nixl.is_none() {
        return None;
    }
    let mut stats = KvConnectorStats {
        nixl: nixl.map(|n| NixlStats {
            transfer_duration: Some(n.transfer_duration),
            post_duration: Some(n.post_duration),
            bytes_transferred: Some(n.bytes_transferred),
            num_descriptors: Some(n.num_descriptors),
            num_failed_transfers: Some(n.failed_transfers),
            ..NixlStats::default()
        }),
        ..KvConnectorStats::default()
    };
    if let Some(step) = offload {
        match config.kv_offload_connector {
            KvOffloadConnector::Offloading => {
                stats.offloading = Some(offloading_stats(step, config));
            }
            KvOffloadConnector::Simple => stats.simple_cpu_offload = Some(simple_stats(step)),
        }
    }
    Some(stats)
}

/// One step of the CPU offload pool as the OffloadingConnector's stats
/// report it: transfers, lookups, allocation failures, skipped stores (with
/// a store threshold) and the pool's usage, every step
/// (`CPUOffloadingManager.get_stats`: `write` is the share held by stores
/// in flight, `read` the rest).
fn offloading_stats(step: OffloadStep, config: &SimConfig) -> OffloadingStats {
    let capacity = f64::from(config.kv_offload_blocks.max(1));
    let usage = f64::from(step.used_blocks) / capacity;
    let write = (f64::from(step.pending_store_blocks) / capacity).min(usage);
    let some = |v: Vec<f64>| (!v.is_empty()).then_some(v);
    let loaded = !step.load_sizes.is_empty();
    let stored = !step.store_sizes.is_empty();
    OffloadingStats {
        load_bytes: loaded.then_some(step.load_bytes),
        load_time: loaded.then_some(step.load_time),
        load_sizes: some(step.load_sizes),
        store_bytes: stored.then_some(step.store_bytes),
        store_time: stored.then_some(step.store_time),
        store_sizes: some(step.store_sizes),
        lookup_sync_delays: some(step.lookups),
        lookup_async_delays: some(step.lookup_async_delays),
        allocation_failures: (step.allocation_failures > 0).then_some(step.allocation_failures),
        // Reported every step (0 too) once the threshold filters stores.
        stores_skipped: (config.kv_offload_store_threshold >= 2).then_some(step.stores_skipped),
        cpu_cache_usage: Some(usage),
        cpu_cache_write_usage: Some(write),
        cpu_cache_read_usage: Some(usage - write),
    }
}

/// One step of the CPU offload pool as the SimpleCPUOffloadConnector's
/// stats report it (`SimpleCPUOffloadScheduler.get_stats`): the outcomes
/// with a count this step, blocks loaded back when there are some, and the
/// pool's gauges every step.
fn simple_stats(step: OffloadStep) -> SimpleCpuOffloadStats {
    let positive = |n: u64| (n > 0).then_some(n);
    let outcomes = SaveOutcomes {
        stored: positive(step.stored_blocks),
        dropped_cpu_full: positive(step.dropped_blocks),
        ..SaveOutcomes::default()
    };
    SimpleCpuOffloadStats {
        save_outcomes: (outcomes != SaveOutcomes::default()).then_some(outcomes),
        load_blocks: positive(step.loaded_blocks),
        used_blocks: Some(u64::from(step.used_blocks)),
        pending_store_blocks: Some(u64::from(step.pending_store_blocks)),
    }
}
