"""The plugin's ``record()`` beside vLLM's own ``PrometheusStatLogger.record()``.

Both get the same vLLM stats objects, built by vLLM's own classes from a
simulated trace (``tests/vllm/vllm_steps.py``), in the same run, alternating
which goes first. The plugin streams to a real ``serve`` while it is timed, so
its background thread competes for the GIL as it would inside vLLM. Reported:
ns per ``record()`` call (median over rounds) and the ratio to vLLM's logger
(range over rounds), plus what the background thread spends converting and
encoding one call's stats (the work the plugin moves off vLLM's event loop).

    python benches/python/plugin_record.py BINARY [--rounds 7] [--batches 1,64,256]

with the python of ``scripts/vllm-env.sh`` (it has vLLM and the plugin).

``--batches`` times engine steps at fixed batch sizes instead: a closed-loop
simulation keeps exactly B requests running (``--concurrency B
--max-num-seqs B`` and a KV cache that never preempts), and only the steps
whose ``SchedulerStats.num_running_reqs`` is B, with their ``IterationStats``
(B inter-token latencies, the first tokens and finished requests of the
step), are timed. One line per batch size, ns per step:
``batch=B vllm=… plugin_record=… plugin_convert=… plugin_total=… ratio=…``.
``plugin_total`` is the process's CPU time (every thread: the event loop's
``record()``, the stream thread's conversion, gRPC's sending) from the first
``record()`` of a round until its last record is sent; ``plugin_convert`` the
conversion and encoding alone, for reference. ratio: ``plugin_total`` over
vLLM's ``record()`` (whose work is all on the calling thread); medians over
rounds, and the range of the per-round ratio.

``--sidecar-load B`` measures the sidecar instead: the steps at batch B,
recorded for 8 engines at 100 steps per second each (``--engines``,
``--steps-per-second``) for ``--seconds`` seconds, streamed to ``serve``;
the line ``sidecar: … cpu_share=…%`` is ``serve``'s CPU time (user and
system, from ``/proc``) over the wall time, as a share of one core.
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
from proc import cpu_seconds  # noqa: E402
from vllm.v1.metrics.loggers import PrometheusStatLogger, load_stat_logger_plugin_factories  # noqa: E402
from vllm_otel_metrics import plugin as plugin_module  # noqa: E402


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


def simulate(binary, trace, extra, engines=2):
    subprocess.run(
        [binary, "simulate", "--seed", "7", "--models", "1", "--engines", str(engines),
         "--max-model-len", "4096", "--metrics-addr", "none", "--record", str(trace), *extra],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def steps_at(binary, work, batch):
    """The ``record()`` calls of engine steps with exactly ``batch`` running
    requests (each a scheduler-stats call merged with its step's
    iteration stats, as AsyncLLM makes one call per engine step)."""
    trace = work / f"batch-{batch}.jsonl"
    simulate(binary, trace, ["--concurrency", str(batch), "--max-num-seqs", str(batch),
                             "--max-num-batched-tokens", str(max(2048, 4 * batch)),
                             "--kv-blocks", "100000", "--prompt-len", "64", "--output-len", "64",
                             "--duration", "120"], engines=1)
    calls, pending = [], {}
    for scheduler, iteration, mm, engine in vllm_steps.steps(str(trace), "sim-model-0"):
        if scheduler is not None:
            pending[engine] = (scheduler, mm)
            continue
        if engine in pending:
            scheduler, mm = pending.pop(engine)
            if scheduler.num_running_reqs == batch:
                calls.append((scheduler, iteration, mm, engine))
    return calls


def bench_batches(args, work, vllm_logger, plugin):
    for batch in args.batches:
        calls = steps_at(args.binary, work, batch)[:2000]
        if not calls:
            sys.exit(f"no step with {batch} running requests")
        for logger in (vllm_logger, plugin):
            time_calls(logger, calls)
        while plugin.streamer.pending:
            time.sleep(0.01)
        ours, theirs, thread, totals = [], [], [], []
        items = [plugin_module.Step(e, s, i, m, 0.0) for s, i, m, e in calls]
        for round_ in range(args.rounds):
            pair = [(plugin, ours), (vllm_logger, theirs)]
            for logger, out in pair if round_ % 2 else reversed(pair):
                cpu = time.process_time()
                out.append(time_calls(logger, calls))
                if logger is plugin:
                    # Everything the plugin costs the process, its stream
                    # thread and gRPC's threads included: CPU time until
                    # every record of the round has been sent.
                    while plugin.streamer.pending:
                        time.sleep(0.001)
                    totals.append((time.process_time() - cpu) * 1e9 / len(calls))
            began = time.perf_counter_ns()
            for item in items:
                for record in plugin._to_records(item):
                    record.SerializeToString()
            thread.append((time.perf_counter_ns() - began) / len(items))
        ratios = [t / v for t, v in zip(totals, theirs)]
        total = statistics.median(totals)
        print(f"batch={batch} steps={len(calls)} vllm={statistics.median(theirs):,.0f} "
              f"plugin_record={statistics.median(ours):,.0f} "
              f"plugin_convert={statistics.median(thread):,.0f} plugin_total={total:,.0f} ns/step "
              f"ratio={total / statistics.median(theirs):.2f} "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f})", flush=True)


def bench_sidecar(args, work, plugin, serve):
    """``serve``'s CPU share while the plugin streams ``args.engines`` engines'
    steps at batch ``args.sidecar_load``, ``args.steps_per_second`` each."""
    calls = steps_at(args.binary, work, args.sidecar_load)
    engines = list(range(args.engines))
    period = 1.0 / args.steps_per_second
    applied_before = plugin.streamer.sent
    began_cpu, began = cpu_seconds(serve.pid), time.monotonic()
    step = 0
    while time.monotonic() - began < args.seconds:
        scheduler, iteration, mm, _ = calls[step % len(calls)]
        for engine in engines:
            plugin.record(scheduler, iteration, mm, engine)
        step += 1
        next_at = began + step * period
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    while plugin.streamer.pending:
        time.sleep(0.01)
    time.sleep(0.5)  # the last records applied
    wall = time.monotonic() - began
    cpu = cpu_seconds(serve.pid) - began_cpu
    steps = step * len(engines)
    print(f"sidecar: batch={args.sidecar_load} engines={len(engines)} "
          f"steps_per_s={steps / wall:.0f} records={plugin.streamer.sent - applied_before} "
          f"dropped={plugin.streamer.dropped} cpu={cpu:.2f}s wall={wall:.1f}s "
          f"cpu_share={100 * cpu / wall:.1f}% per_step={1e6 * cpu / steps:.1f}us", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batches", type=lambda v: [int(b) for b in v.split(",")], default=None)
    p.add_argument("--sidecar-load", type=int, default=None, metavar="B")
    p.add_argument("--engines", type=int, default=8)
    p.add_argument("--steps-per-second", type=float, default=100.0)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="plugin-bench-"))
    trace = work / "trace.jsonl"
    simulate(args.binary, trace, ["--duration", "60", "--rate", "6", "--kv-blocks", "500"])
    calls = list(vllm_steps.steps(str(trace), "sim-model-0"))
    finished = sum(len(it.finished_requests) for _, it, _, _ in calls if it is not None)
    ingest = free_port()
    serve = subprocess.Popen(
        [args.binary, "serve", "--ingest-addr", f"127.0.0.1:{ingest}", "--metrics-addr", "none",
         "--token-buckets", "python"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    # This bench starts its own sidecar.
    os.environ["VLLM_OTEL_METRICS_SIDECAR"] = "off"
    os.environ["VLLM_OTEL_METRICS_TARGET"] = f"http://127.0.0.1:{ingest}"
    os.environ["VLLM_OTEL_METRICS_QUEUE"] = str(max(len(calls) + 10, 50_000))
    try:
        config = vllm_steps.vllm_config("sim-model-0", 4096)
        vllm_logger = PrometheusStatLogger(config, [0, 1])
        (plugin_class,) = [f for f in load_stat_logger_plugin_factories()
                           if f.__module__ == "vllm_otel_metrics.plugin"]
        plugin = plugin_class(config, [0, 1])
        while not plugin.streamer.connected:
            time.sleep(0.05)
        if args.batches:
            bench_batches(args, work, vllm_logger, plugin)
            plugin.streamer.close()
            return
        if args.sidecar_load:
            plugin = plugin_class(config, list(range(args.engines)))
            while not plugin.streamer.connected:
                time.sleep(0.05)
            bench_sidecar(args, work, plugin, serve)
            plugin.streamer.close()
            return
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
        items = [plugin_module.Step(e, s, i, m, 0.0) for s, i, m, e in calls]
        began = time.perf_counter_ns()
        for item in items:
            for record in plugin._to_records(item):
                record.SerializeToString()
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
