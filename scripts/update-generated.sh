#!/usr/bin/env bash
# Rewrites the generated files checked in beside the code
# (src/sources/ingest/proto/pb.rs, src/sources/ingest/proto/mirrored.rs,
# src/sources/ingest/prescan/proto_fields.rs) from
# proto/vllm_otel_metrics/v1/ingest.proto: build.rs writes each one that
# differs when VLLM_OTEL_METRICS_UPDATE_GENERATED is set. The unit test
# generated_files_are_current fails until they are rewritten and committed.
#
# build.rs runs before the crate compiles, so the files are rewritten even
# when the crate then fails to (a record type that lacks a field the proto
# gained, say): the errors name what is left to write by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_OTEL_METRICS_UPDATE_GENERATED=1 cargo check --lib --features grpc "$@"
