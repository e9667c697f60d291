//! Reading a file that a setting names (a certificate, a key, a token), so
//! that one that cannot be read is reported the same way everywhere: the
//! setting, the path and the operating system's error.

use std::path::Path;

use crate::error::{Cause, Setting, Unreadable};

/// The contents of `path`, which `setting` named (the error names it).
pub(crate) fn read(path: &Path, setting: Setting) -> Result<Vec<u8>, Unreadable> {
    std::fs::read(path).map_err(|e| Unreadable::new(setting, path, e))
}

/// The contents of `path` when it holds at most `limit` bytes; None when it
/// holds more, found without reading past the limit (a setting may name
/// `/dev/zero` or a file that is still growing).
#[cfg_attr(not(feature = "listen"), allow(dead_code))]
pub(crate) fn read_at_most(
    path: &Path,
    setting: Setting,
    limit: usize,
) -> Result<Option<Vec<u8>>, Unreadable> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(limit as u64 + 1).read_to_end(&mut bytes))
        .map_err(|e| Unreadable::new(setting, path, e))?;
    Ok((bytes.len() <= limit).then_some(bytes))
}

/// The contents of `path` as text; contents that are not UTF-8 cannot be
/// read either (the operating system's error says so).
#[cfg(feature = "grpc")]
pub(crate) fn read_to_string(path: &Path, setting: Setting) -> Result<String, Unreadable> {
    std::fs::read_to_string(path).map_err(|e| Unreadable::new(setting, path, e))
}

impl Unreadable {
    fn new(setting: Setting, path: &Path, cause: std::io::Error) -> Unreadable {
        Unreadable {
            setting,
            path: path.to_owned(),
            cause: Cause::new(cause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn an_unreadable_file_names_its_setting_and_keeps_the_os_error() {
        let missing = std::env::temp_dir().join("vllm-otel-metrics-no-such-file");
        let error = read(&missing, Setting::variable("SOME_FILE")).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("SOME_FILE: cannot read {}", missing.display())
        );
        let source = error.source().expect("the operating system's error");
        assert_eq!(
            source.to_string(),
            std::fs::read(&missing).unwrap_err().to_string()
        );
    }

    #[test]
    fn a_file_longer_than_the_limit_is_not_read_past_it() {
        let path =
            std::env::temp_dir().join(format!("vllm-otel-metrics-at-most-{}", std::process::id()));
        std::fs::write(&path, b"12345").unwrap();
        let setting = || Setting::variable("SOME_FILE");
        assert_eq!(
            read_at_most(&path, setting(), 5).unwrap().unwrap(),
            b"12345"
        );
        assert_eq!(read_at_most(&path, setting(), 4).unwrap(), None);
        std::fs::remove_file(&path).unwrap();
        // Endless: only the limit and one byte are read.
        #[cfg(unix)]
        assert_eq!(
            read_at_most(Path::new("/dev/zero"), setting(), 4096).unwrap(),
            None
        );
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn text_that_is_not_utf8_cannot_be_read_either() {
        let path =
            std::env::temp_dir().join(format!("vllm-otel-metrics-not-utf8-{}", std::process::id()));
        std::fs::write(&path, b"\xff\xfe token").unwrap();
        let error = read_to_string(&path, Setting::variable("TOKEN_FILE")).unwrap_err();
        let expected = std::fs::read_to_string(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            error.to_string(),
            format!("TOKEN_FILE: cannot read {}", path.display())
        );
        assert_eq!(error.source().unwrap().to_string(), expected);
    }
}
