//! Reads an ingest message's protobuf bytes without decoding them and
//! refuses one whose decoding would take far more memory than its bytes.
//!
//! Why: protobuf decodes a two-byte empty element of a repeated message
//! field (`0a 00`) into a whole struct. A 16 MiB `RecordBatch` of empty
//! records decodes into eight million `Record`s, gigabytes, before a
//! single one is looked at. The scan walks the wire format against the
//! ingest schema, counting what decoding would build (the records of a
//! batch, the outputs of an output batch, and an estimate of every
//! struct, string and packed number), and stops at the first bound
//! exceeded. It allocates nothing and reads each byte at most once.

use std::mem::size_of;

use super::proto::pb;
use crate::sources::budget::{self, Allowance};

/// The bounds a message is scanned against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeLimits {
    /// Most records in one `RecordBatch`.
    pub max_records_per_batch: usize,
    /// Most outputs in one `OutputBatch`.
    pub max_outputs_per_batch: usize,
    /// Most memory the decoded message may take, estimated, bytes.
    pub max_decoded_bytes: usize,
}

impl Default for DecodeLimits {
    /// Room for the plugin's batches (256 records, vLLM's largest step's
    /// outputs), the decoded size bounded at twice the message size limit.
    fn default() -> Self {
        DecodeLimits {
            max_records_per_batch: 1024,
            max_outputs_per_batch: budget::DEFAULT_MAX_OUTPUTS_PER_BATCH,
            max_decoded_bytes: 32 << 20,
        }
    }
}

/// What a field decodes into.
#[derive(Clone, Copy)]
enum Kind {
    /// A message of this schema that decoding allocates: an element of a
    /// repeated field (a `Vec`), or a boxed one.
    Message(&'static Schema),
    /// A message of this schema held inside its parent (a singular field,
    /// a variant of a oneof): its size is its parent's already, and a
    /// second occurrence on the wire is merged into the first.
    Inline(&'static Schema),
    /// A string or bytes: a `String`/`Vec` and its contents.
    Bytes,
    /// Packed varints, each this many bytes once decoded.
    PackedVarints(usize),
}

/// Which bound counts a field's elements.
#[derive(Clone, Copy, PartialEq)]
enum Counted {
    No,
    Records,
    Outputs,
}

/// The fields of one message type that decoding can amplify; the others
/// (numbers, packed fixed-width numbers) take no more than their bytes.
struct Schema {
    name: &'static str,
    size: usize,
    fields: &'static [(u32, Kind, Counted)],
}

const fn field(number: u32, kind: Kind) -> (u32, Kind, Counted) {
    (number, kind, Counted::No)
}

const STRING: Kind = Kind::Bytes;
const U32S: Kind = Kind::PackedVarints(size_of::<u32>());
const U64S: Kind = Kind::PackedVarints(size_of::<u64>());

static RECORD: Schema = Schema {
    name: "Record",
    size: size_of::<pb::Record>(),
    fields: &[
        field(1, Kind::Inline(&REQUEST)),
        field(2, Kind::Inline(&OUTPUT_BATCH)),
        field(3, Kind::Inline(&ABORT)),
        field(4, Kind::Message(&SCHEDULER_STATS)),
        field(5, Kind::Inline(&ENGINE_CONFIG)),
        field(6, Kind::Inline(&NAMED)),
        field(7, Kind::Inline(&LEAF)),
        field(8, Kind::Inline(&ITERATION_STATS)),
        field(9, Kind::Inline(&LEAF)),
        field(10, Kind::Inline(&RECORD_BATCH)),
        field(11, Kind::Inline(&FRAMES)),
    ],
};
static RECORD_BATCH: Schema = Schema {
    name: "RecordBatch",
    size: size_of::<pb::RecordBatch>(),
    fields: &[(1, Kind::Message(&RECORD), Counted::Records)],
};
static FRAMES: Schema = Schema {
    name: "EngineCoreFrames",
    size: size_of::<pb::EngineCoreFrames>(),
    fields: &[
        field(1, STRING),
        field(2, STRING),
        field(3, STRING),
        field(4, STRING),
    ],
};
static REQUEST: Schema = Schema {
    name: "RequestStarted",
    size: size_of::<pb::RequestStarted>(),
    fields: &[
        field(1, STRING),
        field(2, STRING),
        field(8, STRING),
        field(9, STRING),
    ],
};
static OUTPUT_BATCH: Schema = Schema {
    name: "OutputBatch",
    size: size_of::<pb::OutputBatch>(),
    fields: &[(4, Kind::Message(&OUTPUT), Counted::Outputs)],
};
static OUTPUT: Schema = Schema {
    name: "EngineCoreOutput",
    size: size_of::<pb::EngineCoreOutput>(),
    fields: &[
        field(1, STRING),
        field(2, U32S),
        field(3, Kind::Message(&EVENT)),
        field(4, Kind::Inline(&LEAF)),
    ],
};
static EVENT: Schema = Schema {
    name: "EngineCoreEvent",
    size: size_of::<pb::EngineCoreEvent>(),
    fields: &[field(3, STRING)],
};
static ABORT: Schema = Schema {
    name: "Abort",
    size: size_of::<pb::Abort>(),
    fields: &[field(1, STRING)],
};
static SCHEDULER_STATS: Schema = Schema {
    name: "SchedulerStats",
    size: size_of::<pb::SchedulerStats>(),
    fields: &[
        field(1, STRING),
        field(10, Kind::Inline(&LEAF)),
        field(13, Kind::Inline(&LEAF)),
        field(16, Kind::Message(&EVICTION)),
        field(17, Kind::Inline(&LEAF)),
        field(18, Kind::Inline(&SPEC_DECODING)),
        field(19, Kind::Inline(&ADAPTERS)),
        field(20, Kind::Inline(&ADAPTERS)),
        field(21, Kind::Inline(&KV_CONNECTOR)),
    ],
};
static EVICTION: Schema = Schema {
    name: "KvCacheEvictionEvent",
    size: size_of::<pb::KvCacheEvictionEvent>(),
    fields: &[],
};
static SPEC_DECODING: Schema = Schema {
    name: "SpecDecodingStats",
    size: size_of::<pb::SpecDecodingStats>(),
    fields: &[field(4, U64S)],
};
static ADAPTERS: Schema = Schema {
    name: "AdapterList",
    size: size_of::<pb::AdapterList>(),
    fields: &[field(1, STRING)],
};
static KV_CONNECTOR: Schema = Schema {
    name: "KvConnectorStats",
    size: size_of::<pb::KvConnectorStats>(),
    fields: &[
        field(1, Kind::Inline(&NIXL)),
        field(2, Kind::Inline(&OFFLOADING)),
        field(3, Kind::Inline(&SIMPLE_OFFLOAD)),
    ],
};
static NIXL: Schema = Schema {
    name: "NixlStats",
    size: size_of::<pb::NixlStats>(),
    fields: &[
        field(1, Kind::Inline(&LEAF)),
        field(2, Kind::Inline(&LEAF)),
        field(3, Kind::Inline(&LEAF)),
        field(4, Kind::Inline(&LEAF)),
    ],
};
static OFFLOADING: Schema = Schema {
    name: "OffloadingStats",
    size: size_of::<pb::OffloadingStats>(),
    fields: &[
        field(3, Kind::Inline(&LEAF)),
        field(6, Kind::Inline(&LEAF)),
        field(7, Kind::Inline(&LEAF)),
        field(8, Kind::Inline(&LEAF)),
    ],
};
static SIMPLE_OFFLOAD: Schema = Schema {
    name: "SimpleCpuOffloadStats",
    size: size_of::<pb::SimpleCpuOffloadStats>(),
    fields: &[field(1, Kind::Inline(&LEAF))],
};
static ENGINE_CONFIG: Schema = Schema {
    name: "EngineConfig",
    size: size_of::<pb::EngineConfig>(),
    fields: &[field(1, STRING), field(3, Kind::Message(&MAP_ENTRY))],
};
static MAP_ENTRY: Schema = Schema {
    name: "map entry",
    // A hash map's slot: two strings and the table's share.
    size: 2 * size_of::<String>() + 16,
    fields: &[field(1, STRING), field(2, STRING)],
};
static ITERATION_STATS: Schema = Schema {
    name: "IterationStats",
    size: size_of::<pb::IterationStats>(),
    fields: &[
        field(1, STRING),
        field(5, Kind::Inline(&LEAF)),
        field(7, U64S),
        field(8, U64S),
        field(11, Kind::Message(&FINISHED)),
    ],
};
static FINISHED: Schema = Schema {
    name: "FinishedRequest",
    size: size_of::<pb::FinishedRequest>(),
    fields: &[field(1, STRING)],
};
static NAMED: Schema = Schema {
    name: "SleepState",
    size: size_of::<pb::SleepState>(),
    fields: &[field(1, STRING)],
};
/// A message of numbers only (its size bounds any of them closely enough:
/// the largest is a few dozen bytes).
static LEAF: Schema = Schema {
    name: "message",
    size: 64,
    fields: &[],
};

/// Why a message was refused before decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A batch with more records than allowed.
    #[error("a record batch of more than {limit} records (--max-records-per-batch); refused before decoding")]
    TooManyRecords {
        /// The bound.
        limit: usize,
    },
    /// An output batch with more outputs than allowed.
    #[error("an output batch of more than {limit} outputs (--max-outputs-per-batch); refused before decoding")]
    TooManyOutputs {
        /// The bound.
        limit: usize,
    },
    /// Messages nested deeper than protobuf decodes.
    #[error("messages nested more than {limit} deep; refused before decoding")]
    TooDeep {
        /// The bound.
        limit: u32,
    },
    /// Decoding would take more memory than allowed.
    #[error("decoding it would take more than {limit} bytes ({bytes} bytes of protobuf); refused")]
    TooLarge {
        /// The bound.
        limit: usize,
        /// The message's size.
        bytes: usize,
    },
    /// The bytes are not protobuf (decoding would fail as well).
    #[error("cannot decode the message (malformed protobuf in a {0})")]
    Malformed(&'static str),
}

/// prost's recursion limit: a message nested deeper does not decode.
const MAX_DEPTH: u32 = 100;

/// Scans one `Record` message; `Ok` when decoding it stays within `limits`.
///
/// The decoded size is bounded by the smaller of `max_decoded_bytes` and the
/// protobuf share of the decode budget (2 × the message's size + 2 MiB:
/// [`crate::sources::budget`]).
pub fn check(message: &[u8], limits: &DecodeLimits) -> Result<(), Refusal> {
    let mut decoded = Allowance::new(limits.max_decoded_bytes.min(budget::share(
        message.len(),
        budget::DECODE_PER_BYTE,
        budget::DECODE_BASE,
    )));
    // The record itself; checked with the first field that adds to it.
    decoded.charge(RECORD.size);
    let mut scan = Scan {
        limits,
        decoded,
        bytes: message.len(),
    };
    scan.walk(message, &RECORD, 0)
}

struct Scan<'a> {
    limits: &'a DecodeLimits,
    decoded: Allowance,
    bytes: usize,
}

impl Scan<'_> {
    fn add(&mut self, bytes: usize) -> Result<(), Refusal> {
        if self.decoded.charge(bytes) {
            return Ok(());
        }
        Err(Refusal::TooLarge {
            limit: self.decoded.limit(),
            bytes: self.bytes,
        })
    }

    /// Walks the fields of one message of `schema`, `depth` messages deep.
    fn walk(&mut self, mut data: &[u8], schema: &Schema, depth: u32) -> Result<(), Refusal> {
        if depth > MAX_DEPTH {
            return Err(Refusal::TooDeep { limit: MAX_DEPTH });
        }
        let mut records = 0usize;
        let mut outputs = 0usize;
        let malformed = Refusal::Malformed(schema.name);
        while !data.is_empty() {
            let key = varint(&mut data).ok_or(malformed.clone())?;
            let number = u32::try_from(key >> 3).map_err(|_| malformed.clone())?;
            let known = schema.fields.iter().find(|(n, _, _)| *n == number);
            match key & 7 {
                0 => {
                    varint(&mut data).ok_or(malformed.clone())?;
                    if let Some((_, Kind::PackedVarints(size), _)) = known {
                        self.add(*size)?;
                    }
                }
                1 => data = data.get(8..).ok_or(malformed.clone())?,
                5 => data = data.get(4..).ok_or(malformed.clone())?,
                2 => {
                    let length = varint(&mut data).ok_or(malformed.clone())?;
                    let length = usize::try_from(length).map_err(|_| malformed.clone())?;
                    if length > data.len() {
                        return Err(malformed);
                    }
                    let (value, rest) = data.split_at(length);
                    data = rest;
                    match known {
                        Some((_, Kind::Message(child), counted)) => {
                            match counted {
                                Counted::Records => {
                                    records += 1;
                                    if records > self.limits.max_records_per_batch {
                                        return Err(Refusal::TooManyRecords {
                                            limit: self.limits.max_records_per_batch,
                                        });
                                    }
                                }
                                Counted::Outputs => {
                                    outputs += 1;
                                    if outputs > self.limits.max_outputs_per_batch {
                                        return Err(Refusal::TooManyOutputs {
                                            limit: self.limits.max_outputs_per_batch,
                                        });
                                    }
                                }
                                Counted::No => {}
                            }
                            self.add(child.size)?;
                            self.walk(value, child, depth + 1)?;
                        }
                        Some((_, Kind::Inline(child), _)) => self.walk(value, child, depth + 1)?,
                        Some((_, Kind::Bytes, _)) => self.add(size_of::<String>() + length)?,
                        Some((_, Kind::PackedVarints(size), _)) => {
                            let count = value.iter().filter(|b| **b < 0x80).count();
                            self.add(count * size)?;
                        }
                        // Packed fixed-width numbers, or a field this
                        // version does not know (skipped, not kept).
                        None => self.add(length)?,
                    }
                }
                _ => return Err(malformed),
            }
        }
        Ok(())
    }
}

/// Reads one varint off the front of `data`.
fn varint(data: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, byte) in data.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *data = &data[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    include!(concat!(env!("OUT_DIR"), "/proto_fields.rs"));

    /// The fields the proto declares for `message`.
    fn proto_fields(message: &str) -> Vec<(u32, &'static str, bool, &'static str)> {
        PROTO_FIELDS
            .iter()
            .filter(|f| f.0 == message)
            .map(|&(_, number, encoding, repeated, type_name)| {
                (number, encoding, repeated, type_name)
            })
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
                        _ => missing
                            .push(format!("{message}.{number}: a {encoding} field in a leaf")),
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
}
