//! The Prometheus bridge: the OpenTelemetry data exposed under vLLM's own names.
//!
//! [`PrometheusBridge`] collects the [`Registry`] on every scrape and writes
//! each catalog family under its vLLM name (`vllm:request_num_preemptions`),
//! with its HELP text, labels in catalog order, no unit suffixes and no
//! `otel_scope_*` labels; the resource becomes `target_info` only when asked
//! for. It hands a [`Family`] snapshot to the encoders; [`http`] serves it at
//! `/metrics`.
//!
//! ```
//! use vllm_otel_metrics::export::prometheus::{Format, PrometheusBridge};
//! use vllm_otel_metrics::instruments::Instruments;
//!
//! let (bridge, reader) = PrometheusBridge::builder().build();
//! let instruments = Instruments::builder().with_reader(reader).build();
//! let text = bridge.encode(Format::Text);
//! assert!(text.starts_with("# HELP vllm:num_preemptions_total Cumulative number of preemption events.\n"));
//! # drop(instruments);
//! ```

mod encode;
pub mod http;
mod snapshot;

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use crate::catalog::{self, Kind, MetricDef, ValueType};
use crate::metrics::data::{self, Value as DataValue};
use crate::metrics::{MetricReader, Registry};
pub use encode::{encode, format_float, Format};
pub use snapshot::{Family, Series, Value};

/// Configures a [`PrometheusBridge`].
#[derive(Debug, Default)]
pub struct PrometheusBridgeBuilder {
    target_info: bool,
}

impl PrometheusBridgeBuilder {
    /// Also expose the OpenTelemetry resource as `target_info` (off by default:
    /// vLLM has no such family).
    pub fn with_target_info(mut self, enabled: bool) -> Self {
        self.target_info = enabled;
        self
    }

    /// The bridge, and the reader to register with the instruments.
    pub fn build(self) -> (PrometheusBridge, PrometheusReader) {
        let registry = Arc::new(OnceLock::new());
        (
            PrometheusBridge {
                registry: Arc::clone(&registry),
                target_info: self.target_info,
            },
            PrometheusReader { registry },
        )
    }
}

/// The bridge's side of the instruments: it only keeps the registry, which
/// the bridge collects on every scrape.
#[derive(Debug)]
pub struct PrometheusReader {
    registry: Arc<OnceLock<Arc<Registry>>>,
}

impl MetricReader for PrometheusReader {
    fn register(&self, registry: Arc<Registry>) {
        // A reader serves one set of instruments; a second registration is ignored.
        let _ = self.registry.set(registry);
    }
}

/// Collects the registry and renders it with vLLM's names. Cloning shares
/// the same registry.
#[derive(Debug, Clone)]
pub struct PrometheusBridge {
    registry: Arc<OnceLock<Arc<Registry>>>,
    target_info: bool,
}

fn catalog_family(def: &'static MetricDef) -> Family {
    Family {
        name: Cow::Borrowed(def.vllm_name),
        help: Cow::Borrowed(def.help),
        kind: def.kind,
        value_type: def.value_type,
        series: Vec::new(),
    }
}

/// Label names as Prometheus allows them (the overflow label has dots).
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn series(metric: &data::Metric, point: &data::DataPoint) -> Series {
    let value = match &point.value {
        DataValue::Counter(v) => Value::Scalar(*v as f64),
        DataValue::Gauge(v) => Value::Scalar(*v),
        DataValue::Histogram(h) => {
            let mut cumulative = 0;
            Value::Histogram {
                buckets: metric
                    .bounds
                    .iter()
                    .zip(&h.bucket_counts)
                    .map(|(&bound, &count)| {
                        cumulative += count;
                        (bound, cumulative)
                    })
                    .collect(),
                sum: h.sum,
                count: h.count,
            }
        }
    };
    Series {
        labels: point
            .labels
            .iter()
            .map(|(name, value)| (sanitize(name), value.clone()))
            .collect(),
        value,
    }
}

impl PrometheusBridge {
    /// A builder with the defaults (no `target_info`).
    pub fn builder() -> PrometheusBridgeBuilder {
        PrometheusBridgeBuilder::default()
    }

    /// Collects the current state: every catalog family in catalog order
    /// (with or without series), then `target_info` when enabled.
    pub fn snapshot(&self) -> Vec<Family> {
        let mut families: Vec<Family> = catalog::all().map(catalog_family).collect();
        let Some(registry) = self.registry.get() else {
            return families;
        };
        for metric in registry.collect().metrics {
            let Some(family) = families.iter_mut().find(|f| f.name == metric.def.vllm_name) else {
                continue;
            };
            family.series = metric.points.iter().map(|p| series(&metric, p)).collect();
            snapshot::sort_series(&mut family.series);
        }
        if self.target_info {
            let mut labels: Vec<(String, String)> = registry
                .resource()
                .attributes()
                .iter()
                .map(|(k, v)| (sanitize(k), v.clone()))
                .collect();
            labels.sort();
            families.push(Family {
                name: Cow::Borrowed("target_info"),
                help: Cow::Borrowed("Target metadata"),
                kind: Kind::Gauge,
                value_type: ValueType::Integer,
                series: vec![Series {
                    labels,
                    value: Value::Scalar(1.0),
                }],
            });
        }
        families
    }

    /// The current exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        encode(&self.snapshot(), format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instruments::Instruments;
    use crate::metrics::Resource;

    #[test]
    fn target_info_carries_the_resource_only_when_asked_for() {
        let resource = Resource::new([("service.name", "svc"), ("service.instance.id", "i-1")]);
        let (with, reader) = PrometheusBridge::builder().with_target_info(true).build();
        let (without, other_reader) = PrometheusBridge::builder().build();
        let _instruments = Instruments::builder()
            .with_resource(resource)
            .with_reader(reader)
            .with_reader(other_reader)
            .build();
        let text = with.encode(Format::Text);
        let (catalog_part, target_info) = text.split_once("# HELP target_info").unwrap();
        assert_eq!(
            target_info,
            format!(
                " Target metadata\n# TYPE target_info gauge\ntarget_info{{service_instance_id=\"i-1\",service_name=\"svc\",telemetry_sdk_language=\"rust\",telemetry_sdk_name=\"vllm-otel-metrics\",telemetry_sdk_version=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(catalog_part, without.encode(Format::Text));
    }

    #[test]
    fn a_bridge_without_instruments_shows_every_family_empty() {
        let (bridge, _reader) = PrometheusBridge::builder().build();
        let families = bridge.snapshot();
        assert_eq!(families.len(), catalog::all().count());
        assert!(families.iter().all(|f| f.series.is_empty()));
    }
}
