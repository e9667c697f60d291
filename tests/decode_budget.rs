//! The decode budget, proved over generated hostile inputs rather than one
//! input at a time: no message of N bytes, whatever its kind, may raise the
//! heap by more than `budget::bound(N)` = 4 × N + 8 MiB while it is decoded
//! and applied (docs/OPERATIONS.md, "What one input may cost").
//!
//! A structure-aware generator writes messages for every record kind of the
//! ingest protocol and for vLLM's msgpack `EngineCoreOutputs` inside
//! engine-core frames: claimed counts that lie, deep nesting, long strings,
//! many events, many unknown request ids, every field at its limit. Each goes
//! through the entry point both transports use (`decode_message`, then
//! `IngestService::apply_incoming`), and JSONL lines through the replay, while
//! a counting allocator keeps this thread's live bytes and their peak.
//!
//! The test command runs `DECODE_BUDGET_CASES` cases (default 3000) from
//! the fixed seed `DECODE_BUDGET_SEED` (default 49); a longer run for
//! developers is in docs/TESTING.md.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod exposition;
    pub mod http;
    pub mod paths;
    pub mod process;
    pub mod rng;
    pub mod serve;
}

use common::rng::Rng;
use prost::Message;
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::sources::budget;
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::sources::ingest::proto::pb;
use vllm_otel_metrics::sources::ingest::service::{
    decode_message, IngestLimits, IngestService, Summary,
};
use vllm_otel_metrics::tracker::Tracker;

/// Counts this thread's live heap bytes and their peak while `COUNTING`.
struct PeakAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    if !COUNTING.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// A global allocator can only be written with `unsafe`: it forwards every
// call unchanged to the system allocator and only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for PeakAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Both blocks may live at once while the bytes are copied.
        track(new_size as isize);
        track(-(layout.size() as isize));
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: PeakAllocator = PeakAllocator;

/// The most this thread's heap grew by while `f` ran, and `f`'s result.
fn peak_growth<R>(f: impl FnOnce() -> R) -> (usize, R) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    COUNTING.with(|c| c.set(true));
    let result = f();
    COUNTING.with(|c| c.set(false));
    (PEAK.with(Cell::get).max(0) as usize, result)
}

/// A count: mostly small, sometimes at a bound, sometimes past it.
fn count(rng: &mut Rng, typical: u64, bound: u64) -> usize {
    (match rng.below(10) {
        0 => bound,
        1 => bound + 1,
        2 => bound.saturating_mul(1 + rng.below(4)),
        _ => rng.below(typical + 1),
    }) as usize
}

/// A request id: one of `known`, an over-long one, none, or unknown.
fn id(rng: &mut Rng, known: &[String]) -> String {
    match rng.below(10) {
        0..=3 if !known.is_empty() => known[rng.below(known.len() as u64) as usize].clone(),
        4 => "x".repeat(count(rng, 40, 512)),
        5 => String::new(),
        _ => format!("u{}", rng.next_u64() % 1_000_000),
    }
}

// ---- protobuf messages, every record kind -------------------------------

fn event(rng: &mut Rng) -> pb::EngineCoreEvent {
    pb::EngineCoreEvent {
        r#type: rng.below(5) as i32,
        timestamp: [1.0, -1.0, f64::NAN, 2.5][rng.below(4) as usize],
        reason: rng
            .chance(20)
            .then(|| ["kv_full", "bogus", ""][rng.below(3) as usize].to_owned()),
    }
}

fn output(rng: &mut Rng, known: &[String], budget: usize) -> pb::EngineCoreOutput {
    let events = count(rng, 3, 64).min(budget);
    pb::EngineCoreOutput {
        request_id: id(rng, known),
        new_token_ids: vec![7; count(rng, 2, 4096).min(budget)],
        events: (0..events).map(|_| event(rng)).collect(),
        finish_reason: if rng.chance(20) {
            rng.below(9) as i32
        } else {
            0
        },
        ..Default::default()
    }
}

fn finished(rng: &mut Rng, known: &[String]) -> pb::FinishedRequest {
    pb::FinishedRequest {
        request_id: id(rng, known),
        finish_reason: rng.below(9) as i32,
        e2e_latency: [1.0, f64::INFINITY, -0.5][rng.below(3) as usize],
        ..Default::default()
    }
}

fn record(rng: &mut Rng, known: &mut Vec<String>, budget: usize, depth: u32) -> pb::Record {
    use pb::record::Record as R;
    let record = match rng.below(11) {
        0 => {
            let id = id(rng, &[]);
            known.push(id.clone());
            R::Request(pb::RequestStarted {
                request_id: id,
                model_name: "m".repeat(count(rng, 4, 256)),
                arrival_time: 1.0,
                traceparent: rng.chance(10).then(|| "t".repeat(count(rng, 55, 256))),
                ..Default::default()
            })
        }
        1 | 2 => {
            let n = count(rng, 16, 16_384).min(budget);
            R::Outputs(pb::OutputBatch {
                timestamp: 2.0,
                outputs: (0..n)
                    .map(|_| output(rng, known, budget / n.max(1)))
                    .collect(),
                ..Default::default()
            })
        }
        3 => R::Abort(pb::Abort {
            request_id: id(rng, known),
            received_at: Some(3.0),
        }),
        4 => R::SchedulerStats(Box::new(pb::SchedulerStats {
            model_name: "m".into(),
            kv_cache_eviction_events: vec![
                pb::KvCacheEvictionEvent::default();
                count(rng, 4, 4096).min(budget)
            ],
            running_lora_adapters: rng.chance(30).then(|| pb::AdapterList {
                names: vec!["a".repeat(count(rng, 3, 256)); count(rng, 2, 1024).min(budget)],
            }),
            spec_decoding: rng.chance(20).then(|| pb::SpecDecodingStats {
                num_accepted_tokens_per_pos: vec![1; count(rng, 4, 1024).min(budget)],
                ..Default::default()
            }),
            ..Default::default()
        })),
        5 => R::EngineConfig(pb::EngineConfig {
            model_name: "m".into(),
            cache_config: (0..count(rng, 4, 256).min(budget))
                .map(|i| (format!("k{i}"), "v".repeat(count(rng, 4, 256))))
                .collect(),
            ..Default::default()
        }),
        6 => R::SleepState(pb::SleepState {
            model_name: "m".repeat(count(rng, 4, 256)),
            level: rng.below(4) as u32,
            ..Default::default()
        }),
        7 => R::IterationStats(pb::IterationStats {
            model_name: "m".into(),
            time_to_first_tokens_iter: vec![0.5; count(rng, 8, 65_536).min(budget)],
            n_params_iter: vec![1; count(rng, 8, 65_536).min(budget)],
            finished_requests: (0..count(rng, 8, 4096).min(budget))
                .map(|_| finished(rng, known))
                .collect(),
            ..Default::default()
        }),
        8 => R::PluginDrops(pb::PluginDrops {
            dropped: rng.next_u64(),
        }),
        9 if depth < 3 => {
            let n = count(rng, 8, 1024).min(budget);
            R::Batch(pb::RecordBatch {
                records: (0..n)
                    .map(|_| record(rng, known, budget / n.max(1), depth + 1))
                    .collect(),
            })
        }
        _ => R::Frames(frames(rng, known, budget)),
    };
    pb::Record {
        record: Some(record),
    }
}

// ---- vLLM's msgpack EngineCoreOutputs ----------------------------------

const OUTPUTS_FIELDS: [&str; 9] = [
    "engine_index",
    "outputs",
    "scheduler_stats",
    "timestamp",
    "utility_output",
    "finished_requests",
    "wave_complete",
    "start_wave",
    "weight_version",
];
const OUTPUT_FIELDS: [&str; 8] = [
    "request_id",
    "new_token_ids",
    "new_logprobs",
    "new_prompt_logprobs_tensors",
    "pooling_output",
    "finish_reason",
    "stop_reason",
    "events",
];

/// A MessagePack writer for the shapes the generator needs.
#[derive(Default)]
struct Pack(Vec<u8>);

impl Pack {
    fn array(&mut self, n: usize) {
        match n {
            0..=15 => self.0.push(0x90 | n as u8),
            16..=0xffff => {
                self.0.push(0xdc);
                self.0.extend_from_slice(&(n as u16).to_be_bytes());
            }
            _ => {
                self.0.push(0xdd);
                self.0.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
    }
    fn map(&mut self, n: usize) {
        match n {
            0..=15 => self.0.push(0x80 | n as u8),
            _ => {
                self.0.push(0xdf);
                self.0.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
    }
    fn str(&mut self, s: &str) {
        if s.len() < 32 {
            self.0.push(0xa0 | s.len() as u8);
        } else {
            self.0.push(0xdb);
            self.0.extend_from_slice(&(s.len() as u32).to_be_bytes());
        }
        self.0.extend_from_slice(s.as_bytes());
    }
    fn uint(&mut self, n: u64) {
        if n < 128 {
            self.0.push(n as u8);
        } else {
            self.0.push(0xcf);
            self.0.extend_from_slice(&n.to_be_bytes());
        }
    }
    fn float(&mut self, x: f64) {
        self.0.push(0xcb);
        self.0.extend_from_slice(&x.to_bits().to_be_bytes());
    }
    fn nil(&mut self) {
        self.0.push(0xc0);
    }
    /// An array header that claims `n` elements, whatever follows.
    fn claim(&mut self, n: u32) {
        self.0.push(0xdd);
        self.0.extend_from_slice(&n.to_be_bytes());
    }
}

fn msgpack_output(rng: &mut Rng, p: &mut Pack, known: &[String], room: usize) {
    let fields = 1 + rng.below(OUTPUT_FIELDS.len() as u64) as usize;
    p.array(fields);
    for field in &OUTPUT_FIELDS[..fields] {
        match *field {
            "request_id" => match rng.below(20) {
                0 => p.uint(5),
                _ => p.str(&id(rng, known)),
            },
            "new_token_ids" => match rng.below(10) {
                0 => p.claim(rng.next_u64() as u32),
                _ => {
                    let n = count(rng, 2, 4096).min(room);
                    p.array(n);
                    for _ in 0..n {
                        p.uint(rng.below(200));
                    }
                }
            },
            "finish_reason" => match rng.below(4) {
                0 => p.uint(rng.below(9)),
                _ => p.nil(),
            },
            "events" => match rng.below(6) {
                0 => p.nil(),
                1 => p.claim(rng.next_u64() as u32),
                _ => {
                    let n = count(rng, 2, 512).min(room);
                    p.array(n);
                    for _ in 0..n {
                        p.map(2);
                        p.str("type");
                        p.uint(rng.below(5));
                        p.str("timestamp");
                        p.float([1.0, -1.0, f64::NAN][rng.below(3) as usize]);
                    }
                }
            },
            _ => {
                // Fields the decoder skips: nil, or deep nesting.
                if rng.chance(5) {
                    let depth = count(rng, 8, 10_000).min(room);
                    for _ in 0..depth {
                        p.array(1);
                    }
                }
                p.nil();
            }
        }
    }
}

fn msgpack_scheduler_stats(rng: &mut Rng, p: &mut Pack, room: usize) {
    p.map(4);
    p.str("num_running_reqs");
    p.uint(rng.next_u64());
    p.str("kv_cache_eviction_events");
    match rng.below(4) {
        0 => p.claim(rng.next_u64() as u32),
        _ => {
            let n = count(rng, 4, 100_000).min(room);
            p.array(n);
            for _ in 0..n {
                if rng.chance(10) {
                    p.map(1);
                    p.str("reuse_gaps_seconds");
                    let gaps = count(rng, 2, 4096).min(room / n.max(1));
                    p.array(gaps);
                    for _ in 0..gaps {
                        p.uint(1);
                    }
                } else {
                    p.map(0);
                }
            }
        }
    }
    p.str("running_lora_adapters");
    let n = count(rng, 2, 50_000).min(room);
    p.map(n);
    for i in 0..n {
        p.str(if rng.chance(50) { "" } else { "adapter" });
        p.uint(i as u64 & 0x7f);
    }
    p.str("connector_prefix_cache_stats");
    p.map(1);
    p.str("hits_by_source");
    p.map(3);
    for source in ["host", "host", "disk"] {
        p.str(source);
        p.uint(u64::MAX - rng.below(2));
    }
}

fn frame(rng: &mut Rng, known: &[String], room: usize) -> Vec<u8> {
    let mut p = Pack::default();
    let fields = 2 + rng.below(OUTPUTS_FIELDS.len() as u64 - 1) as usize;
    p.array(fields);
    for field in &OUTPUTS_FIELDS[..fields] {
        match *field {
            "engine_index" => p.uint(rng.below(2)),
            "outputs" => match rng.below(8) {
                0 => p.claim(rng.next_u64() as u32),
                1 => {
                    // Item 1 of the issue in small: many three-byte outputs.
                    let n = count(rng, 1000, 200_000).min(room);
                    p.array(n);
                    for _ in 0..n {
                        p.array(1);
                        p.str("x");
                    }
                }
                _ => {
                    let n = count(rng, 8, 16_384).min(room);
                    p.array(n);
                    for _ in 0..n {
                        msgpack_output(rng, &mut p, known, room / n.max(1));
                    }
                }
            },
            "scheduler_stats" => match rng.below(3) {
                0 => p.nil(),
                _ => msgpack_scheduler_stats(rng, &mut p, room),
            },
            "timestamp" => p.float(2.0),
            _ => p.nil(),
        }
    }
    if rng.chance(5) {
        let cut = rng.below(p.0.len() as u64) as usize;
        p.0.truncate(cut);
    }
    p.0
}

fn frames(rng: &mut Rng, known: &[String], budget: usize) -> pb::EngineCoreFrames {
    let n = count(rng, 3, 64).clamp(1, budget.max(1));
    let frames: Vec<Vec<u8>> = (0..n).map(|_| frame(rng, known, budget / n)).collect();
    let mut lengths: Vec<u32> = frames.iter().map(|f| f.len() as u32).collect();
    if rng.chance(3) {
        lengths[0] = lengths[0].wrapping_add(1);
    }
    pb::EngineCoreFrames {
        model_name: "m".into(),
        engine_core_outputs_fields: OUTPUTS_FIELDS.map(String::from).to_vec(),
        engine_core_output_fields: OUTPUT_FIELDS.map(String::from).to_vec(),
        frames: frames.concat(),
        frame_lengths: lengths,
        sent_at: vec![2.0; n],
        kv_consumer: rng.chance(50),
        lora_enabled: rng.chance(50),
    }
}

/// A protobuf message, possibly with its bytes tampered with.
fn message(rng: &mut Rng, known: &mut Vec<String>) -> Vec<u8> {
    let budget = [16, 1024, 20_000, 400_000][rng.below(4) as usize];
    let mut bytes = record(rng, known, budget, 0).encode_to_vec();
    match rng.below(20) {
        0 if !bytes.is_empty() => {
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        1 => {
            // Empty elements that decode into whole structs.
            let n = count(rng, 1000, 2_000_000).min(budget * 4);
            bytes = pb::Record {
                record: Some(pb::record::Record::Batch(pb::RecordBatch {
                    records: vec![pb::Record::default(); n.min(1024)],
                })),
            }
            .encode_to_vec();
            for _ in 0..n / 1024 {
                bytes.extend_from_slice(&[0x52, 0x02, 0x0a, 0x00]);
            }
        }
        _ => {}
    }
    bytes
}

// ---- JSONL lines ---------------------------------------------------------

fn jsonl_line(rng: &mut Rng) -> Vec<u8> {
    let room = [16, 1024, 20_000, 400_000][rng.below(4) as usize];
    let mut line = String::new();
    match rng.below(3) {
        0 => {
            line.push_str(
                r#"{"type":"outputs","engine":0,"timestamp":1,"received_at":1,"outputs":["#,
            );
            let n = count(rng, 100, 100_000).min(room);
            for i in 0..n {
                if i > 0 {
                    line.push(',');
                }
                match rng.below(3) {
                    0 => line.push_str(r#"{"request_id":"x","new_token_ids":[]}"#),
                    1 => {
                        line.push_str(r#"{"request_id":"y","new_token_ids":["#);
                        let tokens = count(rng, 10, 100_000).min(room / n.max(1));
                        line.push_str(&vec!["1"; tokens].join(","));
                        line.push_str("]}");
                    }
                    _ => {
                        line.push_str(r#"{"request_id":"z","new_token_ids":[1],"events":["#);
                        let events = count(rng, 10, 10_000).min(room / n.max(1));
                        line.push_str(
                            &vec![r#"{"type":"queued","timestamp":1}"#; events].join(","),
                        );
                        line.push_str("]}");
                    }
                }
            }
            line.push_str("]}");
        }
        1 => {
            line.push_str(
                r#"{"type":"iteration_stats","model_name":"m","engine":0,"n_params_iter":["#,
            );
            line.push_str(&vec!["1"; count(rng, 100, 200_000).min(room)].join(","));
            line.push_str(r#"],"finished_requests":["#);
            let n = count(rng, 10, 10_000).min(room);
            line.push_str(&vec![r#"{"request_id":"r","finish_reason":"stop"}"#; n].join(","));
            line.push_str("]}");
        }
        _ => {
            line.push_str(r#"{"type":"scheduler_stats","model_name":"m","engine":0,"kv_cache_eviction_events":["#);
            line.push_str(&vec!["{}"; count(rng, 100, 300_000).min(room)].join(","));
            line.push_str("]}");
        }
    }
    line.push('\n');
    line.into_bytes()
}

// ---- the run ---------------------------------------------------------------

fn env_or(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        Err(_) => default,
    }
}

#[derive(Default)]
struct Worst {
    cases: u64,
    bytes: u64,
    /// The largest growth as a share of the bound, and its case.
    ratio: f64,
    case: u64,
}

#[test]
fn no_input_raises_the_heap_past_its_bound() {
    let seed = env_or("DECODE_BUDGET_SEED", 49);
    let cases = env_or("DECODE_BUDGET_CASES", 3000);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut by_kind: BTreeMap<&str, Worst> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut service = None;
    let mut known = Vec::new();
    for case in 0..cases {
        // A fresh service now and then: the requests a case starts are kept
        // (bounded by --max-inflight-requests, not by this budget).
        if case % 200 == 0 {
            service = Some(IngestService::new(
                Tracker::new(Instruments::builder().build()),
                IngestLimits::default(),
            ));
            known.clear();
        }
        let service = service.as_ref().expect("made above");
        let (kind, bytes) = if rng.chance(10) {
            ("jsonl", jsonl_line(&mut rng))
        } else {
            let bytes = message(&mut rng, &mut known);
            known.truncate(4096);
            let kind = match pb::Record::decode(bytes.as_slice())
                .ok()
                .and_then(|r| r.record)
            {
                Some(pb::record::Record::Frames(_)) => "frames",
                Some(pb::record::Record::Batch(_)) => "batch",
                Some(pb::record::Record::Outputs(_)) => "outputs",
                Some(pb::record::Record::IterationStats(_)) => "iteration_stats",
                Some(pb::record::Record::SchedulerStats(_)) => "scheduler_stats",
                Some(_) => "other records",
                None => "undecodable",
            };
            (kind, bytes)
        };
        let mut tracker = (kind == "jsonl").then(|| Tracker::new(Instruments::builder().build()));
        let (growth, ()) = peak_growth(|| {
            if let Some(tracker) = &mut tracker {
                let mut diagnostics = Vec::new();
                jsonl::replay(
                    bytes.as_slice(),
                    "case.jsonl",
                    tracker,
                    &mut diagnostics,
                    jsonl::DEFAULT_MAX_LINE_BYTES,
                )
                .expect("replay from memory");
            } else {
                let incoming = decode_message(&bytes, &IngestLimits::default().decode);
                let (mut position, mut summary) = (0, Summary::default());
                runtime.block_on(service.apply_incoming(incoming, "", &mut position, &mut summary));
            }
        });
        let bound = budget::bound(bytes.len());
        let worst = by_kind.entry(kind).or_default();
        worst.cases += 1;
        worst.bytes += bytes.len() as u64;
        let ratio = growth as f64 / bound as f64;
        if ratio > worst.ratio {
            worst.ratio = ratio;
            worst.case = case;
        }
        if growth > bound {
            failures.push(format!(
                "case {case} ({kind}, {} bytes): the heap grew by {growth} bytes, past {bound}",
                bytes.len()
            ));
        }
    }
    eprintln!("seed {seed}, {cases} cases:");
    for (kind, worst) in &by_kind {
        eprintln!(
            "  {kind}: {} cases, {} bytes in all; the worst used {:.1} % of its bound (case {})",
            worst.cases,
            worst.bytes,
            100.0 * worst.ratio,
            worst.case
        );
    }
    assert_eq!(failures, Vec::<String>::new());
    for kind in ["frames", "batch", "outputs", "jsonl"] {
        assert!(
            by_kind.get(kind).is_some_and(|w| w.cases > 0),
            "no {kind} case was generated"
        );
    }
}

/// Item 1's message: one `EngineCoreFrames` record holding one frame of
/// 5,000,000 three-byte outputs (`[["x"], …]`), 15 MB.
fn five_million_outputs() -> Vec<u8> {
    let mut p = Pack::default();
    p.array(2);
    p.uint(0);
    p.array(5_000_000);
    for _ in 0..5_000_000 {
        p.array(1);
        p.str("x");
    }
    pb::Record {
        record: Some(pb::record::Record::Frames(pb::EngineCoreFrames {
            model_name: "m".into(),
            engine_core_outputs_fields: OUTPUTS_FIELDS.map(String::from).to_vec(),
            engine_core_output_fields: OUTPUT_FIELDS.map(String::from).to_vec(),
            frame_lengths: vec![p.0.len() as u32],
            frames: p.0,
            sent_at: vec![2.0],
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

/// A request and its output of two tokens: what follows the hostile
/// message, and must be applied.
fn request_and_output() -> pb::Record {
    pb::Record {
        record: Some(pb::record::Record::Batch(pb::RecordBatch {
            records: vec![
                pb::Record {
                    record: Some(pb::record::Record::Request(pb::RequestStarted {
                        request_id: "r".into(),
                        model_name: "m".into(),
                        arrival_time: 1.0,
                        ..Default::default()
                    })),
                },
                pb::Record {
                    record: Some(pb::record::Record::Outputs(pb::OutputBatch {
                        timestamp: 2.0,
                        received_at: Some(2.0),
                        outputs: vec![pb::EngineCoreOutput {
                            request_id: "r".into(),
                            new_token_ids: vec![1, 2],
                            ..Default::default()
                        }],
                        ..Default::default()
                    })),
                },
            ],
        })),
    }
}

/// The message the bound was written against, which decoded into 1.1 GB
/// before: refused within its bound, counted and named, and the next
/// message applied.
#[test]
fn five_million_three_byte_outputs_stay_within_the_bound() {
    let message = five_million_outputs();
    assert!(message.len() > 15_000_000, "{} bytes", message.len());
    let service = IngestService::new(
        Tracker::new(Instruments::builder().build()),
        IngestLimits::default(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let (mut position, mut summary) = (0, Summary::default());
    let (growth, ()) = peak_growth(|| {
        let incoming = decode_message(&message, &IngestLimits::default().decode);
        runtime.block_on(service.apply_incoming(incoming, "", &mut position, &mut summary));
    });
    assert!(
        growth <= budget::bound(message.len()),
        "the heap grew by {growth} bytes, past {}",
        budget::bound(message.len())
    );
    // The next message, a request and its output, is applied.
    let next = request_and_output().encode_to_vec();
    let incoming = decode_message(&next, &IngestLimits::default().decode);
    runtime.block_on(service.apply_incoming(incoming, "", &mut position, &mut summary));
    let summary = summary.finish();
    assert_eq!(
        (
            summary.records_applied,
            summary.outputs_applied,
            summary.records_rejected
        ),
        (3, 1, 0)
    );
    assert_eq!(
        summary.first_rejections,
        vec![
            "record 1, frame 1 (15000007 bytes): at byte 7: 5000000 outputs in one frame, more than 16384 (--max-outputs-per-batch)"
                .to_owned()
        ]
    );
}

/// Item 1's message against a running `serve`, over the ingest socket and
/// over gRPC: the process's peak resident memory (`VmHWM`) grows by at most
/// 64 MB, `/metrics` answers while the message is applied, and the next
/// message is applied.
mod live {
    use super::*;
    use common::serve::Server;
    use std::io::Write;

    /// The peak resident memory of process `pid`, bytes.
    fn peak_rss(pid: u32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status");
        kib * 1024
    }

    const GENERATED: &str = r#"vllm:generation_tokens_total{model_name="m",engine="0"}"#;
    const MAX_GROWTH: u64 = 64 << 20;

    /// Warms `server` up (a scrape, one small message sent by `send`), then
    /// sends item 1's message and the next while scraping `/metrics`; the
    /// peak RSS growth.
    fn measure(server: &Server, send: impl FnOnce(Vec<Vec<u8>>) + Send) -> u64 {
        let pid = server.process.0.id();
        let before = peak_rss(pid);
        let scrapes = std::sync::atomic::AtomicU32::new(0);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    assert!(
                        common::http::http_get(server.metrics, "/metrics").is_some(),
                        "/metrics answers while the message is applied"
                    );
                    scrapes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            });
            // The same request again: its two more tokens make 4.
            send(vec![
                five_million_outputs(),
                request_and_output().encode_to_vec(),
            ]);
            common::process::wait_for(30, "the next message to be applied", || {
                (server.sample(GENERATED) == Some(4.0)).then_some(())
            });
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert!(scrapes.into_inner() > 0);
        peak_rss(pid).saturating_sub(before)
    }

    #[test]
    fn over_the_ingest_socket() {
        let dir = common::paths::tempdir("budget-socket");
        let path = dir.join("ingest.sock");
        let server = Server::start(&["--ingest-socket", path.to_str().expect("utf-8")]);
        // Warm-up: the label set's handles and the first scrape.
        common::serve::send_over_socket(&path, &[request_and_output()]);
        common::process::wait_for(10, "the warm-up", || {
            (server.sample(GENERATED) == Some(2.0)).then_some(())
        });
        let growth = measure(&server, |messages| {
            let mut socket =
                std::os::unix::net::UnixStream::connect(&path).expect("the ingest socket");
            for body in messages {
                socket
                    .write_all(&(body.len() as u32).to_le_bytes())
                    .and_then(|()| socket.write_all(&body))
                    .expect("the socket takes the message");
            }
        });
        eprintln!("ingest socket: peak RSS grew by {growth} bytes");
        assert!(growth <= MAX_GROWTH, "peak RSS grew by {growth} bytes");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn over_grpc() {
        let server = Server::start(&[]);
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let target = server.target();
        let send = |messages: Vec<Vec<u8>>| {
            let records: Vec<pb::Record> = messages
                .iter()
                .map(|m| pb::Record::decode(m.as_slice()).expect("well-formed"))
                .collect();
            runtime.block_on(async {
                let mut client = pb::ingest_client::IngestClient::connect(target.clone())
                    .await
                    .expect("connects")
                    .max_encoding_message_size(32 << 20);
                client
                    .stream(tokio_stream::iter(records))
                    .await
                    .expect("the stream is answered");
            });
        };
        send(vec![request_and_output().encode_to_vec()]);
        common::process::wait_for(10, "the warm-up", || {
            (server.sample(GENERATED) == Some(2.0)).then_some(())
        });
        let growth = measure(&server, send);
        eprintln!("gRPC: peak RSS grew by {growth} bytes");
        assert!(growth <= MAX_GROWTH, "peak RSS grew by {growth} bytes");
    }
}
