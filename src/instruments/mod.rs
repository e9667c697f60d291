//! The catalog's families in one [`Registry`], and per-label-set handles.
//!
//! [`Instruments`] builds one family per catalog entry (histograms with the
//! catalog's explicit buckets, the token ones sized by `max_model_len`),
//! hands the registry to every [`MetricReader`], and caches the handles of
//! each `(model_name, engine)` label set. Handles are resolved once, when the
//! first request (or scheduler record) of a label set arrives, and shared by
//! every later request of that set, as vLLM's Rust frontend does; recording
//! through them allocates nothing, looks up no labels and takes no global lock.
//!
//! ```
//! use vllm_otel_metrics::export::prometheus::PrometheusBridge;
//! use vllm_otel_metrics::instruments::Instruments;
//!
//! let (bridge, reader) = PrometheusBridge::builder().build();
//! let instruments = Instruments::builder()
//!     .with_max_model_len(4096)
//!     .with_reader(reader)
//!     .build();
//! assert_eq!(bridge.snapshot().len(), vllm_otel_metrics::catalog::all().count());
//! # instruments.shutdown().unwrap();
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

mod request;

use crate::catalog::{self, DEFAULT_MAX_MODEL_LEN};
use crate::metrics::{
    Counter, Family, Gauge, Labels, MetricReader, ReaderResult, Registry, Resource, Series,
    OVERFLOW_LABEL,
};
use crate::tracker::{EvictReason, RejectReason};
use request::{RequestFamilies, REQUEST_HISTOGRAMS};
pub(crate) use request::{RequestHandles, RequestHistogram};

/// The instrumentation scope name of every metric.
pub const SCOPE_NAME: &str = env!("CARGO_PKG_NAME");

/// Default number of `(model_name, engine)` label sets kept apart before
/// further ones share one overflow series per family.
pub const DEFAULT_MAX_LABEL_SETS: usize = 2048;

/// Configures and builds [`Instruments`].
#[derive(Debug)]
pub struct InstrumentsBuilder {
    readers: Vec<Box<dyn MetricReader>>,
    resource: Resource,
    max_model_len: u32,
    max_label_sets: usize,
}

impl InstrumentsBuilder {
    /// The model context length that bounds the token histograms' buckets.
    pub fn with_max_model_len(mut self, max_model_len: u32) -> Self {
        self.max_model_len = max_model_len;
        self
    }

    /// How many `(model_name, engine)` label sets are kept apart; the series
    /// of later ones go to one overflow series per family, labelled
    /// [`OVERFLOW_LABEL`]`="true"` (plus `finished_reason` or `source`).
    pub fn with_max_label_sets(mut self, max_label_sets: usize) -> Self {
        self.max_label_sets = max_label_sets.max(1);
        self
    }

    /// Adds a reader (the Prometheus bridge, the OTLP exporter, …).
    pub fn with_reader<R: MetricReader>(mut self, reader: R) -> Self {
        self.readers.push(Box::new(reader));
        self
    }

    /// Sets the OpenTelemetry resource.
    pub fn with_resource(mut self, resource: Resource) -> Self {
        self.resource = resource;
        self
    }

    /// Builds every family and registers the readers.
    pub fn build(self) -> Instruments {
        let mut registry = Registry::new(self.resource);
        let families = Families::new(&mut registry, self.max_model_len);
        let reason = |value: &'static str| vec![(catalog::REASON_LABELS[0], value.to_owned())];
        let rejected =
            RejectReason::ALL.map(|r| families.rejected_inputs.series(reason(r.as_str())));
        let evicted =
            EvictReason::ALL.map(|r| families.evicted_requests.series(reason(r.as_str())));
        let registry = Arc::new(registry);
        for reader in &self.readers {
            reader.register(Arc::clone(&registry));
        }
        Instruments {
            inner: Arc::new(Inner {
                families,
                readers: self.readers,
                rejected,
                evicted,
                request_handles: HandleCache::new(self.max_label_sets),
                scheduler_handles: HandleCache::new(self.max_label_sets),
                max_model_len: self.max_model_len,
                shut_down: Mutex::new(false),
            }),
        }
    }
}

/// One family per catalog entry.
#[derive(Debug)]
struct Families {
    request: RequestFamilies,
    num_requests_running: Arc<Family<Gauge>>,
    num_requests_waiting: Arc<Family<Gauge>>,
    kv_cache_usage: Arc<Family<Gauge>>,
    prefix_cache_queries: Arc<Family<Counter>>,
    prefix_cache_hits: Arc<Family<Counter>>,
    rejected_inputs: Arc<Family<Counter>>,
    evicted_requests: Arc<Family<Counter>>,
}

/// Creates the family of `def` and registers it.
fn family<M: Series + std::fmt::Debug>(
    registry: &mut Registry,
    def: &'static catalog::MetricDef,
    max_model_len: u32,
) -> Arc<Family<M>> {
    let family = Arc::new(Family::new(def, def.buckets.boundaries(max_model_len)));
    registry.register(Arc::clone(&family));
    family
}

impl Families {
    /// Creates every family and registers it.
    fn new(registry: &mut Registry, max_model_len: u32) -> Self {
        use catalog::*;
        let mut f = |def| family(registry, def, max_model_len);
        let request = RequestFamilies {
            num_preemptions: f(&NUM_PREEMPTIONS),
            prompt_tokens: f(&PROMPT_TOKENS),
            prompt_tokens_by_source: f(&PROMPT_TOKENS_BY_SOURCE),
            prompt_tokens_cached: f(&PROMPT_TOKENS_CACHED),
            generation_tokens: f(&GENERATION_TOKENS),
            request_success: f(&REQUEST_SUCCESS),
            iteration_tokens: family(registry, &ITERATION_TOKENS, max_model_len),
            histograms: REQUEST_HISTOGRAMS.map(|def| family(registry, def, max_model_len)),
        };
        let families = Families {
            request,
            num_requests_running: family(registry, &NUM_REQUESTS_RUNNING, max_model_len),
            num_requests_waiting: family(registry, &NUM_REQUESTS_WAITING, max_model_len),
            kv_cache_usage: family(registry, &KV_CACHE_USAGE, max_model_len),
            prefix_cache_queries: family(registry, &PREFIX_CACHE_QUERIES, max_model_len),
            prefix_cache_hits: family(registry, &PREFIX_CACHE_HITS, max_model_len),
            rejected_inputs: family(registry, &REJECTED_INPUTS, max_model_len),
            evicted_requests: family(registry, &EVICTED_REQUESTS, max_model_len),
        };
        debug_assert_eq!(
            6 + 1 + REQUEST_HISTOGRAMS.len() + 7,
            catalog::all().count(),
            "every catalog family has a field above"
        );
        families
    }
}

/// The labels every series of a label set starts with: `model_name` and
/// `engine`, or the overflow label.
fn base_labels(label_set: Option<(&str, u32)>) -> Labels {
    match label_set {
        Some((model_name, engine)) => vec![
            (catalog::ENGINE_LABELS[0], model_name.to_owned()),
            (catalog::ENGINE_LABELS[1], engine.to_string()),
        ],
        None => vec![(OVERFLOW_LABEL, "true".to_owned())],
    }
}

/// The per-request handles of one `(model_name, engine)` label set, resolved
/// once. A frontend that keeps one per label set, as vLLM's Rust frontend
/// keeps its `RequestMetricHandles`, starts each request from it
/// ([`RequestMetrics::start_in`](crate::tracker::RequestMetrics::start_in))
/// without any lookup. Cloning is cheap.
///
/// ```
/// use vllm_otel_metrics::instruments::Instruments;
/// use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};
///
/// let instruments = Instruments::builder().build();
/// let llama = instruments.label_set("llama", 0);
/// let params = RequestParams { arrival_time: 100.0, prompt_len: 16, max_tokens: None, n: 1 };
/// let mut request = RequestMetrics::start_in(&llama, params);
/// request.finish(101.0, vllm_otel_metrics::protocol::FinishReason::Stop);
/// ```
#[derive(Clone)]
pub struct LabelSet {
    pub(crate) handles: Arc<RequestHandles>,
}

impl std::fmt::Debug for LabelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelSet").finish_non_exhaustive()
    }
}

/// Scheduler-tier handles of one `(model_name, engine)` label set.
pub(crate) struct SchedulerHandles {
    pub(crate) num_requests_running: Arc<Gauge>,
    pub(crate) num_requests_waiting: Arc<Gauge>,
    pub(crate) kv_cache_usage: Arc<Gauge>,
    pub(crate) prefix_cache_queries: Arc<Counter>,
    pub(crate) prefix_cache_hits: Arc<Counter>,
}

impl SchedulerHandles {
    fn new(f: &Families, labels: Labels) -> Self {
        SchedulerHandles {
            num_requests_running: f.num_requests_running.series(labels.clone()),
            num_requests_waiting: f.num_requests_waiting.series(labels.clone()),
            kv_cache_usage: f.kv_cache_usage.series(labels.clone()),
            prefix_cache_queries: f.prefix_cache_queries.series(labels.clone()),
            prefix_cache_hits: f.prefix_cache_hits.series(labels),
        }
    }
}

/// Handles per label set, up to a limit; later label sets share the
/// overflow handles.
struct HandleCache<H> {
    by_label_set: RwLock<HashMap<String, HashMap<u32, Arc<H>>>>,
    /// Label sets in `by_label_set`; once at `limit`, it never grows again.
    label_sets: AtomicUsize,
    overflow: OnceLock<Arc<H>>,
    limit: usize,
}

impl<H> HandleCache<H> {
    fn new(limit: usize) -> Self {
        HandleCache {
            by_label_set: RwLock::default(),
            label_sets: AtomicUsize::new(0),
            overflow: OnceLock::new(),
            limit,
        }
    }

    /// The handles of a label set, created under the write lock the first
    /// time the set is seen.
    fn get(&self, model_name: &str, engine: u32, create: impl Fn(Labels) -> H) -> Arc<H> {
        let overflow = || {
            Arc::clone(
                self.overflow
                    .get_or_init(|| Arc::new(create(base_labels(None)))),
            )
        };
        if let Some(handles) = self
            .by_label_set
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model_name)
            .and_then(|by_engine| by_engine.get(&engine))
        {
            return Arc::clone(handles);
        }
        // A full cache stays full: new label sets skip the write lock.
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
        }
        let mut cache = self
            .by_label_set
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(handles) = cache.get(model_name).and_then(|e| e.get(&engine)) {
            return Arc::clone(handles);
        }
        if self.label_sets.load(Ordering::Acquire) >= self.limit {
            return overflow();
        }
        let handles = Arc::new(create(base_labels(Some((model_name, engine)))));
        cache
            .entry(model_name.to_owned())
            .or_default()
            .insert(engine, Arc::clone(&handles));
        self.label_sets.fetch_add(1, Ordering::Release);
        handles
    }
}

struct Inner {
    families: Families,
    readers: Vec<Box<dyn MetricReader>>,
    rejected: [Arc<Counter>; 3],
    evicted: [Arc<Counter>; 2],
    request_handles: HandleCache<RequestHandles>,
    scheduler_handles: HandleCache<SchedulerHandles>,
    max_model_len: u32,
    shut_down: Mutex<bool>,
}

impl Drop for Inner {
    /// Readers export a last time when the instruments go away unflushed.
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) -> ReaderResult {
        let mut shut_down = self
            .shut_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *shut_down {
            return Ok(());
        }
        *shut_down = true;
        every_reader(&self.readers, |r| r.shutdown())
    }
}

/// Runs `op` on every reader; the errors, if any, joined.
fn every_reader(
    readers: &[Box<dyn MetricReader>],
    op: impl Fn(&dyn MetricReader) -> ReaderResult,
) -> ReaderResult {
    let errors: Vec<String> = readers
        .iter()
        .filter_map(|r| op(r.as_ref()).err())
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Every catalog family, the readers and the handle caches.
/// Cloning is cheap and shares all of it.
#[derive(Clone)]
pub struct Instruments {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instruments")
            .field("max_model_len", &self.inner.max_model_len)
            .field("readers", &self.inner.readers)
            .finish_non_exhaustive()
    }
}

impl Instruments {
    /// A builder with the catalog defaults, the default resource and no reader.
    pub fn builder() -> InstrumentsBuilder {
        InstrumentsBuilder {
            readers: Vec::new(),
            resource: Resource::default(),
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            max_label_sets: DEFAULT_MAX_LABEL_SETS,
        }
    }

    /// The `max_model_len` the token buckets were built for.
    pub fn max_model_len(&self) -> u32 {
        self.inner.max_model_len
    }

    /// The per-request handles of a label set, created with its series the
    /// first time the set is seen (beyond the label-set limit, the overflow
    /// handles).
    pub fn label_set(&self, model_name: &str, engine: u32) -> LabelSet {
        let families = &self.inner.families;
        LabelSet {
            handles: self
                .inner
                .request_handles
                .get(model_name, engine, |labels| {
                    RequestHandles::new(&families.request, labels)
                }),
        }
    }

    /// The scheduler handles of a label set (resolved once per set).
    pub(crate) fn scheduler_handles(&self, model_name: &str, engine: u32) -> Arc<SchedulerHandles> {
        let families = &self.inner.families;
        self.inner
            .scheduler_handles
            .get(model_name, engine, |labels| {
                SchedulerHandles::new(families, labels)
            })
    }

    /// Counts one input that changed no vLLM metric.
    pub(crate) fn count_rejected(&self, reason: RejectReason) {
        self.inner.rejected[reason as usize].add(1);
    }

    /// Counts one request the tracker terminated itself.
    pub(crate) fn count_evicted(&self, reason: EvictReason) {
        self.inner.evicted[reason as usize].add(1);
    }

    /// Exports everything recorded so far through every push reader.
    pub fn force_flush(&self) -> ReaderResult {
        every_reader(&self.inner.readers, |r| r.force_flush())
    }

    /// Exports a last time through every push reader and stops them; later
    /// calls do nothing.
    pub fn shutdown(&self) -> ReaderResult {
        self.inner.shutdown()
    }
}
