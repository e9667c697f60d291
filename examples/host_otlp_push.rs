//! A host program that pushes the crate's families over OTLP/HTTP to an
//! OpenTelemetry Collector, with an exporter and reader of its own.
//!
//! The host builds `opentelemetry-otlp`'s `MetricExporter` and the SDK's
//! `PeriodicReader` itself; [`Instruments::install`] registers the
//! catalog's Views on the host's builder and builds the instruments from the
//! same config. Shutting the provider down exports what is left.
//!
//! ```text
//! cargo run --example host_otlp_push -- http://127.0.0.1:4318/v1/metrics
//! ```
//!
//! The families go out under their OpenTelemetry names
//! (`vllm.request_num_preemptions`, …); the Collector's Prometheus exporter
//! turns them back into vLLM's (docs/OBSERVABILITY.md).

use std::time::Duration;

use opentelemetry_otlp::{MetricExporter, WithExportConfig as _};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use vllm_otel_metrics::instruments::{Instruments, InstrumentsConfig};
use vllm_otel_metrics::tracker::{RequestMetrics, RequestParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:4318/v1/metrics".to_owned());
    // The OTLP/HTTP client's TLS uses rustls' ring provider, process-wide.
    vllm_otel_metrics::export::otlp::tls::install_crypto_provider();
    let exporter = MetricExporter::builder()
        .with_http()
        .with_endpoint(endpoint.clone())
        .with_timeout(Duration::from_secs(5))
        .build()?;
    let reader = PeriodicReader::builder(exporter)
        .with_interval(Duration::from_secs(10))
        .build();
    let (provider, instruments) = Instruments::install(
        SdkMeterProvider::builder().with_reader(reader),
        InstrumentsConfig::default(),
    );

    // A request the client abandoned: vLLM records it as `abort`, with its
    // preemption count (0) in `vllm.request_num_preemptions`.
    let params = RequestParams {
        arrival_time: 100.0,
        prompt_len: 64,
        max_tokens: None,
        n: 1,
    };
    RequestMetrics::start(&instruments, "my-model", 0, params).abort(100.5);

    match provider.shutdown() {
        Ok(()) => eprintln!("pushed to {endpoint}"),
        Err(e) => eprintln!("the push to {endpoint} failed: {e}"),
    }
    Ok(())
}
