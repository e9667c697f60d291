//! Every family of one pipeline, and their collection.

use std::sync::Arc;
use std::time::SystemTime;

use super::data::Metric;
use super::family::{CollectFamily, Family, Series};
use super::resource::Resource;

/// The families readers collect, with the resource they describe and the
/// time aggregation started (the start of every cumulative series).
///
/// ```
/// use std::sync::Arc;
/// use vllm_otel_metrics::catalog::NUM_PREEMPTIONS;
/// use vllm_otel_metrics::metrics::{Counter, Family, Registry, Resource};
///
/// let preemptions = Arc::new(Family::<Counter>::new(&NUM_PREEMPTIONS, Vec::new()));
/// let mut registry = Registry::new(Resource::default());
/// registry.register(preemptions.clone());
/// preemptions.series(Vec::new()).add(2);
/// assert_eq!(registry.collect().metrics[0].points.len(), 1);
/// ```
#[derive(Debug)]
pub struct Registry {
    families: Vec<Arc<dyn CollectFamily>>,
    resource: Resource,
    start_time: SystemTime,
}

/// One collection: every family, in registration order, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    /// When the values were read.
    pub time: SystemTime,
    /// One entry per family, with or without series.
    pub metrics: Vec<Metric>,
}

impl Registry {
    /// An empty registry describing `resource`; aggregation starts now.
    pub fn new(resource: Resource) -> Self {
        Registry {
            families: Vec::new(),
            resource,
            start_time: SystemTime::now(),
        }
    }

    /// Adds a family of any kind; it is collected after those added before.
    pub fn register<M: Series + std::fmt::Debug>(&mut self, family: Arc<Family<M>>) {
        self.families.push(family);
    }

    /// Reads every family.
    pub fn collect(&self) -> Collected {
        Collected {
            time: SystemTime::now(),
            metrics: self.families.iter().map(|f| f.collect()).collect(),
        }
    }

    /// The resource the metrics describe.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// When aggregation started.
    pub fn start_time(&self) -> SystemTime {
        self.start_time
    }
}
