"""The plugin against a sidecar that requires TLS and a bearer token.

Loads the plugin through vLLM's ``load_stat_logger_plugin_factories()`` with
``VLLM_OTEL_METRICS_TARGET`` (https), ``VLLM_OTEL_METRICS_CA_FILE`` and
``VLLM_OTEL_METRICS_TOKEN_FILE`` as given, records ``--steps`` vLLM
``IterationStats`` of one generation token each, gives the stream
``--seconds`` to deliver them, and reports what the plugin counted and
logged.

    python secure.py --steps 10 --seconds 5 --report OUT.json
"""

import argparse
import json
import logging
import time

from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories
from vllm.v1.metrics.stats import IterationStats

import vllm_steps


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--report", required=True)
    args = p.parse_args()
    lines = Lines()
    logging.getLogger("vllm.vllm_otel_metrics").addHandler(lines)
    (plugin_class,) = [
        f for f in load_stat_logger_plugin_factories() if f.__module__ == "vllm_otel_metrics.plugin"
    ]
    plugin = plugin_class(vllm_steps.vllm_config("m", 4096), [0])
    for _ in range(args.steps):
        stats = IterationStats()
        stats.num_generation_tokens = 1
        plugin.record(None, stats, None, 0)
    deadline = time.monotonic() + args.seconds
    while plugin.streamer.pending and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(max(deadline - time.monotonic(), 0))
    report = {"sent": plugin.streamer.sent, "pending": plugin.streamer.pending,
              "dropped": plugin.streamer.dropped, "log": lines.lines}
    plugin.streamer.close(timeout=0.5)
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
