//! A bounded MessagePack reader over one buffer: the subset vLLM's
//! `MsgpackEncoder` (msgspec) writes, read in place without allocating.
//!
//! Every length is checked against the bytes left before anything is done
//! with it, so a frame that claims a billion elements fails at once, and
//! [`Reader::skip`] walks nested values with a counter instead of recursion,
//! so no nesting depth can exhaust the stack.

use std::fmt;

use crate::sources::budget::Allowance;

/// What went wrong, and where in the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgpackError {
    /// Byte offset in the frame.
    pub offset: usize,
    /// What was expected or found.
    pub what: String,
}

impl fmt::Display for MsgpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.what)
    }
}

impl std::error::Error for MsgpackError {}

impl MsgpackError {
    /// The same error, said to be inside `what` (a field, an element).
    pub(crate) fn within(self, what: &str) -> Self {
        MsgpackError {
            offset: self.offset,
            what: format!("{what}: {}", self.what),
        }
    }
}

/// The kind of the next value, as far as a decoder needs to tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Nil,
    Bool,
    Int,
    Float,
    Str,
    Bin,
    Array,
    Map,
    Ext,
}

/// A cursor over one MessagePack buffer, with the memory budget of what is
/// decoded from it: a decoder [`Reader::charge`]s what it is about to
/// allocate, before it allocates it.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// What the decoder has allocated of its share.
    allowance: Allowance,
}

type Result<T> = std::result::Result<T, MsgpackError>;

impl<'a> Reader<'a> {
    /// A reader of `buf` with no memory to allocate.
    #[cfg(test)]
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader::with_budget(buf, 0)
    }

    /// A reader of `buf` whose decoder may allocate `budget` bytes.
    pub(crate) fn with_budget(buf: &'a [u8], budget: usize) -> Self {
        Reader {
            buf,
            pos: 0,
            allowance: Allowance::new(budget),
        }
    }

    /// Takes `bytes` of the budget before they are allocated, or fails
    /// (and stays failed: [`Reader::over_budget`]).
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<()> {
        if self.allowance.charge(bytes) {
            return Ok(());
        }
        Err(self.error(format!(
            "decoding the frame would take more than {} bytes of memory ({} bytes of frame)",
            self.allowance.limit(),
            self.buf.len()
        )))
    }

    /// [`Reader::charge`]s room for `n` values of `T`.
    pub(crate) fn charge_for<T>(&mut self, n: usize) -> Result<()> {
        self.charge(n.saturating_mul(std::mem::size_of::<T>()))
    }

    /// Whether a charge failed.
    pub(crate) fn over_budget(&self) -> bool {
        self.allowance.exceeded()
    }

    /// Goes back to `offset` (one the reader has been at).
    pub(crate) fn seek(&mut self, offset: usize) {
        self.pos = offset.min(self.buf.len());
    }

    /// Bytes read so far.
    pub(crate) fn offset(&self) -> usize {
        self.pos
    }

    /// Whether every byte has been read.
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn error(&self, what: impl Into<String>) -> MsgpackError {
        MsgpackError {
            offset: self.pos,
            what: what.into(),
        }
    }

    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.error("unexpected end of the frame"))?;
        self.pos += 1;
        Ok(b)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.buf.len() - self.pos {
            return Err(self.error(format!(
                "a length of {n} bytes runs past the end of the frame ({} left)",
                self.buf.len() - self.pos
            )));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn be(&mut self, n: usize) -> Result<u64> {
        Ok(self
            .bytes(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    /// The kind of the next value, without reading it.
    pub(crate) fn peek(&self) -> Result<Kind> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.error("unexpected end of the frame"))?;
        Ok(match b {
            0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xd3 => Kind::Int,
            0x80..=0x8f | 0xde | 0xdf => Kind::Map,
            0x90..=0x9f | 0xdc | 0xdd => Kind::Array,
            0xa0..=0xbf | 0xd9..=0xdb => Kind::Str,
            0xc0 => Kind::Nil,
            0xc2 | 0xc3 => Kind::Bool,
            0xc4..=0xc6 => Kind::Bin,
            0xca | 0xcb => Kind::Float,
            0xc7..=0xc9 | 0xd4..=0xd8 => Kind::Ext,
            0xc1 => return Err(self.error("byte 0xc1 is never used in MessagePack")),
        })
    }

    /// Reads a nil if one is next; says whether it did.
    pub(crate) fn nil(&mut self) -> Result<bool> {
        if self.peek()? == Kind::Nil {
            self.pos += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Checks that `n` elements of at least `per` bytes each can still be
    /// in the frame.
    fn fits(&self, n: u64, per: u64) -> Result<usize> {
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(per) > left {
            return Err(self.error(format!(
                "{n} elements cannot fit in the {left} bytes left in the frame"
            )));
        }
        Ok(n as usize)
    }

    /// An array's length.
    pub(crate) fn array(&mut self) -> Result<usize> {
        self.array_of(1)
    }

    /// The length of an array whose elements take at least `min` bytes
    /// each: a claimed length that the bytes left cannot hold fails before
    /// anything is reserved for it.
    pub(crate) fn array_of(&mut self, min: u64) -> Result<usize> {
        let at = self.pos;
        let n = match self.byte()? {
            b @ 0x90..=0x9f => u64::from(b & 0x0f),
            0xdc => self.be(2)?,
            0xdd => self.be(4)?,
            b => {
                self.pos = at;
                return Err(self.error(format!("expected an array, found {}", describe(b))));
            }
        };
        self.fits(n, min)
    }

    /// A map's length (pairs).
    pub(crate) fn map(&mut self) -> Result<usize> {
        let at = self.pos;
        let n = match self.byte()? {
            b @ 0x80..=0x8f => u64::from(b & 0x0f),
            0xde => self.be(2)?,
            0xdf => self.be(4)?,
            b => {
                self.pos = at;
                return Err(self.error(format!("expected a map, found {}", describe(b))));
            }
        };
        self.fits(n, 2)
    }

    /// A UTF-8 string, borrowed from the frame.
    pub(crate) fn str(&mut self) -> Result<&'a str> {
        let at = self.pos;
        let n = match self.byte()? {
            b @ 0xa0..=0xbf => u64::from(b & 0x1f),
            0xd9 => self.be(1)?,
            0xda => self.be(2)?,
            0xdb => self.be(4)?,
            b => {
                self.pos = at;
                return Err(self.error(format!("expected a string, found {}", describe(b))));
            }
        };
        let bytes = self.bytes(n as usize)?;
        std::str::from_utf8(bytes).map_err(|_| MsgpackError {
            offset: at,
            what: "a string that is not UTF-8".into(),
        })
    }

    /// An integer (any width, either sign).
    pub(crate) fn int(&mut self) -> Result<i128> {
        let at = self.pos;
        Ok(match self.byte()? {
            b @ 0x00..=0x7f => i128::from(b),
            b @ 0xe0..=0xff => i128::from(b as i8),
            0xcc => i128::from(self.be(1)?),
            0xcd => i128::from(self.be(2)?),
            0xce => i128::from(self.be(4)?),
            0xcf => i128::from(self.be(8)?),
            0xd0 => i128::from(self.be(1)? as u8 as i8),
            0xd1 => i128::from(self.be(2)? as u16 as i16),
            0xd2 => i128::from(self.be(4)? as u32 as i32),
            0xd3 => i128::from(self.be(8)? as i64),
            b => {
                self.pos = at;
                return Err(self.error(format!("expected an integer, found {}", describe(b))));
            }
        })
    }

    /// A count: an integer from 0 to `u64::MAX`.
    pub(crate) fn count(&mut self) -> Result<u64> {
        let at = self.pos;
        let n = self.int()?;
        u64::try_from(n).map_err(|_| MsgpackError {
            offset: at,
            what: format!("a count of {n}, below 0"),
        })
    }

    /// A number: a float, or an integer taken as one (Python writes `0`
    /// where a float field was given an int).
    pub(crate) fn float(&mut self) -> Result<f64> {
        match self.peek()? {
            Kind::Int => Ok(self.int()? as f64),
            _ => {
                let at = self.pos;
                match self.byte()? {
                    0xca => Ok(f64::from(f32::from_bits(self.be(4)? as u32))),
                    0xcb => Ok(f64::from_bits(self.be(8)?)),
                    b => {
                        self.pos = at;
                        Err(self.error(format!("expected a number, found {}", describe(b))))
                    }
                }
            }
        }
    }

    /// Skips one value, however deeply nested, without recursion.
    pub(crate) fn skip(&mut self) -> Result<()> {
        let mut pending: u64 = 1;
        while pending > 0 {
            pending -= 1;
            let b = self.byte()?;
            let len = |r: &mut Self, n: usize| r.be(n).map(|v| v as usize);
            match b {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => {}
                0x80..=0x8f => pending += 2 * u64::from(b & 0x0f),
                0x90..=0x9f => pending += u64::from(b & 0x0f),
                0xa0..=0xbf => {
                    self.bytes(usize::from(b & 0x1f))?;
                }
                0xc4 | 0xd9 => {
                    let n = len(self, 1)?;
                    self.bytes(n)?;
                }
                0xc5 | 0xda => {
                    let n = len(self, 2)?;
                    self.bytes(n)?;
                }
                0xc6 | 0xdb => {
                    let n = len(self, 4)?;
                    self.bytes(n)?;
                }
                0xc7..=0xc9 => {
                    let n = len(self, 1 << (b - 0xc7))?;
                    self.bytes(n + 1)?;
                }
                0xca => {
                    self.bytes(4)?;
                }
                0xcb => {
                    self.bytes(8)?;
                }
                0xcc..=0xcf => {
                    self.bytes(1 << (b - 0xcc))?;
                }
                0xd0..=0xd3 => {
                    self.bytes(1 << (b - 0xd0))?;
                }
                0xd4..=0xd8 => {
                    self.bytes(1 + (1 << (b - 0xd4)))?;
                }
                0xdc | 0xdd => {
                    let n = self.be(if b == 0xdc { 2 } else { 4 })?;
                    pending += n;
                }
                0xde | 0xdf => {
                    let n = self.be(if b == 0xde { 2 } else { 4 })?;
                    pending += 2 * n;
                }
                0xc1 => {
                    self.pos -= 1;
                    return Err(self.error("byte 0xc1 is never used in MessagePack"));
                }
            }
            // Every pending value takes at least a byte: a count beyond the
            // bytes left is a lie, found before walking it.
            if pending > (self.buf.len() - self.pos) as u64 {
                return Err(self.error(format!(
                    "{pending} values cannot fit in the {} bytes left in the frame",
                    self.buf.len() - self.pos
                )));
            }
        }
        Ok(())
    }
}

fn describe(b: u8) -> &'static str {
    match b {
        0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xd3 => "an integer",
        0x80..=0x8f | 0xde | 0xdf => "a map",
        0x90..=0x9f | 0xdc | 0xdd => "an array",
        0xa0..=0xbf | 0xd9..=0xdb => "a string",
        0xc0 => "nil",
        0xc2 | 0xc3 => "a boolean",
        0xc4..=0xc6 => "binary data",
        0xca | 0xcb => "a float",
        0xc7..=0xc9 | 0xd4..=0xd8 => "an extension value",
        0xc1 => "the unused byte 0xc1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_width() {
        // [1, -1, 300, -300, 70000, 1.5 (f64), 0.5 (f32), "ab", nil, true]
        let buf = [
            0x9a, 0x01, 0xff, 0xcd, 0x01, 0x2c, 0xd1, 0xfe, 0xd4, 0xce, 0x00, 0x01, 0x11, 0x70,
            0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xca, 0x3f, 0x00, 0x00, 0x00, 0xa2, b'a', b'b',
            0xc0, 0xc3,
        ];
        let mut r = Reader::new(&buf);
        assert_eq!(r.array().unwrap(), 10);
        assert_eq!(r.int().unwrap(), 1);
        assert_eq!(r.int().unwrap(), -1);
        assert_eq!(r.count().unwrap(), 300);
        assert_eq!(r.int().unwrap(), -300);
        assert_eq!(r.count().unwrap(), 70000);
        assert_eq!(r.float().unwrap(), 1.5);
        assert_eq!(r.float().unwrap(), 0.5);
        assert_eq!(r.str().unwrap(), "ab");
        assert!(r.nil().unwrap());
        assert_eq!(r.peek().unwrap(), Kind::Bool);
        r.skip().unwrap();
        assert!(r.at_end());
    }

    #[test]
    fn skips_nested_values_and_extensions() {
        // {"a": [1, {"b": bin8(2)}], "c": fixext4} then 7
        let buf = [
            0x82, 0xa1, b'a', 0x92, 0x01, 0x81, 0xa1, b'b', 0xc4, 0x02, 9, 9, 0xa1, b'c', 0xd6,
            0x01, 1, 2, 3, 4, 0x07,
        ];
        let mut r = Reader::new(&buf);
        r.skip().unwrap();
        assert_eq!(r.int().unwrap(), 7);
        assert!(r.at_end());
    }

    #[test]
    fn lengths_beyond_the_frame_fail_before_any_work() {
        // An array claiming 2^32-1 elements in a 6-byte frame.
        let buf = [0xdd, 0xff, 0xff, 0xff, 0xff, 0x00];
        let err = Reader::new(&buf).array().unwrap_err();
        assert_eq!(
            err.to_string(),
            "at byte 5: 4294967295 elements cannot fit in the 1 bytes left in the frame"
        );
        let err = Reader::new(&buf).skip().unwrap_err();
        assert!(err.what.contains("cannot fit"), "{err}");
        let err = Reader::new(&[0xd9, 0x05, b'a']).str().unwrap_err();
        assert_eq!(
            err.to_string(),
            "at byte 2: a length of 5 bytes runs past the end of the frame (1 left)"
        );
    }

    #[test]
    fn wrong_kinds_are_named() {
        let err = Reader::new(&[0xa1, b'x']).array().unwrap_err();
        assert_eq!(
            err.to_string(),
            "at byte 0: expected an array, found a string"
        );
        let err = Reader::new(&[0xff]).count().unwrap_err();
        assert_eq!(err.to_string(), "at byte 0: a count of -1, below 0");
        let err = Reader::new(&[0xc1]).skip().unwrap_err();
        assert_eq!(
            err.to_string(),
            "at byte 0: byte 0xc1 is never used in MessagePack"
        );
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let mut buf = vec![0x91; 100_000];
        buf.push(0xc0);
        let mut r = Reader::new(&buf);
        r.skip().unwrap();
        assert!(r.at_end());
    }
}
