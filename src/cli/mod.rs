//! The command line (synopses and exit statuses in docs/CLI.md): the
//! binary's own modules, which use the library's public API only.
//!
//! What it takes is declared apart from what it does, so that any part can
//! name a flag: command.rs (the parser and each subcommand's arguments),
//! args.rs (the arguments the subcommands share) and sim_args.rs (the
//! simulator's) define the flags; settings.rs turns them into the library's
//! settings; replay.rs, simulate.rs and serve.rs run the subcommands on the
//! pipeline of pipeline.rs. This file declares them and dispatches.

mod args;
mod argv;
mod command;
mod error;
mod flags;
mod pipeline;
mod plot;
mod replay;
mod report;
mod serve;
mod settings;
mod sim_args;
mod simulate;
mod summary;

use std::process::ExitCode;

pub(crate) use argv::command_line;
pub(crate) use command::Cli;
use command::Command;

/// Runs the command line; returns the process exit status.
pub(crate) fn run(cli: Cli) -> ExitCode {
    report::init_diagnostics();
    let result = match cli.command {
        Command::Replay(args) => replay::run_replay(args),
        Command::Simulate(args) => simulate::run_simulate(*args),
        Command::Serve(args) => serve::run_serve(args),
    };
    result.unwrap_or_else(|e| {
        // The error and each cause under it, one after the other.
        report::line(format_args!(
            "error: {}",
            vllm_otel_metrics::error::chain(&e)
        ));
        e.exit_code()
    })
}
