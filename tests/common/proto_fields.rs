//! Records with every number the ingest proto declares set, read from the
//! proto itself, so that a field added there reaches the tests that must
//! see every field (each family fed, nothing allocated) without a list of
//! fields kept beside them.

use serde_json::{Map, Value};

/// A JSON record of `message` (a message of the ingest proto) with each of
/// its singular number fields set: integers to 1, floats to 0.5. Strings,
/// repeated and message fields are left out (absent is their default);
/// `given` is laid over the result. Ones keep every "hits ≤ queries" and
/// "part ≤ whole" rule of a record.
pub fn every_number(message: &str, given: Value) -> Value {
    let proto = std::fs::read_to_string(
        super::paths::repo().join("proto/vllm_otel_metrics/v1/ingest.proto"),
    )
    .expect("the ingest proto");
    let mut lines = proto
        .lines()
        .skip_while(|line| line.trim() != format!("message {message} {{"));
    assert!(
        lines.next().is_some(),
        "no message {message} in the ingest proto"
    );
    let mut record = Map::new();
    for line in lines.take_while(|line| line.trim() != "}") {
        let line = line.trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        let (kind, name) = match words.as_slice() {
            ["optional", kind, name, "=", ..] | [kind, name, "=", ..] => (*kind, *name),
            _ => continue,
        };
        let value = match kind {
            "double" | "float" => Value::from(0.5),
            "uint32" | "uint64" | "int32" | "int64" | "fixed32" | "fixed64" => Value::from(1),
            _ => continue,
        };
        record.insert(name.to_owned(), value);
    }
    let Value::Object(given) = given else {
        panic!("the fields laid over a record are an object")
    };
    record.extend(given);
    Value::Object(record)
}
