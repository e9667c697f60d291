//! What OTLP is configured to do: the signals, transports, the options
//! ([`OtlpOptions`], the command line's `--otlp-*` flags) and their errors,
//! and where each signal goes ([`Destination`]).

use super::tls;
use crate::error::{setting, Cause, Setting, Settings};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use opentelemetry_otlp::Compression;
use opentelemetry_sdk::metrics::Temporality;

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
    pub(super) fn name(self) -> &'static str {
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

    /// The option that sets the endpoint.
    fn setting(self) -> Setting {
        match self {
            Signal::Metrics => setting!(OtlpOptions.endpoint),
            Signal::Traces => setting!(OtlpOptions.traces_endpoint),
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
    #[error("{name}='{value}'")]
    InvalidVariable {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        source: Box<OtlpError>,
    },
    /// A header name that is not valid in gRPC metadata.
    #[error("invalid OTLP header name '{name}'")]
    InvalidHeaderName {
        /// The header.
        name: String,
        /// Why, as gRPC metadata says.
        #[source]
        cause: Cause,
    },
    /// A header value that is not valid in gRPC metadata (never shown).
    #[error("invalid OTLP header value for '{name}'")]
    InvalidHeaderValue {
        /// The header.
        name: String,
    },
    /// An endpoint URL with credentials in it.
    #[error(transparent)]
    CredentialsInUrl(#[from] crate::error::CredentialsInUrl),
    /// The TLS files or client.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The exporter refused its configuration.
    #[error("cannot build the OTLP exporter for {destination}")]
    Build {
        /// Where it would have sent (transport and endpoint).
        destination: String,
        /// The exporter's error.
        #[source]
        cause: Cause,
    },
}

impl Settings for OtlpError {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        match self {
            OtlpError::InvalidVariable { source, .. } => source.visit_settings(visit),
            OtlpError::CredentialsInUrl(e) => e.visit_settings(visit),
            OtlpError::Tls(e) => e.visit_settings(visit),
            OtlpError::UnknownProtocol(_)
            | OtlpError::UnknownTemporality(_)
            | OtlpError::UnknownCompression { .. }
            | OtlpError::InvalidHeaderName { .. }
            | OtlpError::InvalidHeaderValue { .. }
            | OtlpError::Build { .. } => {}
        }
    }
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

/// The OTLP settings (the command line's `--otlp-*` flags); `None` (or
/// empty) leaves a setting to the exporter, which reads its variable or
/// takes its default.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
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
pub(super) fn with_signal_path(url: &str, signal: Signal) -> String {
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
    /// The option or variable it came from; `None` for the default.
    pub source: Option<Setting>,
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
    pub(super) fn endpoint_flag(&self, signal: Signal) -> Option<&String> {
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
                (with_signal_path(url, signal), Some(signal.setting()))
            }
            Some(url) => (url.clone(), Some(signal.setting())),
            None => signal
                .endpoint_variables()
                .into_iter()
                .find_map(|name| {
                    env(name).map(|v| (v.trim().to_owned(), Some(Setting::variable(name))))
                })
                .unwrap_or_else(|| (protocol.default_endpoint(signal), None)),
        };
        if let Some(source) = &source {
            crate::support::redact::refuse_userinfo(
                source.clone(),
                &endpoint,
                setting!(OtlpOptions.headers),
            )?;
        }
        Ok(Destination {
            signal,
            protocol,
            endpoint,
            source,
        })
    }
}
