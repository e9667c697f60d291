//! The cause under an error of this crate: the operating system's, the
//! exporter's or the TLS library's own error, kept as the wrapping error's
//! `source()` instead of flattened into its text.
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
