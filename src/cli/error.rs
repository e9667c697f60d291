//! Why a subcommand could not run, and the exit status each reason gives:
//! the one place the command line maps errors to exit statuses.

use std::io;
use std::process::ExitCode;

use vllm_otel_metrics::export::otlp::OtlpError;
use vllm_otel_metrics::listen::ListenConfigError;
use vllm_otel_metrics::sources::ingest::client::TargetError;
use vllm_otel_metrics::sources::sim::SimConfigError;

use super::flags::with_flags;

/// Exit status when input lines were invalid.
pub(super) const EXIT_INVALID_INPUT: u8 = 2;
/// Exit status when the final OTLP export failed.
pub(super) const EXIT_EXPORT_FAILED: u8 = 3;
/// Exit status when a listen address is taken by another process.
pub(super) const EXIT_ADDRESS_IN_USE: u8 = 4;

/// Why a subcommand stopped before its work was done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CliError {
    /// The OTLP settings (flags or `OTEL_EXPORTER_OTLP_*` variables).
    #[error(transparent)]
    Otlp(OtlpError),
    /// A listener's TLS or token files.
    #[error(transparent)]
    Listener(ListenConfigError),
    /// Streaming to `--target`.
    #[error(transparent)]
    Target(TargetError),
    /// The simulator's settings.
    #[error(transparent)]
    Simulation(SimConfigError),
    /// A flag whose value cannot be used (`reason` reads on from the flag).
    #[error("{flag} {reason}")]
    Usage {
        /// The flag.
        flag: &'static str,
        /// Why.
        reason: String,
    },
    /// A flag whose value was parsed and rejected (`reason` says why, naming
    /// the part of the value at fault).
    #[error("{flag}: {reason}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// Why.
        reason: String,
    },
    /// Reading, writing, binding or connecting.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The library's errors name settings by field; the command line's show its
/// flags.
macro_rules! from_library_error {
    ($($error:ty => $variant:ident),* $(,)?) => {
        $(impl From<$error> for CliError {
            fn from(error: $error) -> Self {
                CliError::$variant(with_flags(error))
            }
        })*
    };
}

from_library_error! {
    OtlpError => Otlp,
    ListenConfigError => Listener,
    TargetError => Target,
    SimConfigError => Simulation,
}

impl CliError {
    /// The exit status: 4 when a listen address is taken, 1 for every other
    /// reason a run could not start or go on (the exit statuses of
    /// docs/CLI.md; 2 and 3 are outcomes of a completed run, not errors).
    pub(crate) fn exit_code(&self) -> ExitCode {
        match self {
            // A supervisor (the vLLM plugin) tells "another process holds
            // the port" from every other failure: starting again will not help.
            CliError::Io(e) if e.kind() == io::ErrorKind::AddrInUse => {
                ExitCode::from(EXIT_ADDRESS_IN_USE)
            }
            CliError::Otlp(_)
            | CliError::Listener(_)
            | CliError::Target(_)
            | CliError::Simulation(_)
            | CliError::Usage { .. }
            | CliError::Invalid { .. }
            | CliError::Io(_) => ExitCode::FAILURE,
        }
    }
}

/// A final export that did not reach its destination: part of what the run
/// recorded is not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("final OTLP export to {destination} {outcome}: {reason}")]
#[non_exhaustive]
pub(crate) struct FinalExportFailed {
    /// The transport and endpoint.
    pub(crate) destination: String,
    /// `failed` (the destination refused or was unreachable) or `did not
    /// complete` (the SDK could not finish it).
    pub(crate) outcome: &'static str,
    /// Why.
    pub(crate) reason: String,
}

/// The exit status of a run that completed: 3 when a final export failed,
/// else 2 when some input was invalid, else 0.
pub(super) fn exit_status(exported: Result<(), FinalExportFailed>, input_clean: bool) -> ExitCode {
    match (exported, input_clean) {
        (Err(_), _) => ExitCode::from(EXIT_EXPORT_FAILED),
        (Ok(()), false) => ExitCode::from(EXIT_INVALID_INPUT),
        (Ok(()), true) => ExitCode::SUCCESS,
    }
}
