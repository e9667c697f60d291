//! Cost of one engine step's scheduler snapshot through `Tracker::apply`
//! (validation included), on the OpenTelemetry SDK with the catalog's Views
//! and the Prometheus bridge's reader, as `replay` runs it:
//!
//! - `scheduler_core`: the snapshot as it was before the engine tier (the
//!   running/waiting gauges, KV usage and prefix-cache counters), the
//!   baseline;
//! - `scheduler_full`: every engine-level field set (waiting by reason, KV
//!   fetch stages, external and multi-modal cache counters, one sampled
//!   block eviction with two reuse gaps, MFU estimates, speculative decoding
//!   with three draft positions, LoRA adapters unchanged since the last step);
//! - `scheduler_lora_changed`: the full snapshot whose LoRA adapters change
//!   every step, so each one binds a new `vllm:lora_requests_info` series
//!   (vLLM's behaviour; the cost of a label set, not of a step).
//!
//! Every label set exists before anything is measured. After criterion's
//! report the bench prints, last, the medians of 31 interleaved rounds:
//! `engine_records: core=… full=… lora_changed=… ns/record full/core=…`.
//!
//! Run: `cargo bench --bench engine_records`. Without `--bench` (as under
//! `cargo test --all-targets`) it runs a handful of iterations only.

#[path = "common/timing.rs"]
mod timing;

use timing::{median, ns_per_call};

use std::hint::black_box;

use criterion::Criterion;
use vllm_otel_metrics::export::prometheus::PrometheusBridge;
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::{
    KvCacheEvictionEvent, KvFetchStages, PerfStats, Record, SchedulerStats, SpecDecodingStats,
};
use vllm_otel_metrics::tracker::Tracker;

const MODEL: &str = "bench-model";

fn core_stats() -> SchedulerStats {
    SchedulerStats {
        model_name: MODEL.into(),
        engine: 0,
        num_running_reqs: 48,
        num_waiting_reqs: 12,
        kv_cache_usage: 0.83,
        prefix_cache_queries: 24_576,
        prefix_cache_hits: 6_144,
        ..SchedulerStats::default()
    }
}

fn full_stats(adapter: &str) -> SchedulerStats {
    SchedulerStats {
        received_at: Some(1.7e9),
        num_skipped_waiting_reqs: 3,
        num_kv_fetch_reqs_by_stage: Some(KvFetchStages {
            waiting_to_start: 1,
            in_progress: 2,
            completed_waiting: 0,
        }),
        external_prefix_cache_queries: 18_432,
        external_prefix_cache_hits: 4_096,
        mm_cache_queries: 0,
        mm_cache_hits: 0,
        kv_cache_eviction_events: vec![KvCacheEvictionEvent {
            lifetime_seconds: 12.5,
            idle_seconds: 3.0,
            reuse_gaps_seconds: vec![1.0, 2.5],
        }],
        perf_stats: Some(PerfStats {
            num_flops_per_gpu: 1.2e13,
            num_read_bytes_per_gpu: 1.6e10,
            num_write_bytes_per_gpu: 2.0e8,
        }),
        spec_decoding: Some(SpecDecodingStats {
            num_drafts: 40,
            num_draft_tokens: 120,
            num_accepted_tokens: 70,
            num_accepted_tokens_per_pos: vec![35, 22, 13],
        }),
        running_lora_adapters: Some(vec![adapter.to_owned()]),
        waiting_lora_adapters: Some(Vec::new()),
        ..core_stats()
    }
}

struct Setup {
    tracker: Tracker,
    core: Record,
    full: Record,
    /// Two snapshots whose adapters differ, applied in turn.
    lora_changing: [Record; 2],
}

impl Setup {
    fn new() -> Self {
        let (bridge, reader) = PrometheusBridge::builder().build();
        // Kept alive by the reader; the bench never scrapes.
        drop(bridge);
        let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
        let core = Record::SchedulerStats(Box::new(core_stats()));
        let full = Record::SchedulerStats(Box::new(full_stats("sql-lora")));
        let lora_changing = [
            Record::SchedulerStats(Box::new(full_stats("chat-lora"))),
            Record::SchedulerStats(Box::new(full_stats("code-lora"))),
        ];
        for record in [&core, &full, &lora_changing[0], &lora_changing[1]] {
            assert!(tracker.apply(record).is_empty(), "valid: {record:?}");
        }
        Setup {
            tracker,
            core,
            full,
            lora_changing,
        }
    }
}

fn main() {
    let bench_mode = std::env::args().any(|arg| arg == "--bench");
    let mut s = Setup::new();

    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("engine_records");
    group.bench_function("scheduler_core", |b| {
        b.iter(|| black_box(s.tracker.apply(black_box(&s.core))))
    });
    group.bench_function("scheduler_full", |b| {
        b.iter(|| black_box(s.tracker.apply(black_box(&s.full))))
    });
    let mut turn = 0;
    group.bench_function("scheduler_lora_changed", |b| {
        b.iter(|| {
            turn ^= 1;
            black_box(s.tracker.apply(black_box(&s.lora_changing[turn])))
        })
    });
    group.finish();

    let (rounds, records) = if bench_mode { (31, 20_000) } else { (3, 100) };
    let (mut core, mut full, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        core.push(ns_per_call(records, |_| {
            black_box(s.tracker.apply(&s.core));
        }));
        full.push(ns_per_call(records, |_| {
            black_box(s.tracker.apply(&s.full));
        }));
        changed.push(ns_per_call(records, |i| {
            black_box(s.tracker.apply(&s.lora_changing[(i % 2) as usize]));
        }));
    }
    let (core, full, changed) = (median(&mut core), median(&mut full), median(&mut changed));
    println!(
        "engine_records: core={core:.0} full={full:.0} lora_changed={changed:.0} ns/record full/core={:.2}",
        full / core
    );
}
