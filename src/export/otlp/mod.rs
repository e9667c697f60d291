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

use crate::error::Cause;
use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{
    MetricExporter, SpanExporter, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_sdk::metrics::PeriodicReader;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

mod health;
mod settings;

pub use health::{ExportHealth, TrackedExporter, TrackedSpanExporter, FAILURE_LOG_INTERVAL};
pub use settings::{
    parse_compression, parse_temporality, Destination, OtlpError, OtlpOptions, Protocol, Signal,
};

/// The `service.name` when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = env!("CARGO_PKG_NAME");

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
                cause: Cause::new(e),
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
        cause: Cause::new(e),
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
    use super::settings::with_signal_path;
    use super::*;
    use crate::error::Setting;
    use opentelemetry_otlp::Compression;
    use opentelemetry_sdk::metrics::Temporality;

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
                source: Some(Setting::field("OtlpOptions::endpoint"))
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
                Some(Setting::variable("OTEL_EXPORTER_OTLP_ENDPOINT"))
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
                None
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
            (
                "http://c:4318",
                Some(Setting::variable("OTEL_EXPORTER_OTLP_ENDPOINT"))
            )
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
        // The variable in the error, the reason in its cause, as the
        // command line prints them.
        assert_eq!(error.to_string(), "OTEL_EXPORTER_OTLP_PROTOCOL='http/json'");
        assert_eq!(
            crate::error::chain(&error),
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
