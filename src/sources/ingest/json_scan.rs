//! Reads one JSONL line without decoding it and refuses one whose decoding
//! would take far more memory than its bytes: the JSON counterpart of the
//! protobuf scan ([`prescan`](super::prescan)).
//!
//! Why: `{"request_id":"x"}` is 18 bytes of JSON and a whole
//! `EngineCoreOutput` (over a hundred bytes) once decoded, in a `Vec` that
//! doubles as it grows; a 16 MiB line of them would decode into hundreds of
//! megabytes before the record is looked at. The scan walks the line's
//! structure once, allocating nothing, and adds up what decoding could
//! build: every string's bytes, and each array's elements at the size of the
//! largest struct an element of its kind decodes into, at the capacity a
//! growing `Vec` reaches (the next power of two, half as much again while
//! it moves). It knows no schema, so it never underestimates; it stops at
//! the first byte past the bound.

use std::mem::size_of;

use crate::protocol::{
    EngineCoreEvent, EngineCoreOutput, FinishedRequest, KvCacheEvictionEvent, SchedulerStats,
};
use crate::sources::budget::Allowance;

/// The largest struct an element of an array of objects decodes into.
const OBJECT: usize = max(
    max(size_of::<EngineCoreOutput>(), size_of::<FinishedRequest>()),
    max(
        size_of::<KvCacheEvictionEvent>(),
        size_of::<EngineCoreEvent>(),
    ),
);
/// An element that is a number (the widest number a list holds).
const NUMBER: usize = size_of::<f64>();
/// An element that is a string or an array: its `String` or `Vec`.
const CONTAINER: usize = size_of::<Vec<u8>>();
/// The record itself, boxed parts included: any line pays it.
const RECORD: usize = 2 * size_of::<SchedulerStats>() + 1024;
/// Members an object of a struct can have; an object with more is a map
/// (`cache_config`), each member a map slot of two strings.
const STRUCT_MEMBERS: usize = 64;
const MAP_SLOT: usize = 2 * size_of::<String>() + 16;
/// serde_json's recursion limit: a line nested deeper does not decode.
const MAX_DEPTH: usize = 128;

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// Why a line was refused before decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Decoding could take more memory than allowed.
    #[error("decoding it could take more than {limit} bytes ({bytes} bytes of JSON); refused before decoding")]
    TooLarge {
        /// The bound.
        limit: usize,
        /// The line's size.
        bytes: usize,
    },
    /// Nested deeper than the JSON decoder goes.
    #[error("nested more than {MAX_DEPTH} deep; refused before decoding")]
    TooDeep,
}

/// One open array or object.
#[derive(Clone, Copy, Default)]
struct Open {
    array: bool,
    /// Elements (or members) so far.
    count: usize,
    /// The largest element seen, as decoded.
    element: usize,
}

/// The bytes a `Vec` (or map) of `count` elements of `size` bytes can hold
/// at its peak: the next power of two, and half as much again while it is
/// moved into a larger one.
fn grown(count: usize, size: usize) -> usize {
    let capacity = count.checked_next_power_of_two().unwrap_or(usize::MAX);
    capacity.saturating_add(capacity / 2).saturating_mul(size)
}

/// Scans one JSON line; `Ok` when decoding it cannot take more than `limit`
/// bytes. Malformed JSON passes: the decoder names what is wrong with it.
pub fn check(line: &[u8], limit: usize) -> Result<(), Refusal> {
    let too_large = Refusal::TooLarge {
        limit,
        bytes: line.len(),
    };
    let mut total = Allowance::new(limit);
    total.charge(RECORD);
    let mut stack = [Open::default(); MAX_DEPTH + 1];
    let mut depth = 0usize;
    let mut i = 0usize;
    // The size, as decoded, of the value that just ended (an element of the
    // array around it).
    let mut ended: Option<usize> = None;
    while i < line.len() {
        let b = line[i];
        if let Some(size) = ended.take() {
            if depth > 0 {
                let open = &mut stack[depth - 1];
                open.element = open.element.max(size);
            }
        }
        match b {
            b'[' | b'{' => {
                if depth > 0 {
                    stack[depth - 1].count += 1;
                }
                if depth == MAX_DEPTH {
                    return Err(Refusal::TooDeep);
                }
                stack[depth] = Open {
                    array: b == b'[',
                    count: 0,
                    element: 0,
                };
                depth += 1;
                i += 1;
            }
            b']' | b'}' => {
                if depth == 0 {
                    // Unbalanced: the decoder says so.
                    return Ok(());
                }
                depth -= 1;
                let open = stack[depth];
                if open.array {
                    total.charge(grown(open.count, open.element));
                    ended = Some(CONTAINER);
                } else {
                    // Members are counted by their values.
                    if open.count > STRUCT_MEMBERS {
                        total.charge(grown(open.count, MAP_SLOT));
                    }
                    ended = Some(OBJECT);
                }
                i += 1;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < line.len() && line[i] != b'"' {
                    i += if line[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                let length = i.min(line.len()) - start;
                total.charge(length);
                // A key is not an element: its value is.
                let key = line[i.min(line.len())..]
                    .iter()
                    .find(|b| !b.is_ascii_whitespace())
                    == Some(&b':');
                if !key {
                    if depth > 0 {
                        stack[depth - 1].count += 1;
                    }
                    ended = Some(CONTAINER);
                }
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                if depth > 0 {
                    stack[depth - 1].count += 1;
                }
                while i < line.len()
                    && !matches!(line[i], b',' | b']' | b'}' | b':')
                    && !line[i].is_ascii_whitespace()
                {
                    i += 1;
                }
                ended = Some(NUMBER);
            }
            _ => i += 1,
        }
        if total.exceeded() {
            return Err(too_large);
        }
    }
    if let Some(size) = ended {
        if depth > 0 {
            let open = &mut stack[depth - 1];
            open.element = open.element.max(size);
        }
    }
    // Arrays left open: the decoder refuses the line, but may have built
    // them first.
    for open in &stack[..depth] {
        total.charge(grown(open.count, open.element.max(OBJECT)));
    }
    if total.exceeded() {
        return Err(too_large);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs(n: usize) -> String {
        let one = r#"{"request_id":"x"}"#;
        format!(
            r#"{{"type":"outputs","engine":0,"timestamp":1,"received_at":1,"outputs":[{}]}}"#,
            vec![one; n].join(",")
        )
    }

    #[test]
    fn many_small_outputs_are_refused_and_few_pass() {
        let line = outputs(100_000);
        let limit = 2 * line.len() + (2 << 20);
        assert_eq!(
            check(line.as_bytes(), limit),
            Err(Refusal::TooLarge {
                limit,
                bytes: line.len()
            })
        );
        let line = outputs(100);
        assert_eq!(check(line.as_bytes(), 2 * line.len() + (2 << 20)), Ok(()));
    }

    #[test]
    fn the_estimate_grows_with_the_array_and_its_elements() {
        // An array of numbers costs less than one of objects of the same length.
        let numbers = format!("[{}]", vec!["1"; 1000].join(","));
        let objects = format!("[{}]", vec!["{}"; 1000].join(","));
        let limit = RECORD + grown(1000, NUMBER);
        assert_eq!(check(numbers.as_bytes(), limit), Ok(()));
        assert!(check(objects.as_bytes(), limit).is_err());
        assert_eq!(
            check(objects.as_bytes(), RECORD + grown(1000, OBJECT)),
            Ok(())
        );
    }

    #[test]
    fn strings_with_escapes_and_keys_are_read_through() {
        let line = r#"{"type":"abort","request_id":"a\"]}[{","received_at":1}"#;
        assert_eq!(check(line.as_bytes(), RECORD + 64), Ok(()));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let line = "[".repeat(200);
        assert_eq!(check(line.as_bytes(), usize::MAX), Err(Refusal::TooDeep));
    }
}
