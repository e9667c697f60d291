//! The pipeline every subcommand drives: tracker, instruments, the
//! Prometheus bridge and OTLP, and how it shuts down and reports.

use std::io::{self, Write};
use std::sync::Arc;

use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::SdkTracerProvider;
use vllm_otel_metrics::export::otlp::{self, Destination, ExportHealth, Signal};
use vllm_otel_metrics::export::prometheus::{http, Format, PrometheusBridge};
use vllm_otel_metrics::export::shared::SharedAggregation;
use vllm_otel_metrics::instruments::spans::RequestSpans;
use vllm_otel_metrics::instruments::{Instruments, OtlpHistograms};
use vllm_otel_metrics::protocol::{InputLimits, Record};
use vllm_otel_metrics::sources::ingest::client::RemoteSink;
use vllm_otel_metrics::sources::ingest::service::describe_summary;
use vllm_otel_metrics::sources::RecordSink;
use vllm_otel_metrics::tracker::{Rejection, Tracker};

use super::args::{CommonArgs, Switch, TargetArgs};
use super::error::{CliError, FinalExportFailed, EXIT_EXPORT_FAILED};
use super::flags;
use super::report;

/// The OTLP push side of a pipeline, kept to report the final export.
pub(super) struct OtlpReport {
    pub(super) destination: Destination,
    pub(super) health: Arc<ExportHealth>,
}

/// What a pipeline exports to, and what reports on the exports.
pub(super) struct Exports {
    pub(super) instruments: Instruments,
    pub(super) metrics: Option<OtlpReport>,
    /// The tracer provider of the `llm_request` spans, when spans are on.
    pub(super) traces: Option<(SdkTracerProvider, OtlpReport)>,
}

/// What SIGINT/SIGTERM do to a pipeline.
#[derive(Debug, Clone, Copy)]
pub(super) enum OnSignal {
    /// Print the exposition in this format if any, export, exit.
    Exit { print: Option<Format> },
    /// The command handles signals itself.
    Command,
}

/// Writes to stdout; a reader that went away (`| head`) ends the output
/// quietly, so the exit status stays the documented one.
pub(super) fn to_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

/// The metrics pipeline a subcommand runs: instruments, the bridge, OTLP
/// when configured, the runtime serving `/metrics`, and signal handling.
pub(super) struct Pipeline {
    pub(super) exports: Arc<Exports>,
    pub(super) bridge: PrometheusBridge,
    /// Makes the `llm_request` spans, when they are exported.
    pub(super) spans: Option<RequestSpans>,
    pub(super) runtime: tokio::runtime::Runtime,
}

impl Pipeline {
    /// `on_signal`: what SIGINT/SIGTERM do. `bridge_read`: whether the
    /// Prometheus bridge is printed or summarised (served, it is read
    /// anyway); only then does it get a reader (each reader aggregates
    /// every measurement once more).
    pub(super) fn new(
        common: &CommonArgs,
        on_signal: OnSignal,
        bridge_read: bool,
    ) -> Result<Pipeline, CliError> {
        let env = |name: &str| std::env::var(name).ok();
        let options = common.otlp.options()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let (bridge, bridge_reader) = PrometheusBridge::builder()
            .with_target_info(common.target_info)
            .with_semconv(common.semconv.on_metrics())
            .build();
        let mut builder = Instruments::builder()
            .with_max_model_len(common.max_model_len)
            .with_token_buckets(common.token_buckets.into())
            .with_max_label_sets(common.max_label_sets)
            .with_name_style(common.otlp.name_style())
            .with_semconv(common.semconv.semconv())
            .with_semconv_server(common.semconv.server())
            .with_bucket_overrides(common.bucket_overrides()?)
            .with_attribution(common.attribution.attribution());
        if let Some(slo) = common.slo()? {
            builder = builder.with_slo(slo);
        }
        let spans_on = options.enabled(Signal::Traces, &env);
        let exemplars = match common.exemplars {
            Some(switch) => switch == Switch::On,
            None => spans_on,
        };
        builder = builder.with_exemplars(exemplars);
        let mut bridge_reader =
            (bridge_read || common.metrics_addr.0.is_some()).then_some(bridge_reader);
        let resource = otlp::resource();
        builder = builder.with_resource(resource.clone());
        let mut report = None;
        let histograms = common.otlp.histograms();
        if options.enabled(Signal::Metrics, &env) {
            if let OtlpHistograms::Exponential(e) = histograms {
                // The latency histograms go out exponential; the bridge
                // reads explicit copies of them from a provider of its own.
                builder = builder.with_otlp_histograms(histograms);
                if bridge_reader.is_some() {
                    builder = builder.with_explicit_histogram_reader(bridge.latency_reader());
                }
                report::line(format_args!(
                    "OTLP latency histograms: base-2 exponential (at most {} buckets, scale at most {}); /metrics keeps vLLM's buckets",
                    e.max_size, e.max_scale
                ));
            }
            let push = otlp::build(&options, &env, runtime.handle())?;
            report::line(format_args!(
                "pushing metrics over OTLP ({}) to {} ({}){}",
                push.destination.protocol,
                push.destination,
                flags::source(push.destination.source.as_ref()),
                options
                    .interval
                    .map(|i| format!(" every {} ms", i.as_millis()))
                    .unwrap_or_default()
            ));
            // Cumulative push and the bridge read one aggregation; a delta
            // push needs one of its own (the SDK resets it at every export).
            builder = match bridge_reader.take() {
                Some(bridge_reader) => {
                    match SharedAggregation::try_new(push.reader, bridge_reader) {
                        Ok(shared) => builder.with_reader(shared),
                        Err((push_reader, bridge_reader)) => {
                            builder.with_reader(bridge_reader).with_reader(push_reader)
                        }
                    }
                }
                None => builder.with_reader(push.reader),
            };
            report = Some(OtlpReport {
                destination: push.destination,
                health: push.health,
            });
        } else if histograms != OtlpHistograms::Explicit {
            report::line(format_args!(
                "--otlp-histograms exponential changes nothing: OTLP metrics are off"
            ));
        }
        if let Some(bridge_reader) = bridge_reader {
            builder = builder.with_reader(bridge_reader);
        }
        let instruments = builder.build();
        let bridge = bridge.with_exemplars(instruments.exemplars());
        if let Some(exemplars) = instruments.exemplars() {
            report::line(format_args!(
                "exemplars on: OpenMetrics scrapes link each per-request histogram bucket to its latest request's {}",
                if spans_on { "llm_request span" } else { "caller span (traceparent)" }
            ));
            // Placed every second besides at each scrape, so that a busy
            // label set's ring does not fill on the recording thread.
            let exemplars = exemplars.clone();
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let exemplars = exemplars.clone();
                    let _ = tokio::task::spawn_blocking(move || exemplars.place_pending()).await;
                }
            });
        }
        let mut traces = None;
        if spans_on {
            // The batch span processor counts the spans it exports and the
            // ones it drops at a full queue (`otel.sdk.processor.span.processed`,
            // `error.type=queue_full`) on the global meter provider: made
            // ours, the count reaches `/metrics` and OTLP beside the vLLM
            // families instead of a no-op meter.
            if let Some(provider) = instruments.meter_provider() {
                opentelemetry::global::set_meter_provider(provider.clone());
            }
            let push = otlp::build_traces(&options, &env, runtime.handle(), resource)?;
            report::line(format_args!(
                "pushing llm_request spans over OTLP ({}) to {} ({})",
                push.destination.protocol,
                push.destination,
                flags::source(push.destination.source.as_ref()),
            ));
            traces = Some((
                push.provider,
                OtlpReport {
                    destination: push.destination,
                    health: push.health,
                },
            ));
        }
        let spans = traces
            .as_ref()
            .map(|(provider, _)| RequestSpans::new(provider));
        if let Some(addr) = common.metrics_addr.0 {
            let (tls, token) = common.listen.security(&[b"http/1.1"])?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut server = http::MetricsServer::default();
            server.limits = common
                .listen
                .limits(common.listen.metrics_max_connections)?;
            server.tls = tls;
            server.token = token;
            let (local, _task) = runtime
                .block_on(http::spawn(addr, bridge.clone(), server))
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("{e} (choose another --metrics-addr, or none)"),
                    )
                })?;
            report::line(format_args!(
                "serving Prometheus metrics at {scheme}://{local}{}",
                http::METRICS_PATH
            ));
        }
        let pipeline = Pipeline {
            exports: Arc::new(Exports {
                instruments,
                metrics: report,
                traces,
            }),
            bridge,
            spans,
            runtime,
        };
        if let OnSignal::Exit { print } = on_signal {
            pipeline.exit_on_signal(print);
        }
        Ok(pipeline)
    }

    /// On SIGINT or SIGTERM: print the exposition of what was applied when
    /// `print` asks for one, export what was recorded, then exit (130/143,
    /// or [`EXIT_EXPORT_FAILED`] when that export failed).
    pub(super) fn exit_on_signal(&self, print: Option<Format>) {
        let exports = Arc::clone(&self.exports);
        let bridge = self.bridge.clone();
        self.runtime.spawn(async move {
            let name = wait_for_signal().await;
            report::line(format_args!(
                "received {name}: exporting what was recorded, then exiting"
            ));
            if let Some(format) = print {
                // Before the provider shuts down: the bridge reads it.
                let text = bridge.encode(format);
                let _ = tokio::task::spawn_blocking(move || to_stdout(text.as_bytes())).await;
            }
            // Off the runtime's worker: the final export blocks until it is
            // done, and the gRPC transport needs the worker meanwhile.
            let flushed = tokio::task::spawn_blocking(move || flush(&exports)).await;
            // 128 + the signal's number, as a shell reports it.
            let code = match flushed {
                Ok(Ok(())) if name == "SIGINT" => 130,
                Ok(Ok(())) => 143,
                _ => i32::from(EXIT_EXPORT_FAILED),
            };
            std::process::exit(code);
        });
    }

    /// Stops the pipeline; `Err` when the final OTLP export failed.
    pub(super) fn finish(self) -> Result<(), FinalExportFailed> {
        let result = flush(&self.exports);
        self.runtime.shutdown_background();
        result
    }
}

pub(super) async fn wait_for_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

impl Pipeline {
    /// A tracker recording into the pipeline, with its spans and `limits`.
    pub(super) fn tracker(&self, limits: InputLimits) -> Tracker {
        let tracker = Tracker::new(self.exports.instruments.clone()).with_limits(limits);
        match &self.spans {
            Some(spans) => tracker.with_spans(spans.clone()),
            None => tracker,
        }
    }
}

/// Reports on stderr what a final export did (the SDK's own error says
/// only that the shutdown failed); `Err` when it failed.
pub(super) fn report_final_export(
    result: opentelemetry_sdk::error::OTelSdkResult,
    report: &OtlpReport,
) -> Result<(), FinalExportFailed> {
    let failed = |outcome, reason: String| FinalExportFailed {
        destination: report.destination.to_string(),
        outcome,
        reason,
    };
    let outcome = match (result, report.health.last_error()) {
        (Ok(()) | Err(OTelSdkError::AlreadyShutdown), None) => Ok(()),
        (_, Some(error)) => Err(failed("failed", error.to_string())),
        (Err(error), None) => Err(failed("did not complete", error.to_string())),
    };
    if let Err(error) = &outcome {
        report::line(format_args!("error: {error}"));
    }
    outcome
}

/// Shuts the tracer provider down (its last spans go out), then the meter
/// provider (the OTLP reader exports one last time); `Err` when a final
/// export failed.
pub(super) fn flush(exports: &Exports) -> Result<(), FinalExportFailed> {
    let traces = match &exports.traces {
        Some((provider, report)) => report_final_export(provider.shutdown(), report),
        None => Ok(()),
    };
    let result = exports.instruments.shutdown();
    let metrics = match &exports.metrics {
        Some(report) => report_final_export(result, report),
        None => Ok(()),
    };
    traces.and(metrics)
}

/// The local tracker, plus a remote ingest stream when `--target` is given.
pub(super) struct Tee {
    pub(super) tracker: Tracker,
    pub(super) remote: Option<RemoteSink>,
    pub(super) remote_failed: bool,
}

impl Tee {
    pub(super) fn new(
        pipeline: &Pipeline,
        target: &TargetArgs,
        common: &CommonArgs,
    ) -> Result<Tee, CliError> {
        let remote = match &target.target {
            Some(url) => Some(RemoteSink::connect(
                url,
                &target.security(),
                pipeline.runtime.handle(),
            )?),
            None => None,
        };
        Ok(Tee {
            tracker: pipeline.tracker(common.input_limits()),
            remote,
            remote_failed: false,
        })
    }

    /// Closes the remote stream and reports its summary; `Ok(true)` when the
    /// server rejected nothing.
    pub(super) fn finish_remote(&mut self) -> Result<bool, CliError> {
        let Some(remote) = self.remote.take() else {
            return Ok(true);
        };
        let summary = remote
            .finish()
            .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e))?;
        report::line(format_args!(
            "remote ingest: {}",
            describe_summary(&summary)
        ));
        Ok(summary.records_rejected == 0)
    }
}

impl RecordSink for Tee {
    /// Applies locally, then forwards the record unless it was refused as a
    /// whole (the remote would refuse it too).
    fn apply(&mut self, record: &Record) -> Vec<Rejection> {
        let rejections = self.tracker.apply(record);
        let refused = Rejection::refuse_whole_record(&rejections);
        if let Some(remote) = &mut self.remote {
            if !refused && !self.remote_failed && !remote.send(record) {
                self.remote_failed = true;
            }
        }
        rejections
    }

    fn invalid(&mut self) {
        self.tracker.count_invalid_record();
    }
}
