"""The plugin while its sidecar dies and comes back.

Starts ``vllm-otel-metrics serve``, loads the plugin through vLLM's
``load_stat_logger_plugin_factories()`` and records vLLM ``IterationStats``
(one generation token each) in three phases: with the sidecar up (then idle,
timing how long the last record takes to show on ``/metrics``), with the
sidecar killed (timing every ``record()`` call), and after a restart on the
same ports. Writes what it saw as JSON; the caller judges it.

    python restart.py BINARY --queue 50 --report OUT.json
"""

import argparse
import json
import os
import subprocess
import time
import urllib.request

from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories
from vllm.v1.metrics.stats import IterationStats

import vllm_steps
from ports import free_port

GENERATED = "vllm:generation_tokens_total"
DROPPED = "vllm_otel_metrics_plugin_dropped_records_total"


def sample(metrics_port: int, name: str) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).read()
    except OSError:
        return None
    for line in text.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def start_serve(binary: str, ingest: int, metrics: int, log) -> subprocess.Popen:
    process = subprocess.Popen(
        [binary, "serve", "--ingest-addr", f"127.0.0.1:{ingest}",
         "--metrics-addr", f"127.0.0.1:{metrics}", "--token-buckets", "python"],
        stdout=subprocess.DEVNULL, stderr=log,
    )
    wait("serve's /metrics", lambda: sample(metrics, DROPPED) is not None)
    return process


def step(tokens: int = 1) -> IterationStats:
    stats = IterationStats()
    stats.num_generation_tokens = tokens
    return stats


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--queue", type=int, default=50)
    p.add_argument("--report", required=True)
    p.add_argument("--log", required=True)
    args = p.parse_args()
    ingest, metrics = free_port(), free_port()
    os.environ["VLLM_OTEL_METRICS_TARGET"] = f"http://127.0.0.1:{ingest}"
    os.environ["VLLM_OTEL_METRICS_QUEUE"] = str(args.queue)
    # The test runs the sidecar itself.
    os.environ["VLLM_OTEL_METRICS_SIDECAR"] = "off"
    report = {}
    with open(args.log, "ab") as log:
        serve = start_serve(args.binary, ingest, metrics, log)
        (plugin_class,) = [
            f for f in load_stat_logger_plugin_factories()
            if f.__module__ == "vllm_otel_metrics.plugin"
        ]
        plugin = plugin_class(vllm_steps.vllm_config("m", 4096), [0])

        # Up: 40 records (fewer than the queue holds, connected or not yet),
        # then idle; the last one must still arrive.
        for _ in range(40):
            plugin.record(None, step(), None, 0)
        sent_at = time.monotonic()
        wait("the first 40 records", lambda: sample(metrics, GENERATED) == 40)
        report["idle_arrival_seconds"] = time.monotonic() - sent_at

        # Down: kill the sidecar, keep recording at about 100 steps a second.
        serve.kill()
        serve.wait()
        durations = []
        for _ in range(300):
            began = time.perf_counter()
            plugin.record(None, step(), None, 0)
            durations.append(time.perf_counter() - began)
            time.sleep(0.01)
        durations.sort()
        report["down_record_max_seconds"] = durations[-1]
        report["down_record_median_seconds"] = durations[len(durations) // 2]
        report["dropped_while_down"] = plugin.streamer.dropped
        report["queued_while_down"] = plugin.streamer.pending

        # Back: same ports; what was queued and 100 new records arrive, and so
        # does the drop count.
        serve = start_serve(args.binary, ingest, metrics, log)
        restarted = time.monotonic()
        for _ in range(100):
            plugin.record(None, step(), None, 0)
            time.sleep(0.005)
        wait(
            "the drop count on the restarted sidecar",
            lambda: sample(metrics, DROPPED) == plugin.streamer.dropped and plugin.streamer.pending == 0,
        )
        time.sleep(0.5)
        report["resume_seconds"] = time.monotonic() - restarted
        report["dropped_total"] = plugin.streamer.dropped
        report["sidecar_dropped"] = sample(metrics, DROPPED)
        report["sidecar_generated_after_restart"] = sample(metrics, GENERATED)
        plugin.streamer.close()
        serve.terminate()
        serve.wait()
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
