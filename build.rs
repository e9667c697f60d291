//! Generates the gRPC ingest code from `proto/` with a pure-Rust protobuf
//! compiler (protox), so no system `protoc` is needed.
//!
//! What it generates is checked in, each file headed `@generated`, so that a
//! reader (and grep) finds every generated type and impl in a file:
//!
//! - `src/sources/ingest/proto/pb.rs`: the messages, enums and client
//!   (prost and tonic);
//! - `src/sources/ingest/proto/mirrored.rs`: the conversions between the
//!   wire types and the records of the messages copied field for field, and
//!   of the enums;
//! - `src/sources/ingest/prescan/proto_fields.rs`: every field of the proto,
//!   for the test that holds the pre-decoding scan's schema table to it.
//!
//! The crate compiles the checked-in files. This script generates them again
//! into `OUT_DIR` on every build, and a unit test
//! (`generated_files_are_current`, in `src/sources/ingest/proto/tests.rs`)
//! fails while a checked-in file differs from what the proto makes now.
//! `scripts/update-generated.sh` rewrites them: with
//! `VLLM_OTEL_METRICS_UPDATE_GENERATED` set, this script writes each checked-in
//! file that differs. It never writes into the source tree otherwise (a
//! build from a read-only or packaged source stays one).

/// The proto the ingest code is generated from.
#[cfg(feature = "grpc")]
const PROTO: &str = "proto/vllm_otel_metrics/v1/ingest.proto";

/// Set, the checked-in generated files are rewritten where they differ.
#[cfg(feature = "grpc")]
const UPDATE: &str = "VLLM_OTEL_METRICS_UPDATE_GENERATED";

/// Each generated file: its name in `OUT_DIR`, and where it is checked in.
#[cfg(feature = "grpc")]
const GENERATED: [(&str, &str); 3] = [
    ("pb.rs", "src/sources/ingest/proto/pb.rs"),
    ("mirrored.rs", "src/sources/ingest/proto/mirrored.rs"),
    (
        "proto_fields.rs",
        "src/sources/ingest/prescan/proto_fields.rs",
    ),
];

/// The messages copied field for field: each has a record type of its name
/// in `crate::protocol` with the same fields. The other messages' fields
/// follow rules (a required id, a default, an enum that may be unset), which
/// `src/sources/ingest/proto/` writes by hand.
#[cfg(feature = "grpc")]
const MIRRORED_MESSAGES: [&str; 15] = [
    "PrefillStats",
    "SchedulerStats",
    "KvFetchStages",
    "ExternalHitsBySource",
    "KvCacheEvictionEvent",
    "PerfStats",
    "SpecDecodingStats",
    "KvConnectorStats",
    "NixlStats",
    "OffloadingStats",
    "SimpleCpuOffloadStats",
    "SaveOutcomes",
    "EngineConfig",
    "PromptTokenStats",
    "PluginDrops",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Only the `grpc` feature has generated code.
    if std::env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return Ok(());
    }
    generate()
}

#[cfg(feature = "grpc")]
fn generate() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-env-changed={UPDATE}");
    for (_, checked_in) in GENERATED {
        println!("cargo:rerun-if-changed={checked_in}");
    }
    let descriptors = protox::compile([PROTO], ["proto"])?;
    let out = out_dir();
    tonic_prost_build::configure()
        .build_client(true)
        // The server side is written out (src/sources/ingest/grpc/): it
        // scans each message before decoding it.
        .build_server(false)
        // A `Record` is as large as its largest variant: boxing the
        // scheduler stats (over 900 bytes) keeps every record of a batch,
        // two bytes on the wire at the least, small once decoded (the
        // decode budget, src/sources/budget.rs).
        .boxed(".vllm_otel_metrics.v1.Record.record.scheduler_stats")
        .compile_fds(descriptors.clone())?;
    let prost = explicit_client_imports(std::fs::read_to_string(
        out.join("vllm_otel_metrics.v1.rs"),
    )?);
    let contents = [
        header("The messages, enums and client of the ingest service") + &prost,
        header("The record conversions of the messages copied field for field, and of the enums")
            + &mirrored(&descriptors),
        header("Every field of the ingest proto, for the pre-decoding scan's test")
            + &proto_fields(&descriptors),
    ];
    let update = std::env::var_os(UPDATE).is_some_and(|value| !value.is_empty());
    let manifest =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut list = Vec::new();
    for ((name, checked_in), text) in GENERATED.into_iter().zip(contents) {
        std::fs::write(out.join(name), &text)?;
        let path = manifest.join(checked_in);
        if update && std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::write(&path, &text)?;
            println!("cargo:warning=rewrote {checked_in} from {PROTO}");
        }
        list.push(format!("{name}={checked_in}"));
    }
    // For the test that compares them.
    println!("cargo:rustc-env=GENERATED_FILES={}", list.join(";"));
    Ok(())
}

/// tonic's client imports everything of `tonic::codegen`; the names it
/// uses are imported instead (the crate imports no glob outside its tests).
/// A later tonic whose client differs keeps its glob, with a warning to
/// revise the list.
#[cfg(feature = "grpc")]
fn explicit_client_imports(prost: String) -> String {
    const GLOB: &str = "use tonic::codegen::*;";
    const NAMES: &str = "use tonic::codegen::{\n        \
        http, Body, Bytes, CompressionEncoding, GrpcMethod, InterceptedService, StdError,\n    };";
    if prost.matches(GLOB).count() == 1 {
        prost.replace(GLOB, NAMES)
    } else {
        println!("cargo:warning=tonic's client no longer has one `{GLOB}`: revise build.rs");
        prost
    }
}

/// The first lines of a generated file: what made it, and how it is kept
/// current. Neither rustfmt nor a hand edits it.
#[cfg(feature = "grpc")]
fn header(what: &str) -> String {
    format!(
        "// @generated by build.rs from {PROTO} — do not edit.\n\
         // {what}.\n\
         // A unit test (generated_files_are_current) fails while this file differs\n\
         // from what build.rs makes of the proto; scripts/update-generated.sh\n\
         // rewrites it.\n\
         #![cfg_attr(rustfmt, rustfmt::skip)]\n\n"
    )
}

/// The conversions of [`MIRRORED_MESSAGES`] (`impl FromWire`/`impl ToWire`,
/// each field copied with the same traits), and of every enum: a wire value
/// that is known (unset is `None`), and the wire value of a record's.
#[cfg(feature = "grpc")]
fn mirrored(descriptors: &FileDescriptorSet) -> String {
    let messages: Vec<_> = descriptors
        .file
        .iter()
        .flat_map(|file| &file.message_type)
        .collect();
    let enums: Vec<_> = descriptors
        .file
        .iter()
        .flat_map(|file| &file.enum_type)
        .collect();
    let mut names: Vec<&str> = MIRRORED_MESSAGES.to_vec();
    names.extend(enums.iter().map(|e| e.name()));
    names.sort_unstable();
    let imports: String = names.iter().map(|name| format!("    {name},\n")).collect();
    let mut text = format!(
        "use super::pb;\nuse super::wire::{{FromWire, ToWire}};\nuse crate::protocol::{{\n{imports}}};\n"
    );
    for name in MIRRORED_MESSAGES {
        let message = messages
            .iter()
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("{name} (MIRRORED_MESSAGES) is not a message of {PROTO}"));
        let fields: Vec<String> = message.field.iter().map(|f| field_name(f.name())).collect();
        let from: String = fields
            .iter()
            .map(|f| format!("            {f}: FromWire::from_wire(wire.{f}),\n"))
            .collect();
        let to: String = fields
            .iter()
            .map(|f| format!("            {f}: self.{f}.to_wire(),\n"))
            .collect();
        text.push_str(&format!(
            "\nimpl FromWire<pb::{name}> for {name} {{\n    \
                fn from_wire(wire: pb::{name}) -> Self {{\n        \
                    {name} {{\n{from}        }}\n    }}\n}}\n\
             \nimpl ToWire<pb::{name}> for {name} {{\n    \
                fn to_wire(&self) -> pb::{name} {{\n        \
                    pb::{name} {{\n{to}        }}\n    }}\n}}\n"
        ));
    }
    for e in enums {
        let name = e.name();
        // prost's variant names: the value's name without the enum's, in
        // upper camel case (`FINISH_REASON_STOP` is `Stop`).
        let prefix = format!("{}_", screaming_snake(name));
        let variants: Vec<(String, bool)> = e
            .value
            .iter()
            .map(|v| {
                let bare = v.name().strip_prefix(prefix.as_str()).unwrap_or(v.name());
                (upper_camel(bare), v.number() == 0 && bare == "UNSPECIFIED")
            })
            .collect();
        let from: String = variants
            .iter()
            .map(|(v, unset)| {
                if *unset {
                    format!("            pb::{name}::{v} => None,\n")
                } else {
                    format!("            pb::{name}::{v} => Some({name}::{v}),\n")
                }
            })
            .collect();
        let to: String = variants
            .iter()
            .filter(|(_, unset)| !unset)
            .map(|(v, _)| format!("            {name}::{v} => pb::{name}::{v},\n"))
            .collect();
        text.push_str(&format!(
            "\nimpl FromWire<pb::{name}> for Option<{name}> {{\n    \
                fn from_wire(wire: pb::{name}) -> Self {{\n        \
                    match wire {{\n{from}        }}\n    }}\n}}\n\
             \nimpl ToWire<i32> for {name} {{\n    \
                fn to_wire(&self) -> i32 {{\n        \
                    let wire = match self {{\n{to}        }};\n        \
                    wire as i32\n    }}\n}}\n"
        ));
    }
    text
}

/// `FinishReason` as `FINISH_REASON`.
#[cfg(feature = "grpc")]
fn screaming_snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// `RELEASE_KV_CACHE_MEMORY` as `ReleaseKvCacheMemory`.
#[cfg(feature = "grpc")]
fn upper_camel(name: &str) -> String {
    name.split('_')
        .flat_map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .into_iter()
                .chain(chars.flat_map(char::to_lowercase))
        })
        .collect()
}

/// A field's name in prost's structs (a Rust keyword is written raw).
#[cfg(feature = "grpc")]
fn field_name(name: &str) -> String {
    const KEYWORDS: [&str; 12] = [
        "as", "async", "fn", "impl", "in", "loop", "match", "mod", "ref", "type", "use", "where",
    ];
    if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_owned()
    }
}

/// `PROTO_FIELDS`: every field of every message (nested map entries
/// included, as `Outer.InnerEntry`), with how it is encoded, for the test
/// that holds the pre-decoding scan's schema table
/// (`src/sources/ingest/prescan/schema.rs`) to the proto: a string, bytes,
/// message or packed-varint field the table left out would decode to more
/// memory than the scan bounds.
#[cfg(feature = "grpc")]
fn proto_fields(descriptors: &FileDescriptorSet) -> String {
    let mut rows = String::new();
    for file in &descriptors.file {
        let package = format!(".{}.", file.package());
        let mut stack: Vec<(String, _)> = file
            .message_type
            .iter()
            .map(|m| (m.name().to_owned(), m))
            .collect();
        while let Some((path, message)) = stack.pop() {
            for nested in &message.nested_type {
                stack.push((format!("{path}.{}", nested.name()), nested));
            }
            for field in &message.field {
                // The wire types of descriptor.proto's Type numbers.
                let kind = match field.r#type.unwrap_or_default() {
                    9 => "string",
                    12 => "bytes",
                    11 => "message",
                    1 | 2 | 6 | 7 | 15 | 16 => "fixed",
                    _ => "varint",
                };
                let repeated = field.label.unwrap_or_default() == 3;
                let type_name = field.type_name().trim_start_matches(package.as_str());
                rows.push_str(&format!(
                    "    ({path:?}, {}, {kind:?}, {repeated}, {type_name:?}),\n",
                    field.number()
                ));
            }
        }
    }
    format!(
        "/// (message, number, encoding, repeated, message type) of each field of the ingest proto.\n\
         pub(super) const PROTO_FIELDS: &[(&str, u32, &str, bool, &str)] = &[\n{rows}];\n"
    )
}

#[cfg(feature = "grpc")]
use protox::prost_reflect::prost_types::FileDescriptorSet;

/// Where the generated files go first.
#[cfg(feature = "grpc")]
fn out_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
}

#[cfg(not(feature = "grpc"))]
fn generate() -> Result<(), Box<dyn std::error::Error>> {
    unreachable!("CARGO_FEATURE_GRPC is set only with the grpc feature")
}
