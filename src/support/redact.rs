//! Keeping secrets out of messages: credentials in URLs and header values
//! are never printed.

use crate::error::{Setting, Settings};

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

/// A URL that carries credentials, which are not sent (the transports
/// authenticate with headers). Names the setting and shows the URL with its
/// credentials masked, never the secret. Public as
/// [`crate::error::CredentialsInUrl`].
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

impl Settings for CredentialsInUrl {
    fn visit_settings(&mut self, visit: &mut dyn FnMut(&mut Setting)) {
        visit(&mut self.setting);
        visit(&mut self.instead);
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
