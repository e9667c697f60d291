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
    let messages = descriptors.file.iter().flat_map(|file| &file.message_type);
    write_wire_fields(messages.map(|message| {
        let fields = message.field.iter().map(|field| field.name().to_owned());
        (message.name().to_owned(), fields.collect())
    }))?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server side is written out (src/sources/ingest/server.rs): it
        // scans each message before decoding it.
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}

/// Writes `wire_fields!`: each message's field names, in proto order, handed
/// to a macro. The wire conversions (`src/sources/ingest/proto/wire.rs`)
/// take their field lists from it, so a field added to the proto is copied
/// both ways without a list kept by hand beside it.
#[cfg(feature = "grpc")]
fn write_wire_fields(messages: impl Iterator<Item = (String, Vec<String>)>) -> std::io::Result<()> {
    let mut arms = String::new();
    for (name, fields) in messages {
        arms.push_str(&format!(
            "    ({name}, $then:ident!($($args:tt)*)) => {{ $then!($($args)* {{ {} }}); }};\n",
            fields.join(", ")
        ));
    }
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("wire_fields.rs"),
        format!("/// Each ingest message's fields, in proto order (written by build.rs).\nmacro_rules! wire_fields {{\n{arms}}}\n"),
    )
}

#[cfg(not(feature = "grpc"))]
fn compile() -> Result<(), Box<dyn std::error::Error>> {
    unreachable!("CARGO_FEATURE_GRPC is set only with the grpc feature")
}
