//! The arguments the command line parses: the process's, and those a
//! supervisor passes in [`SERVE_ARGS_ENV`].

/// The environment variable whose JSON array of strings is appended to the
/// command line: how a supervisor passes flags that may hold secrets (an
/// OTLP header) without putting them in `/proc/PID/cmdline`, which every
/// local user can read (`/proc/PID/environ` is the owner's alone).
const SERVE_ARGS_ENV: &str = "VLLM_OTEL_METRICS_SERVE_ARGS";

/// The process's arguments, then those of [`SERVE_ARGS_ENV`] when it is
/// set; an error names the variable, never its value (it may hold a secret).
pub(crate) fn command_line() -> Result<Vec<std::ffi::OsString>, String> {
    /// More than any flag set needs; a bound before the value is parsed.
    const MAX_BYTES: usize = 64 << 10;
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let Some(raw) = std::env::var_os(SERVE_ARGS_ENV) else {
        return Ok(argv);
    };
    if raw.len() > MAX_BYTES {
        return Err(format!("{SERVE_ARGS_ENV} is longer than {MAX_BYTES} bytes"));
    }
    let raw = raw
        .into_string()
        .map_err(|_| format!("{SERVE_ARGS_ENV} is not UTF-8"))?;
    let extra: Vec<String> = serde_json::from_str(&raw).map_err(|e| {
        format!(
            "{SERVE_ARGS_ENV} is not a JSON array of strings (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    argv.extend(extra.into_iter().map(Into::into));
    Ok(argv)
}
