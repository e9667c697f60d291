//! The listeners' TLS: a rustls server configuration built from PEM files,
//! with client certificates required when a client CA is given.

use super::config::ListenConfigError;
use crate::error::{setting, Cause, Setting};
use crate::support::file;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn invalid(
    setting: Setting,
    path: &Path,
    cause: impl std::error::Error + Send + Sync + 'static,
) -> ListenConfigError {
    ListenConfigError::Invalid {
        setting,
        path: path.to_owned(),
        cause: Cause::new(cause),
    }
}

/// The files of a TLS server. None given: the server speaks plain TCP.
///
/// ```
/// use std::path::PathBuf;
/// use vllm_otel_metrics::listen::ServerTlsFiles;
///
/// let mut files = ServerTlsFiles::default();
/// files.cert = Some(PathBuf::from("server.pem"));
/// files.key = Some(PathBuf::from("server-key.pem"));
/// // Mutual TLS: clients present certificates that chain to this CA.
/// files.client_ca = Some(PathBuf::from("clients-ca.pem"));
/// assert_ne!(files, ServerTlsFiles::default());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerTlsFiles {
    /// PEM certificate chain (the command line's `--tls-cert`).
    pub cert: Option<PathBuf>,
    /// PEM private key (`--tls-key`).
    pub key: Option<PathBuf>,
    /// PEM CA that client certificates must chain to (`--tls-client-ca`).
    pub client_ca: Option<PathBuf>,
}

/// A rustls server configuration (ring provider), built by
/// [`ServerTls::from_files`].
///
/// ```
/// use vllm_otel_metrics::listen::{ServerTls, ServerTlsFiles};
///
/// let tls: Option<ServerTls> = ServerTls::from_files(&ServerTlsFiles::default(), &[b"h2"]).unwrap();
/// assert!(tls.is_none());
/// ```
#[derive(Debug, Clone)]
pub struct ServerTls(pub(super) Arc<rustls::ServerConfig>);

impl ServerTls {
    /// The configuration of `files`, `None` when no certificate is given;
    /// `alpn` lists the application protocols offered (`h2` for gRPC).
    ///
    /// ```
    /// use vllm_otel_metrics::listen::{ServerTls, ServerTlsFiles};
    ///
    /// // A self-signed certificate and its key, made here with rcgen.
    /// let key = rcgen::KeyPair::generate().unwrap();
    /// let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
    ///     .unwrap()
    ///     .self_signed(&key)
    ///     .unwrap();
    /// let dir = std::env::temp_dir().join(format!("vllm-otel-metrics-doc-tls-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let mut files = ServerTlsFiles::default();
    /// files.cert = Some(dir.join("server.pem"));
    /// files.key = Some(dir.join("server-key.pem"));
    /// std::fs::write(files.cert.as_ref().unwrap(), cert.pem()).unwrap();
    /// std::fs::write(files.key.as_ref().unwrap(), key.serialize_pem()).unwrap();
    /// let tls = ServerTls::from_files(&files, &[b"h2"]);
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// assert!(tls.unwrap().is_some());
    /// ```
    pub fn from_files(
        files: &ServerTlsFiles,
        alpn: &[&[u8]],
    ) -> Result<Option<ServerTls>, ListenConfigError> {
        let (cert, key) = match (&files.cert, &files.key) {
            (None, None) if files.client_ca.is_none() => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            _ => {
                return Err(ListenConfigError::Unpaired {
                    cert: setting!(ServerTlsFiles.cert),
                    key: setting!(ServerTlsFiles.key),
                    client_ca: setting!(ServerTlsFiles.client_ca),
                })
            }
        };
        let chain =
            CertificateDer::pem_slice_iter(&file::read(cert, setting!(ServerTlsFiles.cert))?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(setting!(ServerTlsFiles.cert), cert, e))?;
        if chain.is_empty() {
            return Err(ListenConfigError::NoCertificate {
                setting: setting!(ServerTlsFiles.cert),
                path: cert.clone(),
            });
        }
        let private_key =
            PrivateKeyDer::from_pem_slice(&file::read(key, setting!(ServerTlsFiles.key))?)
                .map_err(|e| invalid(setting!(ServerTlsFiles.key), key, e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| ListenConfigError::Tls(Cause::new(e)))?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for certificate in CertificateDer::pem_slice_iter(&file::read(
                    ca,
                    setting!(ServerTlsFiles.client_ca),
                )?) {
                    let certificate = certificate
                        .map_err(|e| invalid(setting!(ServerTlsFiles.client_ca), ca, e))?;
                    roots
                        .add(certificate)
                        .map_err(|e| invalid(setting!(ServerTlsFiles.client_ca), ca, e))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| invalid(setting!(ServerTlsFiles.client_ca), ca, e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, private_key).map_err(|e| {
            ListenConfigError::KeyPair {
                cert: setting!(ServerTlsFiles.cert),
                key: setting!(ServerTlsFiles.key),
                cause: Cause::new(e),
            }
        })?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Some(ServerTls(Arc::new(config))))
    }
}
