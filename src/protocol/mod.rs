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

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

mod engine;
mod kv_connector;
mod plugin;

pub use plugin::{
    FinishedRequest, IterationStats, PluginDrops, PromptTokenStats, MAX_ITERATION_ENTRIES,
};

pub use kv_connector::{
    KvConnectorStats, NixlStats, OffloadingStats, SaveOutcomes, SimpleCpuOffloadStats,
    MAX_KV_CONNECTOR_ENTRIES,
};

pub use engine::{
    EngineConfig, ExternalHitsBySource, KvCacheEvictionEvent, KvFetchStages, Operation,
    OperationKind, PerfStats, SchedulerStats, SleepState, SpecDecodingStats, MAX_CACHE_CONFIG_KEYS,
    MAX_REUSE_GAPS, MAX_SPEC_POSITIONS,
};

mod record;
mod tag;

pub use record::{Record, RecordKind};

/// A request as the frontend registers it.
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestStart {
    /// Identifier unique among live requests.
    pub request_id: String,
    /// The served model name (label `model_name`).
    pub model_name: String,
    /// Engine index (label `engine`).
    pub engine: u32,
    /// Frontend wall-clock arrival time, seconds.
    pub arrival_time: f64,
    /// Prompt length in tokens.
    pub prompt_len: u32,
    /// The `max_tokens` sampling parameter, if the request set one.
    #[serde(default)]
    #[serialize_always]
    pub max_tokens: Option<u32>,
    /// The `n` sampling parameter (absent or null: 1).
    #[serde(default = "one", deserialize_with = "null_as_one")]
    pub n: u32,
    /// The caller's W3C trace context (`00-<trace id>-<span id>-<flags>`),
    /// from the request's `traceparent` header; the request's `llm_request`
    /// span joins that trace. Absent or null: the span starts a new trace.
    #[serde(default)]
    pub traceparent: Option<String>,
    /// The GenAI operation (`gen_ai.operation.name` of the
    /// semantic-convention streams); absent or null: `text_completion`.
    #[serde(default)]
    pub operation_name: Option<GenAiOperation>,
    /// The request has stop strings. vLLM's frontends match them and end
    /// the request with an abort that, seen from the engine core, looks like
    /// a client's: an abort of such a request counts as `stop`
    /// (docs/SEMANTICS.md, "Stop strings"). Absent: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_strings: bool,
}

fn one() -> u32 {
    1
}

fn null_as_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Option::<u32>::deserialize(d).map(|n| n.unwrap_or(1))
}

/// Optional fields take their default when absent or `null`.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// The outputs of one engine step, as the frontend receives them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputBatch {
    /// Engine index that produced the batch.
    pub engine: u32,
    /// Engine monotonic clock at the step, seconds.
    pub timestamp: f64,
    /// Frontend wall clock when the batch arrived, seconds.
    pub received_at: f64,
    /// One output per request that advanced in this step.
    pub outputs: Vec<EngineCoreOutput>,
}

/// One request's share of an engine step (vLLM's `EngineCoreOutput`).
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EngineCoreOutput {
    /// The request this output belongs to.
    pub request_id: String,
    /// Tokens generated in this step.
    pub new_token_ids: Vec<u32>,
    /// Scheduler events since the previous output.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub events: Vec<EngineCoreEvent>,
    /// Present on the request's first output (vLLM's engine sends it once,
    /// not again after a preemption's re-admission).
    #[serde(default)]
    pub prefill_stats: Option<PrefillStats>,
    /// Present when the request finished in this step.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
}

/// A scheduler event of a request (vLLM's `EngineCoreEvent`).
#[skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineCoreEvent {
    /// What happened.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// Engine monotonic clock, seconds.
    pub timestamp: f64,
    /// Why a `preempted` event happened (vLLM PR #58037's
    /// `EngineCoreEvent.reason`); absent on a preemption means
    /// [`PreemptionReason::KvFull`]. Other events' reasons are not used.
    #[serde(default)]
    pub reason: Option<PreemptionReason>,
}

/// Why the scheduler preempted a request (label `reason` of
/// `vllm:num_preemptions_by_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptionReason {
    /// No free KV-cache blocks for a running request (vLLM's FCFS victim);
    /// also a preemption that names no reason.
    #[default]
    KvFull,
    /// A higher-priority request needed the blocks (`--scheduling-policy priority`).
    Priority,
    /// `reset_prefix_cache` ran with requests running.
    PrefixCacheReset,
}

impl PreemptionReason {
    /// Every reason, in label-value order.
    pub const ALL: [PreemptionReason; crate::catalog::labels::PREEMPTION_REASONS.len()] = [
        PreemptionReason::KvFull,
        PreemptionReason::Priority,
        PreemptionReason::PrefixCacheReset,
    ];

    /// The label value (the catalog's [`PREEMPTION_REASONS`](crate::catalog::labels::PREEMPTION_REASONS)).
    pub fn as_str(self) -> &'static str {
        crate::catalog::labels::PREEMPTION_REASONS[self as usize]
    }

    /// The reason of a label value, if it is one.
    pub fn from_label(value: &str) -> Option<PreemptionReason> {
        PreemptionReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == value)
    }
}

/// The GenAI operation a request performs (the semantic conventions'
/// `gen_ai.operation.name`, their well-known values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GenAiOperation {
    /// Chat completion (OpenAI's `/v1/chat/completions`).
    Chat,
    /// Creating an agent.
    CreateAgent,
    /// Embeddings (`/v1/embeddings`).
    Embeddings,
    /// Executing a tool.
    ExecuteTool,
    /// Multimodal content generation.
    GenerateContent,
    /// Invoking an agent.
    InvokeAgent,
    /// Text completion (`/v1/completions`); also a request that names no
    /// operation.
    #[default]
    TextCompletion,
}

impl GenAiOperation {
    /// Every operation, in label-value order.
    pub const ALL: [GenAiOperation; crate::catalog::semconv::OPERATION_NAMES.len()] = [
        GenAiOperation::Chat,
        GenAiOperation::CreateAgent,
        GenAiOperation::Embeddings,
        GenAiOperation::ExecuteTool,
        GenAiOperation::GenerateContent,
        GenAiOperation::InvokeAgent,
        GenAiOperation::TextCompletion,
    ];

    /// The attribute value (the catalog's
    /// [`OPERATION_NAMES`](crate::catalog::semconv::OPERATION_NAMES)).
    pub fn as_str(self) -> &'static str {
        crate::catalog::semconv::OPERATION_NAMES[self as usize]
    }

    /// The operation of an attribute value, if it is one.
    pub fn from_name(value: &str) -> Option<GenAiOperation> {
        GenAiOperation::ALL
            .into_iter()
            .find(|operation| operation.as_str() == value)
    }
}

/// The kinds of [`EngineCoreEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// Entered the waiting queue.
    Queued,
    /// Admitted to the running batch.
    Scheduled,
    /// Evicted from the running batch (its KV blocks freed).
    Preempted,
}

/// Prompt accounting of a request's first scheduling (vLLM's `PrefillStats`);
/// vLLM's engine sends it with the request's first output only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PrefillStats {
    /// Prompt tokens of this prefill.
    #[serde(deserialize_with = "null_as_default")]
    pub num_prompt_tokens: u32,
    /// Tokens whose KV was computed in this prefill.
    #[serde(deserialize_with = "null_as_default")]
    pub num_computed_tokens: u32,
    /// Tokens found cached (local plus external).
    #[serde(deserialize_with = "null_as_default")]
    pub num_cached_tokens: u32,
    /// Tokens found in the local prefix cache.
    #[serde(deserialize_with = "null_as_default")]
    pub num_local_cached_tokens: u32,
    /// Tokens transferred from an external KV store.
    #[serde(deserialize_with = "null_as_default")]
    pub num_external_cached_tokens: u32,
}

/// Why a request terminated (label `finished_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop condition (EOS, stop string) was met.
    Stop,
    /// `max_tokens` or the model length was reached.
    Length,
    /// Aborted by the client or the frontend.
    Abort,
    /// Failed in the engine.
    Error,
    /// Stopped by repetition detection.
    Repetition,
}

impl FinishReason {
    /// Every reason, in label-value order.
    pub const ALL: [FinishReason; crate::catalog::labels::FINISHED_REASONS.len()] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::Abort,
        FinishReason::Error,
        FinishReason::Repetition,
    ];

    /// The label value (the catalog's [`FINISHED_REASONS`](crate::catalog::labels::FINISHED_REASONS)).
    pub fn as_str(self) -> &'static str {
        crate::catalog::labels::FINISHED_REASONS[self.index()]
    }

    /// Position in [`FinishReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The frontend aborted a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Abort {
    /// The aborted request.
    pub request_id: String,
    /// Frontend wall clock of the abort, seconds.
    pub received_at: f64,
}

/// A record whose values cannot be applied (non-finite numbers).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidRecord(pub String);

impl std::fmt::Display for InvalidRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidRecord {}

/// Bounds on what one record may carry, so that no single record can grow
/// the process's memory, every later scrape or every later export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InputLimits {
    /// Longest label value (`model_name`), bytes.
    pub max_label_bytes: usize,
    /// Longest request id, bytes.
    pub max_request_id_bytes: usize,
}

impl InputLimits {
    /// Default longest label value: longer than any model name in use.
    pub const DEFAULT_MAX_LABEL_BYTES: usize = 256;
    /// Default longest request id.
    pub const DEFAULT_MAX_REQUEST_ID_BYTES: usize = 512;
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_label_bytes: Self::DEFAULT_MAX_LABEL_BYTES,
            max_request_id_bytes: Self::DEFAULT_MAX_REQUEST_ID_BYTES,
        }
    }
}

/// A value shown in a message: at most 64 characters of it, and its length
/// when it is longer (a rejected value may be megabytes long).
pub fn shown(value: &str) -> String {
    const SHOWN: usize = 64;
    if value.len() <= SHOWN {
        return value.to_owned();
    }
    let mut end = SHOWN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

fn bounded(what: &str, value: &str, max: usize) -> Result<(), InvalidRecord> {
    if value.len() <= max {
        Ok(())
    } else {
        Err(InvalidRecord(format!(
            "{what} is {} bytes, more than the limit of {max} ('{}')",
            value.len(),
            shown(value)
        )))
    }
}

/// A time in seconds: finite and not negative (vLLM's clocks cannot be).
fn time(what: &str, value: f64) -> Result<(), InvalidRecord> {
    finite(what, value)?;
    if value < 0.0 {
        return Err(InvalidRecord(format!("{what} is negative ({value})")));
    }
    Ok(())
}

fn finite(what: &str, value: f64) -> Result<(), InvalidRecord> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(InvalidRecord(format!(
            "{what} is not a finite number ({value})"
        )))
    }
}

impl RequestStart {
    /// [`Record::validate`] of a `request` record.
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("request_id", &self.request_id, limits.max_request_id_bytes)?;
        bounded("model_name", &self.model_name, limits.max_label_bytes)?;
        if let Some(traceparent) = &self.traceparent {
            bounded("traceparent", traceparent, limits.max_label_bytes)?;
        }
        time("arrival_time", self.arrival_time)
    }
}

impl OutputBatch {
    /// [`Record::validate`] of an `outputs` record: the batch's own times.
    /// Each output is checked on its own ([`EngineCoreOutput::validate`])
    /// when the batch is applied, so that one bad output is rejected alone
    /// and the other requests of the engine step keep their tokens.
    pub fn validate(&self, _limits: &InputLimits) -> Result<(), InvalidRecord> {
        time("timestamp", self.timestamp)?;
        time("received_at", self.received_at)
    }
}

impl EngineCoreOutput {
    /// Checks one output of a batch: its request id within `limits`, its
    /// events' times finite and non-negative.
    ///
    /// ```
    /// use vllm_otel_metrics::protocol::{EngineCoreOutput, InputLimits};
    /// let long = EngineCoreOutput { request_id: "r".repeat(600), ..Default::default() };
    /// assert!(long.validate(&InputLimits::default()).is_err());
    /// ```
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("request_id", &self.request_id, limits.max_request_id_bytes)?;
        for event in &self.events {
            time("event timestamp", event.timestamp)?;
        }
        Ok(())
    }
}

impl Abort {
    /// [`Record::validate`] of an `abort` record.
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("request_id", &self.request_id, limits.max_request_id_bytes)?;
        time("received_at", self.received_at)
    }
}
