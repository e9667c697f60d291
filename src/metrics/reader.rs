//! What sinks implement to read a [`Registry`]: the Prometheus bridge (pull)
//! and the OTLP exporter (push).

use std::sync::Arc;

use super::registry::Registry;

/// Outcome of a flush or shutdown; the error says what failed and where.
pub type ReaderResult = Result<(), String>;

/// A sink of collected metrics. [`Instruments`](crate::instruments::Instruments)
/// hands every reader its registry once, when built; readers collect when
/// they need to, so recording never waits for them.
///
/// ```
/// use std::sync::{Arc, OnceLock};
/// use vllm_otel_metrics::instruments::Instruments;
/// use vllm_otel_metrics::metrics::{MetricReader, Registry};
///
/// /// Keeps the registry, to collect on demand.
/// #[derive(Debug, Default)]
/// struct OnDemand(Arc<OnceLock<Arc<Registry>>>);
///
/// impl MetricReader for OnDemand {
///     fn register(&self, registry: Arc<Registry>) {
///         let _ = self.0.set(registry);
///     }
/// }
///
/// let reader = OnDemand::default();
/// let slot = Arc::clone(&reader.0);
/// let _instruments = Instruments::builder().with_reader(reader).build();
/// let collected = slot.get().unwrap().collect();
/// assert_eq!(collected.metrics.len(), vllm_otel_metrics::catalog::all().count());
/// ```
pub trait MetricReader: Send + Sync + std::fmt::Debug + 'static {
    /// Gives the reader the registry to collect from.
    fn register(&self, registry: Arc<Registry>);

    /// Exports what was recorded so far (push readers); pull readers have
    /// nothing to do.
    fn force_flush(&self) -> ReaderResult {
        Ok(())
    }

    /// Exports a last time and stops. Later calls do nothing.
    fn shutdown(&self) -> ReaderResult {
        Ok(())
    }
}
