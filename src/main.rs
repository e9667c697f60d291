//! `vllm-otel-metrics`: see `vllm-otel-metrics --help` and docs/CLI.md.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    match cli::command_line() {
        Ok(argv) => cli::run(cli::Cli::parse_from(argv)),
        Err(message) => {
            eprintln!("error: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
