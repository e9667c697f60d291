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
    tonic_prost_build::configure()
        .build_client(true)
        // The server side is written out (src/sources/ingest/server.rs): it
        // scans each message before decoding it.
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}

#[cfg(not(feature = "grpc"))]
fn compile() -> Result<(), Box<dyn std::error::Error>> {
    unreachable!("CARGO_FEATURE_GRPC is set only with the grpc feature")
}
