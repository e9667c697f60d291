//! `Record`'s deserializer: serde's internally tagged form, without its
//! buffering when the tag comes first.
//!
//! A derived `#[serde(tag = "type")]` enum reads every object into an owned
//! intermediate tree before it looks at the tag; on replay that was most of
//! the decoding time. Here the tag, when it is the first key, picks the
//! variant and the rest of the object streams straight into the variant's
//! own derived deserializer. Anything else (tag later, or absent) falls back
//! to a buffered `serde_json::Value`, so accepted input and error messages
//! stay those of the internally tagged form.

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::record::{Record, RecordKind};

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RecordVisitor)
    }
}

struct RecordVisitor;

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = Record;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a record object with a \"type\" field")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record, A::Error> {
        let first = match map.next_key_seed(FirstKeyName)? {
            None => return Err(de::Error::missing_field("type")),
            Some(FirstKey::Tag) => {
                let kind = map.next_value_seed(KindName)?;
                return Record::read_body(kind, MapAccessDeserializer::new(map));
            }
            Some(FirstKey::Other(key)) => key,
        };
        let mut object = serde_json::Map::new();
        object.insert(first, map.next_value()?);
        while let Some(key) = map.next_key::<String>()? {
            object.insert(key, map.next_value()?);
        }
        let tag = object
            .remove("type")
            .ok_or_else(|| de::Error::missing_field("type"))?;
        let kind = KindName.deserialize(tag).map_err(de::Error::custom)?;
        Record::read_body(kind, serde_json::Value::Object(object)).map_err(de::Error::custom)
    }
}

/// Reads the tag's value as a string first, so a tag of the wrong type is
/// named as such rather than as unexpected JSON.
struct KindName;

impl<'de> DeserializeSeed<'de> for KindName {
    type Value = RecordKind;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RecordKind, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KindName {
    type Value = RecordKind;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a record type name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<RecordKind, E> {
        RecordKind::from_type(name).ok_or_else(|| E::unknown_variant(name, &RecordKind::TYPE_NAMES))
    }
}

/// The first key of a record: the tag, or another field to buffer.
enum FirstKey {
    Tag,
    Other(String),
}

/// Reads a [`FirstKey`].
struct FirstKeyName;

impl<'de> DeserializeSeed<'de> for FirstKeyName {
    type Value = FirstKey;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<FirstKey, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FirstKeyName {
    type Value = FirstKey;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<FirstKey, E> {
        Ok(if key == "type" {
            FirstKey::Tag
        } else {
            FirstKey::Other(key.to_owned())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_may_come_anywhere_and_reads_the_same() {
        let first = r#"{"type":"abort","request_id":"r1","received_at":2.5}"#;
        let later = r#"{"request_id":"r1","received_at":2.5,"type":"abort"}"#;
        let a: Record = serde_json::from_str(first).unwrap();
        let b: Record = serde_json::from_str(later).unwrap();
        assert_eq!(a, b);
        assert_eq!(serde_json::to_string(&a).unwrap(), first);
    }

    #[test]
    fn errors_name_the_tag_and_where() {
        let error = |line: &str| {
            serde_json::from_str::<Record>(line)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            error(r#"{"request_id":"r1"}"#),
            "missing field `type` at line 1 column 19"
        );
        assert_eq!(error("{}"), "missing field `type` at line 1 column 2");
        assert_eq!(
            error(r#"{"type":"abort"}"#),
            "missing field `request_id` at line 1 column 16"
        );
        assert_eq!(
            error(r#"{"type":7}"#),
            "invalid type: integer `7`, expected a record type name at line 1 column 9"
        );
        assert_eq!(
            error("[1]"),
            "invalid type: sequence, expected a record object with a \"type\" field at line 1 column 0"
        );
        assert_eq!(
            error(r#"{"type":"nope"}"#),
            "unknown variant `nope`, expected one of `request`, `outputs`, `abort`, \
             `scheduler_stats`, `engine_config`, `sleep_state`, `operation`, \
             `iteration_stats`, `plugin_drops` at line 1 column 14"
        );
    }
}
