"""Build steps pyproject.toml cannot declare.

- The gRPC code (`vllm_otel_metrics/v1/ingest_pb2*.py`) is generated from the
  repository's `proto/` at build time, never copied by hand.
- The sidecar binary goes into the package as `vllm_otel_metrics/_bin/
  vllm-otel-metrics` (the `vllm-otel-metrics` command runs it), so that the
  plugin can start it from its own environment:
  - `VLLM_OTEL_METRICS_BINARY=PATH`: the binary built beforehand
    (`scripts/build-wheel.sh` builds it once with cargo-zigbuild, for
    glibc 2.28);
  - otherwise it is built here from the repository's `Cargo.toml` with
    `cargo build --release --locked`, which needs a Rust toolchain, for the
    machine's own glibc (`VLLM_OTEL_METRICS_CARGO_PROFILE=NAME` builds that
    cargo profile instead: the pip-install test takes `dev`, the build its
    test command has already made);
  - `VLLM_OTEL_METRICS_NO_BINARY=1`: no binary, a plugin-only wheel (the
    sidecar runs elsewhere, for example in its own container).
- A wheel with the binary is tagged `py3-none-PLATFORM`: the binary links no
  Python, so one wheel serves every CPython 3 of its platform.
  `scripts/build-wheel.sh` turns `linux_x86_64` into the manylinux tag
  auditwheel finds the binary consistent with.
"""

import importlib.resources
import os
import pathlib
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
PROTO_ROOT = REPO / "proto"
PROTO_FILE = PROTO_ROOT / "vllm_otel_metrics" / "v1" / "ingest.proto"
BINARY_NAME = "vllm-otel-metrics"


def with_binary() -> bool:
    return os.environ.get("VLLM_OTEL_METRICS_NO_BINARY") != "1"


def sidecar_binary() -> pathlib.Path:
    """The binary to package: the one given, or one cargo builds now."""
    given = os.environ.get("VLLM_OTEL_METRICS_BINARY")
    if given:
        path = pathlib.Path(given)
        if not path.is_file():
            raise SystemExit(f"VLLM_OTEL_METRICS_BINARY={given}: no such file")
        return path
    if shutil.which("cargo") is None:
        raise SystemExit(
            "building the sidecar needs cargo (a Rust toolchain): install one, give a built "
            "binary in VLLM_OTEL_METRICS_BINARY, install a wheel built by scripts/build-wheel.sh, "
            "or set VLLM_OTEL_METRICS_NO_BINARY=1 for the plugin alone"
        )
    profile = os.environ.get("VLLM_OTEL_METRICS_CARGO_PROFILE", "") or "release"
    if not profile.replace("-", "").replace("_", "").isalnum():
        raise SystemExit(f"VLLM_OTEL_METRICS_CARGO_PROFILE={profile!r} is not a cargo profile name")
    subprocess.run(
        [
            "cargo",
            "build",
            "--profile",
            profile,
            "--locked",
            "--manifest-path",
            str(REPO / "Cargo.toml"),
        ],
        check=True,
    )
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    # Cargo writes the `dev` profile's outputs under `debug/`.
    return target / ("debug" if profile == "dev" else profile) / BINARY_NAME


class BuildPyWithProtoAndBinary(build_py):
    """Runs protoc (grpcio-tools) into the build tree after the sources are
    copied, and puts the sidecar binary beside them."""

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
                # Stubs of the messages: the generated module builds its
                # classes at import, where a type checker cannot see them.
                f"--pyi_out={out}",
                str(PROTO_FILE),
            ]
        )
        if status != 0:
            raise SystemExit(f"protoc failed on {PROTO_FILE} (status {status})")
        (out / "vllm_otel_metrics" / "v1" / "__init__.py").touch()
        bin_dir = out / "vllm_otel_metrics" / "_bin"
        # pip builds a local directory in place: a binary left in the build
        # tree by an earlier build must not slip into a plugin-only wheel.
        shutil.rmtree(bin_dir, ignore_errors=True)
        if with_binary():
            bin_dir.mkdir()
            shutil.copy2(sidecar_binary(), bin_dir / BINARY_NAME)
            os.chmod(bin_dir / BINARY_NAME, 0o755)


class BinaryDistribution(Distribution):
    """With the binary the wheel is platform-specific: its files go to
    platlib and its root is not pure."""

    def has_ext_modules(self):
        return with_binary()


class PlatformWheel(bdist_wheel):
    """`py3-none-PLATFORM` when the wheel carries the binary, else `py3-none-any`."""

    def get_tag(self):
        python, abi, platform = super().get_tag()
        if with_binary():
            return "py3", "none", platform
        return python, abi, platform


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithProtoAndBinary, "bdist_wheel": PlatformWheel},
)
