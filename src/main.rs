//! `vllm-otel-metrics`: see `vllm-otel-metrics --help` and docs/CLI.md.

use clap::Parser;

fn main() -> std::process::ExitCode {
    vllm_otel_metrics::cli::run(vllm_otel_metrics::cli::Cli::parse())
}
