//! Resident memory per `(model_name, engine)` label set, for the bridge's
//! reader alone, for the bridge and OTLP reading one aggregation
//! (`both_sinks`, as the CLI registers them with cumulative OTLP), and for
//! the two with an aggregation each (`apart`, as with delta OTLP); and for
//! the bridge with attribution at its default caps (`attributed`: the
//! class label sets of `--attribute lora,priority`, 90 per `(model_name,
//! engine)`).
//!
//! Each measurement runs in a fresh process (this binary, started again
//! with `MEMORY_CASE=<sinks>:<label sets>`), so that what an earlier case
//! allocated and freed is not counted. A case builds the provider, records
//! two requests per label set (one preempted and finished by `length`, one
//! finished by `stop`: every per-request series exists) and reads `VmRSS`
//! from `/proc/self/status`; then it scrapes once, as Prometheus would, and
//! reads it again (the scrape's buffers are freed but may stay resident, as
//! in a running sidecar). The parent prints one line per case,
//! `memory: sinks=… label_sets=N rss_kib=… per_label_set_bytes=… after_scrape_kib=…`,
//! `per_label_set_bytes` against the same sinks with no label set.
//!
//! Run: `cargo bench --bench memory` (Linux: it reads `/proc`).

#[path = "common/idle_otlp.rs"]
mod idle_otlp;

use std::process::Command;

use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::export::shared::SharedAggregation;
use vllm_otel_metrics::instruments::{Attribution, Instruments, PriorityClasses, RequestClass};
use vllm_otel_metrics::protocol::{EngineCoreEvent, EngineCoreOutput, EventType, FinishReason};
use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};

const SINKS: [&str; 3] = ["bridge", "both_sinks", "apart"];
const LABEL_SETS: [u32; 4] = [0, 1, 100, 1_000];

/// Resident bytes of this process.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib * 1024
}

/// One case, in this process: prints `rss_bytes=…`.
fn run_case(sinks: &str, label_sets: u32) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let (bridge, bridge_reader) = PrometheusBridge::builder().build();
    let builder = Instruments::builder();
    let builder = if sinks == "attributed" {
        let attribution = Attribution::default()
            .with_lora()
            .with_adapter_min_requests(2)
            .with_priority(PriorityClasses::default());
        builder
            .with_reader(bridge_reader)
            .with_attribution(attribution)
    } else if sinks == "bridge" {
        builder.with_reader(bridge_reader)
    } else {
        let push = idle_otlp::idle_push(&runtime);
        match sinks {
            "both_sinks" => builder.with_reader(
                SharedAggregation::try_new(push.reader, bridge_reader)
                    .expect("cumulative OTLP and the bridge share"),
            ),
            _ => builder.with_reader(bridge_reader).with_reader(push.reader),
        }
    };
    let instruments = builder.build();
    let params = RequestParams {
        arrival_time: 100.0,
        prompt_len: 512,
        max_tokens: Some(128),
        n: 1,
    };
    let event = |kind, timestamp| EngineCoreEvent {
        kind,
        timestamp,
        reason: None,
    };
    let first = EngineCoreOutput {
        request_id: "r".into(),
        new_token_ids: vec![1],
        events: vec![
            event(EventType::Queued, 10.0),
            event(EventType::Scheduled, 10.05),
        ],
        ..Default::default()
    };
    let preempted = EngineCoreOutput {
        request_id: "r".into(),
        new_token_ids: vec![2],
        events: vec![
            event(EventType::Preempted, 10.3),
            event(EventType::Scheduled, 10.5),
        ],
        ..Default::default()
    };
    let mut label_sets_kept = Vec::new();
    for i in 0..label_sets {
        let model = format!("model-{}", i % 10);
        let engine = i / 10;
        let label_set = if sinks == "attributed" {
            // At the caps: one `(model_name, engine)` per 90 class label
            // sets, 17 adapters (16 labelled, the 17th `other`) and the
            // base model, by 5 priority classes.
            let (model, class) = (format!("model-{}", i / 90), i % 90);
            let adapter = (class / 5 > 0).then(|| format!("adapter-{}", class / 5));
            let class = RequestClass {
                lora_name: adapter.as_deref(),
                priority: Some(i64::from(class % 5) - 2),
            };
            // Its second request gives an adapter its label.
            let _ = instruments.label_set_for(&model, 0, &class);
            instruments.label_set_for(&model, 0, &class)
        } else {
            instruments.label_set(&model, engine)
        };
        for reason in [FinishReason::Length, FinishReason::Stop] {
            let mut request = RequestMetrics::start_in(&label_set, params);
            request.observe_output(10.2, 100.3, &first);
            request.observe_output(10.6, 100.7, &preempted);
            request.finish(100.8, reason);
        }
        // A frontend keeps the label sets it serves.
        label_sets_kept.push(label_set);
    }
    let recorded = resident_bytes();
    let scraped = bridge.encode(Format::Text).len();
    std::hint::black_box(scraped);
    println!("rss_bytes={recorded} {}", resident_bytes());
    drop(label_sets_kept);
    instruments.shutdown().ok();
}

/// Starts this binary again for one case; returns its resident bytes after
/// recording and after the scrape.
fn measure(sinks: &str, label_sets: u32) -> (u64, u64) {
    let exe = std::env::current_exe().expect("the bench's own path");
    let output = Command::new(exe)
        .env("MEMORY_CASE", format!("{sinks}:{label_sets}"))
        .output()
        .expect("the bench starts itself");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "case {sinks}:{label_sets} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("rss_bytes="))
        .and_then(|v| v.split_once(' '))
        .and_then(|(recorded, scraped)| Some((recorded.parse().ok()?, scraped.parse().ok()?)))
        .unwrap_or_else(|| panic!("case {sinks}:{label_sets} printed no rss_bytes: {stdout}"))
}

fn main() {
    if let Ok(case) = std::env::var("MEMORY_CASE") {
        let (sinks, label_sets) = case.split_once(':').expect("MEMORY_CASE=<sinks>:<n>");
        run_case(sinks, label_sets.parse().expect("a label-set count"));
        return;
    }
    let bench_mode = std::env::args().any(|a| a == "--bench");
    // Under `cargo test --all-targets`: one small case per sink, to keep
    // the cases running.
    let sizes: &[u32] = if bench_mode { &LABEL_SETS } else { &[0, 1] };
    // With attribution at its default caps: 90 and 900 class label sets
    // (one and ten `(model_name, engine)`s).
    let attributed: &[u32] = if bench_mode { &[0, 90, 900] } else { &[0, 90] };
    for sinks in SINKS.into_iter().chain(["attributed"]) {
        let sizes = if sinks == "attributed" {
            attributed
        } else {
            sizes
        };
        let (empty, _) = measure(sinks, 0);
        for &label_sets in &sizes[1..] {
            let (recorded, scraped) = measure(sinks, label_sets);
            println!(
                "memory: sinks={sinks} label_sets={label_sets} rss_kib={} per_label_set_bytes={} after_scrape_kib={}",
                recorded / 1024,
                (recorded as i64 - empty as i64) / i64::from(label_sets),
                scraped / 1024
            );
        }
    }
}
