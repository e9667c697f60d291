//! Spans kept in memory, for tests that read the `llm_request` spans a
//! tracker made.

use std::sync::{Arc, Mutex};

use opentelemetry::Value;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// Keeps the spans it is given.
#[derive(Debug, Clone, Default)]
pub struct KeptSpans(pub Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for KeptSpans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// A span's number attribute `key` (integer or float), if it has one.
pub fn number(span: &SpanData, key: &str) -> Option<f64> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            Value::F64(v) => *v,
            Value::I64(v) => *v as f64,
            other => panic!("{key}: {other:?}"),
        })
}
