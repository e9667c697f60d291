//! The command line's own lines on stderr (start-up, progress, summaries,
//! errors): the one place the program writes to stderr besides the
//! `tracing` subscriber that [`super::run`] installs.

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
