#!/usr/bin/env python3
"""Capacity of the scale-out tier: producers -> agent -> gateway -> remote write.

Started by scripts/bench-scale.sh (which builds what it needs). Runs, on
loopback, a Prometheus remote-write receiver, one gateway Collector
(otel-collector/gateway.yaml), one agent (otel-collector/agent.yaml) and N
`serve` producers, each holding the same LABEL_SETS (model_name, engine) label
sets (fed once from a generated trace) and pushing OTLP/gRPC every INTERVAL
seconds. For each N it waits for two intervals, then measures over WINDOW
seconds:

- offered: what the producers push, in remote-write series per second (each
  histogram bucket, _sum and _count is a series; counted on a producer's own
  /metrics);
- written: samples Prometheus appended per second
  (prometheus_tsdb_head_samples_appended_total);
- the CPU (cores) of the gateway, the agent, the producers and Prometheus,
  from /proc/PID/stat;
- series per gateway CPU-second: written / gateway cores, the figure that
  sizes a gateway pool (docs/SCALING.md);
- the resident memory of the gateway and the agent at the window's end;
- refused or failed points in the gateway (memory limiter, exporter).

The gateway is saturated when written stays below offered or its CPU reaches
a core. Standard library only; Linux only (/proc).

With --store thanos the storage is a Thanos Receive hashring instead
(otel-collector/bin/thanos): a routing receiver writing every series to three
ingesters (replication factor 3); "written" is then what one ingester
appended per second (each stores every series), and the store's cores are
the router's and the three ingesters' together.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(REPO, "target", "release", "vllm-otel-metrics")
COLLECTOR = os.path.join(REPO, "otel-collector", "bin", "otelcol-vllm")
THANOS = os.path.join(REPO, "otel-collector", "bin", "thanos")
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=30):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


def wait_for(what, check, secs=60):
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"bench-scale: timed out waiting for {what}")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line.
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def samples(exposition, prefix):
    """Sum of the sample values whose name starts with prefix."""
    total = 0.0
    for line in exposition.splitlines():
        if line.startswith(prefix):
            total += float(line.rsplit(" ", 1)[1])
    return total


def series_count(exposition):
    return sum(1 for line in exposition.splitlines() if line.startswith("vllm:"))


def label_sets(exposition):
    sets = set()
    for line in exposition.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            sets.add(line.split("}")[0])
    return len(sets)


def write_trace(out, count):
    """A trace that gives each of `count` label sets every family a series:
    an engine config, a scheduler snapshot with every engine-level field, a
    request finished by `stop` after a preemption and one aborted."""
    def put(record):
        out.write(json.dumps(record, separators=(",", ":")) + "\n")

    wall, clock = 1_700_000_000.0, 1000.0
    for i in range(count):
        model, engine = f"bench-model-{i // 4}", i % 4
        put({"type": "engine_config", "model_name": model, "engine": engine,
             "cache_config": {"block_size": "16", "gpu_memory_utilization": "0.9"},
             "max_loras": 4})
        put({"type": "scheduler_stats", "model_name": model, "engine": engine,
             "num_running_reqs": 3, "num_waiting_reqs": 5, "kv_cache_usage": 0.42,
             "prefix_cache_queries": 1200, "prefix_cache_hits": 300, "received_at": wall,
             "num_skipped_waiting_reqs": 2,
             "num_kv_fetch_reqs_by_stage": {"waiting_to_start": 1, "in_progress": 1,
                                            "completed_waiting": 0},
             "external_prefix_cache_queries": 800, "external_prefix_cache_hits": 200,
             "mm_cache_queries": 4, "mm_cache_hits": 1,
             "kv_cache_eviction_events": [{"lifetime_seconds": 12.5, "idle_seconds": 3.0,
                                           "reuse_gaps_seconds": [1.0, 2.5]}],
             "perf_stats": {"num_flops_per_gpu": 1.2e13, "num_read_bytes_per_gpu": 1.6e10,
                            "num_write_bytes_per_gpu": 2.0e8},
             "spec_decoding": {"num_drafts": 3, "num_draft_tokens": 9,
                               "num_accepted_tokens": 5,
                               "num_accepted_tokens_per_pos": [3, 2, 0]},
             "running_lora_adapters": ["sql-lora"], "waiting_lora_adapters": []})
        done, aborted = f"r{i}", f"a{i}"
        for rid in (done, aborted):
            put({"type": "request", "request_id": rid, "model_name": model,
                 "engine": engine, "arrival_time": wall, "prompt_len": 512,
                 "max_tokens": 64, "n": 1})
        put({"type": "outputs", "engine": engine, "timestamp": clock + 0.05,
             "received_at": wall + 0.05,
             "outputs": [{"request_id": done, "new_token_ids": [1],
                          "prefill_stats": {"num_prompt_tokens": 512,
                                            "num_computed_tokens": 384,
                                            "num_cached_tokens": 128,
                                            "num_local_cached_tokens": 128,
                                            "num_external_cached_tokens": 0},
                          "events": [{"type": "queued", "timestamp": clock},
                                     {"type": "scheduled", "timestamp": clock + 0.01}]}]})
        put({"type": "outputs", "engine": engine, "timestamp": clock + 0.10,
             "received_at": wall + 0.10,
             "outputs": [{"request_id": done, "new_token_ids": [2],
                          "events": [{"type": "preempted", "timestamp": clock + 0.08}]}]})
        put({"type": "outputs", "engine": engine, "timestamp": clock + 0.20,
             "received_at": wall + 0.20,
             "outputs": [{"request_id": done, "new_token_ids": [3],
                          "finish_reason": "stop"}]})
        put({"type": "abort", "request_id": aborted, "received_at": wall + 0.25})
        wall += 0.3
        clock += 0.3


class Tier:
    def __init__(self, work, interval, store):
        self.work = work
        self.interval = interval
        self.store = store
        self.processes = {}
        self.producers = []

    def spawn(self, name, args, env=None):
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, **(env or {})},
        )
        self.processes[name] = process
        return process

    def start_prometheus(self):
        """Prometheus with its remote-write receiver; returns the write URL."""
        self.store_metrics = [free_port()]
        config = os.path.join(self.work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1m\n")
        self.spawn(
            "store-prometheus",
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={os.path.join(self.work, 'data')}",
                f"--web.listen-address=127.0.0.1:{self.store_metrics[0]}",
                "--web.enable-remote-write-receiver",
            ],
        )
        wait_for("Prometheus", lambda: get(self.store_metrics[0], "/-/ready"))
        return f"http://127.0.0.1:{self.store_metrics[0]}/api/v1/write"

    def start_thanos(self):
        """Three ingesters and a router (replication factor 3); returns the
        router's write URL. store_metrics are the ingesters' HTTP ports."""
        self.store_metrics, endpoints = [], []
        for i in range(3):
            grpc, http = free_port(), free_port()
            self.spawn(
                f"store-ingester-r{i}",
                [
                    THANOS, "receive", f"--tsdb.path={os.path.join(self.work, f'tsdb-r{i}')}",
                    f"--grpc-address=127.0.0.1:{grpc}", f"--http-address=127.0.0.1:{http}",
                    f"--remote-write.address=127.0.0.1:{free_port()}",
                    f"--receive.capnproto-address=127.0.0.1:{free_port()}",
                    f'--label=receive_replica="r{i}"', "--tsdb.retention=1d",
                ],
            )
            wait_for(f"ingester r{i}", lambda: get(http, "/-/ready"))
            self.store_metrics.append(http)
            endpoints.append(f'"127.0.0.1:{grpc}"')
        hashring = os.path.join(self.work, "hashring.json")
        with open(hashring, "w") as f:
            f.write(f'[{{"hashring": "default", "endpoints": [{", ".join(endpoints)}]}}]\n')
        router_http, write = free_port(), free_port()
        self.spawn(
            "store-router",
            [
                THANOS, "receive", f"--receive.hashrings-file={hashring}",
                "--receive.replication-factor=3", '--label=receive="router"',
                f"--tsdb.path={os.path.join(self.work, 'tsdb-router')}",
                f"--grpc-address=127.0.0.1:{free_port()}", f"--http-address=127.0.0.1:{router_http}",
                f"--remote-write.address=127.0.0.1:{write}",
                f"--receive.capnproto-address=127.0.0.1:{free_port()}",
            ],
        )
        wait_for("the router", lambda: get(router_http, "/-/ready"))
        return f"http://127.0.0.1:{write}/api/v1/receive"

    def start(self):
        remote_write = self.start_thanos() if self.store == "thanos" else self.start_prometheus()

        self.gateway_grpc, gateway_health = free_port(), free_port()
        self.gateway_telemetry = free_port()
        self.spawn(
            "gateway",
            [COLLECTOR, "--config", os.path.join(REPO, "otel-collector", "gateway.yaml")],
            {
                "GATEWAY_OTLP_GRPC_PORT": str(self.gateway_grpc),
                "GATEWAY_HEALTH_PORT": str(gateway_health),
                "GATEWAY_TELEMETRY_PORT": str(self.gateway_telemetry),
                "REMOTE_WRITE_URL": remote_write,
            },
        )
        wait_for("the gateway", lambda: get(gateway_health, "/"))

        self.agent_grpc, agent_health = free_port(), free_port()
        self.agent_telemetry = free_port()
        self.spawn(
            "agent",
            [COLLECTOR, "--config", os.path.join(REPO, "otel-collector", "agent.yaml")],
            {
                "AGENT_OTLP_GRPC_PORT": str(self.agent_grpc),
                "AGENT_OTLP_HTTP_PORT": str(free_port()),
                "AGENT_HEALTH_PORT": str(agent_health),
                "AGENT_TELEMETRY_PORT": str(self.agent_telemetry),
                "GATEWAYS": f"[127.0.0.1:{self.gateway_grpc}]",
            },
        )
        wait_for("the agent", lambda: get(agent_health, "/"))

    def add_producer(self, trace):
        index = len(self.producers)
        ingest, metrics = free_port(), free_port()
        self.spawn(
            f"producer-{index}",
            [
                BINARY,
                "serve",
                "--ingest-addr",
                f"127.0.0.1:{ingest}",
                "--metrics-addr",
                f"127.0.0.1:{metrics}",
                "--otlp-endpoint",
                f"http://127.0.0.1:{self.agent_grpc}",
                "--otlp-protocol",
                "grpc",
                "--otlp-interval-ms",
                str(int(self.interval * 1000)),
            ],
            {"OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id=bench-producer-{index}"},
        )
        wait_for(f"producer {index}", lambda: get(metrics, "/metrics"))
        fed = subprocess.run(
            [BINARY, "replay", "--target", f"http://127.0.0.1:{ingest}", trace],
            capture_output=True,
        )
        if fed.returncode not in (0, 2):
            sys.exit(f"bench-scale: feeding producer {index} failed: {fed.stderr.decode()}")
        self.producers.append(metrics)
        return get(metrics, "/metrics")

    def cpu(self):
        out = {"gateway": 0.0, "agent": 0.0, "producers": 0.0, "store": 0.0}
        for name, process in self.processes.items():
            key = name.split("-")[0] if name.startswith(("producer-", "store-")) else name
            out[key.replace("producer", "producers")] += cpu_seconds(process.pid)
        return out

    def counters(self):
        gateway = get(self.gateway_telemetry, "/metrics")
        # One replica's appends: every ingester stores every series.
        written = min(
            samples(get(port, "/metrics"), "prometheus_tsdb_head_samples_appended_total")
            for port in self.store_metrics
        )
        return {
            "written": written,
            "gateway_sent": samples(gateway, "otelcol_exporter_sent_metric_points"),
            "gateway_failed": samples(gateway, "otelcol_exporter_send_failed_metric_points"),
            "gateway_refused": samples(gateway, "otelcol_receiver_refused_metric_points"),
        }

    def stop(self):
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", default="1,2,3,4", help="N values, ascending")
    parser.add_argument("--label-sets", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=5.0, help="export interval, s")
    parser.add_argument("--window", type=float, default=30.0, help="measured seconds per N")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    parser.add_argument("--store", choices=("prometheus", "thanos"), default="prometheus")
    args = parser.parse_args()
    counts = [int(n) for n in args.producers.split(",")]
    if args.store == "prometheus" and shutil.which("prometheus") is None:
        sys.exit("bench-scale: `prometheus` not found: apt-get install -y prometheus")
    if args.store == "thanos" and not os.path.isfile(THANOS):
        sys.exit("bench-scale: Thanos not built: bash otel-collector/build-thanos.sh")

    work = tempfile.mkdtemp(prefix="bench-scale-")
    trace = os.path.join(work, "trace.jsonl")
    with open(trace, "w") as f:
        write_trace(f, args.label_sets)

    tier = Tier(work, args.interval, args.store)
    results = []
    try:
        tier.start()
        for n in counts:
            while len(tier.producers) < n:
                exposition = tier.add_producer(trace)
            series = series_count(exposition)
            sets = label_sets(exposition)
            time.sleep(2 * args.interval)
            cpu0, c0, t0 = tier.cpu(), tier.counters(), time.time()
            time.sleep(args.window)
            cpu1, c1, t1 = tier.cpu(), tier.counters(), time.time()
            secs = t1 - t0
            cores = {k: (cpu1[k] - cpu0[k]) / secs for k in cpu0}
            written = (c1["written"] - c0["written"]) / secs
            row = {
                "producers": n,
                "label_sets_per_producer": sets,
                "series_per_producer": series,
                "interval_s": args.interval,
                "offered_series_per_s": n * series / args.interval,
                "written_series_per_s": written,
                "gateway_cores": cores["gateway"],
                "agent_cores": cores["agent"],
                "producer_cores": cores["producers"],
                "store": args.store,
                "store_cores": cores["store"],
                "series_per_gateway_cpu_second": written / cores["gateway"] if cores["gateway"] else 0.0,
                "gateway_rss_mib": rss_mib(tier.processes["gateway"].pid),
                "agent_rss_mib": rss_mib(tier.processes["agent"].pid),
                "gateway_failed_points": c1["gateway_failed"] - c0["gateway_failed"],
                "gateway_refused_points": c1["gateway_refused"] - c0["gateway_refused"],
            }
            results.append(row)
            print(
                f"N={n}: {sets} label sets x {series} series per producer every {args.interval:g} s; "
                f"offered {row['offered_series_per_s']:,.0f} series/s, written {written:,.0f}/s; "
                f"cores: gateway {cores['gateway']:.2f}, agent {cores['agent']:.2f}, "
                f"producers {cores['producers']:.2f}, {args.store} {cores['store']:.2f}; "
                f"{row['series_per_gateway_cpu_second']:,.0f} series per gateway CPU-second; "
                f"RSS gateway {row['gateway_rss_mib']:.0f} MiB, agent {row['agent_rss_mib']:.0f} MiB; "
                f"failed {row['gateway_failed_points']:.0f}, refused {row['gateway_refused_points']:.0f}",
                flush=True,
            )
    finally:
        tier.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if args.keep:
        print(f"bench-scale: logs in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
