//! `replay`: a JSONL trace through the pipeline.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::process::ExitCode;

use vllm_otel_metrics::sources::ingest::jsonl;

use super::command::ReplayArgs;
use super::error::{exit_status, CliError};
use super::pipeline::{to_stdout, OnSignal, Pipeline, Tee};
use super::report;

pub(super) fn open_trace(file: &str) -> Result<(Box<dyn BufRead>, String), CliError> {
    if file == "-" {
        return Ok((Box::new(io::stdin().lock()), "<stdin>".to_owned()));
    }
    let reader = File::open(file)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {file}: {e}")))?;
    Ok((
        Box::new(BufReader::with_capacity(1 << 16, reader)),
        file.to_owned(),
    ))
}

pub(super) fn run_replay(args: ReplayArgs) -> Result<ExitCode, CliError> {
    let (input, source) = open_trace(&args.file)?;
    let pipeline = Pipeline::new(
        &args.common,
        OnSignal::Exit {
            print: args.output.format(),
        },
        args.output.format().is_some(),
    )?;
    let mut tee = Tee::new(&pipeline, &args.target, &args.common)?;
    // Unlocked: the OTLP and signal threads report on stderr too.
    let report = jsonl::replay(
        input,
        &source,
        &mut tee,
        &mut io::stderr(),
        args.max_line_bytes,
    )?;
    let remote_clean = tee.finish_remote()?;
    let tracker = tee.tracker;
    if tracker.in_flight() > 0 {
        report::line(format_args!(
            "{source}: {} request(s) still in flight at the end of the trace (not recorded)",
            tracker.in_flight()
        ));
    }
    if let Some(format) = args.output.format() {
        to_stdout(pipeline.bridge.encode(format).as_bytes())?;
    }
    drop(tracker);
    Ok(exit_status(
        pipeline.finish(),
        report.is_clean() && remote_clean,
    ))
}
