//! The scan itself: one walk over the wire format against the schema.

use std::mem::size_of;

use super::limits::{DecodeLimits, Refusal, MAX_DEPTH};
use super::schema::{Counted, Kind, Schema, RECORD};
use crate::sources::budget::{self, Allowance};

/// Scans one `Record` message; `Ok` when decoding it stays within `limits`.
///
/// The decoded size is bounded by the smaller of `max_decoded_bytes` and the
/// protobuf share of the decode budget (2 × the message's size + 2 MiB:
/// [`crate::sources::budget`]).
pub fn check(message: &[u8], limits: &DecodeLimits) -> Result<(), Refusal> {
    let mut decoded = Allowance::new(limits.max_decoded_bytes.min(budget::share(
        message.len(),
        budget::DECODE_PER_BYTE,
        budget::DECODE_BASE,
    )));
    // The record itself; checked with the first field that adds to it.
    decoded.charge(RECORD.size);
    let mut scan = Scan {
        limits,
        decoded,
        bytes: message.len(),
    };
    scan.walk(message, &RECORD, 0)
}

struct Scan<'a> {
    limits: &'a DecodeLimits,
    decoded: Allowance,
    bytes: usize,
}

impl Scan<'_> {
    fn add(&mut self, bytes: usize) -> Result<(), Refusal> {
        if self.decoded.charge(bytes) {
            return Ok(());
        }
        Err(Refusal::TooLarge {
            limit: self.decoded.limit(),
            bytes: self.bytes,
        })
    }

    /// Walks the fields of one message of `schema`, `depth` messages deep.
    fn walk(&mut self, mut data: &[u8], schema: &Schema, depth: u32) -> Result<(), Refusal> {
        if depth > MAX_DEPTH {
            return Err(Refusal::TooDeep { limit: MAX_DEPTH });
        }
        let mut records = 0usize;
        let mut outputs = 0usize;
        let malformed = Refusal::Malformed(schema.name);
        while !data.is_empty() {
            let key = varint(&mut data).ok_or(malformed.clone())?;
            let number = u32::try_from(key >> 3).map_err(|_| malformed.clone())?;
            let known = schema.fields.iter().find(|(n, _, _)| *n == number);
            match key & 7 {
                0 => {
                    varint(&mut data).ok_or(malformed.clone())?;
                    if let Some((_, Kind::PackedVarints(size), _)) = known {
                        self.add(*size)?;
                    }
                }
                1 => data = data.get(8..).ok_or(malformed.clone())?,
                5 => data = data.get(4..).ok_or(malformed.clone())?,
                2 => {
                    let length = varint(&mut data).ok_or(malformed.clone())?;
                    let length = usize::try_from(length).map_err(|_| malformed.clone())?;
                    if length > data.len() {
                        return Err(malformed);
                    }
                    let (value, rest) = data.split_at(length);
                    data = rest;
                    match known {
                        Some((_, Kind::Message(child), counted)) => {
                            match counted {
                                Counted::Records => {
                                    records += 1;
                                    if records > self.limits.max_records_per_batch {
                                        return Err(Refusal::TooManyRecords {
                                            limit: self.limits.max_records_per_batch,
                                        });
                                    }
                                }
                                Counted::Outputs => {
                                    outputs += 1;
                                    if outputs > self.limits.max_outputs_per_batch {
                                        return Err(Refusal::TooManyOutputs {
                                            limit: self.limits.max_outputs_per_batch,
                                        });
                                    }
                                }
                                Counted::No => {}
                            }
                            self.add(child.size)?;
                            self.walk(value, child, depth + 1)?;
                        }
                        Some((_, Kind::Inline(child), _)) => self.walk(value, child, depth + 1)?,
                        Some((_, Kind::Bytes, _)) => self.add(size_of::<String>() + length)?,
                        Some((_, Kind::PackedVarints(size), _)) => {
                            let count = value.iter().filter(|b| **b < 0x80).count();
                            self.add(count * size)?;
                        }
                        // Packed fixed-width numbers, or a field this
                        // version does not know (skipped, not kept).
                        None => self.add(length)?,
                    }
                }
                _ => return Err(malformed),
            }
        }
        Ok(())
    }
}

/// Reads one varint off the front of `data`.
fn varint(data: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, byte) in data.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *data = &data[i + 1..];
            return Some(value);
        }
    }
    None
}
