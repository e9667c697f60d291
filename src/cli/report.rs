//! What the program writes to stderr: the command line's own lines
//! (start-up, progress, summaries, errors), and the `tracing` subscriber
//! that shows the library's diagnostics, which [`super::run`] installs.

use std::io;

/// Writes one line to stderr.
pub(super) fn line(args: std::fmt::Arguments<'_>) {
    eprintln!("{args}");
}

/// Writes an empty line to stderr (ends a progress bar).
pub(super) fn end_progress() {
    eprintln!();
}

/// Writes to stderr without a newline (a progress bar redrawn in place, or a
/// text that ends with its own newline).
pub(super) fn text(args: std::fmt::Arguments<'_>) {
    eprint!("{args}");
}

/// Sends the library's diagnostics and the OpenTelemetry crates' own to
/// stderr: warnings and errors, or what `RUST_LOG` asks for. By default the
/// SDK's and the exporter's per-export failure events are left out: the
/// tracked exporter reports failures itself, rate-limited, and recovery.
pub(super) fn init_diagnostics() {
    use tracing_subscriber::filter::{filter_fn, EnvFilter, LevelFilter};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let ansi = io::IsTerminal::is_terminal(&io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(io::stderr)
        .with_ansi(ansi)
        .without_time()
        .with_target(false);
    let registry = tracing_subscriber::registry();
    let installed = match EnvFilter::try_from_default_env() {
        Ok(filter) => registry.with(fmt.with_filter(filter)).try_init(),
        // One filter with its level hint: the callsites below WARN (h2's,
        // tonic's per-frame spans) are then never registered, instead of
        // being created and checked on every message.
        Err(_) => registry
            .with(
                fmt.with_filter(
                    filter_fn(|meta| {
                        let name = meta.name();
                        *meta.level() <= LevelFilter::WARN
                            && name != "PeriodicReader.ExportError"
                            && !name.starts_with("Export.Failed")
                    })
                    .with_max_level_hint(LevelFilter::WARN),
                ),
            )
            .try_init(),
    };
    // A host that installed its own subscriber keeps it.
    let _ = installed;
}
