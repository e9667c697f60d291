//! A request's records as the engine core and its frontend see them: the
//! request's start, the engine-core outputs of each step (their events,
//! prefill stats and finish reasons), and the frontend's abort.

use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use super::defaults::{null_as_default, null_as_one, one};
use super::validate::{bounded, time, InputLimits, InvalidRecord};

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
    /// The request's LoRA adapter (vLLM's `lora_request.lora_name`); absent,
    /// null or empty: the base model. Labels the request's series with
    /// `--attribute lora`.
    #[serde(default)]
    pub lora_name: Option<String>,
    /// The request's priority (vLLM's `Request.priority`, lower first under
    /// `--scheduling-policy priority`); absent or null: vLLM's default, 0.
    /// Labels the request's series with its class with
    /// `--attribute priority`.
    #[serde(default)]
    pub priority: Option<i64>,
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

    /// The label value (the catalog's `PREEMPTION_REASONS`).
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
    /// `OPERATION_NAMES`).
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

    /// The label value (the catalog's `FINISHED_REASONS`).
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

impl RequestStart {
    /// [`Record::validate`](super::Record::validate) of a `request` record.
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("request_id", &self.request_id, limits.max_request_id_bytes)?;
        bounded("model_name", &self.model_name, limits.max_label_bytes)?;
        if let Some(traceparent) = &self.traceparent {
            bounded("traceparent", traceparent, limits.max_label_bytes)?;
        }
        if let Some(lora_name) = &self.lora_name {
            bounded("lora_name", lora_name, limits.max_label_bytes)?;
        }
        time("arrival_time", self.arrival_time)
    }
}

impl OutputBatch {
    /// [`Record::validate`](super::Record::validate) of an `outputs` record: the batch's own times.
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
    /// [`Record::validate`](super::Record::validate) of an `abort` record.
    pub fn validate(&self, limits: &InputLimits) -> Result<(), InvalidRecord> {
        bounded("request_id", &self.request_id, limits.max_request_id_bytes)?;
        time("received_at", self.received_at)
    }
}
