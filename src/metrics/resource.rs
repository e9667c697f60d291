//! The entity producing the telemetry (OpenTelemetry resource attributes).

/// Resource attributes: unique keys, kept in insertion order.
///
/// ```
/// use vllm_otel_metrics::metrics::Resource;
/// let resource = Resource::new([("service.name", "a"), ("host.name", "h"), ("service.name", "b")]);
/// assert_eq!(resource.get("service.name"), Some("b"));
/// assert_eq!(resource.get("telemetry.sdk.language"), Some("rust"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    attributes: Vec<(String, String)>,
}

/// `telemetry.sdk.*` of this crate, and the default `service.name`.
fn defaults() -> [(&'static str, &'static str); 4] {
    [
        ("service.name", env!("CARGO_PKG_NAME")),
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.name", env!("CARGO_PKG_NAME")),
        ("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
    ]
}

impl Default for Resource {
    fn default() -> Self {
        Resource::new(std::iter::empty::<(String, String)>())
    }
}

impl Resource {
    /// The defaults (`service.name`, `telemetry.sdk.*`) overridden by
    /// `attributes`; of repeated keys the last wins.
    pub fn new<K: Into<String>, V: Into<String>>(
        attributes: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut resource = Resource {
            attributes: Vec::new(),
        };
        for (key, value) in defaults() {
            resource.set(key.to_owned(), value.to_owned());
        }
        for (key, value) in attributes {
            resource.set(key.into(), value.into());
        }
        resource
    }

    fn set(&mut self, key: String, value: String) {
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((key, value)),
        }
    }

    /// Every attribute.
    pub fn attributes(&self) -> &[(String, String)] {
        &self.attributes
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}
