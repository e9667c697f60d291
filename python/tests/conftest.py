import os
import pathlib
import sys

# tests/vllm/vllm_steps.py: vLLM's stats objects and a stand-in VllmConfig.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "vllm"))

# The plugins these tests build stream nowhere in particular: none of them
# may start a sidecar (tests/vllm_live.rs runs the plugin that does).
os.environ["VLLM_OTEL_METRICS_SIDECAR"] = "off"
