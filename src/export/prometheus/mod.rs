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
//! OpenMetrics. `http` (feature `http`) serves the result at `/metrics`.
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

mod classes;
mod encode;
#[cfg(feature = "http")]
pub mod http;
mod layout;
#[cfg(feature = "http")]
mod process;
mod snapshot;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_prometheus::PrometheusExporter;
use prometheus::proto::{Metric, MetricFamily, MetricType};

use crate::catalog::labels::ENGINE_LABELS;
use crate::catalog::{self, Kind, MetricDef, ValueType};
use crate::instruments::exemplars::{Exemplar, ExemplarSnapshot, Exemplars, SeriesLabelSet};
use crate::instruments::{SloOutcome, OVERFLOW_ATTRIBUTE};
pub use encode::{encode, format_float, Format};
use encode::{LabelBlock, LeCache};
use layout::Layout;
pub use snapshot::{Family, Series, Value};

/// Configures a [`PrometheusBridge`].
#[derive(Debug, Default)]
pub struct PrometheusBridgeBuilder {
    target_info: bool,
    semconv: bool,
}

impl PrometheusBridgeBuilder {
    /// Also expose the OpenTelemetry resource as `target_info` (off by default:
    /// vLLM has no such family).
    pub fn with_target_info(mut self, enabled: bool) -> Self {
        self.target_info = enabled;
        self
    }

    /// Also expose the semantic-convention streams (`--semconv-prometheus`),
    /// after vLLM's families, under the names the Collector's Prometheus
    /// exporter gives them (`gen_ai_server_request_duration_seconds`). Off
    /// by default: recorded for OTLP, they are left out of the exposition.
    pub fn with_semconv(mut self, enabled: bool) -> Self {
        self.semconv = enabled;
        self
    }

    /// The bridge, and the reader to register with the meter provider.
    pub fn build(self) -> (PrometheusBridge, PrometheusExporter) {
        let registry = prometheus::Registry::new();
        let exporter = reader_on(&registry, self.target_info);
        let mut by_gathered_name = HashMap::new();
        for (index, def) in catalog::all().enumerate() {
            let suffix = if def.kind == Kind::Counter {
                "_total"
            } else {
                ""
            };
            // Either name style of the Views reaches the registry sanitized.
            for name in [def.otel_name, def.vllm_name] {
                by_gathered_name.insert(
                    format!("{}{suffix}", metric_name(name)),
                    Place::Catalog(index),
                );
            }
        }
        for (index, def) in catalog::semconv::ALL.iter().enumerate() {
            let place = match self.semconv {
                true => Place::Semconv(index),
                false => Place::Hidden,
            };
            by_gathered_name.insert(metric_name(def.otel_name), place);
        }
        (
            PrometheusBridge {
                registry,
                latency_registries: Arc::default(),
                by_gathered_name: Arc::new(by_gathered_name),
                semconv: self.semconv,
                overflow_label: Arc::from(metric_name(OVERFLOW_ATTRIBUTE)),
                last_len: Arc::new(AtomicUsize::new(0)),
                exemplars: None,
            },
            exporter,
        )
    }
}

/// An `opentelemetry-prometheus` reader collecting into `registry` (which
/// takes one: the exporter's collector describes no metrics, so a registry
/// holds one such collector at most).
fn reader_on(registry: &prometheus::Registry, target_info: bool) -> PrometheusExporter {
    let mut exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .without_units()
        .scope_info_enabled(false);
    if !target_info {
        exporter = exporter.without_target_info();
    }
    exporter
        .build()
        .expect("a fresh registry accepts the exporter's collector")
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

/// Where a gathered family goes in the exposition.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// Its position in the catalog.
    Catalog(usize),
    /// Its position in the semantic-convention tier.
    Semconv(usize),
    /// Recorded for OTLP only.
    Hidden,
}

/// Reads the SDK state through `opentelemetry-prometheus` and renders it with
/// vLLM's names. Cloning shares the same registry.
#[derive(Clone)]
pub struct PrometheusBridge {
    registry: prometheus::Registry,
    /// The registries of [`PrometheusBridge::latency_reader`]s.
    latency_registries: Arc<Mutex<Vec<prometheus::Registry>>>,
    /// Where each known family goes, by its gathered name.
    by_gathered_name: Arc<HashMap<String, Place>>,
    /// Whether the semantic-convention families are exposed.
    semconv: bool,
    /// The overflow attribute as the exporter writes it as a label name.
    overflow_label: Arc<str>,
    /// The length of the latest exposition: the next one's buffer is
    /// reserved whole, not grown as it is written.
    last_len: Arc<AtomicUsize>,
    /// The instruments' exemplars, when they keep any.
    exemplars: Option<Exemplars>,
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

/// The family of a vLLM family's series by class (`--attribute`).
fn by_class_family(def: &'static MetricDef, name: &'static str) -> Family {
    Family {
        name: Cow::Borrowed(name),
        help: Cow::Owned(format!("{} By request class (--attribute).", def.help)),
        kind: def.kind,
        value_type: def.value_type,
        series: Vec::new(),
    }
}

/// The value of a gathered series, as the data model holds it.
fn series_value(family: &MetricFamily, metric: &Metric) -> Value {
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

/// A gathered family from outside the catalog (`target_info`, or a host's
/// own), without its series.
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

/// What one scrape gathered, in exposition order: every catalog family
/// (gathered or not), the semantic-convention families when exposed
/// (gathered or not), then the gathered families outside the catalog.
struct Gathered {
    families: Vec<MetricFamily>,
    /// Per catalog family, in catalog order: its gathered family, if any.
    by_catalog: Vec<Option<usize>>,
    /// Per catalog family, in catalog order: its series by class, when it
    /// has any (`--attribute`; [`classes`]).
    by_class: Vec<Option<usize>>,
    /// Per semantic-convention family when exposed, in tier order: its
    /// gathered family, if any; empty when not exposed.
    by_semconv: Vec<Option<usize>>,
    /// The gathered families outside the catalog, in gathered order.
    others: Vec<usize>,
}

/// One family of the exposition: its metadata and, when it was gathered,
/// the layout of its series.
struct Laid<'g> {
    meta: Family,
    /// The catalog family, for one from the catalog.
    def: Option<&'static MetricDef>,
    layout: Option<Layout<'g>>,
}

impl Gathered {
    fn families<'g>(&'g self, overflow_label: &'g str) -> impl Iterator<Item = Laid<'g>> + 'g {
        let defs = catalog::all();
        let defs = defs.chain(catalog::semconv::ALL.iter().copied());
        let places = self.by_catalog.iter().chain(&self.by_semconv);
        // The SLO families exist only with `--slo`: without it they are not
        // in the exposition at all (vLLM's families are, series or not).
        let optional = |def: &MetricDef| {
            catalog::slo::ALL
                .iter()
                .any(|slo| slo.vllm_name == def.vllm_name)
        };
        // Each vLLM family with series by class is followed by them.
        let by_class = self
            .by_class
            .iter()
            .map(Some)
            .chain(std::iter::repeat(None));
        let catalog = defs
            .zip(places)
            .zip(by_class)
            .filter(move |((def, gathered), _)| gathered.is_some() || !optional(def))
            .flat_map(move |((def, gathered), by_class)| {
                let laid = |meta, i: usize| Laid {
                    meta,
                    def: Some(def),
                    layout: Some(Layout::new(&self.families[i], overflow_label, def.labels)),
                };
                let family = match gathered {
                    Some(i) => laid(catalog_family(def), *i),
                    None => Laid {
                        meta: catalog_family(def),
                        def: Some(def),
                        layout: None,
                    },
                };
                let twin = by_class
                    .copied()
                    .flatten()
                    .zip(def.by_class_name)
                    .map(|(i, name)| laid(by_class_family(def, name), i));
                std::iter::once(family).chain(twin)
            });
        let others = self.others.iter().map(move |&i| {
            let family = &self.families[i];
            Laid {
                meta: other_family(family),
                def: None,
                layout: Some(Layout::new(family, overflow_label, &[])),
            }
        });
        catalog.chain(others)
    }
}

impl PrometheusBridge {
    /// A builder with the defaults (no `target_info`).
    pub fn builder() -> PrometheusBridgeBuilder {
        PrometheusBridgeBuilder::default()
    }

    /// Gathers the registry (the SDK's collect and `opentelemetry-prometheus`'s
    /// families) and places each family in the exposition.
    fn gather(&self) -> Gathered {
        let mut families = self.registry.gather();
        for registry in self
            .latency_registries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            families.extend(registry.gather());
        }
        let mut by_catalog = vec![None; catalog::all().count()];
        let mut by_semconv = match self.semconv {
            true => vec![None; catalog::semconv::ALL.len()],
            false => Vec::new(),
        };
        let mut others = Vec::new();
        for (i, gathered) in families.iter().enumerate() {
            match self.by_gathered_name.get(gathered.name()) {
                Some(Place::Catalog(index)) => by_catalog[*index] = Some(i),
                Some(Place::Semconv(index)) => by_semconv[*index] = Some(i),
                Some(Place::Hidden) => {}
                None => others.push(i),
            }
        }
        let mut by_class = vec![None; by_catalog.len()];
        for (def, (gathered, twin)) in catalog::all().zip(by_catalog.iter().zip(&mut by_class)) {
            if let (Some(i), Some(_)) = (gathered, def.by_class_name) {
                if let Some(series_by_class) = classes::split_classes(&mut families[*i]) {
                    families.push(series_by_class);
                    *twin = Some(families.len() - 1);
                }
            }
        }
        Gathered {
            families,
            by_catalog,
            by_class,
            by_semconv,
            others,
        }
    }

    /// Writes the instruments' exemplars into OpenMetrics expositions (and
    /// the [`snapshot`](Self::snapshot)): each per-request histogram
    /// bucket's latest request and each SLO outcome's, linked to its
    /// `llm_request` span. Text 0.0.4 stays as it is.
    pub fn with_exemplars(mut self, exemplars: Option<&Exemplars>) -> Self {
        self.exemplars = exemplars.cloned();
        self
    }

    /// Collects the current state: every catalog family in catalog order
    /// (with or without series), then any family from outside the catalog
    /// (`target_info` when enabled); the exemplars too, when the bridge
    /// writes them.
    pub fn snapshot(&self) -> Vec<Family> {
        let gathered = self.gather();
        let exemplars = self.exemplars.as_ref().map(Exemplars::snapshot);
        gathered
            .families(&self.overflow_label)
            .map(
                |Laid {
                     mut meta,
                     def,
                     layout,
                 }| {
                    if let Some(layout) = layout {
                        meta.series = layout
                            .series()
                            .map(|(metric, labels)| {
                                let labels: Vec<(String, String)> = labels
                                    .map(|l| (l.name().to_owned(), l.value().to_owned()))
                                    .collect();
                                let pairs = labels.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                                let exemplars = match (&exemplars, def) {
                                    (Some(snapshot), Some(def)) => {
                                        series_exemplars(snapshot, def, &self.overflow_label, pairs)
                                            .to_vec()
                                    }
                                    _ => Vec::new(),
                                };
                                Series {
                                    value: series_value(layout.family(), metric),
                                    labels,
                                    exemplars,
                                }
                            })
                            .collect();
                    }
                    meta
                },
            )
            .collect()
    }

    /// One more reader whose families join this bridge's exposition: for
    /// the provider that keeps the latency histograms' explicit buckets
    /// when OTLP gets exponential ones
    /// ([`InstrumentsBuilder::with_explicit_histogram_reader`](crate::instruments::InstrumentsBuilder::with_explicit_histogram_reader)).
    /// It writes no `target_info` (the main reader does, when asked).
    pub fn latency_reader(&self) -> PrometheusExporter {
        let registry = prometheus::Registry::new();
        let reader = reader_on(&registry, false);
        self.latency_registries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(registry);
        reader
    }

    /// The `prometheus::Registry` the bridge's reader collects into. A host
    /// may register collectors of its own on it; every scrape gathers it.
    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    /// The current exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        self.encode_with(format, &[])
    }

    /// The current exposition in `format`, with `extra` families (a host's,
    /// or the process families) after the bridge's.
    ///
    /// The bridge's series are written straight from the gathered families
    /// into one buffer, reserved at the previous exposition's length: each
    /// series' labels are rendered once for all of its lines, a histogram
    /// family's `le` strings once for all of its series.
    pub fn encode_with(&self, format: Format, extra: &[Family]) -> String {
        let gathered = self.gather();
        // Text 0.0.4 has no exemplars: its scrape does not even place them.
        let exemplars = match format {
            Format::OpenMetrics => self.exemplars.as_ref().map(Exemplars::snapshot),
            Format::Text => None,
        };
        let last_len = self.last_len.load(Ordering::Relaxed);
        let mut out = String::with_capacity(last_len + last_len / 16);
        let mut labels = LabelBlock::default();
        let mut les = LeCache::default();
        for Laid { meta, def, layout } in gathered.families(&self.overflow_label) {
            encode::write_header(&mut out, &meta.name, &meta.help, meta.kind, format);
            if let Some(layout) = layout {
                let exemplars = exemplars.as_ref().zip(def);
                let exemplars =
                    exemplars.map(|(snapshot, def)| (snapshot, def, &*self.overflow_label));
                write_gathered(&mut out, &meta, &layout, &mut labels, &mut les, exemplars);
            }
        }
        for family in extra {
            encode::write_family(&mut out, family, format);
        }
        encode::write_end(&mut out, format);
        self.last_len.store(out.len(), Ordering::Relaxed);
        out
    }
}

/// A series' exemplars, from its family and labels: a per-request
/// histogram's one per bucket, an SLO outcome's one; none for others.
fn series_exemplars<'s, 'l>(
    snapshot: &'s ExemplarSnapshot,
    def: &MetricDef,
    overflow_label: &str,
    labels: impl Iterator<Item = (&'l str, &'l str)>,
) -> Cow<'s, [Option<Exemplar>]> {
    let is_slo = def.vllm_name == catalog::slo::SLO_REQUESTS.vllm_name;
    if def.kind != Kind::Histogram && !is_slo {
        return Cow::Borrowed(&[]);
    }
    let (mut model, mut engine, mut overflow, mut outcome) = (None, None, false, None);
    let (mut lora_name, mut priority) = (None, None);
    for (name, value) in labels {
        match name {
            _ if name == ENGINE_LABELS[0] => model = Some(value),
            _ if name == ENGINE_LABELS[1] => engine = value.parse::<u32>().ok(),
            _ if name == overflow_label => overflow = true,
            _ if name == catalog::slo::SLO_OUTCOME_LABEL => outcome = Some(value),
            _ if name == catalog::labels::LORA_NAME_LABEL => lora_name = Some(value),
            _ if name == catalog::labels::PRIORITY_LABEL => priority = Some(value),
            _ => {}
        }
    }
    let label_set = match (overflow, model, engine) {
        (true, _, _) => SeriesLabelSet::Overflow,
        (false, Some(model), Some(engine)) => match (lora_name, priority) {
            (None, None) => SeriesLabelSet::Of(model, engine),
            _ => SeriesLabelSet::Classed(model, engine, lora_name, priority),
        },
        _ => return Cow::Borrowed(&[]),
    };
    if is_slo {
        let outcome = SloOutcome::ALL
            .into_iter()
            .find(|o| Some(o.as_str()) == outcome);
        return match outcome.and_then(|o| snapshot.slo(o, label_set)) {
            Some(exemplar) => Cow::Owned(vec![Some(*exemplar)]),
            None => Cow::Borrowed(&[]),
        };
    }
    Cow::Borrowed(snapshot.histogram(def, label_set).unwrap_or(&[]))
}

/// Writes a gathered family's series under `meta`'s name, with each
/// series' exemplars that `exemplars` finds from its labels.
fn write_gathered(
    out: &mut String,
    meta: &Family,
    layout: &Layout<'_>,
    labels: &mut LabelBlock,
    les: &mut LeCache,
    exemplars: Option<(&ExemplarSnapshot, &MetricDef, &str)>,
) {
    let field_type = layout.family().get_field_type();
    for (metric, pairs) in layout.series() {
        labels.clear();
        let mut names_values = Vec::new();
        for pair in pairs {
            labels.push(pair.name(), pair.value());
            if exemplars.is_some() {
                names_values.push((pair.name(), pair.value()));
            }
        }
        let found = exemplars.map(|(snapshot, def, overflow_label)| {
            series_exemplars(snapshot, def, overflow_label, names_values.iter().copied())
        });
        let found = found.as_deref().filter(|e| !e.is_empty());
        if field_type == MetricType::HISTOGRAM {
            let h = metric.get_histogram();
            let buckets = h.get_bucket();
            let les = les.les(buckets.iter().map(|b| b.upper_bound()));
            encode::write_histogram(
                out,
                &meta.name,
                labels,
                les,
                buckets.iter().map(|b| b.cumulative_count()),
                h.get_sample_sum(),
                h.get_sample_count(),
                found,
            );
            continue;
        }
        let scalar = if field_type == MetricType::COUNTER {
            metric.get_counter().get_value()
        } else {
            metric.get_gauge().get_value()
        };
        let exemplar = found.and_then(|e| e[0].as_ref());
        encode::write_scalar(
            out,
            &meta.name,
            meta.kind,
            labels,
            scalar,
            meta.value_type,
            exemplar,
        );
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

    /// The scrape writes the gathered series directly; the data model's
    /// encoder writes the snapshot. Both must give the same text, for every
    /// kind of family, the overflow series, `target_info`, escapes and
    /// engines past 9 included.
    #[test]
    fn the_direct_scrape_writes_what_the_snapshot_encodes() {
        use crate::tracker::{RequestMetrics, RequestParams};
        let (bridge, reader) = PrometheusBridge::builder().with_target_info(true).build();
        let instruments = Instruments::builder()
            .with_max_label_sets(3)
            .with_reader(reader)
            .build();
        let params = RequestParams {
            arrival_time: 100.0,
            prompt_len: 16,
            max_tokens: Some(8),
            n: 1,
        };
        for (model, engine) in [("m\"1\\\n", 10), ("m", 9), ("m", 0), ("z", 2), ("a", 1)] {
            let mut request = RequestMetrics::start(&instruments, model, engine, params);
            request.finish(101.25, crate::protocol::FinishReason::Stop);
        }
        for format in [Format::Text, Format::OpenMetrics] {
            let direct = bridge.encode(format);
            assert!(direct.contains("otel_metric_overflow=\"true\""), "{direct}");
            assert!(direct.contains("model_name=\"m\\\"1\\\\\\n\""), "{direct}");
            assert_eq!(direct, encode(&bridge.snapshot(), format));
        }
    }

    #[test]
    fn a_bridge_without_instruments_shows_every_family_empty() {
        let (bridge, _reader) = PrometheusBridge::builder().build();
        let families = bridge.snapshot();
        // Every family but the SLO ones, which exist only with `--slo`.
        assert_eq!(
            families.len(),
            catalog::all().count() - catalog::slo::ALL.len()
        );
        assert!(families.iter().all(|f| !f.name.contains("slo")));
        assert!(families.iter().all(|f| f.series.is_empty()));
    }
}
