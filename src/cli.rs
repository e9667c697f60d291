//! The command line (DESIGN §5): argument definitions and the subcommands' runs.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::catalog::DEFAULT_MAX_MODEL_LEN;
use crate::export::prometheus::{http, Format, PrometheusBridge};
use crate::ingest::jsonl;
use crate::instruments::Instruments;
use crate::tracker::Tracker;

/// vLLM's per-request lifecycle metrics on OpenTelemetry, exposed under vLLM's names.
#[derive(Debug, Parser)]
#[command(name = "vllm-otel-metrics", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a JSONL engine trace through the tracker and exporters.
    Replay(ReplayArgs),
}

/// Where `/metrics` is served, or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsAddr(pub Option<SocketAddr>);

impl FromStr for MetricsAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("none") {
            return Ok(MetricsAddr(None));
        }
        s.parse().map(|addr| MetricsAddr(Some(addr))).map_err(|e| {
            format!("'{s}' is neither `none` nor an address like 127.0.0.1:9464 ({e})")
        })
    }
}

/// Options every subcommand shares.
#[derive(Debug, Args)]
struct CommonArgs {
    /// Serve Prometheus `/metrics` here (`none` to disable).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR|none")]
    metrics_addr: MetricsAddr,
    /// Model context length; bounds the token histograms' buckets.
    #[arg(long, default_value_t = DEFAULT_MAX_MODEL_LEN, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_model_len: u32,
    /// Also expose the OpenTelemetry resource as `target_info`.
    #[arg(long)]
    target_info: bool,
}

/// What to print on stdout at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Prometheus text format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0 text.
    Openmetrics,
    /// Nothing.
    None,
}

impl Output {
    fn format(self) -> Option<Format> {
        match self {
            Output::Prometheus => Some(Format::Text),
            Output::Openmetrics => Some(Format::OpenMetrics),
            Output::None => None,
        }
    }
}

#[derive(Debug, Args)]
struct ReplayArgs {
    /// The JSONL trace, or `-` for standard input.
    #[arg(value_name = "FILE|-")]
    file: String,
    /// Print the final exposition to stdout in this format.
    #[arg(long, value_enum, default_value = "none")]
    output: Output,
    #[command(flatten)]
    common: CommonArgs,
}

/// The metrics pipeline a subcommand runs: instruments, the bridge, and the
/// runtime serving `/metrics` when asked for.
struct Pipeline {
    instruments: Instruments,
    bridge: PrometheusBridge,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Pipeline {
    fn new(common: &CommonArgs) -> io::Result<Pipeline> {
        let (bridge, reader) = PrometheusBridge::builder()
            .with_target_info(common.target_info)
            .build();
        let instruments = Instruments::builder()
            .with_max_model_len(common.max_model_len)
            .with_reader(reader)
            .build();
        let runtime = match common.metrics_addr.0 {
            None => None,
            Some(addr) => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()?;
                match runtime.block_on(http::spawn(addr, bridge.clone())) {
                    Ok((local, _task)) => eprintln!("serving Prometheus metrics at http://{local}{}", http::METRICS_PATH),
                    Err(e) => eprintln!("warning: cannot serve /metrics on {addr}: {e} (choose another --metrics-addr, or none)"),
                }
                Some(runtime)
            }
        };
        Ok(Pipeline {
            instruments,
            bridge,
            runtime,
        })
    }

    fn finish(self) {
        if let Err(e) = self.instruments.shutdown() {
            eprintln!("warning: shutting the meter provider down: {e}");
        }
        if let Some(runtime) = self.runtime {
            runtime.shutdown_background();
        }
    }
}

fn open_trace(file: &str) -> io::Result<(Box<dyn BufRead>, String)> {
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

fn run_replay(args: ReplayArgs) -> io::Result<ExitCode> {
    let (input, source) = open_trace(&args.file)?;
    let pipeline = Pipeline::new(&args.common)?;
    let mut tracker = Tracker::new(pipeline.instruments.clone());
    let stderr = io::stderr();
    let report = jsonl::replay(input, &source, &mut tracker, &mut stderr.lock())?;
    if tracker.in_flight() > 0 {
        eprintln!(
            "{source}: {} request(s) still in flight at the end of the trace (not recorded)",
            tracker.in_flight()
        );
    }
    if let Some(format) = args.output.format() {
        let mut stdout = io::stdout().lock();
        stdout.write_all(pipeline.bridge.encode(format).as_bytes())?;
        stdout.flush()?;
    }
    drop(tracker);
    pipeline.finish();
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// Runs the command line; returns the process exit status.
pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Replay(args) => run_replay(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}
