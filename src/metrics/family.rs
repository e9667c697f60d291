//! The series of one catalog family, keyed by their labels.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::catalog::MetricDef;

use super::data::{DataPoint, Metric, Value};

/// Label pairs of a series, names from the catalog, in exposition order.
pub type Labels = Vec<(&'static str, String)>;

/// The only label of a series that stands for every label set beyond the
/// cardinality limit (OpenTelemetry's overflow attribute), with value `"true"`.
pub const OVERFLOW_LABEL: &str = "otel.metric.overflow";

/// A series a family can collect.
pub trait Series: Send + Sync + 'static {
    /// The series' value, or `None` while it has nothing to report.
    fn value(&self) -> Option<Value>;
}

/// A series that stands alone and is created by its family: the three
/// kinds ([`Counter`](super::Counter), [`Gauge`](super::Gauge),
/// [`Histogram`](super::Histogram)).
pub trait Aggregation: Series {
    /// A fresh series (histograms take the family's bounds).
    fn create(bounds: &[f64]) -> Self;
}

/// Every series of one family. Creating a series takes a write lock (once
/// per label set); recording goes through the returned handle and never
/// touches the family.
///
/// ```
/// use vllm_otel_metrics::catalog::GENERATION_TOKENS;
/// use vllm_otel_metrics::metrics::{Counter, Family};
///
/// let family = Family::<Counter>::new(&GENERATION_TOKENS, Vec::new());
/// let handle = family.series(vec![("model_name", "m".into()), ("engine", "0".into())]);
/// handle.add(5);
/// assert_eq!(family.collect().points.len(), 1);
/// ```
#[derive(Debug)]
pub struct Family<M> {
    def: &'static MetricDef,
    bounds: Arc<[f64]>,
    series: RwLock<HashMap<Labels, Arc<M>>>,
}

impl<M: Series> Family<M> {
    /// An empty family; `bounds` are the histogram buckets (empty otherwise).
    pub fn new(def: &'static MetricDef, bounds: Vec<f64>) -> Self {
        Family {
            def,
            bounds: bounds.into(),
            series: RwLock::default(),
        }
    }

    /// Adds a series made elsewhere (a [`GroupSeries`](super::GroupSeries)).
    /// Returns `false`, keeping the present one, when the family already has a
    /// series with these labels.
    #[must_use = "false means the series was not added"]
    pub fn insert(&self, labels: Labels, series: M) -> bool {
        let mut all = self.series.write().unwrap_or_else(PoisonError::into_inner);
        if all.contains_key(&labels) {
            return false;
        }
        all.insert(labels, Arc::new(series));
        true
    }

    /// The family's histogram bounds (empty for other kinds).
    pub fn bounds(&self) -> &Arc<[f64]> {
        &self.bounds
    }

    /// The series with these labels, created on first use.
    pub fn series(&self, labels: Labels) -> Arc<M>
    where
        M: Aggregation,
    {
        if let Some(m) = self
            .series
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&labels)
        {
            return Arc::clone(m);
        }
        let mut series = self.series.write().unwrap_or_else(PoisonError::into_inner);
        let bounds = &self.bounds;
        Arc::clone(
            series
                .entry(labels)
                .or_insert_with(|| Arc::new(M::create(bounds))),
        )
    }

    /// The current value of every series that has one.
    pub fn collect(&self) -> Metric {
        let series = self.series.read().unwrap_or_else(PoisonError::into_inner);
        Metric {
            def: self.def,
            bounds: Arc::clone(&self.bounds),
            points: series
                .iter()
                .filter_map(|(labels, m)| {
                    m.value().map(|value| DataPoint {
                        labels: labels.clone(),
                        value,
                    })
                })
                .collect(),
        }
    }
}

/// A family of any kind, as the registry holds it.
pub(crate) trait CollectFamily: Send + Sync + std::fmt::Debug {
    fn collect(&self) -> Metric;
}

impl<M: Series + std::fmt::Debug> CollectFamily for Family<M> {
    fn collect(&self) -> Metric {
        Family::collect(self)
    }
}
