//! The documentation stays true: docs/CATALOG.md's metric table is the
//! catalog's, CI runs the test command the README documents, the README
//! stays a front page of at most 300 lines, and docs/TESTING.md names every
//! test file and every component a test may declare it needs.

/// The helpers of `tests/common/` this file uses.
pub mod common {
    pub mod environments;
    pub mod paths;
}
// The table's one writer: the example prints it, this test compares it.
#[path = "../examples/catalog_table.rs"]
pub mod catalog_table;

use vllm_otel_metrics::catalog::DEFAULT_MAX_MODEL_LEN;

const BEGIN: &str =
    "<!-- catalog:begin (generated from src/catalog/; tests/readme.rs checks it) -->\n";
const END: &str = "<!-- catalog:end -->";

fn read(path: &str) -> String {
    std::fs::read_to_string(common::paths::repo().join(path)).expect(path)
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

/// The README is the front page: what the tool is, the quick start, use with
/// vLLM, the test command and the documentation index. Detail belongs in
/// docs/.
const README_MAX_LINES: usize = 300;

#[test]
fn readme_is_at_most_300_lines() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: keep it to what the \
         tool is, the quick start, use with vLLM, the test command and the documentation \
         index, and move the rest to the docs/ file a reader would look in (docs/CLI.md, \
         docs/OPERATIONS.md, docs/LIBRARY.md, docs/TESTING.md, docs/SCALING.md, …), \
         leaving a one-line pointer in the README"
    );
}

/// docs/TESTING.md names every file under `tests/` in its table of concerns
/// and every component word of a `needs_` module in its table of
/// components, which is exactly what `common::environments::needs` accepts; and the fast
/// script leaves out what those modules hold.
#[test]
fn testing_doc_lists_every_test_file_and_component() {
    let doc = read("docs/TESTING.md");
    let table = |header: &str| -> Vec<Vec<String>> {
        doc.lines()
            .skip_while(|l| !l.starts_with(header))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split(" | ")
                    .map(|cell| cell.trim().to_owned())
                    .collect()
            })
            .collect()
    };
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };

    let mut listed: Vec<String> = table("| concern | test files |")
        .iter()
        .flat_map(|row| ticked(&row[1]))
        .collect();
    listed.sort();
    let mut files: Vec<String> = std::fs::read_dir(common::paths::repo().join("tests"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    files.sort();
    assert_eq!(
        listed, files,
        "docs/TESTING.md's concerns against tests/*.rs"
    );

    let mut words: Vec<String> = table("| word | real component |")
        .iter()
        .flat_map(|row| ticked(&row[0]))
        .collect();
    words.sort();
    assert_eq!(
        words,
        common::environments::COMPONENTS,
        "docs/TESTING.md's components against common::environments::COMPONENTS"
    );
    for file in &files {
        let text = read(&format!("tests/{file}.rs"));
        // `--skip needs_` matches anywhere in a test's path.
        let named = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("fn "))
            .find(|name| name.split('(').next().unwrap().contains("needs_"));
        assert!(
            named.is_none(),
            "tests/{file}.rs: only a module's name may say `needs_`: fn {named:?}"
        );
        for module in text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("mod needs_"))
        {
            let module = module.trim_end_matches(" {");
            let used: Vec<&str> = module.split('_').collect();
            let mut sorted = used.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                used, sorted,
                "tests/{file}.rs: needs_{module}: its words in alphabetical order, once each"
            );
            for word in used {
                assert!(
                    common::environments::COMPONENTS.contains(&word),
                    "tests/{file}.rs: needs_{module}: `{word}` is no component of \
                     docs/TESTING.md's table"
                );
            }
        }
    }

    let script = read("scripts/test-fast.sh");
    assert!(
        script
            .lines()
            .any(|l| l == "cargo test \"$@\" --test '*' -- --skip needs_"),
        "scripts/test-fast.sh runs every test file with `--skip needs_`"
    );
}

/// docs/CLI.md's table of `--custom-histogram-buckets` keys is the
/// catalog's bucket families, each with its histograms in catalog order.
#[test]
fn cli_doc_lists_every_bucket_family() {
    let doc = read("docs/CLI.md");
    let begin =
        "<!-- bucket-families:begin (generated from src/catalog/; tests/readme.rs checks it) -->\n";
    let start = doc
        .find(begin)
        .expect("docs/CLI.md has the bucket-families begin marker")
        + begin.len();
    let end = doc
        .find("<!-- bucket-families:end -->")
        .expect("docs/CLI.md has the bucket-families end marker");
    let expected = catalog_table::bucket_family_table();
    assert!(
        doc[start..end] == expected,
        "docs/CLI.md's bucket families differ from the catalog; run \
         scripts/update-catalog-table.sh or replace them with:\n{expected}"
    );
}

/// `common::environments::needs` refuses a component to a test whose path does not
/// declare it, so that scripts/test-fast.sh cannot run one by mistake.
#[test]
fn a_component_is_refused_to_a_test_that_does_not_declare_it() {
    let in_test = |path: &str, component: &'static str| {
        std::thread::Builder::new()
            .name(path.to_owned())
            .spawn(move || common::environments::needs(component))
            .unwrap()
            .join()
            .is_ok()
    };
    assert!(in_test("file::needs_collector_prometheus::t", "prometheus"));
    assert!(in_test("file::needs_prometheus::t", "prometheus"));
    assert!(!in_test("file::needs_collector::t", "prometheus"));
    assert!(!in_test("file::t_needs_prometheus", "prometheus"));
    assert!(!in_test("file::needs_prometheusx::t", "prometheus"));
    assert!(!in_test("file::prometheus::t", "prometheus"));
}
