//! Prints the catalog as a Markdown table: every family the crate can
//! record, with its Prometheus and OpenTelemetry names, kind, unit, labels,
//! buckets and HELP text, read through the public catalog API. A host
//! program can document its own exposition the same way.
//!
//! ```text
//! cargo run --example catalog_table
//! ```
//!
//! docs/CATALOG.md's table is this output (`scripts/update-catalog-table.sh`
//! writes it there, and `tests/readme.rs` checks that it is).

use vllm_otel_metrics::catalog::{self, DEFAULT_MAX_MODEL_LEN};

/// The catalog as a Markdown table, token buckets up to `max_model_len`.
pub(crate) fn markdown_table(max_model_len: u32) -> String {
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

#[allow(dead_code)] // tests/readme.rs includes this file for `markdown_table`
fn main() {
    print!("{}", markdown_table(DEFAULT_MAX_MODEL_LEN));
}
