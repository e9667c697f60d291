//! The flags as the library's settings: each argument group's values in
//! the library's types, refused with a [`CliError`] where a value cannot be
//! used. Kept apart from the definitions (args.rs, command.rs), which
//! flags.rs reads to name a setting's flag and which so depend on no error.

use std::io;
use std::time::Duration;

use vllm_otel_metrics::export::otlp::tls::TlsFiles;
use vllm_otel_metrics::export::otlp::OtlpOptions;
use vllm_otel_metrics::export::prometheus::http;
use vllm_otel_metrics::instruments::{
    BucketOverrides, ExponentialHistograms, NameStyle, OtlpHistograms, PriorityClasses, Semconv,
    SemconvServer, Slo,
};
use vllm_otel_metrics::listen::{BearerToken, ListenerLimits, ServerTls, ServerTlsFiles};
use vllm_otel_metrics::protocol::InputLimits;
use vllm_otel_metrics::sources::ingest::client::TargetSecurity;

use super::args::{
    CommonArgs, ListenArgs, OtlpArgs, OtlpHistogramsArg, OtlpNames, SemconvArg, SemconvArgs,
    TargetArgs,
};
use super::error::CliError;

impl SemconvArgs {
    pub(super) fn semconv(&self) -> Semconv {
        match self.semconv {
            SemconvArg::None => Semconv::None,
            SemconvArg::GenAi => Semconv::GenAi,
        }
    }

    pub(super) fn server(&self) -> SemconvServer {
        SemconvServer {
            address: self.semconv_server_address.clone(),
            port: self.semconv_server_port,
        }
    }

    /// Whether the bridge exposes the streams.
    pub(super) fn on_metrics(&self) -> bool {
        self.semconv() != Semconv::None && self.semconv_prometheus
    }
}

impl TargetArgs {
    pub(super) fn security(&self) -> TargetSecurity {
        let mut security = TargetSecurity::default();
        security.ca = self.target_ca.clone();
        security.token_file = self.target_token_file.clone();
        security
    }
}

impl ListenArgs {
    pub(super) fn limits(&self, max_connections: usize) -> Result<ListenerLimits, CliError> {
        let optional =
            |flag, value| seconds(flag, value).map(|d: Duration| (!d.is_zero()).then_some(d));
        // Every field is set below; the constant only supplies a value to
        // start from, as the type's fields may grow.
        let mut limits: ListenerLimits = http::DEFAULT_LIMITS;
        limits.max_connections = max_connections;
        limits.idle_timeout = optional("--idle-timeout", self.idle_timeout)?;
        limits.write_timeout = optional("--write-timeout", self.write_timeout)?;
        Ok(limits)
    }

    /// TLS with `alpn`, and the token, as the flags say.
    pub(super) fn security(
        &self,
        alpn: &[&[u8]],
    ) -> Result<(Option<ServerTls>, Option<BearerToken>), CliError> {
        let mut files = ServerTlsFiles::default();
        files.cert = self.tls_cert.clone();
        files.key = self.tls_key.clone();
        files.client_ca = self.tls_client_ca.clone();
        let tls = ServerTls::from_files(&files, alpn)?;
        let token = self
            .auth_token_file
            .as_deref()
            .map(BearerToken::from_file)
            .transpose()?;
        Ok((tls, token))
    }
}

/// An `--otlp-header` that is not one `KEY=VALUE` header; names its
/// position, never its value (which may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--otlp-header #{position}: not one KEY=VALUE header (the value is not shown)")]
pub(super) struct InvalidHeader {
    position: usize,
}

/// Parses the `n`th `--otlp-header`; the error shows no part of the value.
pub(super) fn parse_header(n: usize, s: &str) -> Result<(String, String), InvalidHeader> {
    let invalid = || InvalidHeader { position: n };
    let (key, value) = s.split_once('=').ok_or_else(invalid)?;
    let key = key.trim();
    let valid_key = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !valid_key || value.contains(',') || value.chars().any(char::is_control) {
        return Err(invalid());
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

impl CommonArgs {
    /// `--slo`, parsed; none given, no SLO.
    /// A priority class the SLO names must be one `--attribute priority`
    /// labels, or its bounds would never apply.
    pub(super) fn slo(&self) -> Result<Option<Slo>, CliError> {
        let Some(json) = self.slo.as_deref() else {
            return Ok(None);
        };
        let invalid = |reason: String| CliError::Invalid {
            flag: "--slo",
            reason,
        };
        let slo = Slo::from_json(json).map_err(|e| invalid(e.to_string()))?;
        let attribution = self.attribution.attribution();
        let labels = attribution.priority().map(PriorityClasses::labels);
        for class in slo.priority_classes() {
            match &labels {
                None => {
                    return Err(invalid(format!(
                        "priorities.{class}: priority classes need --attribute priority"
                    )))
                }
                Some(labels) if !labels.contains(&class) => {
                    return Err(invalid(format!(
                        "priorities.{class}: not a class of --priority-classes ({})",
                        labels.join(", ")
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(Some(slo))
    }

    /// `--custom-histogram-buckets`, parsed; none given, none overridden.
    pub(super) fn bucket_overrides(&self) -> Result<BucketOverrides, CliError> {
        match &self.custom_histogram_buckets {
            None => Ok(BucketOverrides::default()),
            Some(json) => BucketOverrides::parse(json).map_err(|e| CliError::Invalid {
                flag: "--custom-histogram-buckets",
                reason: e.to_string(),
            }),
        }
    }

    pub(super) fn input_limits(&self) -> InputLimits {
        let mut limits = InputLimits::default();
        limits.max_label_bytes = self.max_label_bytes;
        limits.max_request_id_bytes = self.max_request_id_bytes;
        limits
    }
}

impl OtlpArgs {
    pub(super) fn options(&self) -> Result<OtlpOptions, CliError> {
        let headers = self
            .otlp_header
            .iter()
            .enumerate()
            .map(|(i, h)| parse_header(i + 1, h))
            .collect::<Result<_, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut tls = TlsFiles::default();
        tls.certificate = self.otlp_certificate.clone();
        tls.client_certificate = self.otlp_client_certificate.clone();
        tls.client_key = self.otlp_client_key.clone();
        let mut options = OtlpOptions::default();
        options.endpoint = self.otlp_endpoint.clone();
        options.traces_endpoint = self.otlp_traces_endpoint.clone();
        options.protocol = self.otlp_protocol;
        options.interval = self.otlp_interval_ms.map(Duration::from_millis);
        options.timeout = self.otlp_timeout_ms.map(Duration::from_millis);
        options.headers = headers;
        options.temporality = self.otlp_temporality;
        options.compression = self.otlp_compression;
        options.tls = tls;
        Ok(options)
    }

    /// The `--otlp-histograms` setting with its size and scale.
    pub(super) fn histograms(&self) -> OtlpHistograms {
        match self.otlp_histograms {
            OtlpHistogramsArg::Explicit => OtlpHistograms::Explicit,
            OtlpHistogramsArg::Exponential => OtlpHistograms::Exponential(ExponentialHistograms {
                max_size: self.otlp_histogram_max_size,
                max_scale: self.otlp_histogram_max_scale,
            }),
        }
    }

    pub(super) fn name_style(&self) -> NameStyle {
        match self.otlp_names {
            OtlpNames::Otel => NameStyle::Otel,
            OtlpNames::Prometheus => NameStyle::Prometheus,
        }
    }
}

/// A duration flag's value: zero or positive seconds, else a clear error.
pub(super) fn seconds(flag: &'static str, value: f64) -> Result<Duration, CliError> {
    Duration::try_from_secs_f64(value).map_err(|_| CliError::Usage {
        flag,
        reason: format!("must be zero or positive seconds, not {value}"),
    })
}
