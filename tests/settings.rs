//! A setting that cannot be used is named as the user gave it: the
//! library's errors name its configuration fields, and the command line
//! shows each as the flag that fills it (`--tls-cert`, not `cert`), or as
//! the environment variable it came from.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod http;
    pub mod paths;
    pub mod pki;
    pub mod process;
}

use common::pki::make_pki;

use std::path::Path;

fn path(p: &Path) -> String {
    p.to_str().expect("a UTF-8 path").to_owned()
}

/// A command line, its environment and the error it must print.
type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, String);

/// Runs each case; each must exit 1 printing exactly its error line.
fn fails_with(cases: Vec<Case>) {
    for (args, env, expected) in cases {
        let (code, _, stderr) = common::process::run_with_env(&args, &env);
        assert_eq!(
            (code, stderr),
            (1, format!("error: {expected}\n")),
            "{args:?} {env:?}"
        );
    }
}

/// `replay` of `trace` without `/metrics`, with `extra`.
fn replay_args<'a>(trace: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["replay", trace, "--metrics-addr", "none"];
    args.extend_from_slice(extra);
    args
}

#[test]
fn every_rejected_setting_is_shown_as_its_flag_or_variable() {
    let dir = common::paths::tempdir("settings");
    let empty = dir.join("empty");
    std::fs::write(&empty, "").unwrap();
    let empty = path(&empty);
    let missing = path(&dir.join("missing"));
    let trace = path(&common::paths::repo().join("tests/data/lifecycle.jsonl"));
    let no_file = "No such file or directory (os error 2)";
    let cases: Vec<Case> = vec![
        (
            vec!["serve", "--metrics-addr", "none", "--tls-cert", &empty],
            vec![],
            "--tls-cert and --tls-key go together (and --tls-client-ca needs them)".into(),
        ),
        (
            vec![
                "serve",
                "--metrics-addr",
                "none",
                "--tls-cert",
                &empty,
                "--tls-key",
                &empty,
            ],
            vec![],
            format!("--tls-cert: {empty} holds no certificate"),
        ),
        (
            vec![
                "serve",
                "--metrics-addr",
                "none",
                "--auth-token-file",
                &empty,
            ],
            vec![],
            format!("--auth-token-file: {empty} is empty"),
        ),
        (
            replay_args(
                &trace,
                &["--target", "http://127.0.0.1:1", "--target-ca", &missing],
            ),
            vec![],
            format!("--target-ca: cannot read {missing}: {no_file}"),
        ),
        (
            replay_args(&trace, &["--target", "http://user:pw@127.0.0.1:1"]),
            vec![],
            "--target http://***@127.0.0.1:1 carries credentials in the URL, which would \
             not be sent; give them with --target-token-file instead"
                .into(),
        ),
        (
            replay_args(&trace, &["--otlp-endpoint", "http://user:pw@127.0.0.1:1"]),
            vec![],
            "--otlp-endpoint http://***@127.0.0.1:1/v1/metrics carries credentials in the \
             URL, which would not be sent; give them with --otlp-header instead"
                .into(),
        ),
        (
            replay_args(
                &trace,
                &[
                    "--otlp-endpoint",
                    "http://127.0.0.1:1",
                    "--otlp-client-key",
                    &empty,
                ],
            ),
            vec![],
            "--otlp-client-key needs its pair: a client certificate and a client key go \
             together"
                .into(),
        ),
        (
            replay_args(
                &trace,
                &[
                    "--otlp-endpoint",
                    "http://127.0.0.1:1",
                    "--otlp-certificate",
                    &empty,
                ],
            ),
            vec![],
            format!("--otlp-certificate: {empty} is not a PEM file"),
        ),
        (
            replay_args(&trace, &["--otlp-endpoint", "http://127.0.0.1:1"]),
            vec![("OTEL_EXPORTER_OTLP_CERTIFICATE", missing.as_str())],
            format!("OTEL_EXPORTER_OTLP_CERTIFICATE: cannot read {missing}: {no_file}"),
        ),
        (
            vec![
                "simulate",
                "--step-base-ms",
                "0",
                "--step-per-token-us",
                "0",
            ],
            vec![],
            "a step must take time: --step-base-ms or --step-per-token-us above 0".into(),
        ),
        (
            vec!["simulate", "--tensor-parallel-size", "0"],
            vec![],
            "--tensor-parallel-size must be at least 1".into(),
        ),
        (
            vec!["simulate", "--nixl"],
            vec![],
            "--nixl must be used with a KV connector (--external-prefix-hit-rate above 0)".into(),
        ),
        (
            vec![
                "simulate",
                "--attribute",
                "priority",
                "--slo",
                r#"{"ttft": 1, "priorities": {"7": {"ttft": 9}}}"#,
            ],
            vec![],
            "--slo: priorities.7: not a class of --priority-classes (<-1, -1, 0, 1, >1)".into(),
        ),
        (
            vec!["simulate", "--slo", r#"{"priorities": {"0": {"ttft": 9}}}"#],
            vec![],
            "--slo: priorities.0: priority classes need --attribute priority".into(),
        ),
    ];
    fails_with(cases);
}

/// A class `--attribute` does not know, or priority boundaries that do not
/// increase, are refused by the command line's parser, which names the
/// value and what it takes.
#[test]
fn attribution_flags_name_the_value_at_fault() {
    for (args, first_line) in [
        (
            &["--attribute", "lora,tenant"][..],
            "error: invalid value 'tenant' for '--attribute <lora,priority>'",
        ),
        (
            &["--priority-classes", "5,1"][..],
            "error: invalid value '5,1' for '--priority-classes <B1,B2,…>': priority class boundaries: 1 is not above 5; boundaries increase strictly",
        ),
        (
            &["--priority-classes", "0,high"][..],
            "error: invalid value '0,high' for '--priority-classes <B1,B2,…>': priority class boundaries: 'high' is not an integer",
        ),
        (
            &["--max-adapters", "0"][..],
            "error: invalid value '0' for '--max-adapters <K>': 0 is not in 1..=1024",
        ),
    ] {
        let (code, _, stderr) = common::process::run(&[&["simulate"][..], args].concat());
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().next(), Some(first_line), "{args:?}: {stderr}");
    }
}

/// A `--custom-histogram-buckets` that cannot be used stops every
/// subcommand before it starts (`serve` binds nothing), with one line that
/// names the key at fault.
#[test]
fn bad_bucket_overrides_name_their_key_and_nothing_starts() {
    let trace = path(&common::paths::repo().join("tests/data/lifecycle.jsonl"));
    let flag = "--custom-histogram-buckets";
    let known = "known: iteration_tokens, request_tokens, request_params_n, \
                 request_num_preemptions, time_to_first_token, inter_token_latency, \
                 request_latency, kv_cache_residency, operation_duration, nixl_xfer_time, \
                 nixl_post_time, nixl_bytes_transferred, nixl_num_descriptors, \
                 kv_offload_transfer_size, kv_offload_lookup_sync_delay, \
                 kv_offload_lookup_async_delay; or a histogram's vLLM name, such as \
                 vllm:e2e_request_latency_seconds";
    let values_and_errors = [
        (
            r#"{"request_latency": [0.1, 1], "e2e_latency": [1]}"#,
            format!(r#""e2e_latency": not a bucket family ({known})"#),
        ),
        (
            r#"{"vllm:num_preemptions": [1]}"#,
            format!(r#""vllm:num_preemptions": not a bucket family ({known})"#),
        ),
        (
            r#"{"time_to_first_token": []}"#,
            r#""time_to_first_token": boundaries are empty"#.to_owned(),
        ),
        (
            r#"{"request_latency": [0.1, 0.5, 0.5]}"#,
            r#""request_latency": boundaries must be strictly increasing (0.5 follows 0.5)"#
                .to_owned(),
        ),
        (
            r#"{"inter_token_latency": [0.2, 0.1]}"#,
            r#""inter_token_latency": boundaries must be strictly increasing (0.1 follows 0.2)"#
                .to_owned(),
        ),
        (
            r#"{"request_num_preemptions": [1, 2, "+Inf"]}"#,
            r#""request_num_preemptions": boundaries must be finite, not "+Inf""#.to_owned(),
        ),
        (
            r#"{"request_tokens": [1, "NaN"]}"#,
            r#""request_tokens": boundaries must be finite, not "NaN""#.to_owned(),
        ),
        (
            r#"{"request_tokens": 5}"#,
            r#""request_tokens": boundaries must be a JSON array of numbers"#.to_owned(),
        ),
        (
            r#"{"request_tokens": [1, "two"]}"#,
            r#""request_tokens": boundaries must be a JSON array of numbers, not "two""#.to_owned(),
        ),
        (
            r#"["request_latency"]"#,
            "not a JSON object of bucket family to boundaries: invalid type: sequence, \
             expected a map at line 1 column 0"
                .to_owned(),
        ),
    ];
    let port = common::http::free_port().to_string();
    let metrics_addr = format!("127.0.0.1:{port}");
    let mut cases: Vec<Case> = Vec::new();
    for (value, error) in &values_and_errors {
        let expected = format!("{flag}: {error}");
        cases.push((
            replay_args(&trace, &[flag, value]),
            vec![],
            expected.clone(),
        ));
        cases.push((vec!["simulate", flag, value], vec![], expected.clone()));
        cases.push((
            vec!["serve", "--metrics-addr", &metrics_addr, flag, value],
            vec![],
            expected,
        ));
    }
    fails_with(cases);
}

/// Under an error about a setting, the library's own reason (the TLS
/// library's, the HTTP client's) follows as its cause, on the same line.
#[test]
fn the_cause_follows_the_setting() {
    let dir = common::paths::tempdir("settings-causes");
    let pki = make_pki();
    let garbled = dir.join("garbled.pem");
    std::fs::write(
        &garbled,
        "-----BEGIN CERTIFICATE-----\nZm9v\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let garbled = path(&garbled);
    let (server_cert, other_key) = (path(&pki.server_cert), path(&pki.client_key));
    let trace = path(&common::paths::repo().join("tests/data/lifecycle.jsonl"));
    let cases: Vec<Case> = vec![
        (
            vec![
                "serve",
                "--metrics-addr",
                "none",
                "--tls-cert",
                &server_cert,
                "--tls-key",
                &other_key,
            ],
            vec![],
            "--tls-cert/--tls-key: keys may not be consistent: KeyMismatch".into(),
        ),
        (
            replay_args(
                &trace,
                &[
                    "--otlp-endpoint",
                    "https://127.0.0.1:1",
                    "--otlp-certificate",
                    &garbled,
                ],
            ),
            vec![],
            "cannot build the OTLP HTTP client: builder error: invalid peer certificate: \
             BadEncoding"
                .into(),
        ),
        (
            replay_args(
                &trace,
                &[
                    "--otlp-endpoint",
                    "https://127.0.0.1:1",
                    "--otlp-client-certificate",
                    &garbled,
                    "--otlp-client-key",
                    &garbled,
                ],
            ),
            vec![],
            "the OTLP client certificate and key cannot be used: builder error: unexpected \
             error: private key or certificate not found"
                .into(),
        ),
    ];
    fails_with(cases);
}
