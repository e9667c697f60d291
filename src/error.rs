//! What an error of this crate is made of beyond its text: the cause under
//! it (the operating system's, the exporter's or the TLS library's own
//! error, kept as its `source()` instead of flattened into its text), and
//! the settings it is about ([`Setting`], named as a host sets them, and
//! renamed by a front end that exposes them under other names).
//!
//! ```
//! use std::error::Error as _;
//! use vllm_otel_metrics::error::Cause;
//!
//! let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
//! let cause = Cause::new(io);
//! assert_eq!(cause.to_string(), "no such file");
//! assert!(cause.downcast_ref::<std::io::Error>().is_some());
//! ```

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// Which setting: a field of one of the crate's configuration types (or a
/// named argument of a constructor), or an environment variable that the
/// OpenTelemetry specification defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SettingKey {
    /// `scope` is the type or function (`"SimConfig"`,
    /// `"BearerToken::from_file"`), `name` the field or argument.
    Field {
        /// The configuration type or constructor.
        scope: &'static str,
        /// The field or argument.
        name: &'static str,
    },
    /// An environment variable (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    Variable(&'static str),
}

/// A setting an error is about. It shows as the field's name
/// (`kv_blocks`) or the variable's, which is what a host that fills the
/// configuration sets; a front end that exposes the fields under names of
/// its own shows those instead with [`Settings::rename`] (the command line
/// shows its flags).
///
/// ```
/// use vllm_otel_metrics::error::{Setting, SettingKey};
///
/// let mut setting = Setting::field("SimConfig::kv_blocks");
/// assert_eq!(setting.to_string(), "kv_blocks");
/// assert_eq!(setting.key(), SettingKey::Field { scope: "SimConfig", name: "kv_blocks" });
/// // A front end whose configuration file has a `[simulator]` table.
/// setting.show_as(&|key| match key {
///     SettingKey::Field { scope: "SimConfig", name } => Some(format!("simulator.{name}")),
///     _ => None,
/// });
/// assert_eq!(setting.to_string(), "simulator.kv_blocks");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Setting {
    /// `Scope::name` for a field, the name for a variable (which has no
    /// `::`): one pointer, so that errors holding several stay small.
    path: &'static str,
    shown: Option<Box<str>>,
}

impl Setting {
    /// The field or argument at `path`, `Scope::name`
    /// (`"ServerTlsFiles::cert"`, `"BearerToken::from_file::token_file"`).
    ///
    /// # Panics
    ///
    /// When `path` has no `::` (at compile time, for a constant).
    pub const fn field(path: &'static str) -> Setting {
        assert!(separator(path).is_some(), "a field's path is Scope::name");
        Setting { path, shown: None }
    }

    /// Environment variable `name`.
    pub const fn variable(name: &'static str) -> Setting {
        assert!(separator(name).is_none(), "a variable's name has no ::");
        Setting {
            path: name,
            shown: None,
        }
    }

    /// Which setting this is.
    pub fn key(&self) -> SettingKey {
        match separator(self.path) {
            Some(at) => SettingKey::Field {
                scope: &self.path[..at],
                name: &self.path[at + 2..],
            },
            None => SettingKey::Variable(self.path),
        }
    }

    /// Shows the setting as `name` calls it, when `name` has a name for it.
    pub fn show_as(&mut self, name: &dyn Fn(SettingKey) -> Option<String>) {
        if let Some(shown) = name(self.key()) {
            self.shown = Some(shown.into_boxed_str());
        }
    }
}

/// Where the last `::` of `path` starts.
const fn separator(path: &str) -> Option<usize> {
    let bytes = path.as_bytes();
    let mut at = bytes.len();
    while at >= 2 {
        at -= 1;
        if bytes[at] == b':' && bytes[at - 1] == b':' {
            return Some(at - 1);
        }
    }
    None
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.shown, self.key()) {
            (Some(shown), _) => f.write_str(shown),
            (None, SettingKey::Field { name, .. } | SettingKey::Variable(name)) => {
                f.write_str(name)
            }
        }
    }
}

/// The [`Setting`] naming field `$field` of configuration type `$scope`,
/// which must have it (so a renamed field cannot leave a stale name).
#[allow(unused_macros)] // Only the optional features' configurations use it.
macro_rules! setting {
    ($scope:ident . $field:ident) => {{
        let _must_exist = |config: &$scope| {
            let _ = &config.$field;
        };
        $crate::error::Setting::field(concat!(stringify!($scope), "::", stringify!($field)))
    }};
}
#[allow(unused_imports)]
pub(crate) use setting;

/// An error that names settings, so that a front end can show them under
/// its own names.
pub trait Settings {
    /// Calls `visit` on every setting the error names (its causes
    /// included, when they are errors of this crate).
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting));

    /// The error with every setting shown as `name` calls it (those `name`
    /// has no name for keep theirs).
    fn rename(mut self, name: &dyn Fn(SettingKey) -> Option<String>) -> Self
    where
        Self: Sized,
    {
        self.visit_settings(&mut |setting| setting.show_as(name));
        self
    }
}

/// An underlying error, shared so that the error holding it stays `Clone`,
/// and compared by its message so that it stays `PartialEq`.
#[derive(Clone)]
pub struct Cause(Arc<dyn Error + Send + Sync>);

impl Cause {
    /// Wraps `error`.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(error))
    }

    /// The underlying error as its own type, when it is one.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref()
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for Cause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// `error` and its causes, each after a `: `, as the command line prints
/// an error. A cause that says what the one above it said is left out
/// (some libraries wrap an error in another with the same text).
///
/// ```
/// use vllm_otel_metrics::error::chain;
/// let io = std::io::Error::other("disk full");
/// assert_eq!(chain(&io), "disk full");
/// ```
pub fn chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut previous = text.clone();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if said != previous {
            text.push_str(": ");
            text.push_str(&said);
        }
        previous = said;
        source = cause.source();
    }
    text
}

/// A file a setting names cannot be read: a certificate, a key or a token
/// file.
///
/// ```
/// # #[cfg(feature = "listen")] {
/// use std::error::Error as _;
/// use vllm_otel_metrics::error::Unreadable;
/// use vllm_otel_metrics::listen::{BearerToken, ListenConfigError};
///
/// let missing = std::env::temp_dir().join("vllm-otel-metrics-doc-no-such-token");
/// let Err(ListenConfigError::Unreadable(error)) = BearerToken::from_file(&missing) else {
///     panic!("a missing token file is unreadable");
/// };
/// let error: Unreadable = error;
/// assert_eq!(error.path, missing);
/// assert_eq!(error.setting.to_string(), "token_file");
/// // The operating system's error is the source, not part of the text.
/// assert!(error.source().is_some());
/// # }
/// ```
#[cfg(any(feature = "listen", feature = "otlp"))]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: cannot read {}", path.display())]
#[non_exhaustive]
pub struct Unreadable {
    /// The field or variable that named the file.
    pub setting: Setting,
    /// The file.
    pub path: std::path::PathBuf,
    /// The operating system's error.
    #[source]
    pub cause: Cause,
}

#[cfg(any(feature = "listen", feature = "otlp"))]
impl Settings for Unreadable {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        visit(&mut self.setting);
    }
}

/// A URL that carries credentials, which are not sent (the transports
/// authenticate with headers). Names the setting and shows the URL with its
/// credentials masked, never the secret.
///
/// ```
/// # #[cfg(feature = "otlp")] {
/// use vllm_otel_metrics::error::CredentialsInUrl;
/// use vllm_otel_metrics::export::otlp::{OtlpError, OtlpOptions, Signal};
///
/// let mut options = OtlpOptions::default();
/// options.endpoint = Some("https://user:secret@collector:4318".to_owned());
/// let Err(OtlpError::CredentialsInUrl(error)) = options.destination(Signal::Metrics, &|_| None)
/// else {
///     panic!("credentials in the endpoint are refused");
/// };
/// let error: CredentialsInUrl = error;
/// assert_eq!(error.shown, "https://***@collector:4318/v1/metrics");
/// assert!(!error.to_string().contains("secret"));
/// # }
/// ```
#[cfg(any(feature = "otlp", feature = "grpc"))]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{setting} {shown} carries credentials in the URL, which would not be sent; \
     give them with {instead} instead"
)]
#[non_exhaustive]
pub struct CredentialsInUrl {
    /// The setting that gave the URL.
    pub setting: Setting,
    /// The URL with its credentials replaced by `***`.
    pub shown: String,
    /// The setting that carries credentials (a header, a token file).
    pub instead: Setting,
}

#[cfg(any(feature = "otlp", feature = "grpc"))]
impl Settings for CredentialsInUrl {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        visit(&mut self.setting);
        visit(&mut self.instead);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapped(&'static str, Option<Box<Wrapped>>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn a_chain_names_each_cause_once() {
        let refused = Wrapped("connection refused", None);
        let inner = Wrapped("tcp connect error", Some(Box::new(refused)));
        let outer = Wrapped("tcp connect error", Some(Box::new(inner)));
        let top = Wrapped("transport error", Some(Box::new(outer)));
        assert_eq!(
            chain(&Cause::new(top)),
            "transport error: tcp connect error: connection refused"
        );
    }
}
