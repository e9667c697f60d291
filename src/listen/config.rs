//! A listener's settings: its bounds ([`ListenerLimits`]) and why its TLS
//! or token files cannot be used ([`ListenConfigError`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Cause, Setting, Settings, Unreadable};

/// Bounds of one listener. Each server has its defaults
/// (`export::prometheus::http::DEFAULT_LIMITS`,
/// `sources::ingest::grpc::DEFAULT_LIMITS`); a host changes their fields.
///
/// ```
/// # #[cfg(feature = "grpc")] {
/// use vllm_otel_metrics::listen::ListenerLimits;
/// use vllm_otel_metrics::sources::ingest::grpc::DEFAULT_LIMITS;
///
/// let mut limits: ListenerLimits = DEFAULT_LIMITS;
/// limits.max_connections = 8;
/// // Connections that take no written byte are never closed.
/// limits.write_timeout = None;
/// assert_eq!(limits.idle_timeout, DEFAULT_LIMITS.idle_timeout);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerLimits {
    /// Connections open at once; further ones wait in the backlog.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed (before the
    /// TLS handshake and the request headers too).
    pub idle_timeout: Option<Duration>,
    /// A connection that takes no written byte for this long is closed.
    pub write_timeout: Option<Duration>,
}

/// Why a listener's TLS or token files cannot be used; names the settings
/// ([`ServerTlsFiles`](super::ServerTlsFiles)' fields, `BearerToken::from_file`'s `token_file`).
///
/// ```
/// use std::path::PathBuf;
/// use vllm_otel_metrics::listen::{ListenConfigError, ServerTls, ServerTlsFiles};
///
/// let mut files = ServerTlsFiles::default();
/// files.key = Some(PathBuf::from("key.pem"));
/// let error = ServerTls::from_files(&files, &[]).unwrap_err();
/// assert!(matches!(error, ListenConfigError::Unpaired { .. }));
/// assert_eq!(error.to_string(), "cert and key go together (and client_ca needs them)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListenConfigError {
    /// A file cannot be read.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// A file's contents are not what the setting needs.
    #[error("{setting}: {}", path.display())]
    Invalid {
        /// The setting that named it.
        setting: Setting,
        /// The file.
        path: PathBuf,
        /// What is wrong, as the TLS library says.
        #[source]
        cause: Cause,
    },
    /// A certificate file without any certificate.
    #[error("{setting}: {} holds no certificate", path.display())]
    NoCertificate {
        /// The certificate setting.
        setting: Setting,
        /// The file.
        path: PathBuf,
    },
    /// A token file with nothing in it.
    #[error("{setting}: {} is empty", path.display())]
    EmptyToken {
        /// The token setting.
        setting: Setting,
        /// The file.
        path: PathBuf,
    },
    /// A token file longer than a token may be.
    #[error("{setting}: {} is longer than {limit} bytes, the most a token file may hold", path.display())]
    TooLong {
        /// The token setting.
        setting: Setting,
        /// The file.
        path: PathBuf,
        /// The most bytes it may hold.
        limit: usize,
    },
    /// A certificate without a key (or the other way round), or a client
    /// CA without a server certificate.
    #[error("{cert} and {key} go together (and {client_ca} needs them)")]
    Unpaired {
        /// The certificate setting.
        cert: Setting,
        /// The key setting.
        key: Setting,
        /// The client CA setting.
        client_ca: Setting,
    },
    /// The certificate and key do not make a TLS configuration.
    #[error("{cert}/{key}")]
    KeyPair {
        /// The certificate setting.
        cert: Setting,
        /// The key setting.
        key: Setting,
        /// Why, as the TLS library says.
        #[source]
        cause: Cause,
    },
    /// The TLS library refused its defaults.
    #[error("TLS cannot be set up")]
    Tls(#[source] Cause),
}

impl Settings for ListenConfigError {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        match self {
            ListenConfigError::Unreadable(unreadable) => unreadable.visit_settings(visit),
            ListenConfigError::Invalid { setting, .. }
            | ListenConfigError::NoCertificate { setting, .. }
            | ListenConfigError::EmptyToken { setting, .. }
            | ListenConfigError::TooLong { setting, .. } => visit(setting),
            ListenConfigError::Unpaired {
                cert,
                key,
                client_ca,
            } => {
                visit(cert);
                visit(key);
                visit(client_ca);
            }
            ListenConfigError::KeyPair { cert, key, .. } => {
                visit(cert);
                visit(key);
            }
            ListenConfigError::Tls(_) => {}
        }
    }
}
