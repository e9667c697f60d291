//! What sinks implement to read a [`Registry`]: the Prometheus bridge (pull)
//! and the OTLP exporter (push).

use std::sync::Arc;

use super::registry::Registry;

/// Outcome of a flush or shutdown; the error says what failed and where.
pub type ReaderResult = Result<(), String>;

/// A sink of collected metrics. [`Instruments`](crate::instruments::Instruments)
/// hands every reader its registry once, when built; readers collect when
/// they need to, so recording never waits for them.
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
