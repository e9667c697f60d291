//! The scan against the proto, and against messages built to amplify.

use std::mem::size_of;

use prost::Message;

use super::limits::MAX_DEPTH;
use super::proto_fields::PROTO_FIELDS;
use super::schema::{Kind, LEAF, MAP_ENTRY, RECORD};
use super::{check, DecodeLimits, Refusal};
use crate::sources::ingest::proto::pb;

/// The fields the proto declares for `message`.
fn proto_fields(message: &str) -> Vec<(u32, &'static str, bool, &'static str)> {
    PROTO_FIELDS
        .iter()
        .filter(|f| f.0 == message)
        .map(|&(_, number, encoding, repeated, type_name)| (number, encoding, repeated, type_name))
        .collect()
}

/// The schema table against the proto, from `Record` down: each string,
/// bytes, message or packed-varint field of a message is in its schema
/// (a message field with the schema of its type, or `LEAF` for a type of
/// fixed-size numbers only), and each number the table lists is a field.
#[test]
fn the_schema_table_covers_every_field_that_decodes_into_more() {
    let mut missing = Vec::new();
    let mut todo = vec![(&RECORD, "Record".to_owned())];
    let mut seen = std::collections::BTreeSet::new();
    while let Some((schema, message)) = todo.pop() {
        if !seen.insert((schema.name, message.clone())) {
            continue;
        }
        let fields = proto_fields(&message);
        assert!(!fields.is_empty(), "no message {message} in the proto");
        if std::ptr::eq(schema, &LEAF) {
            // A leaf holds numbers that are not packed varints, and leaves.
            for (number, encoding, repeated, type_name) in fields {
                match (encoding, repeated) {
                    ("message", _) => todo.push((&LEAF, type_name.to_owned())),
                    ("varint", false) | ("fixed", _) => {}
                    _ => missing.push(format!("{message}.{number}: a {encoding} field in a leaf")),
                }
            }
            continue;
        }
        if !std::ptr::eq(schema, &MAP_ENTRY) {
            assert_eq!(schema.name, message, "the schema of {message}");
        }
        for &(number, _, _) in schema.fields {
            if !fields.iter().any(|f| f.0 == number) {
                missing.push(format!(
                    "{message}: the table lists field {number}, which the proto has not"
                ));
            }
        }
        for (number, encoding, repeated, type_name) in fields {
            let listed = schema.fields.iter().find(|f| f.0 == number).map(|f| f.1);
            match (encoding, repeated, listed) {
                ("string" | "bytes", _, Some(Kind::Bytes)) => {}
                ("varint", true, Some(Kind::PackedVarints(_))) => {}
                // Allocated: an element of a repeated field (map
                // entries too), or Record's boxed scheduler stats
                // (build.rs).
                ("message", true, Some(Kind::Message(inner))) => {
                    todo.push((inner, type_name.to_owned()))
                }
                ("message", false, Some(Kind::Message(inner)))
                    if message == "Record" && number == 4 =>
                {
                    todo.push((inner, type_name.to_owned()))
                }
                ("message", false, Some(Kind::Inline(inner))) => {
                    todo.push((inner, type_name.to_owned()))
                }
                ("varint", false, None) | ("fixed", _, None) => {}
                _ => missing.push(format!(
                    "{message}.{number} ({encoding}{}) is not in the table as it decodes",
                    if repeated { ", repeated" } else { "" }
                )),
            }
        }
    }
    assert_eq!(missing, Vec::<String>::new());
}

fn batch(records: Vec<pb::Record>) -> Vec<u8> {
    pb::Record {
        record: Some(pb::record::Record::Batch(pb::RecordBatch { records })),
    }
    .encode_to_vec()
}

#[test]
fn a_batch_at_the_bound_passes_and_one_more_record_is_refused() {
    let limits = DecodeLimits {
        max_records_per_batch: 3,
        ..DecodeLimits::default()
    };
    let empty = || pb::Record::default();
    assert_eq!(check(&batch(vec![empty(); 3]), &limits), Ok(()));
    assert_eq!(
        check(&batch(vec![empty(); 4]), &limits),
        Err(Refusal::TooManyRecords { limit: 3 })
    );
}

#[test]
fn outputs_are_counted_in_each_output_batch() {
    let limits = DecodeLimits {
        max_outputs_per_batch: 2,
        ..DecodeLimits::default()
    };
    let outputs = |n| pb::Record {
        record: Some(pb::record::Record::Outputs(pb::OutputBatch {
            outputs: vec![pb::EngineCoreOutput::default(); n],
            ..Default::default()
        })),
    };
    assert_eq!(check(&outputs(2).encode_to_vec(), &limits), Ok(()));
    assert_eq!(check(&batch(vec![outputs(2), outputs(2)]), &limits), Ok(()));
    assert_eq!(
        check(&outputs(3).encode_to_vec(), &limits),
        Err(Refusal::TooManyOutputs { limit: 2 })
    );
}

#[test]
fn empty_events_that_would_decode_to_many_structs_are_refused() {
    let output = pb::EngineCoreOutput {
        events: vec![pb::EngineCoreEvent::default(); 40_000],
        ..Default::default()
    };
    let message = pb::Record {
        record: Some(pb::record::Record::Outputs(pb::OutputBatch {
            outputs: vec![output],
            ..Default::default()
        })),
    }
    .encode_to_vec();
    let limits = DecodeLimits {
        max_decoded_bytes: 1 << 20,
        ..DecodeLimits::default()
    };
    assert_eq!(
        check(&message, &limits),
        Err(Refusal::TooLarge {
            limit: 1 << 20,
            bytes: message.len()
        })
    );
    // The estimate is an upper bound of what decoding takes.
    let roomy = DecodeLimits {
        max_decoded_bytes: 40_000 * size_of::<pb::EngineCoreEvent>() + (64 << 10),
        ..DecodeLimits::default()
    };
    assert_eq!(check(&message, &roomy), Ok(()));
}

#[test]
fn deep_nesting_and_truncated_bytes_are_refused() {
    let mut deep = pb::Record::default();
    for _ in 0..60 {
        deep = pb::Record {
            record: Some(pb::record::Record::Batch(pb::RecordBatch {
                records: vec![deep],
            })),
        };
    }
    assert_eq!(
        check(&deep.encode_to_vec(), &DecodeLimits::default()),
        Err(Refusal::TooDeep { limit: MAX_DEPTH })
    );
    let whole = batch(vec![pb::Record {
        record: Some(pb::record::Record::Abort(pb::Abort {
            request_id: "r".into(),
            received_at: None,
        })),
    }]);
    assert_eq!(
        // The outer length then says more than there is.
        check(&whole[..whole.len() - 1], &DecodeLimits::default()),
        Err(Refusal::Malformed("Record"))
    );
    assert_eq!(check(&whole, &DecodeLimits::default()), Ok(()));
}

#[test]
fn what_the_plugin_sends_passes() {
    let scheduler = pb::Record {
        record: Some(pb::record::Record::SchedulerStats(Box::new(
            pb::SchedulerStats {
                model_name: "m".into(),
                running_lora_adapters: Some(pb::AdapterList {
                    names: vec!["a".into(), "b".into()],
                }),
                ..Default::default()
            },
        ))),
    };
    // Finished requests as vLLM's finish them: an id, a reason, times.
    let finished = pb::FinishedRequest {
        request_id: "cmpl-0123456789abcdef0123456789abcdef-0".into(),
        finish_reason: pb::FinishReason::Stop as i32,
        e2e_latency: 1.5,
        queued_time: 0.01,
        prefill_time: 0.2,
        inference_time: 1.4,
        decode_time: 1.2,
        mean_time_per_output_token: 0.02,
        num_prompt_tokens: 512,
        num_generation_tokens: 64,
        ..Default::default()
    };
    let iteration = |finished: pb::FinishedRequest| pb::Record {
        record: Some(pb::record::Record::IterationStats(pb::IterationStats {
            model_name: "m".into(),
            max_num_generation_tokens_iter: vec![1, 2, 3],
            finished_requests: vec![finished; 256],
            ..Default::default()
        })),
    };
    let message = batch(
        std::iter::repeat_n([scheduler.clone(), iteration(finished)], 128)
            .flatten()
            .collect(),
    );
    assert_eq!(check(&message, &DecodeLimits::default()), Ok(()));
    // Empty finished requests (two bytes each, a whole struct decoded)
    // are the amplification the budget is for.
    let empty = batch(
        std::iter::repeat_n([scheduler, iteration(pb::FinishedRequest::default())], 128)
            .flatten()
            .collect(),
    );
    assert!(matches!(
        check(&empty, &DecodeLimits::default()),
        Err(Refusal::TooLarge { .. })
    ));
    assert_eq!(
        pb::Record::decode(message.as_slice()).map(|_| ()),
        Ok(()),
        "the scan agrees with prost on well-formed bytes"
    );
}
