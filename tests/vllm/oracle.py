"""vLLM's own metrics code as the oracle for the plugin path.

Hands each step's stats objects, built by vLLM's own classes from a JSONL
trace (:mod:`vllm_steps`), both to vLLM's ``PrometheusStatLogger`` and to the
plugin (found through vLLM's ``load_stat_logger_plugin_factories()``), which
streams them to a running ``vllm-otel-metrics serve``. Then it compares every
``vllm:`` sample of both expositions.

    python oracle.py TRACE.jsonl --model NAME --max-model-len N [--kv-connector] \
        --target http://127.0.0.1:PORT --metrics-url http://127.0.0.1:PORT/metrics \
        --report OUT.json

``--kv-connector`` configures a MultiConnector (NIXL, the CPU OffloadingConnector
and the SimpleCPUOffloadConnector, :func:`vllm_steps.kv_transfer_config`) for
both loggers and turns the trace's ``kv_connector_stats`` into those
connectors' stats.

The report (JSON) lists the families both sides have, the samples that
differ, and the families only one side has. Exit status 0 unless the run
itself failed; the caller judges the report.
"""

import argparse
import json
import os
import sys
import urllib.request

from prometheus_client import REGISTRY, generate_latest
from vllm.v1.metrics.loggers import PrometheusStatLogger, load_stat_logger_plugin_factories

import vllm_steps
from expositions import compare, samples


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--model", required=True)
    p.add_argument("--max-model-len", type=int, required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--metrics-url", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("--kv-connector", action="store_true")
    args = p.parse_args()
    os.environ["VLLM_OTEL_METRICS_TARGET"] = args.target
    # The test runs the sidecar itself.
    os.environ["VLLM_OTEL_METRICS_SIDECAR"] = "off"
    # The trace is fed far faster than an engine steps: room for all of it.
    os.environ["VLLM_OTEL_METRICS_QUEUE"] = "1000000"

    factories = load_stat_logger_plugin_factories()
    names = [f"{f.__module__}.{f.__qualname__}" for f in factories]
    ours = [f for f in factories if f.__module__ == "vllm_otel_metrics.plugin"]
    if len(ours) != 1:
        sys.exit(f"vLLM's loader found {names}, not the vllm_otel_metrics plugin once")

    # The model's engines: those its requests and scheduler stats name.
    engines = sorted(
        {
            r["engine"]
            for r in vllm_steps.records(args.trace, args.model)
            if r["type"] in ("request", "scheduler_stats")
        }
    )
    kv_transfer_config = (
        vllm_steps.kv_transfer_config(args.trace, args.model) if args.kv_connector else None
    )
    config = vllm_steps.vllm_config(args.model, args.max_model_len, kv_transfer_config)
    vllm_logger = PrometheusStatLogger(config, engines)
    plugin = ours[0](config, engines)
    loggers = [vllm_logger, plugin]
    for logger in loggers:
        logger.log_engine_initialized()
    counts = {}
    for scheduler_stats, iteration_stats, mm_cache_stats, engine in vllm_steps.steps(
        args.trace, args.model, counts, kv_connector=args.kv_connector
    ):
        for logger in loggers:
            logger.record(scheduler_stats, iteration_stats, mm_cache_stats, engine)
    for logger in loggers:
        logger.record_sleep_state(1, 1)
        logger.record_sleep_state(0, 0)

    plugin.streamer.close(timeout=120)
    vllm_text = generate_latest(REGISTRY).decode()
    ours_text = urllib.request.urlopen(args.metrics_url, timeout=10).read().decode()
    result = compare(samples(vllm_text, args.model), samples(ours_text, args.model))
    report = {
        "trace": args.trace,
        "model": args.model,
        "plugin_factories": names,
        "kv_connector": (
            kv_transfer_config.kv_connector_extra_config if kv_transfer_config else None
        ),
        "steps": counts["steps"],
        "finished_requests": counts["finished"],
        "plugin_sent": plugin.streamer.sent,
        "plugin_dropped": plugin.streamer.dropped + plugin.streamer.unsendable,
        **result,
    }
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
