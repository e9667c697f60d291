//! Streams records to a remote `serve` (the `--target` of `replay` and
//! `simulate`): a bounded channel feeds one client-streaming call, so a
//! slow server slows the producer down instead of filling memory.

use crate::error::Unreadable;
use crate::error::{setting, Cause, Setting, Settings};
use crate::support::file;
use std::path::PathBuf;

use prost::Message;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use super::grpc::SUMMARY_TRAILER;
use super::proto::{pb, record_to_proto};
use super::service::describe_summary;
use crate::protocol::Record;

/// How to reach a `serve` that requires TLS or a token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TargetSecurity {
    /// PEM CA that verifies the server (else the system's roots, for an
    /// `https://` target; the command line's `--target-ca`).
    pub ca: Option<PathBuf>,
    /// The bearer token the server requires (`--target-token-file`).
    pub token_file: Option<PathBuf>,
}

/// Adds the bearer token to every call.
#[derive(Clone)]
struct Token(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Token {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Client = pb::ingest_client::IngestClient<InterceptedService<Channel, Token>>;

/// Why streaming to a `serve` process failed; names the settings
/// ([`RemoteSink::TARGET`], [`TargetSecurity`]'s fields).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The target URL carries credentials.
    #[error(transparent)]
    CredentialsInUrl(#[from] crate::error::CredentialsInUrl),
    /// The target is not a usable URL, or its TLS setup failed.
    #[error("{setting} {target}{context}")]
    InvalidTarget {
        /// The target setting.
        setting: Setting,
        /// The target.
        target: String,
        /// What was being set up (`: TLS`), or nothing.
        context: &'static str,
        /// The transport's error.
        #[source]
        cause: Cause,
    },
    /// The CA or token file cannot be read.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// The token file's contents cannot be a header value (never shown).
    #[error("{setting}: {} is not a valid token", path.display())]
    InvalidToken {
        /// The token setting.
        setting: Setting,
        /// The file.
        path: std::path::PathBuf,
    },
    /// No connection.
    #[error("cannot connect to {target}")]
    Connect {
        /// The target.
        target: String,
        /// The transport's error.
        #[source]
        cause: Cause,
    },
    /// The server ended the stream with an error status; `applied` is the
    /// summary it sent of what it had applied, if any.
    #[error("{target} ended the stream: {code}: {message}{}", applied.as_ref().map(|a| format!(" (before that: {a})")).unwrap_or_default())]
    Ended {
        /// The target.
        target: String,
        /// The gRPC status code.
        code: String,
        /// The status message.
        message: String,
        /// What the server had applied before (its summary, described).
        applied: Option<String>,
    },
    /// The stream's task failed.
    #[error("the stream to {target} failed")]
    Failed {
        /// The target.
        target: String,
        /// The task's error.
        #[source]
        cause: Cause,
    },
}

impl Settings for TargetError {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        match self {
            TargetError::CredentialsInUrl(e) => e.visit_settings(visit),
            TargetError::InvalidTarget { setting, .. }
            | TargetError::InvalidToken { setting, .. } => visit(setting),
            TargetError::Unreadable(unreadable) => unreadable.visit_settings(visit),
            TargetError::Connect { .. }
            | TargetError::Ended { .. }
            | TargetError::Failed { .. } => {}
        }
    }
}

/// Connects to `target` as `security` says.
async fn connect(target: &str, security: &TargetSecurity) -> Result<Client, TargetError> {
    crate::support::redact::refuse_userinfo(
        RemoteSink::TARGET,
        target,
        setting!(TargetSecurity.token_file),
    )?;
    let invalid = |context: &'static str, cause: Cause| TargetError::InvalidTarget {
        setting: RemoteSink::TARGET,
        target: target.to_owned(),
        context,
        cause,
    };
    let mut endpoint =
        Endpoint::from_shared(target.to_owned()).map_err(|e| invalid("", Cause::new(e)))?;
    if target.starts_with("https://") || security.ca.is_some() {
        let tls = match &security.ca {
            Some(ca) => {
                let pem = file::read(ca, setting!(TargetSecurity.ca))?;
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
            }
            None => ClientTlsConfig::new().with_native_roots(),
        };
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| invalid(": TLS", Cause::new(e)))?;
    }
    let token = match &security.token_file {
        Some(path) => {
            let text = file::read_to_string(path, setting!(TargetSecurity.token_file))?;
            let value =
                MetadataValue::try_from(format!("Bearer {}", text.trim())).map_err(|_| {
                    TargetError::InvalidToken {
                        setting: setting!(TargetSecurity.token_file),
                        path: path.clone(),
                    }
                })?;
            Some(value)
        }
        None => None,
    };
    let channel = endpoint.connect().await.map_err(|e| TargetError::Connect {
        target: target.to_owned(),
        cause: Cause::new(e),
    })?;
    Ok(pb::ingest_client::IngestClient::with_interceptor(
        channel,
        Token(token),
    ))
}

/// Messages buffered between the producer and the network.
const BUFFERED: usize = 64;

/// A client-streaming call in progress.
#[derive(Debug)]
pub struct RemoteSink {
    target: String,
    sender: Option<mpsc::Sender<pb::Record>>,
    call: JoinHandle<Result<pb::IngestSummary, tonic::Status>>,
    runtime: Handle,
}

impl RemoteSink {
    /// The setting errors about the target URL name (the command line's
    /// `--target`).
    pub const TARGET: Setting = Setting::field("RemoteSink::connect::target");

    /// Connects to `target` (e.g. `http://127.0.0.1:50051`) and opens the stream.
    /// Call from outside the runtime: it blocks on the connection.
    pub fn connect(
        target: &str,
        security: &TargetSecurity,
        runtime: &Handle,
    ) -> Result<RemoteSink, TargetError> {
        let mut client = runtime
            .block_on(connect(target, security))?
            .max_encoding_message_size(64 << 20);
        let (sender, receiver) = mpsc::channel(BUFFERED);
        let call = runtime.spawn(async move {
            client
                .stream(ReceiverStream::new(receiver))
                .await
                .map(tonic::Response::into_inner)
        });
        Ok(RemoteSink {
            target: target.to_owned(),
            sender: Some(sender),
            call,
            runtime: runtime.clone(),
        })
    }

    /// Sends one record, waiting while the buffer is full. Returns false once
    /// the call has ended (the record is not sent); [`RemoteSink::finish`] then says why.
    pub fn send(&mut self, record: &Record) -> bool {
        let Some(sender) = &self.sender else {
            return false;
        };
        if sender.blocking_send(record_to_proto(record)).is_err() {
            self.sender = None;
            return false;
        }
        true
    }

    /// Closes the stream and waits for the server's summary.
    pub fn finish(mut self) -> Result<pb::IngestSummary, TargetError> {
        self.sender = None;
        let target = self.target;
        match self.runtime.block_on(self.call) {
            Ok(Ok(summary)) => Ok(summary),
            Ok(Err(status)) => {
                // A stream cut at the server's drain deadline says what it applied.
                let applied = status
                    .metadata()
                    .get_bin(SUMMARY_TRAILER)
                    .and_then(|v| v.to_bytes().ok())
                    .and_then(|bytes| pb::IngestSummary::decode(bytes.as_ref()).ok())
                    .map(|summary| describe_summary(&summary));
                Err(TargetError::Ended {
                    target,
                    code: status.code().to_string(),
                    message: status.message().to_owned(),
                    applied,
                })
            }
            Err(e) => Err(TargetError::Failed {
                target,
                cause: Cause::new(e),
            }),
        }
    }
}
