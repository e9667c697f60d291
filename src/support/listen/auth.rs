//! The bearer token a server may require, checked in constant time.

use super::ListenConfigError;
use crate::error::Setting;
use crate::support::file;
use std::path::Path;
use std::sync::Arc;

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
        let bytes = file::read(token_file, BearerToken::TOKEN_FILE)?;
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
