//! TLS for the OTLP exporter, from certificate files.
//!
//! `opentelemetry-otlp` reads no certificate variable itself, so this module
//! reads the specification's: `OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE`
//! (the CA that verifies the Collector; without it, the system's roots),
//! `OTEL_EXPORTER_OTLP_[METRICS_]CLIENT_CERTIFICATE` and
//! `…_CLIENT_KEY` (a client identity for mutual TLS), each overridden by its
//! [`TlsFiles`] field (the command line's `--otlp-*` flags). The files go where the exporter takes TLS: a tonic
//! `ClientTlsConfig` for gRPC, and for HTTP a `reqwest` blocking client
//! handed to the exporter. Both use rustls with the ring provider.

use crate::error::{setting, Cause, Setting, Settings, Unreadable};
use crate::support::file;
use std::path::{Path, PathBuf};
use std::time::Duration;

use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};

/// The exporter's default timeout, used for a TLS client when neither the
/// flag nor a variable sets one.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Certificate files, each winning over its variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsFiles {
    /// PEM CA bundle that verifies the Collector (`--otlp-certificate`).
    pub certificate: Option<PathBuf>,
    /// PEM client certificate, for mutual TLS (`--otlp-client-certificate`).
    pub client_certificate: Option<PathBuf>,
    /// PEM private key of the client certificate (`--otlp-client-key`).
    pub client_key: Option<PathBuf>,
}

/// A PEM file's contents.
#[derive(Debug, Clone)]
struct Pem {
    bytes: Vec<u8>,
}

/// TLS settings with their files read.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    ca: Option<Pem>,
    identity: Option<(Pem, Pem)>,
}

/// The field when set, else the first set of `variables`, with the setting
/// it came from.
fn path_from(
    field: &Option<PathBuf>,
    field_setting: Setting,
    variables: [&'static str; 2],
    env: &impl Fn(&str) -> Option<String>,
) -> Option<(PathBuf, Setting)> {
    if let Some(path) = field {
        return Some((path.clone(), field_setting));
    }
    variables.into_iter().find_map(|name| {
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (PathBuf::from(v.trim()), Setting::variable(name)))
    })
}

/// [`path_from`] for field `$field` of [`TlsFiles`] and its two variables,
/// `OTEL_EXPORTER_OTLP_[METRICS_]$variable`: the metrics signal's own wins.
/// The setting and both names come from the one field name and suffix, so
/// that a file's field and its variables cannot disagree.
macro_rules! path_of {
    ($files:ident . $field:ident, $variable:literal, $env:expr) => {
        path_from(
            &$files.$field,
            setting!(TlsFiles.$field),
            [
                concat!("OTEL_EXPORTER_OTLP_METRICS_", $variable),
                concat!("OTEL_EXPORTER_OTLP_", $variable),
            ],
            $env,
        )
    };
}

/// Why the OTLP client's TLS settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A certificate or key file cannot be read.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// A file is not PEM.
    #[error("{setting}: {} is not a PEM file", path.display())]
    NotPem {
        /// The field or variable that named the file.
        setting: Setting,
        /// The file.
        path: PathBuf,
    },
    /// A client certificate without its key, or the other way round.
    #[error("{setting} needs its pair: a client certificate and a client key go together")]
    Unpaired {
        /// The field or variable given alone.
        setting: Setting,
    },
    /// The CA certificate is not usable.
    #[error("the OTLP CA certificate cannot be used")]
    Ca(#[source] Cause),
    /// The client certificate and key are not usable together.
    #[error("the OTLP client certificate and key cannot be used")]
    Identity(#[source] Cause),
    /// The HTTP client cannot be built.
    #[error("cannot build the OTLP HTTP client")]
    HttpClient(#[source] Cause),
}

impl Settings for TlsError {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        match self {
            TlsError::Unreadable(unreadable) => unreadable.visit_settings(visit),
            TlsError::NotPem { setting, .. } | TlsError::Unpaired { setting } => visit(setting),
            TlsError::Ca(_) | TlsError::Identity(_) | TlsError::HttpClient(_) => {}
        }
    }
}

fn read_pem(path: &Path, setting: Setting) -> Result<Pem, TlsError> {
    let bytes = file::read(path, setting.clone())?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(TlsError::NotPem {
            setting,
            path: path.to_owned(),
        });
    }
    Ok(Pem { bytes })
}

/// Installs rustls' ring provider as the process default (the HTTP client
/// needs one; a provider installed before stays).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl TlsSettings {
    /// Reads the files the fields or variables name.
    pub fn resolve(
        files: &TlsFiles,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<TlsSettings, TlsError> {
        let ca = path_of!(files.certificate, "CERTIFICATE", env);
        let cert = path_of!(files.client_certificate, "CLIENT_CERTIFICATE", env);
        let key = path_of!(files.client_key, "CLIENT_KEY", env);
        let ca = ca
            .map(|(path, setting)| read_pem(&path, setting))
            .transpose()?;
        let identity = match (cert, key) {
            (Some((cert, cert_setting)), Some((key, key_setting))) => {
                Some((read_pem(&cert, cert_setting)?, read_pem(&key, key_setting)?))
            }
            (None, None) => None,
            (Some((_, setting)), None) | (None, Some((_, setting))) => {
                return Err(TlsError::Unpaired { setting })
            }
        };
        Ok(TlsSettings { ca, identity })
    }

    /// Whether certificate files are configured.
    pub fn has_files(&self) -> bool {
        self.ca.is_some() || self.identity.is_some()
    }

    /// Whether a gRPC channel to `endpoint` needs a TLS configuration: an
    /// `https` endpoint (tonic's default one trusts no root), or files given.
    pub fn applies_to(&self, endpoint: &str) -> bool {
        self.has_files() || endpoint.trim().to_ascii_lowercase().starts_with("https://")
    }

    /// The tonic TLS configuration: the CA file if given, else the system's
    /// roots; the client identity if given.
    pub fn tonic_config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        config = match &self.ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(&ca.bytes)),
            None => config.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(&cert.bytes, &key.bytes));
        }
        config
    }

    /// A blocking HTTP client for the exporter, with the CA (trusted alone)
    /// and the client identity. The exporter does not apply its timeout to a
    /// client it is handed, so the client gets the flag's, else the
    /// timeout variables' as the exporter reads them (milliseconds), else
    /// the exporter's default.
    pub fn http_client(
        &self,
        timeout: Option<Duration>,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<reqwest::blocking::Client, TlsError> {
        let timeout = timeout
            .or_else(|| {
                [
                    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
                    "OTEL_EXPORTER_OTLP_TIMEOUT",
                ]
                .into_iter()
                .find_map(|name| env(name)?.trim().parse().ok())
                .map(Duration::from_millis)
            })
            .unwrap_or(DEFAULT_TIMEOUT);
        let mut builder = reqwest::blocking::Client::builder().timeout(timeout);
        if let Some(ca) = &self.ca {
            let certificates = reqwest::Certificate::from_pem_bundle(&ca.bytes)
                .map_err(|e| TlsError::Ca(Cause::new(e)))?;
            builder = builder.tls_certs_only(certificates);
        }
        if let Some((cert, key)) = &self.identity {
            let mut pem = cert.bytes.clone();
            pem.push(b'\n');
            pem.extend_from_slice(&key.bytes);
            let identity =
                reqwest::Identity::from_pem(&pem).map_err(|e| TlsError::Identity(Cause::new(e)))?;
            builder = builder.identity(identity);
        }
        install_crypto_provider();
        // The blocking client runs its own runtime; it must not be built
        // inside another one.
        std::thread::spawn(move || builder.build())
            .join()
            .map_err(|_| {
                TlsError::HttpClient(Cause::new(std::io::Error::other("its builder panicked")))
            })?
            .map_err(|e| TlsError::HttpClient(Cause::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_wins_then_the_metrics_variable_then_the_general_one() {
        let files = TlsFiles {
            client_key: Some(PathBuf::from("field.pem")),
            ..TlsFiles::default()
        };
        let env = |name: &str| {
            [
                "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
            ]
            .contains(&name)
            .then(|| format!("{name}.pem"))
        };
        let named = |found: Option<(PathBuf, Setting)>| found.map(|(_, s)| s.to_string());
        let cert = named(path_of!(
            files.client_certificate,
            "CLIENT_CERTIFICATE",
            &env
        ));
        assert_eq!(
            cert.as_deref(),
            Some("OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE")
        );
        let ca = named(path_of!(files.certificate, "CERTIFICATE", &env));
        assert_eq!(ca.as_deref(), Some("OTEL_EXPORTER_OTLP_CERTIFICATE"));
        let key = named(path_of!(files.client_key, "CLIENT_KEY", &env));
        assert_eq!(key.as_deref(), Some("client_key"));
    }
}
