import pathlib
import sys

# tests/vllm/vllm_steps.py: vLLM's stats objects and a stand-in VllmConfig.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "vllm"))
