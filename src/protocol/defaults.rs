//! Defaults of optional record fields: absent or `null`, a field takes its
//! default (serde's `default` alone accepts only absent).

use serde::Deserialize;

pub(super) fn one() -> u32 {
    1
}

pub(super) fn null_as_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Option::<u32>::deserialize(d).map(|n| n.unwrap_or(1))
}

/// Optional fields take their default when absent or `null`.
pub(super) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}
