//! The engine simulator: scheduler invariants read off the record stream,
//! determinism, record/replay identity, the KV-capacity physics, and a
//! realtime run scraped by a real Prometheus.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod process;
    pub mod prometheus_server;
}

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::process::Guard;
use vllm_otel_metrics::protocol::{EventType, Record};
use vllm_otel_metrics::sources::sim::{simulate, SimConfig, SimOutcome};

/// `base` with `change` made: `SimConfig` is `#[non_exhaustive]`, so a
/// configuration starts from a default and changes fields.
fn changed(mut base: SimConfig, change: impl FnOnce(&mut SimConfig)) -> SimConfig {
    change(&mut base);
    base
}

fn run(config: &SimConfig) -> (Vec<Record>, SimOutcome) {
    let mut records = Vec::new();
    let outcome = simulate(
        config,
        &mut |r: &Record| records.push(r.clone()),
        &mut |_| {},
    );
    (records, outcome)
}

/// Checks every scheduler invariant visible in the records of one run.
fn check_invariants(config: &SimConfig, records: &[Record], outcome: &SimOutcome) {
    let mut engine_of: HashMap<&str, u32> = HashMap::new();
    let mut arrival_order: HashMap<u32, Vec<&str>> = HashMap::new();
    let mut terminated: HashSet<&str> = HashSet::new();
    let mut preempted: HashSet<&str> = HashSet::new();
    let mut first_scheduled: HashMap<&str, f64> = HashMap::new();
    let mut prompt_len: HashMap<&str, u32> = HashMap::new();
    let mut had_output: HashSet<&str> = HashSet::new();
    for record in records {
        match record {
            Record::Request(r) => {
                assert!(
                    engine_of.insert(&r.request_id, r.engine).is_none(),
                    "request ids are unique"
                );
                prompt_len.insert(&r.request_id, r.prompt_len);
                assert!(r.engine < config.engines);
                arrival_order
                    .entry(r.engine)
                    .or_default()
                    .push(&r.request_id);
            }
            Record::Outputs(batch) => {
                for output in &batch.outputs {
                    let id = output.request_id.as_str();
                    assert_eq!(
                        engine_of.get(id),
                        Some(&batch.engine),
                        "output on its request's engine"
                    );
                    assert!(!terminated.contains(id), "no output after {id} terminated");
                    let most = 1 + config.num_speculative_tokens as usize;
                    assert!(
                        (1..=most).contains(&output.new_token_ids.len()),
                        "one token per step, plus accepted drafts"
                    );
                    for event in &output.events {
                        match event.kind {
                            EventType::Preempted => {
                                preempted.insert(id);
                            }
                            EventType::Scheduled => {
                                first_scheduled.entry(id).or_insert(event.timestamp);
                            }
                            EventType::Queued => {}
                        }
                        assert!(
                            event.timestamp <= batch.timestamp,
                            "events precede their output"
                        );
                    }
                    // As vLLM's engine: prefill stats on a request's first
                    // output only (of its first admission), never after a
                    // preemption's re-admission.
                    let first = had_output.insert(id);
                    assert_eq!(
                        output.prefill_stats.is_some(),
                        first,
                        "prefill stats on {id}'s first output only"
                    );
                    if let Some(stats) = output.prefill_stats {
                        assert_eq!(Some(&stats.num_prompt_tokens), prompt_len.get(id));
                        assert_eq!(
                            stats.num_cached_tokens + stats.num_computed_tokens,
                            stats.num_prompt_tokens
                        );
                        assert_eq!(
                            stats.num_local_cached_tokens + stats.num_external_cached_tokens,
                            stats.num_cached_tokens
                        );
                    }
                    if output.finish_reason.is_some() {
                        terminated.insert(id);
                    }
                }
            }
            Record::Abort(a) => {
                assert!(
                    terminated.insert(&a.request_id),
                    "{} terminates once",
                    a.request_id
                );
            }
            Record::SchedulerStats(s) => {
                assert!(
                    (0.0..=1.0).contains(&s.kv_cache_usage),
                    "blocks never over-allocated: {}",
                    s.kv_cache_usage
                );
                assert!(
                    s.num_running_reqs <= u64::from(config.max_num_seqs),
                    "seat limit"
                );
                assert!(s.prefix_cache_hits <= s.prefix_cache_queries);
                assert!(
                    Record::SchedulerStats(s.clone())
                        .validate(&Default::default())
                        .is_ok(),
                    "valid stats: {s:?}"
                );
            }
            Record::EngineConfig(_) | Record::SleepState(_) | Record::Operation(_) => {
                assert!(record.validate(&Default::default()).is_ok(), "{record:?}");
            }
            Record::IterationStats(_) | Record::PluginDrops(_) => {
                panic!("the simulator is an engine core, not the plugin: {record:?}")
            }
        }
    }
    // The run drains: every request, preempted ones included, finishes or aborts.
    assert_eq!(
        terminated.len(),
        engine_of.len(),
        "every request terminates"
    );
    assert!(preempted.iter().all(|id| terminated.contains(id)));
    assert_eq!(outcome.requests as usize, engine_of.len());
    assert_eq!(outcome.finished + outcome.aborted, outcome.requests);
    // First come, first served: first admissions follow arrival order per
    // engine (a KV connector's loads let later requests overtake).
    let fcfs = config.external_prefix_hit_rate == 0.0 && config.priority_fraction == 0.0;
    for order in arrival_order.values().filter(|_| fcfs) {
        let admitted: Vec<f64> = order
            .iter()
            .filter_map(|id| first_scheduled.get(id).copied())
            .collect();
        assert!(admitted.windows(2).all(|w| w[0] <= w[1]), "FCFS admission");
    }
}

/// Every engine-tier feature at once, under pressure: the scheduler
/// invariants still hold, and each feature's records agree with what the
/// engine did.
#[test]
fn engine_tier_records_agree_with_the_engine() {
    let config = changed(SimConfig::default(), |c| {
        c.seed = 3;
        c.duration = 40.0;
        c.rate = 4.0;
        c.engines = 2;
        c.models = 3;
        c.kv_blocks = 160;
        c.kv_cache_metrics_sample = 0.3;
        c.external_prefix_hit_rate = 0.5;
        c.kv_load_gbps = 0.5;
        c.num_speculative_tokens = 3;
        c.lora_adapters = true;
        c.sleep_when_idle = Some(0.5);
        c.weight_update_interval = Some(10.0);
    });
    let (records, outcome) = run(&config);
    check_invariants(&config, &records, &outcome);

    let mut configs = Vec::new();
    let (mut accepted, mut drafts, mut evictions, mut deferred_seen) = (0, 0, 0, false);
    let mut external_hits = 0;
    let mut sleep_levels: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut operations = Vec::new();
    let adapters: Vec<String> = (0..3).map(SimConfig::adapter_name).collect();
    for record in &records {
        match record {
            Record::EngineConfig(c) => configs.push((c.engine, c.max_loras)),
            Record::SchedulerStats(s) => {
                let stages = s
                    .num_kv_fetch_reqs_by_stage
                    .expect("a KV consumer reports stages");
                assert_eq!(
                    stages.in_progress + stages.completed_waiting,
                    s.num_skipped_waiting_reqs,
                    "loading and loaded requests are the deferred ones"
                );
                deferred_seen |= s.num_skipped_waiting_reqs > 0;
                external_hits += s.external_prefix_cache_hits;
                let spec = s
                    .spec_decoding
                    .as_ref()
                    .expect("speculative decoding is on");
                assert_eq!(spec.num_draft_tokens, 3 * spec.num_drafts);
                assert!(
                    spec.num_accepted_tokens_per_pos
                        .windows(2)
                        .all(|w| w[0] >= w[1]),
                    "a position is accepted only after the previous one"
                );
                accepted += spec.num_accepted_tokens;
                drafts += spec.num_drafts;
                evictions += s.kv_cache_eviction_events.len();
                let perf = s.perf_stats.expect("MFU estimates every step");
                assert_eq!(
                    perf.num_flops_per_gpu > 0.0,
                    perf.num_read_bytes_per_gpu > 0.0,
                    "a forward pass reads the weights"
                );
                for list in [&s.running_lora_adapters, &s.waiting_lora_adapters] {
                    let list = list.as_ref().expect("LoRA lists every step");
                    assert!(list.iter().all(|a| adapters.contains(a)), "{list:?}");
                    assert!(
                        list.windows(2).all(|w| w[0] < w[1]),
                        "each adapter once, in order"
                    );
                }
            }
            Record::SleepState(s) => sleep_levels.entry(s.engine).or_default().push(s.level),
            Record::Operation(o) => operations.push(o.operation),
            _ => {}
        }
    }
    assert_eq!(
        configs,
        vec![(0, Some(3)), (1, Some(3))],
        "one start-up per engine"
    );
    assert!(
        drafts > 0 && accepted > 0 && accepted < 3 * drafts,
        "{accepted} of {drafts}"
    );
    assert!(evictions > 0, "sampled blocks were evicted");
    assert!(
        external_hits > 0 && deferred_seen,
        "the connector loaded KV"
    );
    // Sleep and wake alternate, asleep first.
    for levels in sleep_levels.values() {
        assert!(!levels.is_empty());
        for (i, level) in levels.iter().enumerate() {
            assert_eq!(*level, if i % 2 == 0 { 1 } else { 0 }, "{levels:?}");
        }
    }
    use vllm_otel_metrics::protocol::OperationKind::*;
    let sleeps = operations.iter().filter(|o| **o == Sleep).count();
    let wakes = operations.iter().filter(|o| **o == Wake).count();
    let slept: usize = sleep_levels
        .values()
        .map(|l| l.iter().filter(|l| **l > 0).count())
        .sum();
    assert_eq!(
        (
            sleeps,
            wakes + sleep_levels.values().filter(|l| l.len() % 2 == 1).count()
        ),
        (slept, slept)
    );
    let updates: Vec<_> = operations.iter().filter(|o| !o.is_sleep_mode()).collect();
    assert_eq!(
        updates,
        [
            Init, Start, StartDraft, Update, Finish, Start, StartDraft, Update, Finish, Start,
            StartDraft, Update, Finish
        ]
        .iter()
        .collect::<Vec<_>>(),
        "an update every 10 s while requests arrive, the transfer set up once"
    );
}

#[test]
fn scheduler_invariants_hold_across_configurations() {
    let configs = [
        changed(SimConfig::default(), |c| {
            c.duration = 60.0;
        }),
        changed(SimConfig::default(), |c| {
            c.seed = 5;
            c.duration = 30.0;
            c.kv_blocks = 96;
            c.max_num_seqs = 8;
            c.max_num_batched_tokens = 256;
            c.prefix_hit_rate = 0.6;
            c.abort_rate = 0.2;
            c.engines = 3;
            c.models = 2;
            c.rate = 9.0;
        }),
        changed(SimConfig::default(), |c| {
            c.seed = 9;
            c.duration = 30.0;
            c.concurrency = Some(24);
            c.kv_blocks = 300;
            c.block_size = 32;
        }),
    ];
    for config in &configs {
        let (records, outcome) = run(config);
        assert!(
            outcome.preemptions > 0,
            "the configuration preempts: {config:?}"
        );
        check_invariants(config, &records, &outcome);
    }
}

/// With priority scheduling, high-priority arrivals preempt low-priority
/// requests (reason `priority`) besides the KV-pressure preemptions
/// (`kv_full`, named by no reason): the records carry both, and replayed,
/// `vllm:num_preemptions_by_reason` sums to `vllm:num_preemptions` per label
/// set. Without it, every preemption is `kv_full`.
#[test]
fn priority_scheduling_preempts_for_priority_and_the_reasons_sum_up() {
    use vllm_otel_metrics::export::prometheus::{PrometheusBridge, Value};
    use vllm_otel_metrics::instruments::Instruments;
    use vllm_otel_metrics::protocol::PreemptionReason;
    use vllm_otel_metrics::tracker::Tracker;

    for priority_fraction in [0.0, 0.3] {
        let config = changed(SimConfig::default(), |c| {
            c.seed = 7;
            c.duration = 60.0;
            c.kv_blocks = 256;
            c.engines = 2;
            c.priority_fraction = priority_fraction;
        });
        let (records, outcome) = run(&config);
        check_invariants(&config, &records, &outcome);
        let mut by_reason: HashMap<Option<PreemptionReason>, u64> = HashMap::new();
        for record in &records {
            if let Record::Outputs(batch) = record {
                for event in batch.outputs.iter().flat_map(|o| &o.events) {
                    if event.kind == EventType::Preempted {
                        *by_reason.entry(event.reason).or_default() += 1;
                    }
                }
            }
        }
        assert_eq!(by_reason.values().sum::<u64>(), outcome.preemptions);
        assert!(by_reason[&None] > 0, "{by_reason:?}");
        assert_eq!(by_reason.get(&Some(PreemptionReason::KvFull)), None);
        assert_eq!(
            by_reason.get(&Some(PreemptionReason::PrefixCacheReset)),
            None
        );
        let priority = by_reason.get(&Some(PreemptionReason::Priority)).copied();
        if priority_fraction > 0.0 {
            assert!(priority > Some(0), "{by_reason:?}");
        } else {
            assert_eq!(priority, None);
        }

        let (bridge, reader) = PrometheusBridge::builder().build();
        let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
        for record in &records {
            assert_eq!(tracker.apply(record), vec![]);
        }
        let families = bridge.snapshot();
        let family = |name: &str| families.iter().find(|f| f.name == name).unwrap();
        let scalar = |value: &Value| match value {
            Value::Scalar(v) => *v,
            other => panic!("a counter: {other:?}"),
        };
        let total = family("vllm:num_preemptions");
        let reasons = family("vllm:num_preemptions_by_reason");
        let mut sums: HashMap<Vec<(String, String)>, f64> = HashMap::new();
        let mut seen_reasons = HashSet::new();
        for series in &reasons.series {
            let (reason, label_set): (Vec<_>, Vec<_>) = series
                .labels
                .iter()
                .cloned()
                .partition(|(k, _)| k == "reason");
            seen_reasons.insert(reason[0].1.clone());
            *sums.entry(label_set).or_default() += scalar(&series.value);
        }
        assert_eq!(total.series.len(), 2, "two engines");
        for series in &total.series {
            let value = scalar(&series.value);
            assert!(value > 0.0);
            assert_eq!(
                sums.get(&series.labels),
                Some(&value),
                "{:?}",
                series.labels
            );
        }
        let expected: HashSet<String> = match priority_fraction > 0.0 {
            true => ["kv_full", "priority"].map(String::from).into(),
            false => ["kv_full"].map(String::from).into(),
        };
        assert_eq!(seen_reasons, expected);
    }
}

/// With a CPU offload pool, a preempted request's KV is stored there and
/// loaded back at re-admission: the scheduler invariants still hold, every
/// step reports the pool (vLLM's OffloadingConnector stats), what is loaded
/// was stored first, the pool ends empty, and a pool too small counts
/// allocation failures. The run replays to the identical exposition.
#[test]
fn cpu_offloading_stores_preempted_kv_and_loads_it_back() {
    use vllm_otel_metrics::export::prometheus::PrometheusBridge;
    use vllm_otel_metrics::instruments::Instruments;
    use vllm_otel_metrics::tracker::Tracker;

    for (pool, expect_failures) in [(4096, false), (8, true)] {
        let config = changed(SimConfig::default(), |c| {
            c.seed = 3;
            c.duration = 40.0;
            c.kv_blocks = 256;
            c.prompt_len = 128.0;
            c.output_len = 256.0;
            c.kv_offload_blocks = pool;
        });
        let (records, outcome) = run(&config);
        check_invariants(&config, &records, &outcome);
        assert!(outcome.preemptions > 0);
        let (mut stored, mut loaded, mut failures, mut steps, mut last_usage) = (0, 0, 0, 0, 1.0);
        for record in &records {
            if let Record::SchedulerStats(s) = record {
                let o = s
                    .kv_connector_stats
                    .as_ref()
                    .and_then(|k| k.offloading.as_ref())
                    .expect("every step reports the pool");
                steps += 1;
                stored += o.store_bytes.unwrap_or(0);
                loaded += o.load_bytes.unwrap_or(0);
                failures += o.allocation_failures.unwrap_or(0);
                assert_eq!(
                    o.store_sizes.as_ref().map(|v| v.iter().sum::<f64>() as u64),
                    o.store_bytes
                );
                last_usage = o.cpu_cache_usage.unwrap();
                assert!((0.0..=1.0).contains(&last_usage));
                assert!(record.validate(&Default::default()).is_ok(), "{record:?}");
            }
        }
        assert!(
            steps > 0 && stored > 0,
            "pool {pool}: {stored} bytes stored"
        );
        assert!(loaded <= stored, "loaded {loaded} of {stored}");
        assert_eq!(last_usage, 0.0, "the pool ends empty");
        assert_eq!(
            failures > 0,
            expect_failures,
            "pool {pool}: {failures} failures"
        );

        let (bridge, reader) = PrometheusBridge::builder().build();
        let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
        for record in &records {
            assert_eq!(tracker.apply(record), vec![]);
        }
        let text = bridge.encode(vllm_otel_metrics::export::prometheus::Format::Text);
        let samples = common::exposition::samples(&text);
        let key = r#"vllm:kv_offload_store_bytes_total{model_name="sim-model-0",engine="0"}"#;
        assert_eq!(samples[key], stored as f64);
    }
    // Without a pool, no connector stats at all.
    let (records, _) = run(&changed(SimConfig::default(), |c| {
        c.duration = 10.0;
    }));
    assert!(records
        .iter()
        .all(|r| !matches!(r, Record::SchedulerStats(s) if s.kv_connector_stats.is_some())));
}

/// Per step, what one offloading run's `kv_connector_stats` add up to.
#[derive(Debug, Default)]
struct OffloadTotals {
    steps: usize,
    store_bytes: u64,
    stores: usize,
    loads: usize,
    deferred_delays: Vec<f64>,
    skipped_reported: usize,
    skipped: u64,
    stored_blocks: u64,
    dropped_blocks: u64,
    loaded_blocks: u64,
    max_pending: u64,
    last_used: u64,
    last_pending: u64,
}

fn offload_totals(records: &[Record]) -> OffloadTotals {
    let mut t = OffloadTotals::default();
    for record in records {
        let Record::SchedulerStats(s) = record else {
            continue;
        };
        let stats = s
            .kv_connector_stats
            .as_ref()
            .expect("every step reports the pool");
        t.steps += 1;
        if let Some(o) = &stats.offloading {
            t.store_bytes += o.store_bytes.unwrap_or(0);
            t.stores += o.store_sizes.as_ref().map_or(0, Vec::len);
            t.loads += o.load_sizes.as_ref().map_or(0, Vec::len);
            t.deferred_delays
                .extend(o.lookup_async_delays.iter().flatten());
            t.skipped_reported += usize::from(o.stores_skipped.is_some());
            t.skipped += o.stores_skipped.unwrap_or(0);
        }
        if let Some(simple) = &stats.simple_cpu_offload {
            let outcomes = simple.save_outcomes.unwrap_or_default();
            t.stored_blocks += outcomes.stored.unwrap_or(0);
            t.dropped_blocks += outcomes.dropped_cpu_full.unwrap_or(0);
            t.loaded_blocks += simple.load_blocks.unwrap_or(0);
            t.last_used = simple.used_blocks.expect("used blocks every step");
            t.last_pending = simple
                .pending_store_blocks
                .expect("pending blocks every step");
            t.max_pending = t.max_pending.max(t.last_pending);
        }
    }
    t
}

/// Stores complete after the step that scheduled them, so a request
/// re-admitted sooner is skipped (its lookup pending) and the delay is
/// observed when a lookup resolves; a store threshold of 2 skips each
/// request's first store and reports the count every step; the
/// SimpleCPUOffloadConnector reports the same pool in blocks.
#[test]
fn offload_lookups_wait_for_stores_and_both_connectors_report_the_pool() {
    use vllm_otel_metrics::sources::sim::KvOffloadConnector;
    let base = changed(SimConfig::default(), |c| {
        c.seed = 3;
        c.duration = 40.0;
        c.kv_blocks = 256;
        c.prompt_len = 128.0;
        c.output_len = 256.0;
        c.kv_offload_blocks = 4096;
    });
    let (records, outcome) = run(&base);
    check_invariants(&base, &records, &outcome);
    let offloading = offload_totals(&records);
    assert!(offloading.loads > 0, "{offloading:?}");
    assert!(
        !offloading.deferred_delays.is_empty()
            && offloading.deferred_delays.len() <= offloading.loads + outcome.aborted as usize,
        "at most one deferred lookup per load or abort: {offloading:?}"
    );
    assert!(offloading
        .deferred_delays
        .iter()
        .all(|d| d.is_finite() && *d > 0.0));
    assert_eq!(
        offloading.skipped_reported, 0,
        "no threshold, no skipped stores"
    );

    let threshold = changed(base.clone(), |c| {
        c.kv_offload_store_threshold = 2;
    });
    let (records, outcome) = run(&threshold);
    check_invariants(&threshold, &records, &outcome);
    let filtered = offload_totals(&records);
    assert_eq!(
        filtered.skipped_reported, filtered.steps,
        "every step, 0 too"
    );
    assert!(filtered.skipped > 0 && filtered.stores > 0, "{filtered:?}");
    assert!(filtered.stores < offloading.stores, "{filtered:?}");

    // The same decisions (every store fits), counted in blocks.
    let simple = changed(base.clone(), |c| {
        c.kv_offload_connector = KvOffloadConnector::Simple;
    });
    let (records, outcome) = run(&simple);
    check_invariants(&simple, &records, &outcome);
    let blocks = offload_totals(&records);
    let block_bytes = u64::from(base.block_size) * base.kv_bytes_per_token;
    assert_eq!(blocks.stored_blocks * block_bytes, offloading.store_bytes);
    assert_eq!(blocks.dropped_blocks, 0);
    assert!(blocks.loaded_blocks > 0 && blocks.loaded_blocks <= blocks.stored_blocks);
    assert!(blocks.max_pending > 0, "stores are pending for a step");
    assert_eq!(
        (blocks.last_used, blocks.last_pending),
        (0, 0),
        "the pool ends empty"
    );
    assert!(records.iter().all(|r| match r {
        Record::SchedulerStats(s) => s.kv_connector_stats.as_ref().unwrap().offloading.is_none(),
        _ => true,
    }));

    // A small pool: the simple connector drops what does not fit.
    let small = changed(simple.clone(), |c| {
        c.kv_offload_blocks = 8;
    });
    let (records, _) = run(&small);
    let dropped = offload_totals(&records);
    assert!(
        dropped.dropped_blocks > 0 && dropped.stored_blocks > 0,
        "{dropped:?}"
    );
}

/// With `--nixl`, the KV connector is NIXL: every completed transfer is one
/// observation, its bytes those of the external hits, and failed transfers
/// are counted (their requests compute their prompts).
#[test]
fn nixl_transfers_are_the_connector_loads() {
    let config = changed(SimConfig::default(), |c| {
        c.seed = 4;
        c.duration = 30.0;
        c.external_prefix_hit_rate = 0.8;
        c.nixl = true;
        c.nixl_failure_rate = 0.2;
        c.abort_rate = 0.0;
    });
    let (records, outcome) = run(&config);
    check_invariants(&config, &records, &outcome);
    let (mut hits, mut bytes, mut transfers, mut failures) = (0u64, 0.0, 0usize, 0u64);
    for record in &records {
        if let Record::SchedulerStats(s) = record {
            hits += s.external_prefix_cache_hits;
            let n = s
                .kv_connector_stats
                .as_ref()
                .and_then(|k| k.nixl.as_ref())
                .expect("every step reports NIXL");
            let lists = [
                &n.transfer_duration,
                &n.post_duration,
                &n.bytes_transferred,
                &n.num_descriptors,
            ];
            let lens: Vec<usize> = lists
                .iter()
                .map(|l| l.as_ref().map_or(0, Vec::len))
                .collect();
            assert!(
                lens.iter().all(|&l| l == lens[0]),
                "one entry per transfer in each list"
            );
            transfers += lens[0];
            bytes += n.bytes_transferred.iter().flatten().sum::<f64>();
            failures += n.num_failed_transfers.unwrap_or(0);
        }
    }
    assert!(
        transfers > 0 && failures > 0,
        "{transfers} transfers, {failures} failures"
    );
    assert_eq!(bytes, (hits * config.kv_bytes_per_token) as f64);
    let share = failures as f64 / (failures as f64 + transfers as f64);
    assert!((0.1..0.3).contains(&share), "failure share {share}");
}

#[test]
fn a_seed_gives_the_same_run() {
    let config = changed(SimConfig::default(), |c| {
        c.seed = 42;
        c.duration = 30.0;
        c.engines = 2;
    });
    let (a, outcome_a) = run(&config);
    let (b, outcome_b) = run(&config);
    assert_eq!(a, b);
    assert_eq!(outcome_a, outcome_b);
    let (c, _) = run(&changed(config.clone(), |c| {
        c.seed = 43;
    }));
    assert_ne!(a, c);
}

/// Over doubling KV sizes, fewer blocks never yield fewer preemptions on the
/// same seed and workload (close sizes can differ by noise: which request a
/// preemption hits is chaotic; see docs/SIMULATOR.md).
#[test]
fn fewer_kv_blocks_never_yield_fewer_preemptions() {
    for (seed, engines, rate) in [(1, 1, 6.0), (2, 1, 6.0), (3, 1, 6.0), (4, 2, 12.0)] {
        let mut previous: Option<(u32, u64)> = None;
        for kv_blocks in [512, 1024, 2048, 4096] {
            let config = changed(SimConfig::default(), |c| {
                c.seed = seed;
                c.engines = engines;
                c.rate = rate;
                c.kv_blocks = kv_blocks;
                c.duration = 60.0;
            });
            let (_, outcome) = run(&config);
            if let Some((fewer_blocks, more_preemptions)) = previous {
                assert!(
                    outcome.preemptions <= more_preemptions,
                    "seed {seed}: {kv_blocks} blocks preempt {} times, {fewer_blocks} blocks only {more_preemptions}",
                    outcome.preemptions
                );
            }
            previous = Some((kv_blocks, outcome.preemptions));
        }
        assert_eq!(
            previous.map(|p| p.1),
            Some(0),
            "ample blocks: no preemption"
        );
    }
}

#[test]
fn recorded_run_replays_to_the_identical_exposition() {
    let dir = common::paths::tempdir("sim");
    let trace = dir.join("t.jsonl");
    let (code, live, stderr) = common::process::run(&[
        "simulate",
        "--seed",
        "7",
        "--duration",
        "60",
        "--record",
        trace.to_str().unwrap(),
        "--output",
        "prometheus",
        "--metrics-addr",
        "none",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("preemptions per request"),
        "the summary goes to stderr: {stderr}"
    );
    let (code, replayed, _) = common::process::replay(&trace);
    assert_eq!(code, 0);
    assert!(
        live == replayed,
        "replaying the recorded trace gives the live run's exposition"
    );
    let again = dir.join("again.jsonl");
    common::process::run(&[
        "simulate",
        "--seed",
        "7",
        "--duration",
        "60",
        "--record",
        again.to_str().unwrap(),
        "--metrics-addr",
        "none",
    ]);
    assert!(
        std::fs::read(&trace).unwrap() == std::fs::read(&again).unwrap(),
        "same seed, same trace"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn sweep_prints_one_row_per_kv_size() {
    let (code, stdout, stderr) = common::process::run(&[
        "simulate",
        "--duration",
        "30",
        "--sweep-kv-blocks",
        "256,1024,4096",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].contains("kv_blocks") && lines[0].contains("share>=2"));
    let blocks: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(blocks, ["256", "1024", "4096"]);
    let requests: HashSet<&str> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(
        requests.len(),
        1,
        "the same workload at every size: {stdout}"
    );
}

#[test]
fn invalid_settings_are_rejected_clearly() {
    for (flag, value, message) in [
        ("--rate", "0", "--rate must be a positive number"),
        (
            "--prefix-hit-rate",
            "1.5",
            "--prefix-hit-rate must be between 0 and 1",
        ),
        ("--kv-blocks", "0", "--kv-blocks must be at least 1"),
        ("--linger", "-1", "--linger must be zero or positive"),
    ] {
        let (code, _, stderr) = common::process::run(&[
            "simulate",
            &format!("{flag}={value}"),
            "--metrics-addr",
            "none",
        ]);
        assert_eq!(code, 1, "{flag} {value}: {stderr}");
        assert!(stderr.contains(message), "{stderr}");
    }
    // Offload settings need a pool, and the threshold its connector.
    for (args, message) in [
        (
            &["--kv-offload-connector", "simple"][..],
            "--kv-offload-connector must be used with a CPU offload pool (--kv-offload-blocks above 0)",
        ),
        (
            &["--kv-offload-store-threshold", "2"][..],
            "--kv-offload-store-threshold must be used with a CPU offload pool (--kv-offload-blocks above 0)",
        ),
        (
            &[
                "--kv-offload-blocks",
                "64",
                "--kv-offload-connector",
                "simple",
                "--kv-offload-store-threshold",
                "2",
            ][..],
            "--kv-offload-store-threshold must be an OffloadingConnector setting (--kv-offload-connector offloading)",
        ),
    ] {
        let (code, _, stderr) = common::process::run(
            &[&["simulate", "--metrics-addr", "none"][..], args].concat(),
        );
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// The interpolated quantile line of a summary:
/// `histogram_quantile: p50 a, p90 b, p99 c`.
fn summary_p99(line: &str) -> Option<String> {
    line.trim()
        .strip_prefix("histogram_quantile: ")?
        .split(", ")
        .find_map(|part| part.strip_prefix("p99 ").map(str::to_owned))
}

/// The count and sum of `vllm:request_num_preemptions` in an exposition,
/// summed over label sets.
fn final_preemption_totals(exposition: &str) -> (u64, f64) {
    let samples = common::exposition::samples(exposition);
    let (mut count, mut sum) = (0u64, 0.0);
    for (key, value) in &samples {
        if key.starts_with("vllm:request_num_preemptions_count{") {
            count += *value as u64;
        } else if key.starts_with("vllm:request_num_preemptions_sum{") {
            sum += value;
        }
    }
    (count, sum)
}

mod needs_prometheus {
    use super::*;

    #[test]
    fn realtime_run_scraped_by_prometheus_matches_the_simulator() {
        let metrics_port = common::http::free_port();
        let dir = common::paths::tempdir("realtime");
        let (_prometheus, prometheus_port) =
            common::prometheus_server::start_honoring_labels(&dir, metrics_port);

        let mut sim = Guard(
            Command::new(common::process::binary())
                .args([
                    "simulate",
                    "--realtime",
                    "--duration",
                    "20",
                    "--seed",
                    "5",
                    "--linger",
                    "15",
                ])
                .args([
                    "--output",
                    "prometheus",
                    "--metrics-addr",
                    &format!("127.0.0.1:{metrics_port}"),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        // The summary's quantile line appears when the run is over (lingering follows).
        let stderr = BufReader::new(sim.0.stderr.take().unwrap());
        let mut p99_line = None;
        for line in stderr.lines() {
            let line = line.unwrap();
            if line.trim_start().starts_with("histogram_quantile: ") {
                p99_line = Some(line);
                break;
            }
        }
        let printed_p99 = summary_p99(&p99_line.expect("the summary is printed")).unwrap();
        let final_exposition = common::http::http_get(metrics_port, "/metrics")
            .expect("still serving while lingering");
        let (count, sum) = final_preemption_totals(&final_exposition);
        assert!(
            count > 0 && sum > 0.0,
            "the run finished requests and preempted"
        );

        let query = |q: &str| common::prometheus_server::value(prometheus_port, q);
        let count = count as f64;
        common::process::wait_for(10, "Prometheus to scrape the final state", || {
            query("sum(vllm:request_num_preemptions_count)").filter(|v| *v == count)
        });
        let p99 =
            query("histogram_quantile(0.99, sum by (le) (vllm:request_num_preemptions_bucket))")
                .unwrap();
        assert_eq!(
            printed_p99,
            format!("{p99:.2}"),
            "PromQL p99 {p99}, the summary's {printed_p99}"
        );
        drop(sim);
        std::fs::remove_dir_all(dir).ok();
    }
}

/// `histogram_quantile(q, …)` of cumulative `(le, count)` buckets (`+Inf`
/// last), as PromQL reads them: linear inside the bucket holding the rank,
/// the highest finite bound for a rank in `+Inf`.
fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, cumulative) in buckets {
        if cumulative >= rank {
            if le.is_infinite() {
                return lower;
            }
            return lower + (le - lower) * (rank - below) / (cumulative - below);
        }
        (lower, below) = (le, cumulative);
    }
    f64::NAN
}

/// With `--attribute lora,priority` and vLLM's priority scheduling, the
/// summary's line per class is what the exposition holds for the class's
/// series (requests, preemptions per request, TTFT p99, SLO met), the
/// classes add up to the totals, and the low-priority class (1) is
/// preempted more per request than the high-priority one (0).
#[test]
fn the_low_priority_class_absorbs_the_preemptions_and_the_class_lines_are_the_exposition() {
    let (code, exposition, stderr) = common::process::run(&[
        "simulate",
        "--seed",
        "5",
        "--duration",
        "90",
        "--rate",
        "3",
        "--kv-blocks",
        "256",
        "--priority-fraction",
        "0.3",
        "--lora-adapters",
        "--models",
        "2",
        "--attribute",
        "lora,priority",
        "--adapter-min-requests",
        "1",
        "--slo",
        r#"{"ttft": 2}"#,
        "--output",
        "prometheus",
        "--metrics-addr",
        "none",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let samples = common::exposition::samples(&exposition);
    let of_class = |key: &str, family: &str, lora: &str, priority: &str| {
        key.starts_with(&format!("{family}{{"))
            && key.contains(&format!("lora_name=\"{lora}\""))
            && key.contains(&format!("priority=\"{priority}\""))
    };
    let sum = |family: &str, lora: &str, priority: &str, extra: &str| -> f64 {
        samples
            .iter()
            .filter(|(k, _)| of_class(k, family, lora, priority) && k.contains(extra))
            .map(|(_, v)| v)
            .sum()
    };
    let mut by_priority: HashMap<String, (f64, f64)> = HashMap::new();
    let mut classes = 0;
    for line in stderr.lines().filter(|l| l.starts_with("class ")) {
        classes += 1;
        // class lora_name=L priority=P: N requests, M preemptions/request, TTFT p99 T s, SLO met S%
        let (class, rest) = line.split_once(": ").unwrap();
        let label = |name: &str| {
            let at = class.find(&format!("{name}=")).unwrap() + name.len() + 1;
            class[at..].split(' ').next().unwrap().to_owned()
        };
        let (lora, priority) = (label("lora_name"), label("priority"));
        let numbers: Vec<f64> = rest
            .split([' ', '%'])
            .filter_map(|w| w.parse().ok())
            .collect();
        let [requests, per_request, ttft_p99, met] = numbers[..] else {
            panic!("not a class line: {line}");
        };
        let count = sum(
            "vllm_class:request_num_preemptions_count",
            &lora,
            &priority,
            "",
        );
        let preemptions = sum(
            "vllm_class:request_num_preemptions_sum",
            &lora,
            &priority,
            "",
        );
        assert_eq!(requests, count, "{line}");
        assert_eq!(
            format!("{per_request:.3}"),
            format!("{:.3}", preemptions / count),
            "{line}"
        );
        // The class's TTFT buckets, summed over its engines.
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for (key, value) in &samples {
            if of_class(
                key,
                "vllm_class:time_to_first_token_seconds_bucket",
                &lora,
                &priority,
            ) {
                let le = key
                    .split("le=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                match buckets.iter_mut().find(|(l, _)| *l == le) {
                    Some(bucket) => bucket.1 += value,
                    None => buckets.push((le, *value)),
                }
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let p99 = histogram_quantile(0.99, &buckets);
        assert_eq!(format!("{ttft_p99:.3}"), format!("{p99:.3}"), "{line}");
        let judged = sum("vllm_otel_metrics_slo_requests_total", &lora, &priority, "");
        let met_count = sum(
            "vllm_otel_metrics_slo_requests_total",
            &lora,
            &priority,
            "outcome=\"met\"",
        );
        assert_eq!(
            format!("{met:.1}"),
            format!("{:.1}", met_count / judged * 100.0),
            "{line}"
        );
        let entry = by_priority.entry(priority).or_default();
        entry.0 += count;
        entry.1 += preemptions;
    }
    assert_eq!(
        classes,
        2 * 2,
        "two adapters, two priority classes:\n{stderr}"
    );
    // The classes add up to every request the run ended.
    let total: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("vllm:request_num_preemptions_count{"))
        .map(|(_, v)| v)
        .sum();
    let classed: f64 = by_priority.values().map(|(n, _)| n).sum();
    assert_eq!(classed, total);
    let success: f64 = samples
        .iter()
        .filter(|(k, _)| k.starts_with("vllm:request_success_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(success, total);
    let per_request = |p: &str| by_priority[p].1 / by_priority[p].0;
    // About 0.65 against 0.15 (seed 5): vLLM preempts the lowest priority first.
    assert!(
        per_request("1") > 2.0 * per_request("0"),
        "preemptions per request: low class {}, high class {}\n{stderr}",
        per_request("1"),
        per_request("0")
    );
    eprintln!(
        "preemptions per request: high class (0) {:.3}, low class (1) {:.3}",
        per_request("0"),
        per_request("1")
    );
}
