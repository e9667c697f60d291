"""Build steps pyproject.toml cannot declare.

- The gRPC code (`vllm_otel_metrics/v1/ingest_pb2*.py`) is generated from the
  repository's `proto/` at build time, never copied by hand.
- The sidecar binary is built from the repository's `Cargo.toml` with
  setuptools-rust and installed as the `vllm-otel-metrics` script. Set
  `VLLM_OTEL_METRICS_NO_BINARY=1` for a plugin-only wheel (the sidecar runs
  elsewhere, for example in its own container).
"""

import importlib.resources
import os
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent / "proto"
PROTO_FILE = PROTO_ROOT / "vllm_otel_metrics" / "v1" / "ingest.proto"


class BuildPyWithProto(build_py):
    """Runs protoc (grpcio-tools) into the build tree after the sources are copied."""

    def run(self):
        super().run()
        from grpc_tools import protoc

        if not PROTO_FILE.is_file():
            raise SystemExit(
                f"{PROTO_FILE} not found: build from a checkout of the repository "
                "(pip install ./python), not from an sdist"
            )
        out = pathlib.Path(self.build_lib)
        include = importlib.resources.files("grpc_tools") / "_proto"
        status = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"-I{include}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                str(PROTO_FILE),
            ]
        )
        if status != 0:
            raise SystemExit(f"protoc failed on {PROTO_FILE} (status {status})")
        (out / "vllm_otel_metrics" / "v1" / "__init__.py").touch()


def rust_binaries():
    if os.environ.get("VLLM_OTEL_METRICS_NO_BINARY") == "1":
        return []
    from setuptools_rust import RustBin

    return [RustBin("vllm-otel-metrics", path=str(HERE.parent / "Cargo.toml"), args=["--locked"])]


setup(cmdclass={"build_py": BuildPyWithProto}, rust_extensions=rust_binaries())
