//! Collected metrics as an OTLP `ExportMetricsServiceRequest`.
//!
//! Counters become monotonic `Sum`s of integers, histograms explicit-bucket
//! `Histogram`s (no min/max, as vLLM keeps none), gauges `Gauge`s of integers
//! or doubles as the catalog says. With delta temporality each export carries
//! what changed since the last export the collector accepted, and series that
//! did not change are left out.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;

use super::{NameStyle, Temporality};
use crate::catalog::{Kind, ValueType};
use crate::instruments::SCOPE_NAME;
use crate::metrics::data::{self, HistogramValue, Value};
use crate::metrics::{Collected, Labels, Resource};

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn key_value(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

fn attributes(labels: &Labels) -> Vec<KeyValue> {
    labels.iter().map(|(k, v)| key_value(k, v)).collect()
}

/// Builds export requests; remembers what was last accepted, for delta.
///
/// ```
/// use std::sync::Arc;
/// use vllm_otel_metrics::catalog::NUM_PREEMPTIONS;
/// use vllm_otel_metrics::export::otlp::encode::RequestEncoder;
/// use vllm_otel_metrics::export::otlp::{NameStyle, Temporality};
/// use vllm_otel_metrics::metrics::{Counter, Family, Registry, Resource};
///
/// let preemptions = Arc::new(Family::<Counter>::new(&NUM_PREEMPTIONS, Vec::new()));
/// let mut registry = Registry::new(Resource::default());
/// registry.register(preemptions.clone());
/// let series = preemptions.series(vec![("model_name", "m".into()), ("engine", "0".into())]);
/// let mut encoder = RequestEncoder::new(NameStyle::Prometheus, Temporality::Delta, registry.start_time());
/// series.add(3);
/// let collected = registry.collect();
/// let request = encoder.request(&collected, registry.resource());
/// assert_eq!(request.resource_metrics[0].scope_metrics[0].metrics[0].name, NUM_PREEMPTIONS.vllm_name);
/// encoder.accepted(&collected);
/// // Nothing changed since the accepted export: nothing to send.
/// let request = encoder.request(&registry.collect(), registry.resource());
/// assert!(request.resource_metrics[0].scope_metrics[0].metrics.is_empty());
/// ```
#[derive(Debug)]
pub struct RequestEncoder {
    names: NameStyle,
    temporality: Temporality,
    start_time: SystemTime,
    /// Delta only: per family and labels, the value last accepted and when
    /// it was read (where the series' next delta interval starts).
    accepted: HashMap<(&'static str, Labels), (Value, SystemTime)>,
}

impl RequestEncoder {
    /// An encoder for a registry whose aggregation started at `start_time`.
    pub fn new(names: NameStyle, temporality: Temporality, start_time: SystemTime) -> Self {
        RequestEncoder {
            names,
            temporality,
            start_time,
            accepted: HashMap::new(),
        }
    }

    /// Whether requests carry changes rather than totals.
    pub fn is_delta(&self) -> bool {
        self.temporality == Temporality::Delta
    }

    /// The request carrying `collected`.
    pub fn request(
        &self,
        collected: &Collected,
        resource: &Resource,
    ) -> ExportMetricsServiceRequest {
        let metrics = collected
            .metrics
            .iter()
            .filter_map(|m| self.metric(m, collected.time))
            .collect();
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(ProtoResource {
                    attributes: resource
                        .attributes()
                        .iter()
                        .map(|(k, v)| key_value(k, v))
                        .collect(),
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.to_owned(),
                        ..Default::default()
                    }),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }

    /// Records that the collector accepted the request built from `collected`
    /// (the base of the next deltas).
    pub fn accepted(&mut self, collected: &Collected) {
        if self.temporality == Temporality::Cumulative {
            return;
        }
        for metric in &collected.metrics {
            for point in &metric.points {
                let key = (metric.def.otel_name, point.labels.clone());
                // Unchanged series were not sent: their interval goes on.
                let unchanged = self
                    .accepted
                    .get(&key)
                    .is_some_and(|(value, _)| *value == point.value);
                if !unchanged {
                    self.accepted
                        .insert(key, (point.value.clone(), collected.time));
                }
            }
        }
    }

    /// The start of the point's interval and the value to send, or `None`
    /// for an unchanged delta. A delta interval starts where the series' last
    /// accepted one ended, as receivers that add deltas up require.
    fn value_to_send(
        &self,
        metric: &data::Metric,
        point: &data::DataPoint,
    ) -> Option<(SystemTime, Value)> {
        if self.temporality == Temporality::Cumulative {
            return Some((self.start_time, point.value.clone()));
        }
        let Some((previous, since)) = self
            .accepted
            .get(&(metric.def.otel_name, point.labels.clone()))
        else {
            // First sight, zero-valued series included, as the bridge shows them.
            return Some((self.start_time, point.value.clone()));
        };
        let value = match (&point.value, previous) {
            (Value::Counter(now), Value::Counter(before)) => {
                let delta = now.saturating_sub(*before);
                (delta > 0).then_some(Value::Counter(delta))
            }
            (Value::Histogram(now), Value::Histogram(before)) => {
                (now.count > before.count).then(|| {
                    Value::Histogram(HistogramValue {
                        bucket_counts: now
                            .bucket_counts
                            .iter()
                            .zip(&before.bucket_counts)
                            .map(|(n, b)| n.saturating_sub(*b))
                            .collect(),
                        sum: now.sum - before.sum,
                        count: now.count - before.count,
                    })
                })
            }
            (value, _) => Some(value.clone()),
        };
        value.map(|v| (*since, v))
    }

    fn metric(&self, metric: &data::Metric, time: SystemTime) -> Option<Metric> {
        let def = metric.def;
        let time_unix_nano = unix_nanos(time);
        let temporality = match self.temporality {
            Temporality::Cumulative => AggregationTemporality::Cumulative,
            Temporality::Delta => AggregationTemporality::Delta,
        } as i32;
        let points = metric.points.iter().filter_map(|p| {
            let (start, value) = self.value_to_send(metric, p)?;
            Some((attributes(&p.labels), unix_nanos(start), value))
        });
        let data = match def.kind {
            Kind::Counter => metric::Data::Sum(Sum {
                data_points: points
                    .map(
                        |(attributes, start_time_unix_nano, value)| NumberDataPoint {
                            attributes,
                            start_time_unix_nano,
                            time_unix_nano,
                            value: number(&value, def.value_type),
                            ..Default::default()
                        },
                    )
                    .collect(),
                aggregation_temporality: temporality,
                is_monotonic: true,
            }),
            Kind::Gauge => metric::Data::Gauge(Gauge {
                data_points: points
                    .map(|(attributes, _, value)| NumberDataPoint {
                        attributes,
                        time_unix_nano,
                        value: number(&value, def.value_type),
                        ..Default::default()
                    })
                    .collect(),
            }),
            Kind::Histogram => metric::Data::Histogram(Histogram {
                data_points: points
                    .filter_map(|(attributes, start_time_unix_nano, value)| match value {
                        Value::Histogram(h) => Some(HistogramDataPoint {
                            attributes,
                            start_time_unix_nano,
                            time_unix_nano,
                            count: h.count,
                            sum: Some(h.sum),
                            bucket_counts: h.bucket_counts,
                            explicit_bounds: metric.bounds.to_vec(),
                            ..Default::default()
                        }),
                        _ => None,
                    })
                    .collect(),
                aggregation_temporality: temporality,
            }),
        };
        let empty = match &data {
            metric::Data::Sum(s) => s.data_points.is_empty(),
            metric::Data::Gauge(g) => g.data_points.is_empty(),
            metric::Data::Histogram(h) => h.data_points.is_empty(),
            _ => true,
        };
        if empty {
            return None;
        }
        Some(Metric {
            name: match self.names {
                NameStyle::Otel => def.otel_name,
                NameStyle::Prometheus => def.vllm_name,
            }
            .to_owned(),
            description: def.help.to_owned(),
            unit: def.unit.to_owned(),
            metadata: Vec::new(),
            data: Some(data),
        })
    }
}

/// A counter's or gauge's value as OTLP carries it (integers as the
/// catalog says); `None` for a histogram.
fn number(value: &Value, value_type: ValueType) -> Option<number_data_point::Value> {
    use number_data_point::Value::{AsDouble, AsInt};
    match (value, value_type) {
        (Value::Counter(v), _) => Some(AsInt(i64::try_from(*v).unwrap_or(i64::MAX))),
        (Value::Gauge(v), ValueType::Integer) => Some(AsInt(*v as i64)),
        (Value::Gauge(v), ValueType::Float) => Some(AsDouble(*v)),
        (Value::Histogram(_), _) => None,
    }
}
