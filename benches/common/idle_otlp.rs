//! The OTLP push the CLI builds, for benches that need its reader beside
//! the bridge's: its hour-long period means it never exports while a bench
//! runs. Each bench that needs it includes this file.

use std::time::Duration;

use vllm_otel_metrics::export::otlp::{self, OtlpOptions, OtlpPush, Protocol};

/// An HTTP/protobuf push to a closed port that exports once an hour.
pub(crate) fn idle_push(runtime: &tokio::runtime::Runtime) -> OtlpPush {
    let mut options = OtlpOptions::default();
    options.endpoint = Some("http://127.0.0.1:9".into());
    options.protocol = Some(Protocol::HttpProtobuf);
    options.interval = Some(Duration::from_secs(3600));
    otlp::build(&options, &|_| None, runtime.handle()).expect("an OTLP exporter")
}
