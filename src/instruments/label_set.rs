//! Label sets: the attributes every series of a `(model_name, engine)`
//! label set (or of the overflow label set) carries, and [`LabelSet`], the
//! per-request handles of one label set, resolved once.

use std::sync::Arc;

use opentelemetry::KeyValue;

use super::RequestHandles;
use crate::catalog;

/// The attribute the SDK marks its overflow series with.
pub const OVERFLOW_ATTRIBUTE: &str = "otel.metric.overflow";

/// An attribute value whose clones share one string.
pub(crate) fn shared_string(value: &str) -> opentelemetry::Value {
    opentelemetry::Value::String(opentelemetry::StringValue::from(Arc::<str>::from(value)))
}

/// `base` plus one more label.
pub(crate) fn with_label(
    base: &[KeyValue],
    name: &'static str,
    value: &'static str,
) -> Vec<KeyValue> {
    let mut labels = base.to_vec();
    labels.push(KeyValue::new(name, value));
    labels
}

/// The attributes every series of a label set starts with: `model_name` and
/// `engine`, or the overflow attribute. Bound to the overflow attribute, a
/// family whose limit is reached writes the SDK's own overflow series; one
/// with a further label (`finished_reason`, `source`) has room for it and
/// keeps that label.
///
/// The values are reference-counted: the SDK clones every series'
/// attributes at every collect, and an owned string would be copied there
/// (two allocations per series and scrape), a shared one is not.
pub(super) fn base_labels(label_set: Option<(&str, u32)>) -> Vec<KeyValue> {
    match label_set {
        Some((model_name, engine)) => vec![
            KeyValue::new(catalog::labels::ENGINE_LABELS[0], shared_string(model_name)),
            KeyValue::new(
                catalog::labels::ENGINE_LABELS[1],
                shared_string(&engine.to_string()),
            ),
        ],
        None => vec![KeyValue::new(OVERFLOW_ATTRIBUTE, true)],
    }
}

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
