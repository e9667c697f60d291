//! The Prometheus bridge: the SDK's state exposed under vLLM's own names.
//!
//! `opentelemetry_prometheus::exporter()` is the bridge's reader: a pull
//! reader on a `prometheus::Registry` of the bridge's own, configured without
//! unit suffixes, without scope labels and without `target_info` unless asked
//! for. Every scrape gathers that registry (which collects the SDK);
//! [`PrometheusBridge`] maps the gathered families back to the catalog
//! (`vllm_request_num_preemptions` → `vllm:request_num_preemptions`),
//! restores HELP texts and label order, and hands a [`Family`] snapshot to
//! the encoders. The encoders ([`encode`]) are the project's own: the
//! `prometheus` crate writes neither vLLM's `le` spelling (`le="1.0"`) nor
//! OpenMetrics. [`http`] serves the result at `/metrics`.
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
mod process;
mod snapshot;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry_prometheus::PrometheusExporter;
use prometheus::proto::{MetricFamily, MetricType};

use crate::catalog::{self, Kind, MetricDef, ValueType};
use crate::instruments::OVERFLOW_ATTRIBUTE;
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

    /// The bridge, and the reader to register with the meter provider.
    pub fn build(self) -> (PrometheusBridge, PrometheusExporter) {
        let registry = prometheus::Registry::new();
        let mut exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .without_units()
            .scope_info_enabled(false);
        if !self.target_info {
            exporter = exporter.without_target_info();
        }
        let exporter = exporter
            .build()
            .expect("a fresh registry accepts the exporter's collector");
        let mut by_gathered_name = HashMap::new();
        for (index, def) in catalog::all().enumerate() {
            let suffix = if def.kind == Kind::Counter {
                "_total"
            } else {
                ""
            };
            // Either name style of the Views reaches the registry sanitized.
            for name in [def.otel_name, def.vllm_name] {
                by_gathered_name.insert(format!("{}{suffix}", metric_name(name)), index);
            }
        }
        (
            PrometheusBridge {
                registry,
                by_gathered_name: Arc::new(by_gathered_name),
            },
            exporter,
        )
    }
}

/// A metric name as the Prometheus exporter writes it: `:` kept, every other
/// character Prometheus does not allow replaced by `_`.
fn metric_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The overflow attribute as the exporter writes it as a label name.
fn overflow_label() -> String {
    metric_name(OVERFLOW_ATTRIBUTE)
}

/// Reads the SDK state through `opentelemetry-prometheus` and renders it with
/// vLLM's names. Cloning shares the same registry.
#[derive(Clone)]
pub struct PrometheusBridge {
    registry: prometheus::Registry,
    /// Catalog position of each family, by its gathered name.
    by_gathered_name: Arc<HashMap<String, usize>>,
}

impl std::fmt::Debug for PrometheusBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusBridge").finish_non_exhaustive()
    }
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

/// The series' labels: the overflow label first (it stands for `model_name`
/// and `engine`), then the catalog's labels in catalog order, then any
/// others by name.
fn ordered_labels(metric: &prometheus::proto::Metric, order: &[&str]) -> Vec<(String, String)> {
    let overflow = overflow_label();
    let mut labels: Vec<(String, String)> = metric
        .get_label()
        .iter()
        .map(|l| (l.name().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort_by_cached_key(|(name, _)| {
        let rank = if *name == overflow {
            0
        } else {
            1 + order.iter().position(|o| o == name).unwrap_or(order.len())
        };
        (rank, name.clone())
    });
    labels
}

fn series_value(family: &MetricFamily, metric: &prometheus::proto::Metric) -> Value {
    match family.get_field_type() {
        MetricType::COUNTER => Value::Scalar(metric.get_counter().get_value()),
        MetricType::HISTOGRAM => {
            let h = metric.get_histogram();
            Value::Histogram {
                buckets: h
                    .get_bucket()
                    .iter()
                    .map(|b| (b.upper_bound(), b.cumulative_count()))
                    .collect(),
                sum: h.get_sample_sum(),
                count: h.get_sample_count(),
            }
        }
        _ => Value::Scalar(metric.get_gauge().get_value()),
    }
}

/// A gathered family from outside the catalog (`target_info`, or a host's own).
fn other_family(gathered: &MetricFamily) -> Family {
    let kind = match gathered.get_field_type() {
        MetricType::COUNTER => Kind::Counter,
        MetricType::HISTOGRAM => Kind::Histogram,
        _ => Kind::Gauge,
    };
    // The encoder adds a counter's `_total` back.
    let name = match kind {
        Kind::Counter => gathered.name().trim_end_matches("_total"),
        _ => gathered.name(),
    };
    Family {
        name: Cow::Owned(name.to_owned()),
        help: Cow::Owned(gathered.help().to_owned()),
        kind,
        value_type: ValueType::Float,
        series: Vec::new(),
    }
}

impl PrometheusBridge {
    /// A builder with the defaults (no `target_info`).
    pub fn builder() -> PrometheusBridgeBuilder {
        PrometheusBridgeBuilder::default()
    }

    /// Collects the current state: every catalog family in catalog order
    /// (with or without series), then any family from outside the catalog
    /// (`target_info` when enabled).
    pub fn snapshot(&self) -> Vec<Family> {
        let defs: Vec<&'static MetricDef> = catalog::all().collect();
        let mut families: Vec<Family> = defs.iter().map(|def| catalog_family(def)).collect();
        let mut others: Vec<Family> = Vec::new();
        for gathered in self.registry.gather() {
            let index = self.by_gathered_name.get(gathered.name()).copied();
            let (family, order) = match index {
                Some(index) => (&mut families[index], defs[index].labels),
                None => {
                    others.push(other_family(&gathered));
                    (others.last_mut().expect("just pushed"), &[][..])
                }
            };
            for metric in gathered.get_metric() {
                family.series.push(Series {
                    labels: ordered_labels(metric, order),
                    value: series_value(&gathered, metric),
                });
            }
        }
        families.append(&mut others);
        for family in &mut families {
            snapshot::sort_series(&mut family.series);
        }
        families
    }

    /// The `prometheus::Registry` the bridge's reader collects into. A host
    /// may register collectors of its own on it; every scrape gathers it.
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
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
    use opentelemetry::KeyValue;
    use opentelemetry_sdk::Resource;

    #[test]
    fn target_info_carries_the_resource_only_when_asked_for() {
        let resource = Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", "svc"),
                KeyValue::new("service.instance.id", "i-1"),
            ])
            .build();
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
            " Target metadata\n# TYPE target_info gauge\ntarget_info{service_instance_id=\"i-1\",service_name=\"svc\"} 1.0\n",
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
