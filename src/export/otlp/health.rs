//! How exports fare: [`ExportHealth`] counts outcomes, and the tracked
//! exporters wrap `opentelemetry-otlp`'s to log failures rate-limited
//! (the first at once, then at most one per [`FAILURE_LOG_INTERVAL`]),
//! announce recovery and keep the last error for the exit report.

use super::settings::{Destination, Signal};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

/// How often a persisting export failure is logged again.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Export outcomes, for rate-limited logging and the exit report.
#[derive(Debug, Default)]
pub struct ExportHealth {
    failures: AtomicU64,
    exports: AtomicU64,
    last_error: Mutex<Option<String>>,
    last_logged: Mutex<Option<Instant>>,
}

impl ExportHealth {
    /// Successful exports so far.
    pub fn exports(&self) -> u64 {
        self.exports.load(Ordering::Relaxed)
    }

    /// The error of the latest export if it failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn record(&self, destination: &Destination, result: &OTelSdkResult) {
        let mut last_error = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(()) => {
                self.exports.fetch_add(1, Ordering::Relaxed);
                let failed = self.failures.swap(0, Ordering::Relaxed);
                if failed > 0 {
                    tracing::warn!(
                        signal = destination.signal.name(),
                        failed,
                        "OTLP export to {destination} recovered after {failed} failed attempt(s)"
                    );
                }
                *last_error = None;
            }
            Err(error) => {
                let failed = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                let mut logged = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
                let due = logged.is_none_or(|at| at.elapsed() >= FAILURE_LOG_INTERVAL);
                if failed == 1 || due {
                    // Metrics are cumulative by default, so the next export
                    // carries what this one lost; a span batch is gone.
                    let consequence = match destination.signal {
                        Signal::Metrics => "counts are resent when it recovers",
                        Signal::Traces => "the spans of this export are lost",
                    };
                    tracing::warn!(
                        signal = destination.signal.name(),
                        failed,
                        "OTLP export to {destination} failed ({failed} in a row): {error}; recording continues, {consequence}"
                    );
                    *logged = Some(Instant::now());
                }
                *last_error = Some(error.to_string());
            }
        }
    }
}

/// The OTLP exporter, its outcomes tracked in an [`ExportHealth`].
#[derive(Debug)]
pub struct TrackedExporter {
    pub(super) inner: MetricExporter,
    pub(super) destination: Destination,
    pub(super) health: Arc<ExportHealth>,
}

impl PushMetricExporter for TrackedExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        self.health.record(&self.destination, &result);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// The span exporter with outcome tracking.
#[derive(Debug)]
pub struct TrackedSpanExporter {
    pub(super) inner: SpanExporter,
    pub(super) destination: Destination,
    pub(super) health: Arc<ExportHealth>,
}

impl opentelemetry_sdk::trace::SpanExporter for TrackedSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        self.health.record(&self.destination, &result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
