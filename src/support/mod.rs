//! Small things every layer may use, which use nothing of the crate's
//! layers: the wall clock, reading the files settings name, bounded
//! listeners, and keeping credentials out of messages.

pub mod clock;
pub mod file;
#[cfg(feature = "listen")]
pub mod listen;
pub mod redact;
