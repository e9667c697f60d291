//! Small things every layer may use, which use nothing of the crate's
//! layers: the wall clock, bounded listeners, and keeping credentials out of
//! messages.

pub mod clock;
#[cfg(feature = "listen")]
pub mod listen;
pub mod redact;
