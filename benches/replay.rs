//! JSONL replay throughput: decode + track, side by side with decoding
//! alone (the baseline: `serde_json` into the same records, nothing
//! tracked), over a trace the simulator records in memory (120 simulated
//! seconds of the default engine, about 100,000 outputs).
//!
//! After criterion's report it prints one line:
//! `replay: outputs=… replay_outputs_per_s=… decode_only_outputs_per_s=… ratio=…`
//! (ratio = replay time / decode-only time, medians of interleaved rounds).
//! `scripts/bench-replay.sh` measures the release binary on a file,
//! with its peak memory. Run: `cargo bench --bench replay`.

#[path = "common/timing.rs"]
mod timing;

use timing::median;

use std::hint::black_box;
use std::io::{self, BufRead};
use std::time::{Duration, Instant};

use criterion::Criterion;
use vllm_otel_metrics::export::prometheus::PrometheusBridge;
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::sources::sim::{simulate, SimConfig};
use vllm_otel_metrics::tracker::Tracker;

/// The simulator's records as JSONL, and how many outputs they carry.
fn trace(duration: f64) -> (Vec<u8>, usize) {
    let mut jsonl = Vec::new();
    let mut outputs = 0;
    let mut config = SimConfig::default();
    config.duration = duration;
    simulate(
        &config,
        &mut |record: &Record| {
            if let Record::Outputs(batch) = record {
                outputs += batch.outputs.len();
            }
            serde_json::to_writer(&mut jsonl, record).expect("records serialize");
            jsonl.push(b'\n');
        },
        &mut |_| {},
    );
    (jsonl, outputs)
}

fn replay(instruments: &Instruments, trace: &[u8]) {
    let mut tracker = Tracker::new(instruments.clone());
    let report = jsonl::replay(
        trace,
        "bench",
        &mut tracker,
        &mut io::sink(),
        jsonl::DEFAULT_MAX_LINE_BYTES,
    )
    .expect("reading from memory cannot fail");
    black_box(report);
}

fn decode_only(trace: &[u8]) {
    for line in trace.lines() {
        let line = line.expect("reading from memory cannot fail");
        black_box(serde_json::from_str::<Record>(&line).expect("the trace is valid"));
    }
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    let (trace, outputs) = trace(if bench_mode { 120.0 } else { 2.0 });
    // The bridge's reader, as a default `replay` serving /metrics has it:
    // without a reader the SDK would aggregate nothing.
    let (_bridge, reader) = PrometheusBridge::builder().build();
    let instruments = Instruments::builder().with_reader(reader).build();
    let mut criterion = Criterion::default().configure_from_args();
    {
        let mut group = criterion.benchmark_group("replay");
        if bench_mode {
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(8));
        }
        group.bench_function("decode_and_track", |b| {
            b.iter(|| replay(&instruments, &trace))
        });
        group.bench_function("decode_only", |b| b.iter(|| decode_only(&trace)));
        group.finish();
    }
    criterion.final_summary();

    let rounds = if bench_mode { 11 } else { 1 };
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64()
    };
    let (mut tracked, mut decoded) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let run_replay = || replay(&instruments, &trace);
        let run_decode = || decode_only(&trace);
        if round % 2 == 0 {
            tracked.push(time(&run_replay));
            decoded.push(time(&run_decode));
        } else {
            decoded.push(time(&run_decode));
            tracked.push(time(&run_replay));
        }
    }
    let (tracked, decoded) = (median(&mut tracked), median(&mut decoded));
    println!(
        "replay: outputs={outputs} replay_outputs_per_s={:.0} decode_only_outputs_per_s={:.0} ratio={:.2}",
        outputs as f64 / tracked,
        outputs as f64 / decoded,
        tracked / decoded
    );
}
