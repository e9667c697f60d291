//! The wire conversions: round trips, and the rules' errors.

use super::*;

#[test]
fn records_round_trip_through_the_wire_types() {
    let trace = include_str!("../../../../tests/data/lifecycle.jsonl");
    let mut converted = 0;
    for line in trace.lines() {
        let Ok(record) = serde_json::from_str::<Record>(line) else {
            continue;
        };
        if record.validate(&Default::default()).is_err() {
            continue;
        }
        assert_eq!(record_from_proto(record_to_proto(&record), 0.0), Ok(record));
        converted += 1;
    }
    assert!(converted > 20);
}

#[test]
fn plugin_records_round_trip_through_the_wire_types() {
    let lines = [
        r#"{"type":"iteration_stats","model_name":"m","engine":2,"received_at":1700000000.5,"num_generation_tokens":12,"prompt_token_stats":{"computed":100,"local_cache_hit":16,"external_kv_transfer":0,"cached_tokens":16,"total":116},"num_preempted_reqs":1,"max_num_generation_tokens_iter":[30],"n_params_iter":[1],"time_to_first_tokens_iter":[0.25],"inter_token_latencies_iter":[0.02,0.03],"finished_requests":[{"request_id":"r1","finish_reason":"stop","e2e_latency":1.5,"queued_time":0.1,"prefill_time":0.2,"inference_time":1.3,"decode_time":1.1,"mean_time_per_output_token":0.04,"num_prompt_tokens":116,"num_generation_tokens":30,"num_preemptions":1,"num_cached_tokens":16,"max_tokens_param":64},{"finish_reason":"abort"}]}"#,
        r#"{"type":"iteration_stats","model_name":"m","engine":0}"#,
        r#"{"type":"plugin_drops","dropped":5}"#,
        r#"{"type":"engine_config","model_name":"m","engine":0,"max_model_len":4096}"#,
    ];
    for line in lines {
        let record: Record = serde_json::from_str(line).unwrap();
        assert_eq!(
            record_from_proto(record_to_proto(&record), 0.0),
            Ok(record.clone()),
            "{line}"
        );
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(
            serde_json::from_str::<Record>(&json).unwrap(),
            record,
            "{json}"
        );
    }
    let unfinished = pb::Record {
        record: Some(pb::record::Record::IterationStats(pb::IterationStats {
            model_name: "m".into(),
            finished_requests: vec![
                pb::FinishedRequest {
                    request_id: "r0".into(),
                    finish_reason: pb::FinishReason::Stop as i32,
                    ..Default::default()
                },
                pb::FinishedRequest {
                    request_id: "r1".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        })),
    };
    let error = record_from_proto(unfinished, 0.0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "finished_requests[1] (request 'r1'): no finish reason (FINISH_REASON_UNSPECIFIED)"
    );
    let unknown = pb::Record {
        record: Some(pb::record::Record::IterationStats(pb::IterationStats {
            finished_requests: vec![pb::FinishedRequest {
                finish_reason: 42,
                ..Default::default()
            }],
            ..Default::default()
        })),
    };
    assert_eq!(
        record_from_proto(unknown, 0.0).unwrap_err().to_string(),
        "finished_requests[0] (request ''): unknown finish reason 42"
    );
}

#[test]
fn invalid_wire_records_are_named() {
    let empty = pb::Record { record: None };
    assert_eq!(
        record_from_proto(empty, 0.0).unwrap_err(),
        ConversionError::Empty
    );
    let bad_event = pb::Record {
        record: Some(pb::record::Record::Outputs(pb::OutputBatch {
            engine: 0,
            timestamp: 1.0,
            received_at: None,
            outputs: vec![pb::EngineCoreOutput {
                request_id: "r7".into(),
                events: vec![pb::EngineCoreEvent {
                    r#type: 9,
                    timestamp: 1.0,
                    reason: None,
                }],
                ..Default::default()
            }],
        })),
    };
    let error = record_from_proto(bad_event, 0.0).unwrap_err();
    assert_eq!(
        error,
        ConversionError::InRequest {
            request_id: "r7".into(),
            source: Box::new(ConversionError::UnknownEventType(9)),
        }
    );
    assert_eq!(error.to_string(), "request r7: unknown event type 9");
    let nan = pb::Record {
        record: Some(pb::record::Record::Abort(pb::Abort {
            request_id: "r".into(),
            received_at: Some(f64::NAN),
        })),
    };
    // Converted as it is; the tracker's check refuses it.
    assert!(record_from_proto(nan, 0.0)
        .unwrap()
        .validate(&Default::default())
        .unwrap_err()
        .0
        .contains("not a finite number"));
    let defaulted = pb::Record {
        record: Some(pb::record::Record::Abort(pb::Abort {
            request_id: "r".into(),
            received_at: None,
        })),
    };
    assert_eq!(
        record_from_proto(defaulted, 42.0),
        Ok(Record::Abort(Abort {
            request_id: "r".into(),
            received_at: 42.0
        }))
    );
}

#[test]
fn preemption_reasons_and_operation_names_cross_the_wire() {
    let line = r#"{"type":"request","request_id":"r","model_name":"m","engine":0,"arrival_time":1.0,"prompt_len":4,"operation_name":"chat"}"#;
    let record: Record = serde_json::from_str(line).unwrap();
    assert_eq!(record_from_proto(record_to_proto(&record), 0.0), Ok(record));
    let line = r#"{"type":"outputs","engine":0,"timestamp":2.0,"received_at":3.0,"outputs":[{"request_id":"r","new_token_ids":[1],"events":[{"type":"preempted","timestamp":1.5,"reason":"priority"},{"type":"preempted","timestamp":1.6}]}]}"#;
    let record: Record = serde_json::from_str(line).unwrap();
    assert_eq!(record_from_proto(record_to_proto(&record), 0.0), Ok(record));

    let event = |reason: &str| pb::Record {
        record: Some(pb::record::Record::Outputs(pb::OutputBatch {
            outputs: vec![pb::EngineCoreOutput {
                request_id: "r7".into(),
                events: vec![pb::EngineCoreEvent {
                    r#type: pb::EventType::Preempted as i32,
                    timestamp: 1.0,
                    reason: Some(reason.into()),
                }],
                ..Default::default()
            }],
            ..Default::default()
        })),
    };
    // Empty is no reason, as proto3 writes an unset string.
    let Ok(Record::Outputs(batch)) = record_from_proto(event(""), 0.0) else {
        panic!()
    };
    assert_eq!(batch.outputs[0].events[0].reason, None);
    assert_eq!(
        record_from_proto(event("kv_cache_full"), 0.0)
            .unwrap_err()
            .to_string(),
        "request r7: unknown preemption reason 'kv_cache_full' (expected kv_full, priority or prefix_cache_reset)"
    );
    let request = pb::Record {
        record: Some(pb::record::Record::Request(pb::RequestStarted {
            request_id: "r".into(),
            operation_name: Some("summarize".into()),
            ..Default::default()
        })),
    };
    assert_eq!(
        record_from_proto(request, 0.0).unwrap_err().to_string(),
        "unknown operation_name 'summarize' (expected one of chat, create_agent, embeddings, execute_tool, generate_content, invoke_agent, text_completion)"
    );
}

/// The checked-in generated files (`pb.rs`, `mirrored.rs`,
/// `prescan/proto_fields.rs`) are what build.rs makes of the proto now: it
/// writes them into `OUT_DIR` on every build, and names them here.
#[test]
fn generated_files_are_current() {
    let out_dir = std::path::Path::new(env!("OUT_DIR"));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .replace("\r\n", "\n")
    };
    let stale: Vec<&str> = env!("GENERATED_FILES")
        .split(';')
        .filter_map(|entry| {
            let (name, checked_in) = entry.split_once('=').expect("name=path");
            (read(&out_dir.join(name)) != read(&root.join(checked_in))).then_some(checked_in)
        })
        .collect();
    assert!(
        stale.is_empty(),
        "out of date with proto/vllm_otel_metrics/v1/ingest.proto (or build.rs): {}; \
         run scripts/update-generated.sh and commit the result",
        stale.join(", ")
    );
}
