//! The Prometheus bridge: OpenTelemetry state exposed under vLLM's own names.
//!
//! `opentelemetry-prometheus` reads the SDK (no unit suffixes, no
//! `otel_scope_*` labels, `target_info` only on request); [`PrometheusBridge`]
//! maps its families back to the catalog (`vllm_request_num_preemptions` →
//! `vllm:request_num_preemptions`), restores HELP texts and label order, and
//! hands a [`Family`] snapshot to the encoders. [`http`] serves it at `/metrics`.
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
use std::collections::HashMap;

use opentelemetry_prometheus::PrometheusExporter;
use prometheus::proto::{MetricFamily, MetricType};

use crate::catalog::{self, Kind, MetricDef, ValueType};
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
        let mut by_bridge_name = HashMap::new();
        for def in catalog::all() {
            let suffix = if def.kind == Kind::Counter {
                "_total"
            } else {
                ""
            };
            // Either wire-name style of the Views reaches the bridge sanitized.
            for name in [def.otel_name, def.vllm_name] {
                by_bridge_name.insert(format!("{}{suffix}", sanitize(name)), def);
            }
        }
        (
            PrometheusBridge {
                registry,
                by_bridge_name,
            },
            exporter,
        )
    }
}

/// The Prometheus metric-name sanitizing of the bridge crate.
fn sanitize(name: &str) -> String {
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

/// Reads the SDK state through `opentelemetry-prometheus` and renders it with
/// vLLM's names. Cloning shares the same registry.
#[derive(Clone)]
pub struct PrometheusBridge {
    registry: prometheus::Registry,
    by_bridge_name: HashMap<String, &'static MetricDef>,
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

/// Puts the catalog's labels first, in catalog order, then any others by name.
fn ordered_labels(metric: &prometheus::proto::Metric, order: &[&str]) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = metric
        .get_label()
        .iter()
        .map(|l| (l.name().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort_by_key(|(name, _)| {
        let rank = order.iter().position(|o| o == name).unwrap_or(order.len());
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

impl PrometheusBridge {
    /// A builder with the defaults (no `target_info`).
    pub fn builder() -> PrometheusBridgeBuilder {
        PrometheusBridgeBuilder::default()
    }

    /// Collects the current state: every catalog family in catalog order
    /// (with or without series), then any family from outside the catalog.
    pub fn snapshot(&self) -> Vec<Family> {
        let mut families: Vec<Family> = catalog::all().map(catalog_family).collect();
        let mut others: Vec<Family> = Vec::new();
        for gathered in self.registry.gather() {
            let def = self.by_bridge_name.get(gathered.name()).copied();
            let family = match def {
                Some(def) => {
                    let index = catalog::all()
                        .position(|d| d == def)
                        .expect("mapped families are in the catalog");
                    &mut families[index]
                }
                None => {
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
                    others.push(Family {
                        name: Cow::Owned(name.to_owned()),
                        help: Cow::Owned(gathered.help().to_owned()),
                        kind,
                        value_type: ValueType::Float,
                        series: Vec::new(),
                    });
                    others.last_mut().expect("just pushed")
                }
            };
            let order = def.map_or(&[][..], |d| d.labels);
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

    /// The current exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        encode(&self.snapshot(), format)
    }
}
