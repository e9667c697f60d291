//! promtool on what the project ships: `promtool check metrics` on a
//! replay's exposition reports only the lints that vLLM's own names always
//! trigger, and `otel-collector/rules.yml` passes `promtool check rules` and
//! its unit tests, `otel-collector/rules_test.yml`, at their production
//! durations.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod paths;
    pub mod process;
}

use std::process::Command;

use vllm_otel_metrics::catalog;

mod needs_promtool {
    use super::*;

    #[test]
    fn promtool_reports_only_the_lints_of_vllm_names() {
        let promtool = common::environments::promtool();
        let (code, exposition, stderr) =
            common::process::replay(&common::paths::repo().join("tests/data/lifecycle.jsonl"));
        assert_eq!(code, 2, "the trace has invalid lines: {stderr}");

        let output = common::process::run_with_stdin(
            Command::new(promtool).args(["check", "metrics"]),
            &exposition,
        );
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let mut lines: Vec<&str> = report.lines().collect();
        lines.sort();

        // promtool lints the families that have samples (an engine-tier family
        // whose event the trace lacks has only its HELP and TYPE lines).
        let sample_names: std::collections::HashSet<&str> = exposition
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split(['{', ' ']).next())
            .collect();
        let has_samples = |def: &catalog::MetricDef| {
            ["", "_total", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| sample_names.contains(format!("{}{suffix}", def.vllm_name).as_str()))
        };
        // vLLM's names contain a colon (a recording-rule convention promtool
        // flags), and vLLM names one histogram `…_total`; nothing else may be flagged.
        let mut expected: Vec<String> = catalog::all()
            .filter(|def| def.vllm_name.contains(':') && has_samples(def))
            .map(|def| {
                let suffix = if def.kind == catalog::Kind::Counter {
                    "_total"
                } else {
                    ""
                };
                format!(
                    "{}{suffix} metric names should not contain ':'",
                    def.vllm_name
                )
            })
            .collect();
        expected.push(format!(
            "{} non-counter metrics should not have \"_total\" suffix",
            "vllm:iteration_tokens_total"
        ));
        expected.sort();
        assert_eq!(lines, expected, "promtool said:\n{report}");
        // Exit status 3 is "lint problems only"; 1 would be a parse error.
        assert_eq!(output.status.code(), Some(3), "promtool said:\n{report}");
    }

    #[test]
    fn rules_pass_promtool() {
        let promtool = common::environments::promtool();
        let dir = common::paths::repo().join("otel-collector");
        for args in [
            ["check", "rules", "rules.yml"],
            ["test", "rules", "rules_test.yml"],
        ] {
            let output = Command::new(&promtool)
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("promtool runs");
            let report = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                output.status.success() && report.contains("SUCCESS"),
                "promtool {}:\n{report}",
                args.join(" ")
            );
        }
    }
}
