//! The `/metrics` endpoint: content negotiation, 404/405, and both formats
//! parsed by Python's `prometheus_client` with the same samples.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod paths;
    pub mod process;
}

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;

use vllm_otel_metrics::export::prometheus::{http, PrometheusBridge};
use vllm_otel_metrics::instruments::Instruments;
use vllm_otel_metrics::protocol::{Abort, RequestStart};
use vllm_otel_metrics::tracker::Tracker;

/// A raw HTTP/1.1 request; returns (status line, headers, body).
fn get(
    addr: SocketAddr,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: test\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("a complete response");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (
        status.to_owned(),
        headers.to_ascii_lowercase(),
        body.to_owned(),
    )
}

fn python_samples(format: &str, exposition: &str) -> Vec<String> {
    let python = common::environments::python_with_prometheus_client();
    let output = common::process::run_with_stdin(
        Command::new(python)
            .arg(common::paths::repo().join("tests/helpers/parse_exposition.py"))
            .arg(format),
        exposition,
    );
    assert!(
        output.status.success(),
        "prometheus_client rejected the {format} exposition: {}\n{exposition}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn endpoint_negotiates_formats_and_both_parse_to_the_same_samples() {
    let (bridge, reader) = PrometheusBridge::builder().build();
    let mut tracker = Tracker::new(Instruments::builder().with_reader(reader).build());
    let rejections = tracker.start_request(&RequestStart {
        request_id: "r".into(),
        model_name: "m \"quoted\"".into(),
        engine: 3,
        arrival_time: 10.0,
        prompt_len: 12,
        max_tokens: Some(4),
        n: 1,
        traceparent: None,
        operation_name: None,
        stop_strings: false,
        lora_name: None,
        priority: None,
    });
    assert_eq!(rejections, vec![]);
    let rejections = tracker.abort(&Abort {
        request_id: "r".into(),
        received_at: 10.5,
    });
    assert_eq!(rejections, vec![]);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (addr, _task) = runtime
        .block_on(http::spawn(
            "127.0.0.1:0".parse().unwrap(),
            bridge.clone(),
            // The process families change between scrapes; this test compares two.
            {
                let mut server = http::MetricsServer::default();
                server.process_metrics = false;
                server
            },
        ))
        .unwrap();

    let (status, headers, text) = get(addr, "GET", "/metrics", None);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{headers}"
    );
    assert!(!text.contains("# EOF"));
    assert!(
        text.contains(
            "vllm:request_num_preemptions_count{model_name=\"m \\\"quoted\\\"\",engine=\"3\"} 1\n"
        ),
        "{text}"
    );

    let (status, headers, open) = get(
        addr,
        "GET",
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{headers}"
    );
    assert!(open.ends_with("# EOF\n"));
    assert!(open.contains("# TYPE vllm:num_preemptions counter\n"));
    assert!(open.contains("vllm:num_preemptions_total{"));

    let (status, _, _) = get(addr, "GET", "/", None);
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, _, _) = get(addr, "GET", "/metricsx", None);
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, headers, _) = get(addr, "POST", "/metrics", None);
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert!(headers.contains("allow: get, head"));
    let (status, _, body) = get(addr, "HEAD", "/metrics", None);
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", ""));

    // Same samples through both parsers (the OpenMetrics parser names counter
    // families without `_total`; samples keep it in both).
    let from_text = python_samples("text", &text);
    let from_open = python_samples("openmetrics", &open);
    let strip_type = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| !l.starts_with("families"))
            .map(|l| l.split_once(' ').unwrap().1.to_owned())
            .collect()
    };
    assert_eq!(strip_type(&from_text), strip_type(&from_open));
    // Every catalog family, announced even without series (but the SLO
    // families, which exist only with `--slo`).
    let families = format!(
        "families {}",
        vllm_otel_metrics::catalog::all().count() - vllm_otel_metrics::catalog::slo::ALL.len()
    );
    assert!(from_text.contains(&families), "{from_text:?}");
    assert!(from_open.contains(&families));
    assert!(from_text.contains(
        &"histogram vllm:request_num_preemptions_sum{engine=\"3\",model_name=\"m \"quoted\"\"} 0.0"
            .to_owned()
    ));
}
