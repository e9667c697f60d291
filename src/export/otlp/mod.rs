//! OTLP push: `opentelemetry_otlp::MetricExporter` (gRPC over tonic, or
//! HTTP/protobuf) under the SDK's `PeriodicReader`.
//!
//! The exporter reads the standard variables itself
//! (`OTEL_EXPORTER_OTLP_[METRICS_]{ENDPOINT,HEADERS,TIMEOUT,COMPRESSION}`,
//! `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`, and the reader
//! `OTEL_METRIC_EXPORT_INTERVAL`), retries as it does, and sends from the
//! reader's own thread, so recording never waits for the network.
//! [`OtlpOptions`] are the command line's `--otlp-*` flags: each one that is
//! given is set on the exporter's builder, where it wins over its variable
//! (headers excepted: the exporter merges the header variables over the
//! builder's). This module decides only what the exporter cannot: whether
//! OTLP is on at all, which transport's builder to take, and TLS from the
//! certificate files ([`tls`]). [`TrackedExporter`] wraps the exporter to
//! log failures rate-limited (the first at once, then at most one per
//! [`FAILURE_LOG_INTERVAL`]), announce recovery, and keep the last error for
//! the exit report; the SDK itself reports a failed final export only as
//! "Failed to shutdown".

pub mod tls;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use opentelemetry_otlp::{
    Compression, MetricExporter, SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};
use opentelemetry_sdk::Resource;

/// The `service.name` when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = env!("CARGO_PKG_NAME");
/// How often a persisting export failure is logged again.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// The two signals sent over OTLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Metrics (a `PeriodicReader`).
    Metrics,
    /// `llm_request` spans (a batch span processor).
    Traces,
}

impl Signal {
    /// `metrics` or `traces`, as a log field.
    fn name(self) -> &'static str {
        match self {
            Signal::Metrics => "metrics",
            Signal::Traces => "traces",
        }
    }

    /// The HTTP path the signal is posted to.
    fn path(self) -> &'static str {
        match self {
            Signal::Metrics => "/v1/metrics",
            Signal::Traces => "/v1/traces",
        }
    }

    /// The flag that sets the endpoint.
    fn flag(self) -> &'static str {
        match self {
            Signal::Metrics => "--otlp-endpoint",
            Signal::Traces => "--otlp-traces-endpoint",
        }
    }

    /// The variables that carry the endpoint, the signal-specific one first.
    fn endpoint_variables(self) -> [&'static str; 2] {
        match self {
            Signal::Metrics => [
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ],
            Signal::Traces => [
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ],
        }
    }

    /// The variables that carry the transport, the signal-specific one first.
    fn protocol_variables(self) -> [&'static str; 2] {
        match self {
            Signal::Metrics => [
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ],
            Signal::Traces => [
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ],
        }
    }

    /// The variable that names the signal's exporters (`otlp`).
    fn exporter_variable(self) -> &'static str {
        match self {
            Signal::Metrics => "OTEL_METRICS_EXPORTER",
            Signal::Traces => "OTEL_TRACES_EXPORTER",
        }
    }
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// gRPC via tonic.
    Grpc,
    /// HTTP with protobuf bodies.
    HttpProtobuf,
}

impl Protocol {
    /// The exporter's default endpoint for this transport.
    fn default_endpoint(self, signal: Signal) -> String {
        match self {
            Protocol::Grpc => "http://localhost:4317".to_owned(),
            Protocol::HttpProtobuf => format!("http://localhost:4318{}", signal.path()),
        }
    }
}

/// Why the OTLP settings (flags and `OTEL_EXPORTER_OTLP_*` variables)
/// cannot be used; the text names the setting and its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// Not a transport this crate speaks.
    #[error("unsupported OTLP protocol '{0}' (expected grpc or http/protobuf)")]
    UnknownProtocol(String),
    /// Not a temporality.
    #[error("unsupported temporality '{0}' (expected cumulative, delta or lowmemory)")]
    UnknownTemporality(String),
    /// Not a compression the exporter knows.
    #[error("{reason} (expected gzip or zstd)")]
    UnknownCompression {
        /// The value given.
        value: String,
        /// The exporter's reason.
        reason: String,
    },
    /// A variable with a value that is not valid for it.
    #[error("{name}='{value}': {source}")]
    InvalidVariable {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        source: Box<OtlpError>,
    },
    /// A header name that is not valid in gRPC metadata.
    #[error("invalid OTLP header name '{name}': {reason}")]
    InvalidHeaderName {
        /// The header.
        name: String,
        /// Why.
        reason: String,
    },
    /// A header value that is not valid in gRPC metadata (never shown).
    #[error("invalid OTLP header value for '{name}'")]
    InvalidHeaderValue {
        /// The header.
        name: String,
    },
    /// An endpoint URL with credentials in it.
    #[error(transparent)]
    CredentialsInUrl(#[from] crate::support::redact::CredentialsInUrl),
    /// The TLS files or client.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The exporter refused its configuration.
    #[error("cannot build the OTLP exporter for {destination}: {reason}")]
    Build {
        /// Where it would have sent (transport and endpoint).
        destination: String,
        /// The exporter's reason.
        reason: String,
    },
}

impl FromStr for Protocol {
    type Err = OtlpError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            _ => Err(OtlpError::UnknownProtocol(s.trim().to_owned())),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        })
    }
}

/// Parses a temporality as the exporter's variable does: `cumulative`,
/// `delta` or `lowmemory`, in any case.
pub fn parse_temporality(s: &str) -> Result<Temporality, OtlpError> {
    s.trim()
        .parse()
        .map_err(|()| OtlpError::UnknownTemporality(s.trim().to_owned()))
}

/// Parses a compression name as the exporter does (`gzip`, `zstd`).
pub fn parse_compression(s: &str) -> Result<Compression, OtlpError> {
    s.trim()
        .to_ascii_lowercase()
        .parse()
        .map_err(
            |e: opentelemetry_otlp::ParseConfigError| OtlpError::UnknownCompression {
                value: s.trim().to_owned(),
                reason: e.to_string(),
            },
        )
}

/// The command line's OTLP settings; `None` (or empty) leaves a setting to
/// the exporter, which reads its variable or takes its default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OtlpOptions {
    /// `--otlp-endpoint`: for gRPC the URL, for HTTP a base URL that takes
    /// `/v1/metrics` when it has no path (as `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub endpoint: Option<String>,
    /// `--otlp-traces-endpoint` (vLLM's flag): turns spans on; for HTTP a
    /// URL without a path takes `/v1/traces`.
    pub traces_endpoint: Option<String>,
    /// `--otlp-protocol`.
    pub protocol: Option<Protocol>,
    /// `--otlp-interval-ms`: the reader's export period.
    pub interval: Option<Duration>,
    /// `--otlp-timeout-ms`: how long one export (with its retries) may take.
    pub timeout: Option<Duration>,
    /// `--otlp-header K=V`, in order.
    pub headers: Vec<(String, String)>,
    /// `--otlp-temporality`.
    pub temporality: Option<Temporality>,
    /// `--otlp-compression`.
    pub compression: Option<Compression>,
    /// `--otlp-certificate`, `--otlp-client-certificate`, `--otlp-client-key`.
    pub tls: tls::TlsFiles,
}

/// Appends the signal's path to an HTTP URL without a path (the flags
/// take a base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` does).
fn with_signal_path(url: &str, signal: Signal) -> String {
    let trimmed = url.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        url.to_owned()
    } else {
        format!("{trimmed}{}", signal.path())
    }
}

/// Where the exporter sends, and from which setting, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// What is sent.
    pub signal: Signal,
    /// The transport.
    pub protocol: Protocol,
    /// The endpoint as configured (a base URL when it came from
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, to which the HTTP exporter appends
    /// `/v1/metrics`).
    pub endpoint: String,
    /// The flag or variable it came from, or `default`.
    pub source: &'static str,
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.signal {
            Signal::Metrics => write!(f, "{}", self.endpoint),
            Signal::Traces => write!(f, "{} (traces)", self.endpoint),
        }
    }
}

impl OtlpOptions {
    fn endpoint_flag(&self, signal: Signal) -> Option<&String> {
        match signal {
            Signal::Metrics => self.endpoint.as_ref(),
            Signal::Traces => self.traces_endpoint.as_ref(),
        }
    }

    /// Whether `signal` is to be sent: its endpoint flag, an endpoint
    /// variable (for traces only the traces-specific one: spans are off
    /// unless asked for), or `OTEL_METRICS_EXPORTER` /
    /// `OTEL_TRACES_EXPORTER` naming `otlp`.
    pub fn enabled(&self, signal: Signal, env: &impl Fn(&str) -> Option<String>) -> bool {
        let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
        let variables = signal.endpoint_variables();
        let variables = match signal {
            Signal::Metrics => &variables[..],
            Signal::Traces => &variables[..1],
        };
        self.endpoint_flag(signal).is_some()
            || variables.iter().any(|v| set(v))
            || env(signal.exporter_variable())
                .is_some_and(|v| v.split(',').any(|e| e.trim().eq_ignore_ascii_case("otlp")))
    }

    /// The transport (the flag, else the protocol variables, else
    /// `http/protobuf` as the specification says) and the endpoint of `signal`.
    pub fn destination(
        &self,
        signal: Signal,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Destination, OtlpError> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let protocol = match self.protocol {
            Some(p) => p,
            None => match signal
                .protocol_variables()
                .into_iter()
                .find_map(|name| env(name).map(|v| (name, v)))
            {
                Some((name, value)) => value.parse().map_err(|e| OtlpError::InvalidVariable {
                    name: name.to_owned(),
                    value: value.trim().to_owned(),
                    source: Box::new(e),
                })?,
                None => Protocol::HttpProtobuf,
            },
        };
        let (endpoint, source) = match self.endpoint_flag(signal) {
            Some(url) if protocol == Protocol::HttpProtobuf => {
                (with_signal_path(url, signal), signal.flag())
            }
            Some(url) => (url.clone(), signal.flag()),
            None => signal
                .endpoint_variables()
                .into_iter()
                .find_map(|name| env(name).map(|v| (v.trim().to_owned(), name)))
                .unwrap_or_else(|| (protocol.default_endpoint(signal), "default")),
        };
        crate::support::redact::refuse_userinfo(source, &endpoint)?;
        Ok(Destination {
            signal,
            protocol,
            endpoint,
            source,
        })
    }
}

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
    inner: MetricExporter,
    destination: Destination,
    health: Arc<ExportHealth>,
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

/// A built OTLP push: the reader to add to the meter provider, and what
/// reports on it.
#[derive(Debug)]
pub struct OtlpPush {
    /// The reader.
    pub reader: PeriodicReader<TrackedExporter>,
    /// Where it sends.
    pub destination: Destination,
    /// Its export outcomes.
    pub health: Arc<ExportHealth>,
}

/// Sets the flags on a gRPC exporter builder.
fn configure_tonic<B: WithExportConfig + WithTonicConfig>(
    builder: B,
    options: &OtlpOptions,
    destination: &Destination,
    tls: &tls::TlsSettings,
) -> Result<B, OtlpError> {
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (key, value) in &options.headers {
        let key = tonic::metadata::MetadataKey::from_bytes(key.to_ascii_lowercase().as_bytes())
            .map_err(|e| OtlpError::InvalidHeaderName {
                name: key.clone(),
                reason: e.to_string(),
            })?;
        let value = value.parse().map_err(|_| OtlpError::InvalidHeaderValue {
            name: key.to_string(),
        })?;
        metadata.insert(key, value);
    }
    let mut builder = builder.with_metadata(metadata);
    if let Some(endpoint) = options.endpoint_flag(destination.signal) {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(timeout) = options.timeout {
        builder = builder.with_timeout(timeout);
    }
    if let Some(compression) = options.compression {
        builder = builder.with_compression(compression);
    }
    if tls.applies_to(&destination.endpoint) {
        builder = builder.with_tls_config(tls.tonic_config());
    }
    Ok(builder)
}

/// Sets the flags on an HTTP/protobuf exporter builder.
fn configure_http<B: WithExportConfig + WithHttpConfig>(
    builder: B,
    options: &OtlpOptions,
    destination: &Destination,
    tls: &tls::TlsSettings,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<B, OtlpError> {
    let mut builder = builder
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_headers(
            options
                .headers
                .iter()
                .cloned()
                .collect::<HashMap<String, String>>(),
        );
    if options.endpoint_flag(destination.signal).is_some() {
        builder = builder.with_endpoint(&destination.endpoint);
    }
    if let Some(timeout) = options.timeout {
        builder = builder.with_timeout(timeout);
    }
    if let Some(compression) = options.compression {
        builder = builder.with_compression(compression);
    }
    tls::install_crypto_provider();
    if tls.has_files() {
        builder = builder.with_http_client(tls.http_client(options.timeout, env)?);
    }
    Ok(builder)
}

/// Configures an exporter builder (`MetricExporter::builder()` or
/// `SpanExporter::builder()`: they share no trait for `with_tonic` and
/// `with_http`) for the destination's transport and builds it.
macro_rules! build_exporter {
    ($builder:expr, $options:expr, $destination:expr, $tls:expr, $env:expr, $runtime:expr) => {
        match $destination.protocol {
            Protocol::Grpc => {
                let builder = configure_tonic($builder.with_tonic(), $options, $destination, $tls)?;
                // The channel's worker is spawned on the runtime.
                let _guard = $runtime.enter();
                builder.build().map_err(build_failed($destination))?
            }
            Protocol::HttpProtobuf => {
                configure_http($builder.with_http(), $options, $destination, $tls, $env)?
                    .build()
                    .map_err(build_failed($destination))?
            }
        }
    };
}

fn build_failed(
    destination: &Destination,
) -> impl Fn(opentelemetry_otlp::ExporterBuildError) -> OtlpError + '_ {
    move |e| OtlpError::Build {
        destination: destination.to_string(),
        reason: e.to_string(),
    }
}

/// Builds the metric exporter and its periodic reader from the flags, the
/// variables read through `env` (for the choices the exporter leaves to
/// its caller) and the exporter's own reading of the process environment.
/// The gRPC transport runs on a Tokio runtime: pass its handle; it must
/// outlive the reader.
pub fn build(
    options: &OtlpOptions,
    env: &impl Fn(&str) -> Option<String>,
    runtime: &tokio::runtime::Handle,
) -> Result<OtlpPush, OtlpError> {
    let destination = options.destination(Signal::Metrics, env)?;
    let tls = tls::TlsSettings::resolve(&options.tls, env)?;
    let builder = MetricExporter::builder();
    let builder = match options.temporality {
        Some(t) => builder.with_temporality(t),
        None => builder,
    };
    let inner = build_exporter!(builder, options, &destination, &tls, env, runtime);
    let health = Arc::new(ExportHealth::default());
    let exporter = TrackedExporter {
        inner,
        destination: destination.clone(),
        health: Arc::clone(&health),
    };
    let mut reader = PeriodicReader::builder(exporter);
    if let Some(interval) = options.interval {
        reader = reader.with_interval(interval);
    }
    Ok(OtlpPush {
        reader: reader.build(),
        destination,
        health,
    })
}

/// The span exporter with outcome tracking.
#[derive(Debug)]
pub struct TrackedSpanExporter {
    inner: SpanExporter,
    destination: Destination,
    health: Arc<ExportHealth>,
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

/// A built OTLP span push: the tracer provider (a batch span processor over
/// the exporter; the SDK's sampler from `OTEL_TRACES_SAMPLER`, parent-based
/// by default), and what reports on it.
#[derive(Debug)]
pub struct TracesPush {
    /// The provider; shut it down to export the last spans.
    pub provider: SdkTracerProvider,
    /// Where it sends.
    pub destination: Destination,
    /// Its export outcomes.
    pub health: Arc<ExportHealth>,
}

/// Builds the span exporter and a tracer provider around it, as [`build`]
/// does for metrics. The batch span processor keeps at most
/// `OTEL_BSP_MAX_QUEUE_SIZE` (2048) finished spans: when the backend is
/// down, later spans are dropped, never queued without bound, and recording
/// never waits. The processor counts them as
/// `otel.sdk.processor.span.processed{error.type="queue_full"}` on the
/// *global* meter provider: a program that wants the count makes its own
/// provider global before calling this (the CLI does).
pub fn build_traces(
    options: &OtlpOptions,
    env: &impl Fn(&str) -> Option<String>,
    runtime: &tokio::runtime::Handle,
    resource: Resource,
) -> Result<TracesPush, OtlpError> {
    let destination = options.destination(Signal::Traces, env)?;
    let tls = tls::TlsSettings::resolve(&options.tls, env)?;
    let builder = SpanExporter::builder();
    let inner = build_exporter!(builder, options, &destination, &tls, env, runtime);
    let health = Arc::new(ExportHealth::default());
    let exporter = TrackedSpanExporter {
        inner,
        destination: destination.clone(),
        health: Arc::clone(&health),
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    Ok(TracesPush {
        provider,
        destination,
        health,
    })
}

/// The process's resource, as the SDK detects it from `OTEL_SERVICE_NAME`
/// and `OTEL_RESOURCE_ATTRIBUTES` (`Resource::builder()`), plus a
/// `service.instance.id` unique per process and `service.name`
/// [`DEFAULT_SERVICE_NAME`] where the environment sets neither.
pub fn resource() -> Resource {
    let detected = Resource::builder().build();
    let mut extra = Vec::new();
    let named = detected
        .get(&"service.name".into())
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if !named {
        extra.push(KeyValue::new("service.name", DEFAULT_SERVICE_NAME));
    }
    if detected.get(&"service.instance.id".into()).is_none() {
        extra.push(KeyValue::new(
            "service.instance.id",
            uuid::Uuid::new_v4().to_string(),
        ));
    }
    if extra.is_empty() {
        detected
    } else {
        Resource::builder().with_attributes(extra).build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn nothing_configured_means_no_otlp() {
        assert!(!OtlpOptions::default().enabled(Signal::Metrics, &env(&[])));
        assert!(!OtlpOptions::default().enabled(
            Signal::Metrics,
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])
        ));
        assert!(OtlpOptions::default().enabled(
            Signal::Metrics,
            &env(&[("OTEL_METRICS_EXPORTER", "console,OTLP")])
        ));
        assert!(OtlpOptions::default().enabled(
            Signal::Metrics,
            &env(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4318")])
        ));
    }

    #[test]
    fn the_flag_wins_over_the_variables() {
        let options = OtlpOptions {
            endpoint: Some("http://127.0.0.1:4318".into()),
            protocol: Some(Protocol::HttpProtobuf),
            ..OtlpOptions::default()
        };
        let d = options
            .destination(
                Signal::Metrics,
                &env(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ]),
            )
            .unwrap();
        assert_eq!(
            d,
            Destination {
                signal: Signal::Metrics,
                protocol: Protocol::HttpProtobuf,
                endpoint: "http://127.0.0.1:4318/v1/metrics".into(),
                source: "--otlp-endpoint"
            }
        );
    }

    #[test]
    fn the_variables_choose_transport_and_endpoint() {
        let d = OtlpOptions::default()
            .destination(
                Signal::Metrics,
                &env(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "GRPC"),
                ]),
            )
            .unwrap();
        assert_eq!(
            (d.protocol, d.endpoint.as_str(), d.source),
            (
                Protocol::Grpc,
                "http://collector:4317",
                "OTEL_EXPORTER_OTLP_ENDPOINT"
            )
        );
        let d = OtlpOptions::default()
            .destination(
                Signal::Metrics,
                &env(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318"),
                    (
                        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                        "http://c:4318/custom",
                    ),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                    ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
                ]),
            )
            .unwrap();
        assert_eq!(
            (d.protocol, d.endpoint.as_str()),
            (Protocol::HttpProtobuf, "http://c:4318/custom")
        );
        let d = OtlpOptions::default()
            .destination(Signal::Metrics, &env(&[]))
            .unwrap();
        assert_eq!(
            (d.protocol, d.endpoint.as_str(), d.source),
            (
                Protocol::HttpProtobuf,
                "http://localhost:4318/v1/metrics",
                "default"
            )
        );
    }

    #[test]
    fn spans_are_off_unless_asked_for() {
        let generic = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        assert!(OtlpOptions::default().enabled(Signal::Metrics, &env(&generic)));
        assert!(!OtlpOptions::default().enabled(Signal::Traces, &env(&generic)));
        let asked = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
        ];
        let d = OtlpOptions::default()
            .destination(Signal::Traces, &env(&asked))
            .unwrap();
        assert!(OtlpOptions::default().enabled(Signal::Traces, &env(&asked)));
        assert_eq!(
            (d.endpoint.as_str(), d.source),
            ("http://c:4318", "OTEL_EXPORTER_OTLP_ENDPOINT")
        );
        let options = OtlpOptions {
            traces_endpoint: Some("http://tempo:4318".into()),
            ..OtlpOptions::default()
        };
        let d = options.destination(Signal::Traces, &env(&[])).unwrap();
        assert_eq!(d.to_string(), "http://tempo:4318/v1/traces (traces)");
        assert!(!options.enabled(Signal::Metrics, &env(&[])));
    }

    #[test]
    fn an_invalid_protocol_variable_is_an_error_that_names_it() {
        let error = OtlpOptions::default()
            .destination(
                Signal::Metrics,
                &env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]),
            )
            .unwrap_err();
        assert_eq!(
            error,
            OtlpError::InvalidVariable {
                name: "OTEL_EXPORTER_OTLP_PROTOCOL".into(),
                value: "http/json".into(),
                source: Box::new(OtlpError::UnknownProtocol("http/json".into())),
            }
        );
        assert_eq!(
            error.to_string(),
            "OTEL_EXPORTER_OTLP_PROTOCOL='http/json': unsupported OTLP protocol 'http/json' (expected grpc or http/protobuf)"
        );
    }

    #[test]
    fn flag_values_parse_as_the_exporter_parses_its_variables() {
        assert_eq!(parse_temporality("LowMemory"), Ok(Temporality::LowMemory));
        assert_eq!(parse_temporality("delta"), Ok(Temporality::Delta));
        assert_eq!(
            parse_temporality("sometimes"),
            Err(OtlpError::UnknownTemporality("sometimes".into()))
        );
        assert_eq!(parse_compression("GZIP"), Ok(Compression::Gzip));
        let error = parse_compression("brotli").unwrap_err();
        assert!(
            matches!(&error, OtlpError::UnknownCompression { value, .. } if value == "brotli"),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "unsupported compression algorithm 'brotli' (expected gzip or zstd)"
        );
        assert_eq!(
            with_signal_path("http://c:4318/", Signal::Metrics),
            "http://c:4318/v1/metrics"
        );
        assert_eq!(
            with_signal_path("http://c:4318", Signal::Traces),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            with_signal_path("http://c:4318/x", Signal::Traces),
            "http://c:4318/x"
        );
    }
}
