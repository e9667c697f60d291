//! The documentation stays true: docs/CATALOG.md's metric table is the
//! catalog's, CI runs the test command the README documents, and
//! docs/TESTING.md's table of test files is complete and is what
//! scripts/test-fast.sh runs.

mod common;
// The table's one writer: the example prints it, this test compares it.
#[path = "../examples/catalog_table.rs"]
mod catalog_table;

use vllm_otel_metrics::catalog::{self, DEFAULT_MAX_MODEL_LEN};

const BEGIN: &str =
    "<!-- catalog:begin (generated from src/catalog/; tests/readme.rs checks it) -->\n";
const END: &str = "<!-- catalog:end -->";

fn read(path: &str) -> String {
    std::fs::read_to_string(common::repo().join(path)).expect(path)
}

#[test]
fn catalog_doc_table_is_the_catalog() {
    let doc = read("docs/CATALOG.md");
    let start = doc
        .find(BEGIN)
        .expect("docs/CATALOG.md has the catalog begin marker")
        + BEGIN.len();
    let end = doc
        .find(END)
        .expect("docs/CATALOG.md has the catalog end marker");
    let expected = catalog_table::markdown_table(DEFAULT_MAX_MODEL_LEN);
    assert!(
        doc[start..end] == expected,
        "docs/CATALOG.md's metric table differs from the catalog; run \
         scripts/update-catalog-table.sh or replace it with:\n{expected}"
    );
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = read("README.md");
    let command = readme
        .lines()
        .skip_while(|l| !l.contains("<!-- test-command -->"))
        .nth(2)
        .expect("README has a test command block after <!-- test-command -->");
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == command.trim()),
        ".ci/run must run the README test command `{command}`"
    );
}

/// Every file under `tests/` is in docs/TESTING.md's table, and the fast
/// script runs exactly those that need no real component.
#[test]
fn testing_doc_lists_every_test_file_and_the_fast_set() {
    let doc = read("docs/TESTING.md");
    let mut listed: Vec<(String, String)> = doc
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix("| `")?.split(" | ");
            let name = cells.next()?.strip_suffix('`')?.to_owned();
            let needs = cells.next()?.trim_end_matches(" |").to_owned();
            Some((name, needs))
        })
        .collect();
    listed.sort();
    let mut files: Vec<String> = std::fs::read_dir(common::repo().join("tests"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    files.sort();
    let names: Vec<String> = listed.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, files, "docs/TESTING.md's table against tests/*.rs");

    let script = read("scripts/test-fast.sh");
    let line = script
        .lines()
        .find_map(|l| l.strip_prefix("FAST_TESTS=("))
        .expect("scripts/test-fast.sh has a FAST_TESTS=(…) line");
    let mut fast: Vec<&str> = line.trim_end_matches(')').split_whitespace().collect();
    fast.sort();
    let none: Vec<&str> = listed
        .iter()
        .filter(|(_, needs)| needs == "none")
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        fast, none,
        "scripts/test-fast.sh against docs/TESTING.md's *none* rows"
    );
}

/// docs/CLI.md's table of `--custom-histogram-buckets` keys is the
/// catalog's bucket families, each with its histograms in catalog order.
#[test]
fn cli_doc_lists_every_bucket_family() {
    let doc = read("docs/CLI.md");
    let section = doc
        .split("### Histogram buckets")
        .nth(1)
        .expect("docs/CLI.md has a Histogram buckets section");
    let listed: Vec<(String, Vec<String>)> = section
        .lines()
        .skip_while(|l| !l.starts_with("| key |"))
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            let names = cells[1]
                .split(", ")
                .map(|n| n.split('`').nth(1).unwrap().to_owned())
                .collect();
            (cells[0].trim().trim_matches('`').to_owned(), names)
        })
        .collect();
    let expected: Vec<(String, Vec<String>)> = catalog::BUCKET_FAMILIES
        .iter()
        .map(|f| {
            let names = f.members.iter().map(|d| d.vllm_name.to_owned()).collect();
            (f.key.to_owned(), names)
        })
        .collect();
    assert_eq!(listed, expected);
}
