"""One plugin process of the sidecar-supervision test: builds the plugin
(found through vLLM's loader) with the settings of its environment, records
one engine step a second, and prints each line of the plugin's log to stdout,
its level first (``ERROR vllm-otel-metrics: ...``), until it is killed or
told to stop (a line on stdin).

    python supervise.py
"""

import logging
import sys
import threading

from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories
from vllm.v1.metrics.stats import IterationStats

import vllm_steps


def main():
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("vllm.vllm_otel_metrics")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    (plugin_class,) = [
        f for f in load_stat_logger_plugin_factories() if f.__module__ == "vllm_otel_metrics.plugin"
    ]
    plugin = plugin_class(vllm_steps.vllm_config("m", 4096), [0])
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    while not stop.is_set():
        stats = IterationStats()
        stats.num_generation_tokens = 1
        plugin.record(None, stats, None, 0)
        stop.wait(1.0)
    # The interpreter's exit runs the plugin's atexit handlers: the queue
    # drains, then the sidecar this process started is terminated.


if __name__ == "__main__":
    main()
