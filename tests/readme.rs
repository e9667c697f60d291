//! The README stays true: its metric table is the catalog's, and CI runs the
//! test command it documents.

mod common;

use vllm_otel_metrics::catalog::{self, DEFAULT_MAX_MODEL_LEN};

const BEGIN: &str =
    "<!-- catalog:begin (generated from src/catalog/; tests/readme.rs checks it) -->\n";
const END: &str = "<!-- catalog:end -->";

fn readme() -> String {
    std::fs::read_to_string(common::repo().join("README.md")).expect("README.md")
}

#[test]
fn readme_metric_table_is_the_catalog() {
    let readme = readme();
    let start = readme
        .find(BEGIN)
        .expect("README has the catalog begin marker")
        + BEGIN.len();
    let end = readme.find(END).expect("README has the catalog end marker");
    let expected = catalog::markdown_table(DEFAULT_MAX_MODEL_LEN);
    assert!(
        readme[start..end] == expected,
        "README metric table differs from the catalog; replace it with:\n{expected}"
    );
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = readme();
    let command = readme
        .lines()
        .skip_while(|l| !l.contains("<!-- test-command -->"))
        .nth(2)
        .expect("README has a test command block after <!-- test-command -->");
    let ci = std::fs::read_to_string(common::repo().join(".ci/run")).expect(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == command.trim()),
        ".ci/run must run the README test command `{command}`"
    );
}

/// Prints the table for pasting into README.md: `cargo test --test readme -- --ignored --nocapture`.
#[test]
#[ignore = "prints the README table; not a check"]
fn print_catalog_table() {
    print!("{}", catalog::markdown_table(DEFAULT_MAX_MODEL_LEN));
}
