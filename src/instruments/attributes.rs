//! The attributes every series of a `(model_name, engine)` label set (or of
//! the overflow label set) carries, built once per label set.

use std::sync::Arc;

use opentelemetry::KeyValue;

use crate::catalog::labels::ENGINE_LABELS;

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
            KeyValue::new(ENGINE_LABELS[0], shared_string(model_name)),
            KeyValue::new(ENGINE_LABELS[1], shared_string(&engine.to_string())),
        ],
        None => vec![KeyValue::new(OVERFLOW_ATTRIBUTE, true)],
    }
}
