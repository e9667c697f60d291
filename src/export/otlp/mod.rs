//! OTLP push: the registry exported periodically over gRPC (tonic) or
//! HTTP/protobuf, in OpenTelemetry's protobuf data model.
//!
//! Settings ([`OtlpSettings`]) come from the standard `OTEL_*` variables, with
//! command-line flags winning. [`OtlpExporter`] is a [`MetricReader`]: it
//! collects and sends on its own thread, so recording never waits for the
//! network ([`exporter`]); [`encode`] builds the export requests. Failures
//! are logged rate-limited (the first one at once, then at most one summary
//! per [`FAILURE_LOG_INTERVAL`]) and recovery is announced; cumulative
//! temporality resends every count after an outage, and delta temporality
//! reports changes since the last export that succeeded, so an outage loses
//! nothing either way.
//!
//! [`MetricReader`]: crate::metrics::MetricReader

pub mod encode;
pub mod exporter;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metrics::Resource;
pub use exporter::OtlpExporter;

/// The default `service.name`.
pub const DEFAULT_SERVICE_NAME: &str = env!("CARGO_PKG_NAME");
/// How often a persisting export failure is logged again.
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(30);

const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318";
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Aggregation temporality of counters and histograms on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Temporality {
    /// Totals since the process started (what Prometheus expects).
    #[default]
    Cumulative,
    /// Changes since the previous successful export.
    Delta,
}

impl FromStr for Temporality {
    type Err = String;

    /// `cumulative`, `delta`, or the specification's `lowmemory` (delta for
    /// synchronous counters and histograms, which is all this crate has).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cumulative" => Ok(Temporality::Cumulative),
            "delta" | "lowmemory" => Ok(Temporality::Delta),
            _ => Err(format!(
                "unsupported temporality '{}' (expected cumulative, delta or lowmemory)",
                s.trim()
            )),
        }
    }
}

/// Which names the metrics carry on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameStyle {
    /// OpenTelemetry names (`vllm.request_num_preemptions`).
    #[default]
    Otel,
    /// vLLM's Prometheus names (`vllm:request_num_preemptions`).
    Prometheus,
}

/// Request body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// None.
    #[default]
    None,
    /// gzip.
    Gzip,
    /// zstd (gRPC only).
    Zstd,
}

impl FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(format!(
                "unsupported OTLP compression '{}' (expected gzip, zstd or none)",
                s.trim()
            )),
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

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            _ => Err(format!(
                "unsupported OTLP protocol '{}' (expected grpc or http/protobuf)",
                s.trim()
            )),
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

/// What the command line says about OTLP; `None` defers to the environment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OtlpOverrides {
    /// `--otlp-endpoint`.
    pub endpoint: Option<String>,
    /// `--otlp-protocol`.
    pub protocol: Option<Protocol>,
    /// `--otlp-interval-ms`.
    pub interval: Option<Duration>,
    /// `--otlp-header K=V`, in order.
    pub headers: Vec<(String, String)>,
    /// `--otlp-temporality`.
    pub temporality: Option<Temporality>,
    /// `--otlp-names`.
    pub names: NameStyle,
}

/// Resolved OTLP settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpSettings {
    /// Full URL the exporter sends to (for HTTP including `/v1/metrics`).
    pub endpoint: String,
    /// Transport.
    pub protocol: Protocol,
    /// Export period.
    pub interval: Duration,
    /// Extra request headers (environment ones merged, flags winning).
    pub headers: Vec<(String, String)>,
    /// Temporality (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`,
    /// default cumulative).
    pub temporality: Temporality,
    /// Metric names on the wire.
    pub names: NameStyle,
    /// How long one export may take (`OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT`, ms).
    pub timeout: Duration,
    /// Body compression (`OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION`).
    pub compression: Compression,
}

/// Parses `k1=v1,k2=v2` (values URL-decoded as the spec asks).
pub fn parse_headers(input: &str) -> Result<Vec<(String, String)>, String> {
    input
        .split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("header '{pair}' is not KEY=VALUE"))?;
            Ok((key.trim().to_owned(), percent_decode(value.trim())))
        })
        .collect()
}

fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The variables extra headers are read from, the first set one winning.
const HEADER_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
];

impl OtlpSettings {
    /// Resolves flags over the standard variables read through `env`.
    /// Returns `Ok(None)` when OTLP is not asked for (no endpoint anywhere and
    /// `OTEL_METRICS_EXPORTER` does not name `otlp`).
    pub fn resolve(
        overrides: &OtlpOverrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpSettings>, String> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let signal_endpoint = env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
        let base_endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT");
        let exporter_named =
            env("OTEL_METRICS_EXPORTER").is_some_and(|v| v.split(',').any(|e| e.trim() == "otlp"));
        if overrides.endpoint.is_none()
            && signal_endpoint.is_none()
            && base_endpoint.is_none()
            && !exporter_named
        {
            return Ok(None);
        }
        let protocol = match overrides.protocol {
            Some(p) => p,
            // The specification's default transport.
            None => parse_variable(&env, &PROTOCOL_VARIABLES, str::parse)?
                .unwrap_or(Protocol::HttpProtobuf),
        };
        // Flag and signal-specific URLs are complete; the generic one is a
        // base that takes the signal path (for HTTP).
        let endpoint = match (&overrides.endpoint, signal_endpoint, base_endpoint) {
            (Some(url), _, _) => with_signal_path(url, protocol),
            (None, Some(url), _) => url,
            (None, None, Some(base)) => with_signal_path(&base, protocol),
            (None, None, None) => with_signal_path(
                match protocol {
                    Protocol::Grpc => DEFAULT_GRPC_ENDPOINT,
                    Protocol::HttpProtobuf => DEFAULT_HTTP_ENDPOINT,
                },
                protocol,
            ),
        };
        let interval = match overrides.interval {
            Some(i) => i,
            None => parse_variable(&env, &["OTEL_METRIC_EXPORT_INTERVAL"], milliseconds)?
                .unwrap_or(DEFAULT_INTERVAL),
        };
        let mut headers = match HEADER_VARIABLES.iter().find_map(|v| env(v)) {
            Some(h) => parse_headers(&h)?,
            None => Vec::new(),
        };
        for (key, value) in &overrides.headers {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
            headers.push((key.clone(), value.clone()));
        }
        let temporality = match overrides.temporality {
            Some(t) => t,
            None => parse_variable(
                &env,
                &["OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"],
                str::parse,
            )?
            .unwrap_or_default(),
        };
        let timeout =
            parse_variable(&env, &TIMEOUT_VARIABLES, milliseconds)?.unwrap_or(DEFAULT_TIMEOUT);
        let compression =
            parse_variable(&env, &COMPRESSION_VARIABLES, str::parse)?.unwrap_or_default();
        Ok(Some(OtlpSettings {
            endpoint,
            protocol,
            interval,
            headers,
            temporality,
            names: overrides.names,
            timeout,
            compression,
        }))
    }
}

const PROTOCOL_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];
const TIMEOUT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
];
const COMPRESSION_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
];

/// Parses the first of `names` that `env` has; the error names the variable.
fn parse_variable<T>(
    env: &impl Fn(&str) -> Option<String>,
    names: &[&str],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    for name in names {
        if let Some(value) = env(name) {
            return parse(value.trim())
                .map(Some)
                .map_err(|e| format!("{name}='{}': {e}", value.trim()));
        }
    }
    Ok(None)
}

fn milliseconds(value: &str) -> Result<Duration, String> {
    value
        .parse()
        .map(Duration::from_millis)
        .map_err(|e| format!("not a number of milliseconds ({e})"))
}

/// Appends `/v1/metrics` to an HTTP URL without a path.
fn with_signal_path(url: &str, protocol: Protocol) -> String {
    if protocol == Protocol::Grpc {
        return url.to_owned();
    }
    let trimmed = url.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        url.to_owned()
    } else {
        format!("{trimmed}/v1/metrics")
    }
}

/// The process's resource: `service.name` (default [`DEFAULT_SERVICE_NAME`]),
/// a `service.instance.id` unique per process, and `OTEL_RESOURCE_ATTRIBUTES`
/// / `OTEL_SERVICE_NAME`, which win.
pub fn resource(env: impl Fn(&str) -> Option<String>) -> Resource {
    let mut attributes = vec![
        ("service.name".to_owned(), DEFAULT_SERVICE_NAME.to_owned()),
        (
            "service.instance.id".to_owned(),
            uuid::Uuid::new_v4().to_string(),
        ),
    ];
    let from_env = env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    for pair in from_env.split(',').filter(|p| !p.trim().is_empty()) {
        if let Some((key, value)) = pair.split_once('=') {
            attributes.push((key.trim().to_owned(), percent_decode(value.trim())));
        }
    }
    if let Some(name) = env("OTEL_SERVICE_NAME").filter(|n| !n.trim().is_empty()) {
        attributes.push(("service.name".to_owned(), name));
    }
    // Later attributes win, so the environment overrides the defaults.
    Resource::new(attributes)
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

    fn record(&self, endpoint: &str, result: &Result<(), String>) {
        let mut last_error = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(()) => {
                self.exports.fetch_add(1, Ordering::Relaxed);
                let failed = self.failures.swap(0, Ordering::Relaxed);
                if failed > 0 {
                    eprintln!(
                        "OTLP export to {endpoint} recovered after {failed} failed attempt(s)"
                    );
                }
                *last_error = None;
            }
            Err(error) => {
                let failed = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                let mut logged = self.last_logged.lock().unwrap_or_else(|e| e.into_inner());
                let due = logged.is_none_or(|at| at.elapsed() >= FAILURE_LOG_INTERVAL);
                if failed == 1 || due {
                    eprintln!(
                        "warning: OTLP export to {endpoint} failed ({failed} in a row): {error}; recording continues, counts are resent when it recovers"
                    );
                    *logged = Some(Instant::now());
                }
                *last_error = Some(error.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn nothing_configured_means_no_otlp() {
        assert_eq!(
            OtlpSettings::resolve(&OtlpOverrides::default(), env(&[])),
            Ok(None)
        );
    }

    #[test]
    fn flags_win_over_environment() {
        let overrides = OtlpOverrides {
            endpoint: Some("http://127.0.0.1:4318".into()),
            protocol: Some(Protocol::HttpProtobuf),
            interval: Some(Duration::from_millis(250)),
            headers: vec![("x-token".into(), "flag".into())],
            temporality: Some(Temporality::Delta),
            names: NameStyle::Prometheus,
        };
        let s = OtlpSettings::resolve(
            &overrides,
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-token=env,tenant=a%20b"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://127.0.0.1:4318/v1/metrics");
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.interval, Duration::from_millis(250));
        assert_eq!(
            s.headers,
            vec![
                ("tenant".into(), "a b".into()),
                ("x-token".into(), "flag".into())
            ]
        );
        assert_eq!(s.temporality, Temporality::Delta);
        assert_eq!(s.names, NameStyle::Prometheus);
    }

    #[test]
    fn environment_alone_configures_otlp() {
        let s = OtlpSettings::resolve(
            &OtlpOverrides::default(),
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "1500"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.endpoint.as_str(), s.protocol),
            ("http://collector:4317", Protocol::Grpc)
        );
        assert_eq!(s.interval, Duration::from_millis(1500));
        assert_eq!(
            (s.temporality, s.timeout, s.compression),
            (Temporality::Cumulative, DEFAULT_TIMEOUT, Compression::None)
        );
        let s = OtlpSettings::resolve(
            &OtlpOverrides::default(),
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                (
                    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
                    "LowMemory",
                ),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.temporality, s.timeout, s.compression),
            (
                Temporality::Delta,
                Duration::from_millis(2500),
                Compression::Gzip
            )
        );
        let s = OtlpSettings::resolve(
            &OtlpOverrides::default(),
            env(&[(
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://c:4318/custom/path",
            )]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.endpoint.as_str(), s.protocol),
            ("http://c:4318/custom/path", Protocol::HttpProtobuf)
        );
        let s = OtlpSettings::resolve(
            &OtlpOverrides::default(),
            env(&[("OTEL_METRICS_EXPORTER", "otlp")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://localhost:4318/v1/metrics");
        assert!(OtlpSettings::resolve(
            &OtlpOverrides::default(),
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
            ])
        )
        .is_err());
    }

    #[test]
    fn invalid_variables_are_errors_that_name_them() {
        let resolve = |vars: &[(&str, &str)]| {
            let mut all = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
            all.extend_from_slice(vars);
            OtlpSettings::resolve(&OtlpOverrides::default(), env(&all))
        };
        assert_eq!(
            resolve(&[("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "soon")]).unwrap_err(),
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT='soon': not a number of milliseconds (invalid digit found in string)"
        );
        assert_eq!(
            resolve(&[("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli")]).unwrap_err(),
            "OTEL_EXPORTER_OTLP_COMPRESSION='brotli': unsupported OTLP compression 'brotli' (expected gzip, zstd or none)"
        );
        assert!(resolve(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")])
            .unwrap_err()
            .starts_with("OTEL_EXPORTER_OTLP_PROTOCOL='http/json': "));
        let s = resolve(&[
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "GRPC"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.compression, s.protocol),
            (Compression::Gzip, Protocol::Grpc)
        );
    }

    #[test]
    fn resource_defaults_and_environment() {
        let r = resource(env(&[]));
        assert_eq!(r.get("service.name"), Some(DEFAULT_SERVICE_NAME));
        let id = r.get("service.instance.id").unwrap().to_owned();
        assert_ne!(
            Some(id.as_str()),
            resource(env(&[])).get("service.instance.id")
        );
        let r = resource(env(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=x,service.instance.id=i-1",
            ),
            ("OTEL_SERVICE_NAME", "svc"),
        ]));
        assert_eq!(r.get("service.instance.id"), Some("i-1"));
        assert_eq!(r.get("service.name"), Some("svc"));
    }
}
