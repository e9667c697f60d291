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

/// Whether two label values are equal: those of 8 to 16 bytes (most
/// adapter names) by two overlapping word loads each, not a call to
/// `memcmp`, on a request's path.
#[inline]
pub(super) fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |bytes: &[u8], at: usize| {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_ne_bytes(word)
    };
    match len {
        8..=16 => word(a, 0) == word(b, 0) && word(a, len - 8) == word(b, len - 8),
        _ => a == b,
    }
}

#[cfg(test)]
mod same_str_tests {
    use super::same_str;

    #[test]
    fn equal_exactly_when_every_byte_is() {
        for len in 0..=24 {
            let a: String = (0..len)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            assert!(same_str(&a, &a.clone()), "{a:?}");
            for at in 0..len {
                let mut b = a.clone().into_bytes();
                b[at] = b'Z';
                let b = String::from_utf8(b).unwrap();
                assert!(!same_str(&a, &b), "{a:?} against {b:?}");
            }
            assert!(!same_str(&a, &format!("{a}x")));
        }
    }
}
