//! Text exposition encoders: Prometheus text 0.0.4 and OpenMetrics 1.0.
//!
//! Numbers are written as vLLM's Rust frontend writes them (the `dtoa` shortest
//! round-trip form, so `le="1.0"`, `le="0.001"`, `le="2560.0"`); counts and
//! integer-valued families without a decimal point.

use std::fmt::Write;

use super::snapshot::{Family, Series, Value};
use crate::catalog::{Kind, ValueType};
use crate::instruments::exemplars::Exemplar;

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text (ends with `# EOF`).
    OpenMetrics,
}

impl Format {
    /// The HTTP `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format a scrape asks for with its `Accept` header.
    ///
    /// ```
    /// use vllm_otel_metrics::export::prometheus::Format;
    /// assert_eq!(Format::negotiate(Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")), Format::OpenMetrics);
    /// assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
    /// assert_eq!(Format::negotiate(None), Format::Text);
    /// ```
    pub fn negotiate(accept: Option<&str>) -> Format {
        let wants_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or("");
                let refused = parts.any(|p| p.replace(' ', "") == "q=0");
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if wants_openmetrics {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

/// Writes a float as vLLM does: shortest round trip, always with a decimal
/// point or exponent (`1.0`, `0.001`, `1e-7`), `+Inf`/`-Inf`/`NaN` for the rest.
///
/// ```
/// use vllm_otel_metrics::export::prometheus::format_float;
/// assert_eq!(format_float(1.0), "1.0");
/// assert_eq!(format_float(0.001), "0.001");
/// assert_eq!(format_float(2560.0), "2560.0");
/// assert_eq!(format_float(f64::INFINITY), "+Inf");
/// ```
pub fn format_float(value: f64) -> String {
    let mut out = String::new();
    push_float(&mut out, value);
    out
}

/// Appends `value` as [`format_float`] writes it, without an allocation.
fn push_float(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value == f64::INFINITY {
        out.push_str("+Inf");
    } else if value == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        out.push_str(dtoa::Buffer::new().format(value));
    }
}

fn push_count(out: &mut String, count: u64) {
    out.push_str(itoa::Buffer::new().format(count));
}

/// Appends a sample value: integer-valued families without a decimal point.
fn push_value(out: &mut String, value: f64, value_type: ValueType) {
    // Snapshot values are floats; counts below 2^53 are exact in them.
    if value_type == ValueType::Integer
        && value.fract() == 0.0
        && value.abs() < 9.007_199_254_740_992e15
    {
        out.push_str(itoa::Buffer::new().format(value as i64));
    } else {
        push_float(out, value);
    }
}

/// Appends a label value with the exposition's escapes (`\\`, `\"`, `\n`).
fn push_label_value(out: &mut String, value: &str) {
    if !value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A series' label pairs as the exposition writes them between the braces
/// (`model_name="m",engine="0"`), rendered once for all of its lines.
#[derive(Debug, Default)]
pub(super) struct LabelBlock {
    pairs: String,
    /// `name_bucket{pairs,le="`, the start of each of a histogram series'
    /// bucket lines (most of an exposition's lines), written once per
    /// series and copied whole into each line.
    bucket_prefix: String,
}

impl LabelBlock {
    /// Starts the block of the next series.
    pub(super) fn clear(&mut self) {
        self.pairs.clear();
    }

    /// Appends one pair.
    pub(super) fn push(&mut self, name: &str, value: &str) {
        if !self.pairs.is_empty() {
            self.pairs.push(',');
        }
        self.pairs.push_str(name);
        self.pairs.push_str("=\"");
        push_label_value(&mut self.pairs, value);
        self.pairs.push('"');
    }

    /// The start of this series' bucket lines in family `name`, up to the
    /// `le` value.
    fn bucket_prefix(&mut self, name: &str) -> &str {
        let prefix = &mut self.bucket_prefix;
        prefix.clear();
        prefix.push_str(name);
        prefix.push_str("_bucket{");
        if !self.pairs.is_empty() {
            prefix.push_str(&self.pairs);
            prefix.push(',');
        }
        prefix.push_str("le=\"");
        prefix
    }
}

fn escape_help(help: &str, format: Format) -> String {
    let mut out = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if format == Format::OpenMetrics => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// Writes a family's `# HELP` and `# TYPE` lines.
pub(super) fn write_header(out: &mut String, name: &str, help: &str, kind: Kind, format: Format) {
    // Text 0.0.4 names a counter's metadata by its sample name; OpenMetrics by its family.
    let total = if format == Format::Text && kind == Kind::Counter {
        "_total"
    } else {
        ""
    };
    let _ = writeln!(out, "# HELP {name}{total} {}", escape_help(help, format));
    let _ = writeln!(out, "# TYPE {name}{total} {}", kind.prometheus_type());
}

/// Starts a sample line: `name` and `suffix`, the labels in braces (when
/// there are any), and the space before the value.
fn start_sample(out: &mut String, name: &str, suffix: &str, labels: &LabelBlock) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.pairs.is_empty() {
        out.push('{');
        out.push_str(&labels.pairs);
        out.push('}');
    }
    out.push(' ');
}

/// Appends an OpenMetrics exemplar to a sample line:
/// ` # {trace_id="…",span_id="…"} value timestamp`. Its label set is 63
/// characters, within OpenMetrics' 128.
fn push_exemplar(out: &mut String, exemplar: &Exemplar) {
    out.push_str(" # {trace_id=\"");
    push_hex(out, &exemplar.link.trace_id.to_bytes());
    out.push_str("\",span_id=\"");
    push_hex(out, &exemplar.link.span_id.to_bytes());
    out.push_str("\"} ");
    push_float(out, exemplar.value);
    out.push(' ');
    push_float(out, exemplar.timestamp);
}

/// Appends `bytes` in lowercase hex, as W3C trace context writes ids (a
/// table lookup per nibble: the `{:x}` formatter costs ten times more, and
/// a scrape writes an id per bucket).
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; 32];
    let len = bytes.len().min(16);
    for (i, byte) in bytes[..len].iter().enumerate() {
        text[2 * i] = DIGITS[usize::from(byte >> 4)];
        text[2 * i + 1] = DIGITS[usize::from(byte & 0x0f)];
    }
    // Only ASCII hex digits were written.
    out.push_str(std::str::from_utf8(&text[..2 * len]).unwrap_or_default());
}

/// Writes a counter's or gauge's sample, with its exemplar when given (a
/// counter's, in OpenMetrics).
pub(super) fn write_scalar(
    out: &mut String,
    name: &str,
    kind: Kind,
    labels: &LabelBlock,
    value: f64,
    value_type: ValueType,
    exemplar: Option<&Exemplar>,
) {
    let suffix = if kind == Kind::Counter { "_total" } else { "" };
    start_sample(out, name, suffix, labels);
    push_value(out, value, value_type);
    if let Some(exemplar) = exemplar {
        push_exemplar(out, exemplar);
    }
    out.push('\n');
}

/// Writes a histogram's samples: a bucket line per finite bound (`les`, in
/// order, with `cumulative` counts), `+Inf`, `_sum` and `_count`; with
/// `exemplars` (one per bucket, `+Inf` last; OpenMetrics), each bucket's.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_histogram(
    out: &mut String,
    name: &str,
    labels: &mut LabelBlock,
    les: &[String],
    cumulative: impl Iterator<Item = u64>,
    sum: f64,
    count: u64,
    exemplars: Option<&[Option<Exemplar>]>,
) {
    let prefix = labels.bucket_prefix(name);
    // One per bucket or none: a list of another length belongs to other
    // bounds than these.
    let exemplars = exemplars.filter(|e| e.len() == les.len() + 1);
    let exemplar = |bucket: usize| exemplars.and_then(|e| e[bucket].as_ref());
    for (bucket, (le, cumulative)) in les.iter().zip(cumulative).enumerate() {
        out.push_str(prefix);
        out.push_str(le);
        out.push_str("\"} ");
        push_count(out, cumulative);
        if let Some(exemplar) = exemplar(bucket) {
            push_exemplar(out, exemplar);
        }
        out.push('\n');
    }
    out.push_str(prefix);
    out.push_str("+Inf\"} ");
    push_count(out, count);
    if let Some(exemplar) = exemplar(les.len()) {
        push_exemplar(out, exemplar);
    }
    out.push('\n');
    start_sample(out, name, "_sum", labels);
    push_float(out, sum);
    out.push('\n');
    start_sample(out, name, "_count", labels);
    push_count(out, count);
    out.push('\n');
}

/// Ends the exposition (`# EOF` in OpenMetrics).
pub(super) fn write_end(out: &mut String, format: Format) {
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
}

/// The `le` strings of a histogram family's bounds, formatted once for all
/// its series (every series of a family has the same bounds).
#[derive(Debug, Default)]
pub(super) struct LeCache {
    bounds: Vec<f64>,
    les: Vec<String>,
}

impl LeCache {
    /// The `le` strings of `bounds`, formatted again only when they differ
    /// from the previous series'.
    pub(super) fn les(&mut self, bounds: impl ExactSizeIterator<Item = f64> + Clone) -> &[String] {
        let same = self.bounds.len() == bounds.len()
            && self.bounds.iter().zip(bounds.clone()).all(|(a, b)| *a == b);
        if !same {
            self.bounds.clear();
            self.bounds.extend(bounds);
            self.les = self.bounds.iter().map(|b| format_float(*b)).collect();
        }
        &self.les
    }
}

/// Writes one family of the data model.
pub(super) fn write_family(out: &mut String, family: &Family, format: Format) {
    write_header(out, &family.name, &family.help, family.kind, format);
    let mut les = LeCache::default();
    let mut labels = LabelBlock::default();
    for series in &family.series {
        write_series(out, family, series, &mut labels, &mut les, format);
    }
}

fn write_series(
    out: &mut String,
    family: &Family,
    series: &Series,
    labels: &mut LabelBlock,
    les: &mut LeCache,
    format: Format,
) {
    labels.clear();
    for (name, value) in &series.labels {
        labels.push(name, value);
    }
    // Text 0.0.4 has no exemplars.
    let exemplars = (format == Format::OpenMetrics && !series.exemplars.is_empty())
        .then_some(series.exemplars.as_slice());
    match &series.value {
        Value::Scalar(v) => {
            let exemplar = exemplars.and_then(|e| e.first()).and_then(Option::as_ref);
            write_scalar(
                out,
                &family.name,
                family.kind,
                labels,
                *v,
                family.value_type,
                exemplar,
            );
        }
        Value::Histogram {
            buckets,
            sum,
            count,
        } => {
            let les = les.les(buckets.iter().map(|(upper, _)| *upper));
            write_histogram(
                out,
                &family.name,
                labels,
                les,
                buckets.iter().map(|(_, cumulative)| *cumulative),
                *sum,
                *count,
                exemplars,
            );
        }
    }
}

/// Encodes families in `format`. Every family gets its HELP and TYPE lines,
/// also before its first series exists.
///
/// ```
/// use vllm_otel_metrics::catalog::{Kind, ValueType};
/// use vllm_otel_metrics::export::prometheus::{encode, Family, Format, Series, Value};
///
/// let family = Family {
///     name: "vllm:num_preemptions".into(),
///     help: "Cumulative number of preemption events.".into(),
///     kind: Kind::Counter,
///     value_type: ValueType::Integer,
///     series: vec![Series { labels: vec![("engine".into(), "0".into())], value: Value::Scalar(2.0), exemplars: vec![] }],
/// };
/// let text = encode(&[family], Format::Text);
/// let lines: Vec<&str> = text.lines().collect();
/// assert_eq!(lines, [
///     "# HELP vllm:num_preemptions_total Cumulative number of preemption events.",
///     "# TYPE vllm:num_preemptions_total counter",
///     "vllm:num_preemptions_total{engine=\"0\"} 2",
/// ]);
/// ```
pub fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::new();
    for family in families {
        write_family(&mut out, family, format);
    }
    write_end(&mut out, format);
    out
}
