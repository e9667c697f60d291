import os
import pathlib
import sys

import pytest

# tests/vllm/vllm_steps.py: vLLM's stats objects and a stand-in VllmConfig.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "vllm"))

# The plugins these tests build stream nowhere in particular: none of them
# may start a sidecar (tests/vllm_live.rs runs the plugin that does).
os.environ["VLLM_OTEL_METRICS_SIDECAR"] = "off"


@pytest.fixture
def started_supervisors(monkeypatch):
    """Stands in for the sidecar supervisor: ``patch(module)`` replaces the
    ``Supervisor`` a module starts and returns the list of the arguments
    each one was made with."""
    started = []

    class Recorded:
        def __init__(self, *args):
            started.append(args)

        def start(self):
            return self

        def admits(self):
            return True

        def close(self):
            pass

    def patch(module):
        monkeypatch.setattr(module, "Supervisor", Recorded)
        return started

    return patch
