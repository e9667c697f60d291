//! Keeping secrets out of messages: credentials in URLs and header values
//! are never printed.

use crate::error::{CredentialsInUrl, Setting};

/// `url` with any userinfo (`user:password@`) replaced by `***@`, and
/// whether it had some.
pub(crate) fn userinfo(url: &str) -> (String, bool) {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((_, host)) => {
            let scheme = scheme.map(|s| format!("{s}://")).unwrap_or_default();
            (format!("{scheme}***@{host}{path}"), true)
        }
        None => (url.to_owned(), false),
    }
}

/// Refuses a URL that carries credentials; `instead` is the setting that
/// carries them.
pub(crate) fn refuse_userinfo(
    setting: Setting,
    url: &str,
    instead: Setting,
) -> Result<(), CredentialsInUrl> {
    match userinfo(url) {
        (shown, true) => Err(CredentialsInUrl {
            setting,
            shown,
            instead,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_masked_and_reported() {
        assert_eq!(
            userinfo("https://u:pw@collector:4318/v1/metrics"),
            ("https://***@collector:4318/v1/metrics".to_owned(), true)
        );
        assert_eq!(
            userinfo("http://collector:4317"),
            ("http://collector:4317".to_owned(), false)
        );
    }
}
