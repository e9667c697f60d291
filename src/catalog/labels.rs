//! The label names the catalog's families share, and the values of the
//! labels whose values it fixes.

/// Label names shared by every vLLM family.
pub(crate) const ENGINE_LABELS: &[&str] = &["model_name", "engine"];
/// Labels of `vllm:request_success`.
pub(crate) const FINISHED_REASON_LABELS: &[&str] = &["model_name", "engine", "finished_reason"];
/// Values of its `finished_reason` label (vLLM's `FinishReason`, as
/// `str(reason)` writes it in `vllm/v1/engine/__init__.py`).
pub(crate) const FINISHED_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];
/// Labels of `vllm:num_preemptions_by_reason`.
pub(crate) const PREEMPTION_REASON_LABELS: &[&str] = &["model_name", "engine", "reason"];
/// Values of its `reason` label (vLLM PR #58037), in the order of
/// [`PreemptionReason::ALL`](crate::protocol::PreemptionReason::ALL).
pub(crate) const PREEMPTION_REASONS: [&str; 3] = ["kv_full", "priority", "prefix_cache_reset"];
/// Labels of `vllm:prompt_tokens_by_source`.
pub(crate) const SOURCE_LABELS: &[&str] = &["model_name", "engine", "source"];
/// Labels of the self-telemetry counters.
pub(crate) const REASON_LABELS: &[&str] = &["reason"];

/// Values of the `source` label, in the order prefill stats report them:
/// computed locally, hit in the local prefix cache, transferred from an external KV store.
pub(crate) const PROMPT_TOKEN_SOURCES: [&str; 3] =
    ["local_compute", "local_cache_hit", "external_kv_transfer"];

/// The adapter label of the per-request families, with `--attribute lora`
/// (vLLM's `lora_request.lora_name`).
pub const LORA_NAME_LABEL: &str = "lora_name";
/// The priority-class label of the per-request families, with
/// `--attribute priority` (the name vLLM's proposal #58077 gives it).
pub const PRIORITY_LABEL: &str = "priority";
/// `lora_name` of a request of the base model, without an adapter.
pub const NO_ADAPTER: &str = "none";
/// `lora_name` of the adapters without a label of their own.
pub const OTHER_ADAPTER: &str = "other";
