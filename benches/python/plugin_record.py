"""The plugin's ``record()`` beside vLLM's own ``PrometheusStatLogger.record()``.

Both get the same vLLM stats objects, built by vLLM's own classes from a
simulated trace (``tests/vllm/vllm_steps.py``), in the same run, alternating
which goes first. The plugin streams to a real ``serve`` while it is timed, so
its background thread competes for the GIL as it would inside vLLM. Reported:
ns per ``record()`` call (median over rounds) and the ratio to vLLM's logger
(range over rounds), plus what the background thread spends converting and
encoding one call's stats (the work the plugin moves off vLLM's event loop).

    python benches/python/plugin_record.py BINARY [--rounds 7]

with the python of ``scripts/vllm-env.sh`` (it has vLLM and the plugin).
"""

import argparse
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "vllm"))

import vllm_steps  # noqa: E402
from vllm.v1.metrics.loggers import PrometheusStatLogger, load_stat_logger_plugin_factories  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_calls(logger, calls) -> float:
    """ns per record() call over the whole list."""
    began = time.perf_counter_ns()
    for scheduler_stats, iteration_stats, mm_cache_stats, engine in calls:
        logger.record(scheduler_stats, iteration_stats, mm_cache_stats, engine)
    return (time.perf_counter_ns() - began) / len(calls)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="plugin-bench-"))
    trace = work / "trace.jsonl"
    subprocess.run(
        [args.binary, "simulate", "--seed", "7", "--models", "1", "--engines", "2",
         "--duration", "60", "--rate", "6", "--kv-blocks", "500", "--max-model-len", "4096",
         "--metrics-addr", "none", "--record", str(trace)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    calls = list(vllm_steps.steps(str(trace), "sim-model-0"))
    finished = sum(len(it.finished_requests) for _, it, _, _ in calls if it is not None)
    ingest = free_port()
    serve = subprocess.Popen(
        [args.binary, "serve", "--ingest-addr", f"127.0.0.1:{ingest}", "--metrics-addr", "none",
         "--token-buckets", "python"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.environ["VLLM_OTEL_METRICS_TARGET"] = f"http://127.0.0.1:{ingest}"
    os.environ["VLLM_OTEL_METRICS_QUEUE"] = str(len(calls) + 10)
    try:
        config = vllm_steps.vllm_config("sim-model-0", 4096)
        vllm_logger = PrometheusStatLogger(config, [0, 1])
        (plugin_class,) = [f for f in load_stat_logger_plugin_factories()
                           if f.__module__ == "vllm_otel_metrics.plugin"]
        plugin = plugin_class(config, [0, 1])
        while not plugin.streamer.connected:
            time.sleep(0.05)
        # One round unreported: prometheus_client and the stream warm up.
        for logger in (vllm_logger, plugin):
            time_calls(logger, calls)
        while plugin.streamer.pending:
            time.sleep(0.01)
        ours, theirs = [], []
        for round_ in range(args.rounds):
            pair = [(plugin, ours), (vllm_logger, theirs)]
            for logger, out in pair if round_ % 2 else reversed(pair):
                out.append(time_calls(logger, calls))
            while plugin.streamer.pending:
                time.sleep(0.01)
        # The thread's share: convert and encode each call's stats, alone.
        from vllm_otel_metrics import stream
        from vllm_otel_metrics.v1 import ingest_pb2 as pb
        items = [("step", e, s, i, m, 0.0) for s, i, m, e in calls]
        began = time.perf_counter_ns()
        for item in items:
            for record in plugin._to_records(item):
                stream.to_message(record, pb).SerializeToString()
        background = (time.perf_counter_ns() - began) / len(items)
        dropped = plugin.streamer.dropped
        plugin.streamer.close()
    finally:
        serve.terminate()
        serve.wait()
    ratios = [o / t for o, t in zip(ours, theirs)]
    print(f"{len(calls)} record() calls per round ({finished} finished requests), {args.rounds} rounds")
    print(f"{'':32} {'ns/call (median)':>18}")
    print(f"{'vLLM PrometheusStatLogger':32} {statistics.median(theirs):>18,.0f}")
    print(f"{'vllm-otel-metrics plugin':32} {statistics.median(ours):>18,.0f}")
    print("per round, plugin / vLLM:", " ".join(f"{r:.3f}" for r in ratios))
    print(f"plugin / vLLM: {min(ratios):.3f}-{max(ratios):.3f} (median {statistics.median(ratios):.3f})")
    print(f"background conversion + encoding: {background:,.0f} ns/call, off the event loop")
    total = statistics.median(ours) + background
    print(f"plugin in all (record() + background): {total:,.0f} ns/call, "
          f"{total / statistics.median(theirs):.2f}x vLLM's record()")
    print(f"dropped: {dropped}")


if __name__ == "__main__":
    main()
