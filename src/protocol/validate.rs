//! What a record must meet beyond its wire format: [`InputLimits`], the
//! error [`InvalidRecord`], and the checks every record type's `validate`
//! is made of.

/// A record whose values cannot be applied (non-finite numbers).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidRecord(pub String);

impl std::fmt::Display for InvalidRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidRecord {}

/// Bounds on what one record may carry, so that no single record can grow
/// the process's memory, every later scrape or every later export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InputLimits {
    /// Longest label value (`model_name`), bytes.
    pub max_label_bytes: usize,
    /// Longest request id, bytes.
    pub max_request_id_bytes: usize,
}

impl InputLimits {
    /// Default longest label value: longer than any model name in use.
    pub const DEFAULT_MAX_LABEL_BYTES: usize = 256;
    /// Default longest request id.
    pub const DEFAULT_MAX_REQUEST_ID_BYTES: usize = 512;
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_label_bytes: Self::DEFAULT_MAX_LABEL_BYTES,
            max_request_id_bytes: Self::DEFAULT_MAX_REQUEST_ID_BYTES,
        }
    }
}

/// A value shown in a message: at most 64 characters of it, and its length
/// when it is longer (a rejected value may be megabytes long).
pub fn shown(value: &str) -> String {
    const SHOWN: usize = 64;
    if value.len() <= SHOWN {
        return value.to_owned();
    }
    let mut end = SHOWN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &value[..end], value.len())
}

pub(super) fn bounded(what: &str, value: &str, max: usize) -> Result<(), InvalidRecord> {
    if value.len() <= max {
        Ok(())
    } else {
        Err(InvalidRecord(format!(
            "{what} is {} bytes, more than the limit of {max} ('{}')",
            value.len(),
            shown(value)
        )))
    }
}

/// A time in seconds: finite and not negative (vLLM's clocks cannot be).
pub(super) fn time(what: &str, value: f64) -> Result<(), InvalidRecord> {
    finite(what, value)?;
    if value < 0.0 {
        return Err(InvalidRecord(format!("{what} is negative ({value})")));
    }
    Ok(())
}

pub(super) fn finite(what: &str, value: f64) -> Result<(), InvalidRecord> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(InvalidRecord(format!(
            "{what} is not a finite number ({value})"
        )))
    }
}
