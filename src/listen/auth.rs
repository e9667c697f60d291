//! The bearer token a server may require, checked in constant time.

use super::config::ListenConfigError;
use crate::error::Setting;
use crate::support::file;
use std::path::Path;
use std::sync::Arc;

use subtle::ConstantTimeEq;

/// A bearer token a server requires, read from a file (surrounding
/// whitespace dropped). Its value is never printed.
///
/// ```
/// use vllm_otel_metrics::listen::BearerToken;
///
/// let path = std::env::temp_dir().join(format!("vllm-otel-metrics-doc-token-{}", std::process::id()));
/// std::fs::write(&path, "s3cr3t\n").unwrap();
/// let token = BearerToken::from_file(&path).unwrap();
/// std::fs::remove_file(&path).unwrap();
/// assert!(token.accepts(Some(b"Bearer s3cr3t")));
/// assert_eq!(format!("{token:?}"), "BearerToken(***)");
/// ```
#[derive(Clone)]
pub struct BearerToken(Arc<[u8]>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(***)")
    }
}

impl BearerToken {
    /// The setting errors about the token file name; a front end renames
    /// it to its own flag with [`Settings::rename`](crate::error::Settings::rename).
    ///
    /// ```
    /// use vllm_otel_metrics::listen::BearerToken;
    /// assert_eq!(BearerToken::TOKEN_FILE.to_string(), "token_file");
    /// ```
    pub const TOKEN_FILE: Setting = Setting::field("BearerToken::from_file::token_file");

    /// The most bytes a token file may hold (the token and the whitespace
    /// around it); a longer file is an error, found without reading past
    /// this many bytes.
    pub const MAX_FILE_BYTES: usize = 4096;

    /// The token in `token_file` (the command line's `--auth-token-file`); an
    /// empty file is an error, and so is one longer than
    /// [`MAX_FILE_BYTES`](BearerToken::MAX_FILE_BYTES).
    ///
    /// ```
    /// use vllm_otel_metrics::listen::{BearerToken, ListenConfigError};
    ///
    /// let path = std::env::temp_dir().join(format!("vllm-otel-metrics-doc-empty-{}", std::process::id()));
    /// std::fs::write(&path, " \n").unwrap();
    /// let error = BearerToken::from_file(&path).unwrap_err();
    /// std::fs::remove_file(&path).unwrap();
    /// assert!(matches!(error, ListenConfigError::EmptyToken { .. }));
    ///
    /// std::fs::write(&path, [b'x'; BearerToken::MAX_FILE_BYTES + 1]).unwrap();
    /// let error = BearerToken::from_file(&path).unwrap_err();
    /// std::fs::remove_file(&path).unwrap();
    /// assert_eq!(
    ///     error.to_string(),
    ///     format!("token_file: {} is longer than 4096 bytes, the most a token file may hold", path.display())
    /// );
    /// ```
    pub fn from_file(token_file: &Path) -> Result<BearerToken, ListenConfigError> {
        let limit = BearerToken::MAX_FILE_BYTES;
        let Some(bytes) = file::read_at_most(token_file, BearerToken::TOKEN_FILE, limit)? else {
            return Err(ListenConfigError::TooLong {
                setting: BearerToken::TOKEN_FILE,
                path: token_file.to_owned(),
                limit,
            });
        };
        let token = bytes.trim_ascii();
        if token.is_empty() {
            return Err(ListenConfigError::EmptyToken {
                setting: BearerToken::TOKEN_FILE,
                path: token_file.to_owned(),
            });
        }
        Ok(BearerToken(token.into()))
    }

    /// Whether an `Authorization` header value carries this token (either
    /// spelling of the scheme, the whole token and nothing else).
    ///
    /// ```
    /// use vllm_otel_metrics::listen::BearerToken;
    ///
    /// let path = std::env::temp_dir().join(format!("vllm-otel-metrics-doc-accepts-{}", std::process::id()));
    /// std::fs::write(&path, "s3cr3t").unwrap();
    /// let token = BearerToken::from_file(&path).unwrap();
    /// std::fs::remove_file(&path).unwrap();
    /// assert!(token.accepts(Some(b"bearer s3cr3t")));
    /// assert!(!token.accepts(Some(b"Bearer s3cr3")));
    /// assert!(!token.accepts(Some(b"Basic s3cr3t")));
    /// assert!(!token.accepts(None));
    /// ```
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
        // Constant time in the token's contents (a length mismatch returns
        // at once: the length is not the secret).
        presented.ct_eq(&self.0).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An endless file is not read whole: the bound is found after the
    /// limit's bytes.
    #[cfg(unix)]
    #[test]
    fn an_endless_token_file_is_refused_at_the_bound() {
        let error = BearerToken::from_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "token_file: /dev/zero is longer than 4096 bytes, the most a token file may hold"
        );
    }

    #[test]
    fn only_the_whole_token_after_either_scheme_spelling_is_accepted() {
        let token = BearerToken(Arc::from(&b"s3cr3t"[..]));
        assert!(token.accepts(Some(b"Bearer s3cr3t")));
        assert!(token.accepts(Some(b"bearer s3cr3t")));
        for refused in [
            &b"Bearer s3cr3T"[..],
            b"Bearer s3cr3",
            b"Bearer s3cr3tt",
            b"Bearer ",
            b"Basic s3cr3t",
            b"s3cr3t",
        ] {
            assert!(!token.accepts(Some(refused)), "{refused:?}");
        }
        assert!(!token.accepts(None));
    }
}
