//! The ingest schema as the scan reads it: for each message type, its
//! decoded size and the fields whose decoding can take more memory than
//! their bytes.

use std::mem::size_of;

use crate::sources::ingest::proto::pb;

/// What a field decodes into.
#[derive(Clone, Copy)]
pub(super) enum Kind {
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
pub(super) enum Counted {
    No,
    Records,
    Outputs,
}

/// The fields of one message type that decoding can amplify; the others
/// (numbers, packed fixed-width numbers) take no more than their bytes.
pub(super) struct Schema {
    pub(super) name: &'static str,
    pub(super) size: usize,
    pub(super) fields: &'static [(u32, Kind, Counted)],
}

const fn field(number: u32, kind: Kind) -> (u32, Kind, Counted) {
    (number, kind, Counted::No)
}

const STRING: Kind = Kind::Bytes;
const U32S: Kind = Kind::PackedVarints(size_of::<u32>());
const U64S: Kind = Kind::PackedVarints(size_of::<u64>());

pub(super) static RECORD: Schema = Schema {
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
        field(11, STRING),
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
pub(super) static MAP_ENTRY: Schema = Schema {
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
pub(super) static LEAF: Schema = Schema {
    name: "message",
    size: 64,
    fields: &[],
};
