//! [`LabelSet`], the per-request handles of one label set, resolved once.

use std::sync::Arc;

use super::request::RequestHandles;

/// The per-request handles of one `(model_name, engine)` label set, resolved
/// once. A frontend that keeps one per label set, as vLLM's Rust frontend
/// keeps its `RequestMetricHandles`, starts each request from it
/// (the tracker's `RequestMetrics::start_in`)
/// without any lookup. Cloning is cheap.
///
/// ```
/// use vllm_otel_metrics::instruments::Instruments;
/// use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
///
/// let instruments = Instruments::builder().build();
/// let llama = instruments.label_set("llama", 0);
/// let params = RequestParams { arrival_time: 100.0, prompt_len: 16, max_tokens: None, n: 1 };
/// let mut request = RequestMetrics::start_in(&llama, params);
/// request.finish(101.0, vllm_otel_metrics::protocol::FinishReason::Stop);
/// ```
#[derive(Clone)]
pub struct LabelSet {
    pub(crate) handles: Arc<RequestHandles>,
}

impl std::fmt::Debug for LabelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelSet").finish_non_exhaustive()
    }
}
