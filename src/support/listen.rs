//! Bounded listeners for the two servers (`/metrics` and gRPC ingest).
//!
//! [`incoming`] accepts connections only while fewer than
//! [`ListenerLimits::max_connections`] are open (the rest wait in the
//! kernel's backlog, holding no file descriptor), backs off when an accept
//! fails (`EMFILE` must not spin a core), completes the optional TLS
//! handshake off the accept loop within the idle timeout, and hands out
//! [`Conn`]s whose reads and writes are guarded: a connection that sends
//! nothing for the idle timeout, or does not take written bytes for the
//! write timeout (a scraper that never reads), is closed and frees what it
//! held. [`ServerTls`] builds the rustls configuration from PEM files, with
//! client certificates required when a client CA is given; [`BearerToken`]
//! checks an `Authorization: Bearer` header in constant time.

use crate::error::{setting, Cause, Setting, Settings};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep, Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;

/// How long an accept error pauses the accept loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Bounds of one listener.
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

/// A file a flag names, read with the flag in its error.
/// Why a listener's TLS or token files cannot be used; names the settings
/// ([`ServerTlsFiles`]' fields, `BearerToken::from_file`'s `token_file`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListenConfigError {
    /// A file cannot be read.
    #[error("{setting}: cannot read {}", path.display())]
    Unreadable {
        /// The setting that named it.
        setting: Setting,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        cause: Cause,
    },
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
            ListenConfigError::Unreadable { setting, .. }
            | ListenConfigError::Invalid { setting, .. }
            | ListenConfigError::NoCertificate { setting, .. }
            | ListenConfigError::EmptyToken { setting, .. } => visit(setting),
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

fn read_file(path: &Path, setting: Setting) -> Result<Vec<u8>, ListenConfigError> {
    std::fs::read(path).map_err(|e| ListenConfigError::Unreadable {
        setting,
        path: path.to_owned(),
        cause: Cause::new(e),
    })
}

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

/// The files of a TLS server.
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

/// A rustls server configuration (ring provider).
#[derive(Debug, Clone)]
pub struct ServerTls(Arc<rustls::ServerConfig>);

impl ServerTls {
    /// The configuration of `files`, `None` when no certificate is given;
    /// `alpn` lists the application protocols offered (`h2` for gRPC).
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
            CertificateDer::pem_slice_iter(&read_file(cert, setting!(ServerTlsFiles.cert))?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(setting!(ServerTlsFiles.cert), cert, e))?;
        if chain.is_empty() {
            return Err(ListenConfigError::NoCertificate {
                setting: setting!(ServerTlsFiles.cert),
                path: cert.clone(),
            });
        }
        let private_key =
            PrivateKeyDer::from_pem_slice(&read_file(key, setting!(ServerTlsFiles.key))?)
                .map_err(|e| invalid(setting!(ServerTlsFiles.key), key, e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| ListenConfigError::Tls(Cause::new(e)))?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for certificate in CertificateDer::pem_slice_iter(&read_file(
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

/// A bearer token a server requires, read from a file (surrounding
/// whitespace dropped). Its value is never printed.
#[derive(Clone)]
pub struct BearerToken(Arc<[u8]>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(***)")
    }
}

impl BearerToken {
    /// The setting errors about the token file name.
    pub const TOKEN_FILE: Setting = Setting::field("BearerToken::from_file::token_file");

    /// The token in `token_file` (the command line's `--auth-token-file`); an
    /// empty file is an error.
    pub fn from_file(token_file: &Path) -> Result<BearerToken, ListenConfigError> {
        let bytes = read_file(token_file, BearerToken::TOKEN_FILE)?;
        let token = bytes.trim_ascii();
        if token.is_empty() {
            return Err(ListenConfigError::EmptyToken {
                setting: BearerToken::TOKEN_FILE,
                path: token_file.to_owned(),
            });
        }
        Ok(BearerToken(token.into()))
    }

    /// Whether an `Authorization` header value carries this token.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some(presented) = value
            .strip_prefix(b"Bearer ")
            .or_else(|| value.strip_prefix(b"bearer "))
        else {
            return false;
        };
        // Constant time in the token's contents.
        presented.len() == self.0.len()
            && presented
                .iter()
                .zip(self.0.iter())
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

/// An accepted connection, plain or TLS, holding its slot of the
/// connection cap until it is dropped.
#[derive(Debug)]
pub enum Conn {
    /// Plain TCP.
    Plain(Guarded),
    /// TLS over TCP.
    Tls(Box<TlsStream<Guarded>>),
}

impl Conn {
    /// The peer's address.
    pub fn peer(&self) -> Option<std::net::SocketAddr> {
        match self {
            Conn::Plain(io) => io.stream.peer_addr().ok(),
            Conn::Tls(io) => io.get_ref().0.stream.peer_addr().ok(),
        }
    }
}

/// A TCP stream with idle and write timeouts and a connection slot.
#[derive(Debug)]
pub struct Guarded {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    idle_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    read_deadline: Option<Pin<Box<Sleep>>>,
    write_deadline: Option<Pin<Box<Sleep>>>,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

impl Guarded {
    fn new(stream: TcpStream, slot: OwnedSemaphorePermit, limits: &ListenerLimits) -> Self {
        Guarded {
            read_deadline: limits.idle_timeout.map(|t| Box::pin(sleep(t))),
            stream,
            _slot: slot,
            idle_timeout: limits.idle_timeout,
            write_timeout: limits.write_timeout,
            write_deadline: None,
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if let (Some(deadline), Some(idle)) = (&mut this.read_deadline, this.idle_timeout) {
                    deadline.as_mut().reset(Instant::now() + idle);
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let expired = this
                    .read_deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    Poll::Ready(Err(timed_out("the peer sent nothing for the idle timeout")))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl Guarded {
    /// Notes the outcome of a write: progress resets both deadlines; a
    /// write that stays pending past the write timeout fails.
    fn guard_write(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(result) => {
                self.write_deadline = None;
                // Taking bytes is activity too: a long response is not idle.
                if let (Some(deadline), Some(idle)) = (&mut self.read_deadline, self.idle_timeout) {
                    deadline.as_mut().reset(Instant::now() + idle);
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let Some(timeout) = self.write_timeout else {
                    return Poll::Pending;
                };
                let deadline = self
                    .write_deadline
                    .get_or_insert_with(|| Box::pin(sleep(timeout)));
                if deadline.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Err(timed_out(
                        "the peer took no written byte for the write timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        self.guard_write(cx, polled)
    }

    /// Vectored, so that hyper writes a response from its shared body
    /// instead of copying it into a buffer per connection.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.guard_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write(cx, data),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(io) => io.is_write_vectored(),
            Conn::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_flush(cx),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Conn::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

// tonic's server asks each connection for its peer.
#[cfg(feature = "grpc")]
impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = Option<std::net::SocketAddr>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.peer()
    }
}

/// Accepts from `listener` under `limits`, with TLS when given; the
/// connections come out of the returned stream (for tonic's
/// `serve_with_incoming` or a hyper loop). `name` names the listener in
/// warnings.
pub fn incoming(
    listener: TcpListener,
    limits: ListenerLimits,
    tls: Option<ServerTls>,
    name: &'static str,
) -> ReceiverStream<io::Result<Conn>> {
    let (sender, receiver) = mpsc::channel(limits.max_connections.clamp(1, 64));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let acceptor = tls.map(|tls| TlsAcceptor::from(tls.0));
    tokio::spawn(async move {
        let mut warned_at: Option<Instant> = None;
        loop {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: wait instead of spinning; warn at
                    // most every 10 s.
                    if warned_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!(%error, "{name}: accepting a connection failed; retrying");
                        warned_at = Some(Instant::now());
                    }
                    drop(slot);
                    sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let guarded = Guarded::new(stream, slot, &limits);
            let sender = sender.clone();
            match &acceptor {
                None => {
                    if sender.send(Ok(Conn::Plain(guarded))).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let acceptor = acceptor.clone();
                    // Off the accept loop: a client that never finishes its
                    // handshake hits the idle timeout alone.
                    tokio::spawn(async move {
                        match acceptor.accept(guarded).await {
                            Ok(tls) => {
                                let _ = sender.send(Ok(Conn::Tls(Box::new(tls)))).await;
                            }
                            Err(error) => {
                                tracing::debug!(%error, %peer, "{name}: TLS handshake failed");
                            }
                        }
                    });
                }
            }
        }
    });
    ReceiverStream::new(receiver)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_fields() {
        let files = ServerTlsFiles {
            key: Some(PathBuf::from("key.pem")),
            ..ServerTlsFiles::default()
        };
        assert_eq!(
            ServerTls::from_files(&files, &[]).unwrap_err().to_string(),
            "cert and key go together (and client_ca needs them)"
        );
        let missing = std::env::temp_dir().join("vllm-otel-metrics-no-such-token");
        let error = BearerToken::from_file(&missing).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("token_file: cannot read {}", missing.display())
        );
    }
}
