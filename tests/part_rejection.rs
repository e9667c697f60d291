//! One bad part of a record is rejected alone: an output of an `outputs`
//! record (a request id over the limit, an event time that is not a time, an
//! event type that does not exist) or a finished request of an
//! `iteration_stats` record (an id over the limit, a duration that is not
//! finite). The other requests of the engine step keep their samples, exact:
//! every vLLM sample equals that of the same input without the bad part, on
//! JSONL replay and on the wire path the transports share.

use std::collections::BTreeMap;

use prost::Message;
use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::sources::ingest::jsonl;
use vllm_otel_metrics::sources::ingest::proto::pb;
use vllm_otel_metrics::sources::ingest::service::{
    decode_message, IngestLimits, IngestService, Summary,
};
use vllm_otel_metrics::tracker::Tracker;

/// The vLLM samples of a bridge (the project's own counters left out: they
/// count the rejections).
fn vllm_samples(bridge: &PrometheusBridge) -> BTreeMap<String, String> {
    bridge
        .encode(Format::Text)
        .lines()
        .filter(|l| l.starts_with("vllm:"))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Replays `trace`: its report, diagnostics and vLLM samples.
fn replay(trace: &str) -> (jsonl::ReplayReport, String, BTreeMap<String, String>) {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
    let mut diagnostics = Vec::new();
    let report = jsonl::replay(
        trace.as_bytes(),
        "t.jsonl",
        &mut tracker,
        &mut diagnostics,
        jsonl::DEFAULT_MAX_LINE_BYTES,
    )
    .expect("replay from memory");
    (
        report,
        String::from_utf8(diagnostics).expect("utf-8"),
        vllm_samples(&bridge),
    )
}

const STARTS: &str = r#"{"type":"request","request_id":"r1","model_name":"m","engine":0,"arrival_time":1.0,"prompt_len":4}
{"type":"request","request_id":"r2","model_name":"m","engine":0,"arrival_time":1.0,"prompt_len":4}
"#;

/// Two requests' step: r1 two tokens, r2 three and finished; `bad` in
/// between.
fn step(bad: &str) -> String {
    format!(
        r#"{{"type":"outputs","engine":0,"timestamp":2.0,"received_at":2.0,"outputs":[{{"request_id":"r1","new_token_ids":[1,2],"events":[{{"type":"queued","timestamp":1.0}},{{"type":"scheduled","timestamp":1.5}}]}},{bad}{{"request_id":"r2","new_token_ids":[1,2,3],"finish_reason":"stop","events":[{{"type":"queued","timestamp":1.0}},{{"type":"scheduled","timestamp":1.5}}]}}]}}
"#
    )
}

#[test]
fn a_bad_output_is_rejected_alone_on_replay() {
    let (clean_report, clean_diagnostics, clean) = replay(&(STARTS.to_owned() + &step("")));
    assert_eq!((clean_report.invalid, clean_diagnostics.as_str()), (0, ""));
    assert_eq!(
        clean.get(r#"vllm:generation_tokens_total{model_name="m",engine="0"}"#),
        Some(&"5".to_owned())
    );
    let long = "x".repeat(600);
    for (bad, why) in [
        (
            format!(r#"{{"request_id":"{long}","new_token_ids":[9]}},"#),
            "request_id is 600 bytes, more than the limit of 512",
        ),
        (
            r#"{"request_id":"r3","new_token_ids":[9],"events":[{"type":"queued","timestamp":-1.0}]},"#
                .to_owned(),
            "event timestamp is negative (-1)",
        ),
    ] {
        let (report, diagnostics, samples) = replay(&(STARTS.to_owned() + &step(&bad)));
        assert_eq!(samples, clean, "{why}");
        // The line is reported, with the output's request and what is wrong.
        assert_eq!(report.invalid, 1, "{diagnostics}");
        assert!(
            diagnostics.starts_with("t.jsonl:3: invalid output record: ")
                && diagnostics.contains(why),
            "{diagnostics}"
        );
    }
}

#[test]
fn a_bad_finished_request_is_rejected_alone_on_replay() {
    let stats = |bad: &str| {
        format!(
            r#"{{"type":"iteration_stats","model_name":"m","engine":0,"received_at":5.0,"num_generation_tokens":3,"time_to_first_tokens_iter":[0.25],"finished_requests":[{bad}{{"request_id":"ok","finish_reason":"stop","e2e_latency":1.5,"num_prompt_tokens":4,"num_generation_tokens":3}}]}}
"#
        )
    };
    let (_, clean_diagnostics, clean) = replay(&stats(""));
    assert_eq!(clean_diagnostics, "");
    // JSON has no NaN: the bad finished request here is an over-long id.
    let long = "y".repeat(513);
    let bad = format!(r#"{{"request_id":"{long}","finish_reason":"stop","e2e_latency":1.0}},"#);
    let (report, diagnostics, samples) = replay(&stats(&bad));
    assert_eq!(samples, clean);
    assert_eq!(report.invalid, 1, "{diagnostics}");
    assert!(
        diagnostics.starts_with(&format!(
            "t.jsonl:1: invalid finished_request record: request '{}… (513 bytes)': request_id is 513 bytes",
            "y".repeat(64)
        )),
        "{diagnostics}"
    );
}

/// Applies `messages` through the entry point both transports use; the
/// stream's summary and the vLLM samples.
fn ingest(messages: &[pb::Record]) -> (pb::IngestSummary, BTreeMap<String, String>) {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let service = IngestService::new(
        Tracker::new(Instruments::builder().with_reader(reader).build()),
        IngestLimits::default(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let (mut position, mut summary) = (0, Summary::default());
    for message in messages {
        let incoming = decode_message(&message.encode_to_vec(), &IngestLimits::default().decode);
        runtime.block_on(service.apply_incoming(incoming, "", &mut position, &mut summary));
    }
    (summary.finish(), vllm_samples(&bridge))
}

fn wire_output(id: &str, tokens: usize, finished: bool) -> pb::EngineCoreOutput {
    pb::EngineCoreOutput {
        request_id: id.into(),
        new_token_ids: vec![1; tokens],
        events: vec![
            pb::EngineCoreEvent {
                r#type: pb::EventType::Queued as i32,
                timestamp: 1.0,
                reason: None,
            },
            pb::EngineCoreEvent {
                r#type: pb::EventType::Scheduled as i32,
                timestamp: 1.5,
                reason: None,
            },
        ],
        finish_reason: if finished {
            pb::FinishReason::Stop as i32
        } else {
            0
        },
        ..Default::default()
    }
}

fn wire_step(bad: Vec<pb::EngineCoreOutput>) -> Vec<pb::Record> {
    let start = |id: &str| pb::Record {
        record: Some(pb::record::Record::Request(pb::RequestStarted {
            request_id: id.into(),
            model_name: "m".into(),
            arrival_time: 1.0,
            prompt_len: 4,
            ..Default::default()
        })),
    };
    let mut outputs = vec![wire_output("r1", 2, false)];
    outputs.extend(bad);
    outputs.push(wire_output("r2", 3, true));
    vec![
        start("r1"),
        start("r2"),
        pb::Record {
            record: Some(pb::record::Record::Outputs(pb::OutputBatch {
                timestamp: 2.0,
                received_at: Some(2.0),
                outputs,
                ..Default::default()
            })),
        },
    ]
}

#[test]
fn a_bad_output_is_rejected_alone_on_the_wire() {
    let (clean_summary, clean) = ingest(&wire_step(Vec::new()));
    assert_eq!(clean_summary.first_rejections, Vec::<String>::new());
    assert_eq!(
        clean.get(r#"vllm:generation_tokens_total{model_name="m",engine="0"}"#),
        Some(&"5".to_owned())
    );
    let mut unknown_event = wire_output("r4", 1, false);
    unknown_event.events[0].r#type = 9;
    let (summary, samples) = ingest(&wire_step(vec![
        wire_output(&"x".repeat(600), 1, false),
        unknown_event,
    ]));
    assert_eq!(samples, clean);
    // Every record applied; the two outputs counted and named.
    assert_eq!((summary.records_applied, summary.records_rejected), (3, 0));
    assert_eq!(summary.rejected_by_reason.get("invalid_record"), Some(&2));
    assert_eq!(summary.first_rejections.len(), 2);
    assert_eq!(
        summary.first_rejections[0],
        "record 3: request r4: unknown event type 9"
    );
    assert!(
        summary.first_rejections[1].starts_with(&format!(
            "record 3: invalid output record: request '{}… (600 bytes)': request_id is 600 bytes",
            "x".repeat(64)
        )),
        "{:?}",
        summary.first_rejections
    );
}

#[test]
fn a_bad_finished_request_is_rejected_alone_on_the_wire() {
    let stats = |bad: Vec<pb::FinishedRequest>, ttft: Vec<f64>| {
        let mut finished = bad;
        finished.push(pb::FinishedRequest {
            request_id: "ok".into(),
            finish_reason: pb::FinishReason::Stop as i32,
            e2e_latency: 1.5,
            num_prompt_tokens: 4,
            num_generation_tokens: 3,
            ..Default::default()
        });
        vec![pb::Record {
            record: Some(pb::record::Record::IterationStats(pb::IterationStats {
                model_name: "m".into(),
                received_at: Some(5.0),
                num_generation_tokens: 3,
                time_to_first_tokens_iter: ttft,
                finished_requests: finished,
                ..Default::default()
            })),
        }]
    };
    let (_, clean) = ingest(&stats(Vec::new(), vec![0.25]));
    let (summary, samples) = ingest(&stats(
        vec![
            pb::FinishedRequest {
                request_id: "nan".into(),
                finish_reason: pb::FinishReason::Stop as i32,
                decode_time: f64::NAN,
                ..Default::default()
            },
            pb::FinishedRequest {
                request_id: "no reason".into(),
                ..Default::default()
            },
        ],
        vec![0.25, f64::INFINITY],
    ));
    assert_eq!(samples, clean);
    assert_eq!((summary.records_applied, summary.records_rejected), (1, 0));
    assert_eq!(
        summary.first_rejections,
        vec![
            "record 1: finished_requests[1] (request 'no reason'): no finish reason (FINISH_REASON_UNSPECIFIED)".to_owned(),
            "record 1: invalid iteration_value record: time_to_first_tokens_iter[1] is not a finite number (inf)".to_owned(),
            "record 1: invalid finished_request record: request 'nan': decode_time is not a finite number (NaN)".to_owned(),
        ]
    );
}
