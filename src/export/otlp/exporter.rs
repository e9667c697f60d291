//! The OTLP push reader: a thread that collects the registry every interval
//! (and on flush and shutdown) and sends it over gRPC or HTTP/protobuf.

use std::io::Write as _;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::Channel;

use super::encode::RequestEncoder;
use super::{Compression, ExportHealth, OtlpSettings, Protocol};
use crate::metrics::{MetricReader, ReaderResult, Registry};

/// Sent with every export.
const USER_AGENT: &str = concat!(env!("CARGO_PKG_NAME"), "/", env!("CARGO_PKG_VERSION"));

/// What the caller asks of the export thread; the answer comes back on the
/// enclosed channel.
enum Command {
    Flush(mpsc::Sender<ReaderResult>),
    Shutdown(mpsc::Sender<ReaderResult>),
}

struct Worker {
    commands: mpsc::Sender<Command>,
    thread: JoinHandle<()>,
}

/// Pushes the registry over OTLP every interval, on [`force_flush`] and a
/// last time on [`shutdown`]. The export thread starts when the reader is
/// registered with [`Instruments`](crate::instruments::Instruments).
///
/// [`force_flush`]: MetricReader::force_flush
/// [`shutdown`]: MetricReader::shutdown
#[derive(Debug)]
pub struct OtlpExporter {
    settings: OtlpSettings,
    metadata: MetadataMap,
    health: Arc<ExportHealth>,
    worker: Mutex<Option<Worker>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

impl OtlpExporter {
    /// Checks the settings (endpoint URL, header names and values) and
    /// returns the exporter with the health record it keeps.
    pub fn new(settings: OtlpSettings) -> Result<(OtlpExporter, Arc<ExportHealth>), String> {
        let uri: hyper::Uri = settings
            .endpoint
            .parse()
            .map_err(|e| format!("invalid OTLP endpoint '{}': {e}", settings.endpoint))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(format!(
                    "OTLP endpoint '{}': https is not supported by this build; send to a local Collector over http",
                    settings.endpoint
                ))
            }
            _ => {
                return Err(format!(
                    "invalid OTLP endpoint '{}': expected an http:// URL",
                    settings.endpoint
                ))
            }
        }
        if settings.compression == Compression::Zstd && settings.protocol != Protocol::Grpc {
            return Err(
                "OTLP compression zstd is supported over grpc only; use gzip with http/protobuf"
                    .to_owned(),
            );
        }
        let mut metadata = MetadataMap::new();
        for (key, value) in &settings.headers {
            let name = MetadataKey::from_bytes(key.to_ascii_lowercase().as_bytes())
                .map_err(|e| format!("invalid OTLP header name '{key}': {e}"))?;
            let value = MetadataValue::try_from(value.as_str())
                .map_err(|e| format!("invalid OTLP header value for '{key}': {e}"))?;
            metadata.insert(name, value);
        }
        let health = Arc::new(ExportHealth::default());
        Ok((
            OtlpExporter {
                settings,
                metadata,
                health: Arc::clone(&health),
                worker: Mutex::new(None),
            },
            health,
        ))
    }

    fn ask(&self, command: impl FnOnce(mpsc::Sender<ReaderResult>) -> Command) -> ReaderResult {
        let worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(worker) = worker.as_ref() else {
            return Ok(());
        };
        let (reply, answer) = mpsc::channel();
        worker
            .commands
            .send(command(reply))
            .map_err(|_| "the OTLP export thread has stopped".to_owned())?;
        answer
            .recv()
            .map_err(|_| "the OTLP export thread has stopped".to_owned())?
    }
}

impl MetricReader for OtlpExporter {
    fn register(&self, registry: Arc<Registry>) {
        let mut worker = self.worker.lock().unwrap_or_else(PoisonError::into_inner);
        if worker.is_some() {
            return;
        }
        let (commands, inbox) = mpsc::channel();
        let settings = self.settings.clone();
        let metadata = self.metadata.clone();
        let health = Arc::clone(&self.health);
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || run(&settings, metadata, &health, &registry, &inbox))
            .expect("the OTLP export thread starts");
        *worker = Some(Worker { commands, thread });
    }

    fn force_flush(&self) -> ReaderResult {
        self.ask(Command::Flush)
    }

    fn shutdown(&self) -> ReaderResult {
        let result = self.ask(Command::Shutdown);
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(worker) = worker {
            drop(worker.commands);
            let _ = worker.thread.join();
        }
        result
    }
}

/// The export thread: a single-threaded runtime for the transports, a timer,
/// and the commands.
fn run(
    settings: &OtlpSettings,
    metadata: MetadataMap,
    health: &ExportHealth,
    registry: &Registry,
    inbox: &mpsc::Receiver<Command>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the OTLP export runtime: {e}; nothing will be pushed");
            return;
        }
    };
    let transport = {
        let _entered = runtime.enter();
        Transport::new(settings, metadata)
    };
    let mut encoder =
        RequestEncoder::new(settings.names, settings.temporality, registry.start_time());
    let mut export = || {
        let collected = registry.collect();
        let request = encoder.request(&collected, registry.resource());
        if encoder.is_delta()
            && request.resource_metrics[0].scope_metrics[0]
                .metrics
                .is_empty()
        {
            // Nothing changed since the last accepted export: nothing to send.
            encoder.accepted(&collected);
            return Ok(());
        }
        let result = runtime.block_on(async {
            match tokio::time::timeout(settings.timeout, transport.send(request)).await {
                Ok(result) => result,
                Err(_) => Err(format!(
                    "no answer within {} ms",
                    settings.timeout.as_millis()
                )),
            }
        });
        let result = match result {
            Ok(Some(partial)) => {
                // Accepted in part: retrying would count the rest twice.
                eprintln!("warning: OTLP export to {}: {partial}", settings.endpoint);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(error) => Err(error),
        };
        if result.is_ok() {
            encoder.accepted(&collected);
        }
        health.record(&settings.endpoint, &result);
        result
    };
    let mut next = Instant::now() + settings.interval;
    loop {
        match inbox.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {
                let _ = export();
                next = Instant::now() + settings.interval;
            }
            Ok(Command::Flush(reply)) => {
                let _ = reply.send(export());
            }
            Ok(Command::Shutdown(reply)) => {
                let _ = reply.send(export());
                return;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// One of the two OTLP transports, ready to send.
enum Transport {
    Grpc {
        client: MetricsServiceClient<Channel>,
        metadata: MetadataMap,
    },
    Http {
        client: Client<HttpConnector, Full<Bytes>>,
        endpoint: String,
        headers: Vec<(String, String)>,
        gzip: bool,
    },
}

impl Transport {
    /// Needs the runtime entered (the gRPC channel connects lazily on it).
    fn new(settings: &OtlpSettings, metadata: MetadataMap) -> Transport {
        match settings.protocol {
            Protocol::Grpc => {
                let channel = Channel::from_shared(settings.endpoint.clone())
                    .expect("the endpoint was checked in OtlpExporter::new")
                    .user_agent(USER_AGENT)
                    .expect("the user agent is a valid header value")
                    .connect_timeout(settings.timeout)
                    .connect_lazy();
                // Collectors answer gzip-compressed requests compressed.
                let mut client =
                    MetricsServiceClient::new(channel).accept_compressed(CompressionEncoding::Gzip);
                match settings.compression {
                    Compression::None => {}
                    Compression::Gzip => {
                        client = client.send_compressed(CompressionEncoding::Gzip);
                    }
                    Compression::Zstd => {
                        client = client
                            .send_compressed(CompressionEncoding::Zstd)
                            .accept_compressed(CompressionEncoding::Zstd);
                    }
                }
                Transport::Grpc { client, metadata }
            }
            Protocol::HttpProtobuf => Transport::Http {
                client: Client::builder(TokioExecutor::new()).build_http(),
                endpoint: settings.endpoint.clone(),
                headers: settings.headers.clone(),
                gzip: settings.compression == Compression::Gzip,
            },
        }
    }

    /// Sends one request; `Ok(Some(_))` describes a partial success.
    async fn send(&self, request: ExportMetricsServiceRequest) -> Result<Option<String>, String> {
        let rejected = match self {
            Transport::Grpc { client, metadata } => {
                let mut call = tonic::Request::new(request);
                *call.metadata_mut() = metadata.clone();
                let response =
                    client.clone().export(call).await.map_err(|status| {
                        format!("gRPC {:?}: {}", status.code(), status.message())
                    })?;
                response.into_inner().partial_success
            }
            Transport::Http {
                client,
                endpoint,
                headers,
                gzip,
            } => {
                let mut body = request.encode_to_vec();
                let mut builder = hyper::Request::post(endpoint.as_str())
                    .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
                    .header(hyper::header::USER_AGENT, USER_AGENT);
                if *gzip {
                    let mut encoder =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                    encoder
                        .write_all(&body)
                        .and_then(|()| encoder.try_finish())
                        .map_err(|e| format!("gzip: {e}"))?;
                    body = encoder.finish().map_err(|e| format!("gzip: {e}"))?;
                    builder = builder.header(hyper::header::CONTENT_ENCODING, "gzip");
                }
                for (key, value) in headers {
                    builder = builder.header(key.as_str(), value.as_str());
                }
                let http_request = builder
                    .body(Full::new(Bytes::from(body)))
                    .map_err(|e| format!("cannot build the HTTP request: {e}"))?;
                let response = client
                    .request(http_request)
                    .await
                    .map_err(|e| format!("HTTP: {e}"))?;
                let status = response.status();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| format!("HTTP {status}: reading the answer: {e}"))?
                    .to_bytes();
                if !status.is_success() {
                    let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
                    return Err(format!("HTTP {status}: {}", text.trim()));
                }
                opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse::decode(body)
                    .ok()
                    .and_then(|r| r.partial_success)
            }
        };
        Ok(match rejected {
            Some(p) if p.rejected_data_points > 0 => Some(format!(
                "the collector rejected {} data points: {}",
                p.rejected_data_points, p.error_message
            )),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::otlp::OtlpOverrides;

    fn settings(endpoint: &str, headers: &[(&str, &str)]) -> OtlpSettings {
        OtlpSettings::resolve(
            &OtlpOverrides {
                endpoint: Some(endpoint.to_owned()),
                protocol: Some(Protocol::Grpc),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..OtlpOverrides::default()
            },
            |_| None,
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn bad_endpoints_and_headers_are_refused_up_front() {
        let error = |endpoint, headers| OtlpExporter::new(settings(endpoint, headers)).unwrap_err();
        assert_eq!(
            error("https://collector:4317", &[]),
            "OTLP endpoint 'https://collector:4317': https is not supported by this build; send to a local Collector over http"
        );
        assert_eq!(
            error("collector:4317", &[]),
            "invalid OTLP endpoint 'collector:4317': expected an http:// URL"
        );
        assert!(error("http://c:4317", &[("bad header", "v")])
            .starts_with("invalid OTLP header name 'bad header': "));
        assert!(error("http://c:4317", &[("x-token", "line\nbreak")])
            .starts_with("invalid OTLP header value for 'x-token': "));
    }

    #[test]
    fn zstd_is_refused_over_http() {
        let mut s = settings("http://c:4318", &[]);
        s.protocol = Protocol::HttpProtobuf;
        s.compression = Compression::Zstd;
        assert_eq!(
            OtlpExporter::new(s).unwrap_err(),
            "OTLP compression zstd is supported over grpc only; use gzip with http/protobuf"
        );
    }

    #[test]
    fn an_unregistered_exporter_has_nothing_to_flush() {
        let (exporter, health) = OtlpExporter::new(settings("http://127.0.0.1:9", &[])).unwrap();
        assert_eq!(exporter.force_flush(), Ok(()));
        assert_eq!(exporter.shutdown(), Ok(()));
        assert_eq!(health.exports(), 0);
    }

    #[test]
    fn a_failed_final_export_is_reported_with_its_cause() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Nothing listens on the port any more: the connection is refused.
        let (exporter, health) =
            OtlpExporter::new(settings(&format!("http://127.0.0.1:{port}"), &[])).unwrap();
        exporter.register(Arc::new(Registry::new(crate::metrics::Resource::default())));
        let error = exporter.shutdown().unwrap_err();
        assert!(error.starts_with("gRPC Unavailable"), "{error}");
        assert_eq!(health.last_error(), Some(error));
        assert_eq!(
            exporter.shutdown(),
            Ok(()),
            "a second shutdown does nothing"
        );
    }
}

#[cfg(test)]
mod partial_success {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
    };
    use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
    use prost::Message;

    use super::*;
    use crate::catalog::NUM_PREEMPTIONS;
    use crate::export::otlp::{OtlpOverrides, Temporality};
    use crate::metrics::{Counter, Family, Resource};

    /// An OTLP/HTTP receiver that keeps every request and answers each with
    /// a partial success.
    fn partial_receiver() -> (u16, Arc<Mutex<Vec<ExportMetricsServiceRequest>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                'requests: loop {
                    let mut length = 0;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            break 'requests;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    keep.lock()
                        .unwrap()
                        .push(ExportMetricsServiceRequest::decode(&body[..]).unwrap());
                    let answer = ExportMetricsServiceResponse {
                        partial_success: Some(ExportMetricsPartialSuccess {
                            rejected_data_points: 1,
                            error_message: "one point too many".into(),
                        }),
                    }
                    .encode_to_vec();
                    write!(
                        writer,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
                        answer.len()
                    )
                    .unwrap();
                    writer.write_all(&answer).unwrap();
                }
            }
        });
        (port, received)
    }

    fn sent_value(request: &ExportMetricsServiceRequest) -> Option<number_data_point::Value> {
        let metric = request.resource_metrics[0].scope_metrics[0]
            .metrics
            .first()?;
        match &metric.data {
            Some(metric::Data::Sum(sum)) => sum.data_points[0].value,
            _ => None,
        }
    }

    /// Accepted in part means accepted: no failure is reported, and the next
    /// delta starts after what was sent, so nothing is counted twice.
    #[test]
    fn a_partial_success_is_not_resent() {
        let (port, received) = partial_receiver();
        let settings = OtlpSettings::resolve(
            &OtlpOverrides {
                endpoint: Some(format!("http://127.0.0.1:{port}")),
                protocol: Some(Protocol::HttpProtobuf),
                temporality: Some(Temporality::Delta),
                interval: Some(std::time::Duration::from_secs(3600)),
                ..OtlpOverrides::default()
            },
            |_| None,
        )
        .unwrap()
        .unwrap();
        let (exporter, health) = OtlpExporter::new(settings).unwrap();
        let preemptions = Arc::new(Family::<Counter>::new(&NUM_PREEMPTIONS, Vec::new()));
        let mut registry = Registry::new(Resource::default());
        registry.register(Arc::clone(&preemptions));
        exporter.register(Arc::new(registry));
        let series = preemptions.series(Vec::new());
        series.add(5);
        assert_eq!(exporter.force_flush(), Ok(()));
        series.add(2);
        assert_eq!(exporter.force_flush(), Ok(()));
        // Nothing changed since: the final export sends nothing.
        assert_eq!(exporter.shutdown(), Ok(()));
        assert_eq!((health.exports(), health.last_error()), (2, None));
        let received = received.lock().unwrap();
        let values: Vec<_> = received.iter().map(sent_value).collect();
        use number_data_point::Value::AsInt;
        assert_eq!(values, [Some(AsInt(5)), Some(AsInt(2))]);
    }
}
