//! Prints the catalog as a Markdown table: every family the crate can
//! record, with its Prometheus and OpenTelemetry names, kind, unit, labels,
//! buckets and HELP text, read through the public catalog API. A host
//! program can document its own exposition the same way.
//!
//! ```text
//! cargo run --example catalog_table
//! ```
//!
//! docs/CATALOG.md's table is this output, and docs/CLI.md's table of bucket
//! families is `bucket_family_table`'s (`scripts/update-catalog-table.sh`
//! writes them there, and `tests/readme.rs` checks that they are).

use vllm_otel_metrics::catalog::{self, DEFAULT_MAX_MODEL_LEN};

/// The catalog as a Markdown table, token buckets up to `max_model_len`.
pub fn markdown_table(max_model_len: u32) -> String {
    let mut out = String::from(
        "| vLLM name | OTel name | kind | unit | labels | buckets | HELP |\n|---|---|---|---|---|---|---|\n",
    );
    for def in catalog::all() {
        let buckets = def
            .buckets
            .boundaries(max_model_len)
            .iter()
            .map(|b| format!("{b:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let unit = if def.unit.is_empty() {
            String::new()
        } else {
            format!("`{}`", def.unit)
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} | {} | {} |\n",
            def.vllm_name,
            def.otel_name,
            def.kind.prometheus_type(),
            unit,
            def.labels.join(", "),
            buckets,
            def.help
        ));
    }
    out
}

/// The bucket families as a Markdown table: each key of
/// `--custom-histogram-buckets` and its histograms.
pub fn bucket_family_table() -> String {
    let mut out = String::from("| key | histograms |\n|---|---|\n");
    for family in catalog::bucket_families() {
        let members: Vec<String> = catalog::bucket_family_members(&family)
            .map(|def| format!("`{}`", def.vllm_name))
            .collect();
        out.push_str(&format!("| `{}` | {} |\n", family.key, members.join(", ")));
    }
    out
}

/// Prints the catalog table; with `bucket-families`, the bucket families'.
pub fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("bucket-families") => print!("{}", bucket_family_table()),
        _ => print!("{}", markdown_table(DEFAULT_MAX_MODEL_LEN)),
    }
}
