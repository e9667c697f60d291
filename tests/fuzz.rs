//! Property tests over random inputs (seeded, so every failure reproduces):
//!
//! - JSONL: random valid records, a share of them mutated (cut, a byte
//!   flipped, a value of the wrong type or out of bounds, garbage). The
//!   replay must not panic, must report every invalid line exactly once with
//!   its number, and the valid lines must be unaffected: replaying the trace
//!   without the lines refused as a whole gives the same vLLM samples.
//! - gRPC: random wire records and random bytes decoded as wire records go
//!   through the converter and the tracker without a panic; whatever the
//!   tracker refuses is one located invalid-record rejection.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod rng;
}

use std::collections::{BTreeMap, BTreeSet};

use common::rng::Rng;

use prost::Message;
use vllm_otel_metrics::catalog::RejectReason;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::{
    Abort, EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, FinishedRequest,
    IterationStats, OutputBatch, PluginDrops, PrefillStats, PromptTokenStats, Record, RequestStart,
    SchedulerStats,
};
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::sources::ingest::proto::{pb, record_from_proto, record_to_proto};
use vllm_otel_metrics::tracker::{Rejection, Tracker};

/// A random record over a few ids, models and engines, with times that
/// mostly move forward.
fn random_record(rng: &mut Rng, clock: &mut f64) -> Record {
    *clock += rng.below(100) as f64 / 100.0;
    let id = format!("r{}", rng.below(12));
    let model = rng.pick(&["m0", "m1", "qwen/Qwen2.5-7B"]).to_string();
    let engine = rng.below(3) as u32;
    match rng.below(12) {
        0..=2 => Record::Request(RequestStart {
            request_id: id,
            model_name: model,
            engine,
            arrival_time: 1000.0 + *clock,
            prompt_len: rng.below(4096) as u32,
            max_tokens: rng.chance(50).then(|| rng.below(1024) as u32),
            n: 1 + rng.below(3) as u32,
            traceparent: None,
            operation_name: None,
            stop_strings: false,
            lora_name: None,
            priority: None,
        }),
        3..=7 => Record::Outputs(OutputBatch {
            engine,
            timestamp: *clock,
            received_at: 1000.0 + *clock,
            outputs: (0..1 + rng.below(3))
                .map(|_| EngineCoreOutput {
                    request_id: format!("r{}", rng.below(12)),
                    new_token_ids: (0..rng.below(3)).map(|t| t as u32).collect(),
                    events: (0..rng.below(2))
                        .map(|_| EngineCoreEvent {
                            kind: *rng.pick(&[
                                EventType::Queued,
                                EventType::Scheduled,
                                EventType::Preempted,
                            ]),
                            timestamp: (*clock - 0.01).max(0.0),
                            reason: None,
                        })
                        .collect(),
                    prefill_stats: rng.chance(30).then(|| PrefillStats {
                        num_prompt_tokens: rng.below(100) as u32,
                        num_computed_tokens: rng.below(100) as u32,
                        num_cached_tokens: rng.below(100) as u32,
                        num_local_cached_tokens: rng.below(100) as u32,
                        num_external_cached_tokens: rng.below(100) as u32,
                    }),
                    finish_reason: rng.chance(20).then(|| *rng.pick(&FinishReason::ALL)),
                })
                .collect(),
        }),
        8 => Record::Abort(Abort {
            request_id: id,
            received_at: 1000.0 + *clock,
        }),
        9 => {
            let (computed, hit, external) = (rng.below(500), rng.below(100), rng.below(20));
            let seconds = |rng: &mut Rng| rng.below(3000) as f64 / 1000.0;
            Record::IterationStats(Box::new(IterationStats {
                model_name: model,
                engine,
                received_at: Some(1000.0 + *clock),
                num_generation_tokens: rng.below(64),
                prompt_token_stats: PromptTokenStats {
                    computed,
                    local_cache_hit: hit,
                    external_kv_transfer: external,
                    cached_tokens: hit + external,
                    total: computed + hit + external,
                },
                num_preempted_reqs: rng.below(3),
                max_num_generation_tokens_iter: (0..rng.below(3))
                    .map(|_| rng.below(2048))
                    .collect(),
                n_params_iter: (0..rng.below(3)).map(|_| 1 + rng.below(4)).collect(),
                time_to_first_tokens_iter: (0..rng.below(3)).map(|_| seconds(rng)).collect(),
                inter_token_latencies_iter: (0..rng.below(8)).map(|_| seconds(rng)).collect(),
                finished_requests: (0..rng.below(3))
                    .map(|_| FinishedRequest {
                        request_id: format!("r{}", rng.below(12)),
                        finish_reason: *rng.pick(&FinishReason::ALL),
                        e2e_latency: seconds(rng),
                        queued_time: seconds(rng),
                        prefill_time: seconds(rng),
                        inference_time: seconds(rng),
                        decode_time: seconds(rng),
                        mean_time_per_output_token: seconds(rng),
                        num_prompt_tokens: rng.below(4096) as u32,
                        num_generation_tokens: rng.below(1024) as u32,
                        num_preemptions: rng.below(3) as u32,
                        num_cached_tokens: rng.below(4096) as u32,
                        max_tokens_param: rng.chance(50).then(|| rng.below(1024) as u32),
                    })
                    .collect(),
            }))
        }
        10 => Record::PluginDrops(PluginDrops {
            dropped: rng.below(10),
        }),
        _ => Record::SchedulerStats(Box::new(SchedulerStats {
            model_name: model,
            engine,
            num_running_reqs: rng.below(10),
            num_waiting_reqs: rng.below(10),
            kv_cache_usage: rng.below(100) as f64 / 100.0,
            prefix_cache_queries: rng.below(1000),
            prefix_cache_hits: rng.below(100),
            ..SchedulerStats::default()
        })),
    }
}

/// One mutation of a valid JSON line.
fn mutate(rng: &mut Rng, line: &str) -> String {
    let mut bytes = line.as_bytes().to_vec();
    match rng.below(7) {
        0 => bytes.truncate(rng.below(bytes.len() as u64) as usize),
        1 => {
            let at = rng.below(bytes.len() as u64) as usize;
            // Any byte but a line break, which would make two lines of one.
            bytes[at] = match rng.below(128) as u8 {
                b'\n' => b'?',
                byte => byte,
            };
        }
        2 => return line.replacen("\"engine\":", "\"engine\":-", 1),
        3 => return line.replacen("\"timestamp\":", "\"timestamp\":\"late\",\"x\":", 1),
        4 => {
            return line.replacen(
                "\"model_name\":\"",
                &format!("\"model_name\":\"{}", "x".repeat(300)),
                1,
            )
        }
        5 => return line.replacen("\"received_at\":", "\"received_at\":-", 1),
        _ => bytes = b"\x00\xff not json {".to_vec(),
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Replays `lines`; returns the diagnostics and the vLLM samples.
fn replay(lines: &[String]) -> (jsonl::ReplayReport, String, BTreeMap<String, String>) {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
    let input = lines.join("\n") + "\n";
    let mut diagnostics = Vec::new();
    let report = jsonl::replay(
        input.as_bytes(),
        "fuzz",
        &mut tracker,
        &mut diagnostics,
        jsonl::DEFAULT_MAX_LINE_BYTES,
    )
    .unwrap();
    let samples = bridge
        .encode(Format::Text)
        .lines()
        .filter(|l| l.starts_with("vllm:"))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    (report, String::from_utf8(diagnostics).unwrap(), samples)
}

/// Messages of a line refused as a whole (a batch line may instead have
/// some outputs refused and the rest applied).
fn refused_whole(message: &str) -> bool {
    !message.starts_with("invalid output record:")
}

#[test]
fn jsonl_mutations_are_reported_once_each_and_leave_valid_lines_alone() {
    for seed in 1..=6u64 {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let mut clock = 0.0;
        let lines: Vec<String> = (0..1500)
            .map(|_| {
                let line = serde_json::to_string(&random_record(&mut rng, &mut clock)).unwrap();
                if rng.chance(8) {
                    mutate(&mut rng, &line)
                } else {
                    line
                }
            })
            .collect();
        let (report, diagnostics, samples) = replay(&lines);
        // Every located problem names a line in range; a line is invalid
        // once however many of its outputs were refused.
        let mut invalid_lines: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for line in diagnostics.lines() {
            let Some(rest) = line.strip_prefix("fuzz:") else {
                continue;
            };
            let Some((number, message)) = rest.split_once(": ") else {
                continue;
            };
            let Ok(number) = number.parse::<usize>() else {
                continue;
            };
            assert!((1..=lines.len()).contains(&number), "{line}");
            if !message.starts_with("warning: ") {
                invalid_lines
                    .entry(number)
                    .or_default()
                    .push(message.to_owned());
            }
        }
        assert_eq!(
            report.invalid as usize,
            invalid_lines.len(),
            "seed {seed}: {diagnostics}"
        );
        assert_eq!(report.lines as usize, lines.len());
        assert!(
            report.invalid > 0,
            "seed {seed}: the mutations produced invalid lines"
        );
        // Without the lines refused as a whole, the same vLLM samples.
        let whole: BTreeSet<usize> = invalid_lines
            .iter()
            .filter(|(_, messages)| messages.iter().all(|m| refused_whole(m)))
            .map(|(n, _)| *n)
            .collect();
        let kept: Vec<String> = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !whole.contains(&(i + 1)))
            .map(|(_, l)| l.clone())
            .collect();
        let (_, _, clean_samples) = replay(&kept);
        assert!(
            samples.len() > 500,
            "seed {seed}: {} samples",
            samples.len()
        );
        assert_eq!(samples, clean_samples, "seed {seed}");
        // And the comparison can fail: dropping an applied request start
        // changes the samples.
        let sensitive = (1..=lines.len())
            .filter(|n| {
                !invalid_lines.contains_key(n) && lines[n - 1].contains("\"type\":\"request\"")
            })
            .take(20)
            .any(|n| {
                let fewer: Vec<String> = kept
                    .iter()
                    .filter(|l| **l != lines[n - 1])
                    .cloned()
                    .collect();
                replay(&fewer).2 != samples
            });
        assert!(sensitive, "seed {seed}: no valid line mattered");
    }
}

#[test]
fn random_wire_records_and_bytes_never_panic_the_converter_or_tracker() {
    let mut rng = Rng(0x51ed_270b_3c6d_0aa1);
    let (_bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
    let mut clock = 0.0;
    let (mut converted, mut refused) = (0, 0);
    for i in 0..4000 {
        let mut wire = record_to_proto(&random_record(&mut rng, &mut clock));
        // Field-level damage: out-of-range numbers, long strings, unknown enums.
        if let Some(pb::record::Record::Outputs(batch)) = &mut wire.record {
            if rng.chance(10) {
                batch.timestamp = *rng.pick(&[f64::NAN, f64::INFINITY, -1.0, 1e300]);
            }
            if let Some(output) = batch.outputs.first_mut() {
                if rng.chance(5) {
                    output.request_id = "i".repeat(600);
                }
                if rng.chance(5) {
                    output.finish_reason = 99;
                }
            }
        }
        if let Some(pb::record::Record::IterationStats(stats)) = &mut wire.record {
            if rng.chance(10) {
                stats
                    .time_to_first_tokens_iter
                    .push(*rng.pick(&[f64::NAN, -1.0]));
            }
            if let Some(finished) = stats.finished_requests.first_mut() {
                if rng.chance(10) {
                    finished.finish_reason = *rng.pick(&[0, 99]);
                }
            }
        }
        let mut bytes = wire.encode_to_vec();
        if rng.chance(20) && !bytes.is_empty() {
            let at = rng.below(bytes.len() as u64) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        let Ok(decoded) = pb::Record::decode(bytes.as_slice()) else {
            continue;
        };
        let Ok(record) = record_from_proto(decoded, 1000.0 + i as f64) else {
            continue;
        };
        converted += 1;
        let rejections = tracker.apply(&record);
        if Rejection::refuse_whole_record(&rejections) {
            refused += 1;
            assert_eq!(rejections[0].reason, RejectReason::InvalidRecord);
            assert!(!rejections[0].detail.is_empty());
            assert!(rejections[0].to_string().len() < 400, "{}", rejections[0]);
        }
    }
    assert!(
        converted > 3000 && refused > 50,
        "{converted} converted, {refused} refused"
    );
}
