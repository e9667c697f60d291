//! Sources: they only translate their input into tracker calls.

pub mod jsonl;
