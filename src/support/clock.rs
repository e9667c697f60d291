//! The wall clock the records' times are read against.

use std::time::{SystemTime, UNIX_EPOCH};

/// The frontend's wall clock, seconds since the Unix epoch.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
