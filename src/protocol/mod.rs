//! Engine-core protocol types: the records every source translates its input into.
//!
//! They mirror vLLM's engine-core outputs (`EngineCoreOutput`, `EngineCoreEvent`,
//! `PrefillStats`, finish reasons) plus the frontend-side request start, abort
//! and the scheduler's per-step stats, and the records of vLLM's stat-logger
//! plugin (the Python frontend's `IterationStats`, the plugin's drops). Their
//! serde form is the JSONL trace format (one [`Record`] per line, tagged by
//! `"type"`).
//!
//! ```
//! use vllm_otel_metrics::protocol::{Record, FinishReason};
//!
//! let line = r#"{"type":"outputs","engine":0,"timestamp":10.0,"received_at":5.0,
//!   "outputs":[{"request_id":"r0","new_token_ids":[5,6],"finish_reason":"length"}]}"#;
//! let Record::Outputs(batch) = serde_json::from_str(line).unwrap() else { unreachable!() };
//! assert_eq!(batch.outputs[0].finish_reason, Some(FinishReason::Length));
//! ```
//!
//! Where things are: a request's own records (`request.rs`: its start, the
//! engine-core outputs, the abort), the engine's (`engine.rs`, with the KV
//! connectors' stats in `kv_connector.rs`), the plugin's (`plugin.rs`), the
//! [`Record`] enum over all of them (`record.rs`, its deserializer in
//! `tag.rs`), and the limits and checks records are validated with
//! (`validate.rs`). This file only declares and re-exports them.

mod defaults;
mod engine;
mod kv_connector;
mod plugin;
mod record;
mod request;
mod tag;
mod validate;

pub use engine::{
    EngineConfig, ExternalHitsBySource, KvCacheEvictionEvent, KvFetchStages, Operation,
    OperationKind, PerfStats, SchedulerStats, SleepState, SpecDecodingStats, MAX_CACHE_CONFIG_KEYS,
    MAX_REUSE_GAPS, MAX_SPEC_POSITIONS,
};
pub use kv_connector::{
    KvConnectorStats, NixlStats, OffloadingStats, SaveOutcomes, SimpleCpuOffloadStats,
    MAX_KV_CONNECTOR_ENTRIES,
};
pub use plugin::{
    FinishedRequest, IterationStats, PluginDrops, PromptTokenStats, MAX_ITERATION_ENTRIES,
};
pub use record::{Record, RecordKind};
pub use request::{
    Abort, EngineCoreEvent, EngineCoreOutput, EventType, FinishReason, GenAiOperation, OutputBatch,
    PreemptionReason, PrefillStats, RequestStart,
};
pub use validate::{shown, InputLimits, InvalidRecord};
