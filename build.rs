//! Generates the gRPC ingest code from `proto/` with a pure-Rust protobuf
//! compiler (protox), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Only the `grpc` feature has generated code.
    if std::env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return Ok(());
    }
    compile()
}

#[cfg(feature = "grpc")]
fn compile() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/vllm_otel_metrics/v1/ingest.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    write_wire_fields(&descriptors)?;
    write_proto_fields(&descriptors)?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server side is written out (src/sources/ingest/server.rs): it
        // scans each message before decoding it.
        .build_server(false)
        // A `Record` is as large as its largest variant: boxing the
        // scheduler stats (over 900 bytes) keeps every record of a batch,
        // two bytes on the wire at the least, small once decoded (the
        // decode budget, src/sources/budget.rs).
        .boxed(".vllm_otel_metrics.v1.Record.record.scheduler_stats")
        .compile_fds(descriptors)?;
    Ok(())
}

/// Writes `wire_fields!`: each message's field names, in proto order, handed
/// to a macro. The wire conversions (`src/sources/ingest/proto/wire.rs`)
/// take their field lists from it, so a field added to the proto is copied
/// both ways without a list kept by hand beside it.
#[cfg(feature = "grpc")]
fn write_wire_fields(descriptors: &FileDescriptorSet) -> std::io::Result<()> {
    let mut arms = String::new();
    for message in descriptors.file.iter().flat_map(|file| &file.message_type) {
        let fields: Vec<&str> = message.field.iter().map(|field| field.name()).collect();
        arms.push_str(&format!(
            "    ({}, $then:ident!($($args:tt)*)) => {{ $then!($($args)* {{ {} }}); }};\n",
            message.name(),
            fields.join(", ")
        ));
    }
    std::fs::write(
        out_dir().join("wire_fields.rs"),
        format!("/// Each ingest message's fields, in proto order (written by build.rs).\nmacro_rules! wire_fields {{\n{arms}}}\n"),
    )
}

/// Writes `PROTO_FIELDS`: every field of every message (nested map entries
/// included, as `Outer.InnerEntry`), with how it is encoded, for the test
/// that holds the pre-decoding scan's schema table
/// (`src/sources/ingest/prescan.rs`) to the proto: a string, bytes, message
/// or packed-varint field the table left out would decode to more memory
/// than the scan bounds.
#[cfg(feature = "grpc")]
fn write_proto_fields(descriptors: &FileDescriptorSet) -> std::io::Result<()> {
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
    std::fs::write(
        out_dir().join("proto_fields.rs"),
        format!(
            "/// (message, number, encoding, repeated, message type) of each field of the ingest proto (written by build.rs).\n#[allow(dead_code)]\nconst PROTO_FIELDS: &[(&str, u32, &str, bool, &str)] = &[\n{rows}];\n"
        ),
    )
}

#[cfg(feature = "grpc")]
use protox::prost_reflect::prost_types::FileDescriptorSet;

/// Where the generated files go.
#[cfg(feature = "grpc")]
fn out_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
}

#[cfg(not(feature = "grpc"))]
fn compile() -> Result<(), Box<dyn std::error::Error>> {
    unreachable!("CARGO_FEATURE_GRPC is set only with the grpc feature")
}
