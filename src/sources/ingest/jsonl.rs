//! JSONL trace replay (docs/SEMANTICS.md §5): one [`Record`] per line, streamed.
//!
//! Lines are read one at a time into a reused buffer, so memory does not grow
//! with the trace. A line that is not a valid record is reported as
//! `FILE:LINE: reason` and skipped; every valid line around it is still
//! applied. A line whose decoding could take far more memory than its bytes
//! is refused before it is decoded ([`json_scan`], the decode budget of
//! [`crate::sources::budget`]). Records that parse but do not fit the tracker's state (unknown
//! request ids, duplicate starts) are counted and warned about once per kind.
//!
//! ```
//! use vllm_otel_metrics::sources::ingest::jsonl;
//! use vllm_otel_metrics::instruments::Instruments;
//! use vllm_otel_metrics::tracker::Tracker;
//!
//! let trace = br#"{"type":"request","request_id":"r1","model_name":"m","engine":0,"arrival_time":1.0,"prompt_len":4}
//! not json
//! {"type":"abort","request_id":"r1","received_at":2.0}
//! "#;
//! let mut tracker = Tracker::new(Instruments::builder().build());
//! let mut stderr = Vec::new();
//! let report = jsonl::replay(&trace[..], "t.jsonl", &mut tracker, &mut stderr, 1 << 20).unwrap();
//! assert_eq!((report.applied, report.invalid), (2, 1));
//! assert!(String::from_utf8(stderr).unwrap().starts_with("t.jsonl:2: "));
//! ```

use std::io::{self, BufRead, Write};

use super::json_scan;
use crate::catalog::RejectReason;
use crate::protocol::Record;
use crate::sources::budget;
use crate::sources::RecordSink;

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Lines read (blank lines included).
    pub lines: u64,
    /// Valid records applied.
    pub applied: u64,
    /// Lines rejected as invalid.
    pub invalid: u64,
    /// Engine-core outputs carried by the valid records.
    pub outputs: u64,
    /// Inputs that changed no metric, by [`RejectReason`] index.
    pub rejected: [u64; RejectReason::ALL.len()],
}

impl ReplayReport {
    /// Whether every line was a valid record.
    pub fn is_clean(&self) -> bool {
        self.invalid == 0
    }
}

/// Why a line is not a record, without serde's position suffix (the line
/// number is already given; the column is kept when it helps).
fn json_error_reason(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let message = match text.rfind(" at line ") {
        Some(at) => &text[..at],
        None => &text,
    };
    let what = match error.classify() {
        serde_json::error::Category::Data => "invalid record",
        _ => "invalid JSON",
    };
    if error.column() > 0 {
        format!("{what}: {message} (column {})", error.column())
    } else {
        format!("{what}: {message}")
    }
}

/// Default longest JSONL line, bytes (as large as a default gRPC message).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 << 20;

/// Reads one line (its `\n` included) into `line`, keeping at most `max`
/// bytes: the rest of a longer line is skipped without being buffered.
/// Returns the line's full length, 0 at the end of the input.
fn read_line_bounded<R: BufRead>(
    input: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> io::Result<usize> {
    let mut total = 0;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(total);
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(end) => (&available[..=end], true),
            None => (available, false),
        };
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        total += used;
        input.consume(used);
        if done {
            return Ok(total);
        }
    }
}

/// Streams `input` (named `source` in messages) into `sink` (a
/// [`Tracker`](crate::tracker::Tracker) or a tee), writing diagnostics to
/// `diagnostics`. Lines longer than `max_line_bytes` are invalid; a UTF-8
/// byte-order mark before the first line is ignored.
pub fn replay<R: BufRead, S: RecordSink + ?Sized, W: Write>(
    mut input: R,
    source: &str,
    sink: &mut S,
    diagnostics: &mut W,
    max_line_bytes: usize,
) -> io::Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let mut line = Vec::with_capacity(4096);
    let mut warned = [false; RejectReason::ALL.len()];
    loop {
        line.clear();
        let length = read_line_bounded(&mut input, &mut line, max_line_bytes)?;
        if length == 0 {
            break;
        }
        report.lines += 1;
        if length > max_line_bytes {
            report.invalid += 1;
            sink.invalid();
            writeln!(
                diagnostics,
                "{source}:{}: line is {length} bytes, more than the limit of {max_line_bytes}",
                report.lines
            )?;
            continue;
        }
        if report.lines == 1 && line.starts_with(b"\xEF\xBB\xBF") {
            line.drain(..3);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let decoded_limit = budget::share(line.len(), budget::DECODE_PER_BYTE, budget::DECODE_BASE);
        if let Err(why) = json_scan::check(&line, decoded_limit) {
            report.invalid += 1;
            sink.invalid();
            writeln!(diagnostics, "{source}:{}: {why}", report.lines)?;
            continue;
        }
        let record = match serde_json::from_slice::<Record>(&line) {
            Ok(record) => record,
            Err(error) => {
                report.invalid += 1;
                sink.invalid();
                writeln!(
                    diagnostics,
                    "{source}:{}: {}",
                    report.lines,
                    json_error_reason(&error)
                )?;
                continue;
            }
        };
        let mut invalid = false;
        for rejection in sink.apply(&record) {
            let kind = rejection.reason as usize;
            report.rejected[kind] += 1;
            if rejection.reason == RejectReason::InvalidRecord {
                // Out of bounds or out of order: located like a parse error.
                invalid = true;
                writeln!(diagnostics, "{source}:{}: {rejection}", report.lines)?;
            } else if !warned[kind] {
                warned[kind] = true;
                writeln!(
                    diagnostics,
                    "{source}:{}: warning: {rejection}; it changes no metric (further {} warnings are not shown, see the summary)",
                    report.lines,
                    rejection.reason.as_str()
                )?;
            }
        }
        if invalid {
            report.invalid += 1;
            continue;
        }
        report.applied += 1;
        if let Record::Outputs(batch) = &record {
            report.outputs += batch.outputs.len() as u64;
        }
    }
    let skipped: Vec<String> = RejectReason::ALL
        .iter()
        .filter(|r| **r != RejectReason::InvalidRecord && report.rejected[**r as usize] > 0)
        .map(|r| format!("{} {}", report.rejected[*r as usize], r.as_str()))
        .collect();
    if !skipped.is_empty() {
        writeln!(
            diagnostics,
            "{source}: inputs that changed no metric: {}",
            skipped.join(", ")
        )?;
    }
    if report.invalid > 0 {
        writeln!(
            diagnostics,
            "{source}: {} invalid line(s) skipped",
            report.invalid
        )?;
    }
    Ok(report)
}
