//! `simulate`: the engine simulator feeding the pipeline, and `--sweep`.

use std::fs::File;
use std::io::{self, Write};
use std::process::ExitCode;

use vllm_otel_metrics::export::prometheus::PrometheusBridge;
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::Record;
use vllm_otel_metrics::sources::sim::{simulate, Progress};
use vllm_otel_metrics::sources::RecordSink;
use vllm_otel_metrics::tracker::{Rejection, Tracker};

use super::command::SimulateArgs;
use super::error::{exit_status, CliError};
use super::pipeline::{to_stdout, OnSignal, Pipeline, Tee};
use super::settings::seconds;
use super::summary::{self, SweepRow};
use super::{plot, report};

/// Shows simulation progress on stderr when it is a terminal.
pub(super) fn progress_bar(enabled: bool) -> impl FnMut(Progress) {
    move |p: Progress| {
        if enabled {
            let done = (p.simulated / p.duration).min(1.0);
            let filled = (done * 30.0) as usize;
            report::text(format_args!(
                "\r[{}{}] {:>6.1}/{} s simulated, {} requests, {} preemptions ",
                "#".repeat(filled),
                " ".repeat(30 - filled),
                p.simulated,
                p.duration,
                p.requests,
                p.preemptions
            ));
        }
    }
}

pub(super) fn run_sweep(args: &SimulateArgs) -> Result<ExitCode, CliError> {
    let slo = args.common.slo()?;
    let mut rows = Vec::new();
    to_stdout(format!("{}\n", SweepRow::header(slo.is_some())).as_bytes())?;
    for &kv_blocks in &args.sweep_kv_blocks {
        let mut config = args.config();
        config.kv_blocks = kv_blocks;
        config.realtime = false;
        config.validate()?;
        let (bridge, reader) = PrometheusBridge::builder().build();
        let mut builder = Instruments::builder()
            .with_max_model_len(config.max_model_len)
            .with_token_buckets(args.common.token_buckets.into())
            .with_bucket_overrides(args.common.bucket_overrides()?)
            .with_attribution(args.common.attribution.attribution())
            .with_reader(reader);
        if let Some(slo) = &slo {
            builder = builder.with_slo(slo.clone());
        }
        let mut tracker = Tracker::new(builder.build());
        let outcome = simulate(&config, &mut tracker, &mut |_| {});
        let row = SweepRow::new(kv_blocks, &outcome, &bridge.snapshot());
        to_stdout(format!("{}\n", row.line()).as_bytes())?;
        rows.push(row);
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, plot::sweep_svg(&rows))
            .map_err(|e| io::Error::new(e.kind(), format!("--plot {}: {e}", path.display())))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn run_simulate(args: SimulateArgs) -> Result<ExitCode, CliError> {
    if !args.sweep_kv_blocks.is_empty() {
        return run_sweep(&args);
    }
    let config = args.config();
    config.validate()?;
    let linger = seconds("--linger", args.linger)?;
    let recorder = match &args.record {
        Some(path) => Some(io::BufWriter::new(File::create(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {path}: {e}"))
        })?)),
        None => None,
    };
    // The summary reads the bridge.
    let pipeline = Pipeline::new(
        &args.common,
        OnSignal::Exit {
            print: args.output.format(),
        },
        true,
    )?;
    let mut sink = Recording {
        sink: Tee::new(&pipeline, &args.target, &args.common)?,
        trace: recorder,
        write_error: None,
    };
    let started = std::time::Instant::now();
    let show_progress = io::IsTerminal::is_terminal(&io::stderr());
    let outcome = simulate(&config, &mut sink, &mut progress_bar(show_progress));
    if show_progress {
        report::end_progress();
    }
    let wall = started.elapsed().as_secs_f64();
    let Recording {
        sink: mut tee,
        trace,
        write_error,
    } = sink;
    let remote_clean = tee.finish_remote()?;
    if let Some(mut out) = trace {
        if let Some(e) = write_error {
            return Err(io::Error::new(e.kind(), format!("writing the trace failed: {e}")).into());
        }
        out.flush()?;
    }
    let most_preempted = pipeline
        .exports
        .instruments
        .exemplars()
        .map(|exemplars| exemplars.most_preempted());
    let summary = summary::summary(
        &config,
        &outcome,
        &pipeline.bridge.snapshot(),
        most_preempted,
        wall,
    );
    match args.output.format() {
        Some(format) => {
            report::text(format_args!("{summary}"));
            to_stdout(pipeline.bridge.encode(format).as_bytes())?;
        }
        None => to_stdout(summary.as_bytes())?,
    }
    std::thread::sleep(linger);
    drop(tee);
    Ok(exit_status(pipeline.finish(), remote_clean))
}

/// The simulator's sink on the command line: the pipeline's, and each record
/// written to `--record`'s trace (writing stops at the first error, which
/// the command reports when the run ends).
struct Recording<S> {
    sink: S,
    trace: Option<io::BufWriter<File>>,
    write_error: Option<io::Error>,
}

impl<S: RecordSink> RecordSink for Recording<S> {
    fn apply(&mut self, record: &Record) -> Vec<Rejection> {
        let rejections = self.sink.apply(record);
        if let (Some(out), None) = (self.trace.as_mut(), self.write_error.as_ref()) {
            if let Err(e) = serde_json::to_writer(&mut *out, record)
                .map_err(io::Error::from)
                .and_then(|()| out.write_all(b"\n"))
            {
                self.write_error = Some(e);
            }
        }
        rejections
    }

    fn invalid(&mut self) {
        self.sink.invalid();
    }
}
