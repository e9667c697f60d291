#!/usr/bin/env python3
"""Per-request cost of vLLM's lifecycle metrics with Python's prometheus_client.

The counterpart of `cargo bench --bench lifecycle` for vLLM's Python frontend:
the same canonical request (512-token prompt, 128 single-token outputs, the
first with queued/scheduled events and prefill stats, two preempted/scheduled
pairs during decode, finished by `length`) recorded into prometheus_client
Counters and Histograms with vLLM's names, buckets and labels. Children are
resolved once per label set (`.labels(model_name=..., engine=...)`), as vLLM's
Python frontend does; each request then makes the same observations and
increments as the Rust tracker.

    pip install -r benches/python/requirements.txt
    python3 benches/python/lifecycle.py [--requests N] [--rounds R]

Prints `lifecycle: python_prometheus_client=<ns> ns/request` (the median of
the rounds' mean time per request).
"""

import argparse
import statistics
import time

from prometheus_client import CollectorRegistry, Counter, Histogram

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ENGINE = "0"
PROMPT_LEN = 512
OUTPUTS = 128
PREEMPTED_AT = (40, 90)
MAX_MODEL_LEN = 131072

# Bucket boundaries as in src/catalog.rs.
PREEMPTION_BUCKETS = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]
N_BUCKETS = [1.0, 2.0, 5.0, 10.0, 20.0]
ITERATION_BUCKETS = [1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
                     2048.0, 4096.0, 8192.0, 16384.0]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
               2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                   40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def token_buckets(max_model_len):
    """The 1-2-5 series up to max_model_len, then max_model_len itself."""
    bounds, decade = [], 1
    while True:
        for mantissa in (1, 2, 5):
            bound = mantissa * decade
            if bound > max_model_len:
                if bounds[-1] != max_model_len:
                    bounds.append(float(max_model_len))
                return bounds
            bounds.append(float(bound))
        decade *= 10


TOKEN_BUCKETS = token_buckets(MAX_MODEL_LEN)
ENGINE_LABELS = ["model_name", "engine"]
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")

QUEUED, SCHEDULED, PREEMPTED = 0, 1, 2


class Metrics:
    """The 22 per-request families in one registry."""

    def __init__(self):
        r = CollectorRegistry()

        def counter(name, doc, labels=ENGINE_LABELS):
            return Counter(name, doc, labels, registry=r)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, ENGINE_LABELS, buckets=buckets, registry=r)

        self.registry = r
        self.num_preemptions = counter("vllm:num_preemptions", "Preemptions.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens.")
        self.prompt_tokens_by_source = counter(
            "vllm:prompt_tokens_by_source", "Prompt tokens by source.",
            ENGINE_LABELS + ["source"])
        self.prompt_tokens_cached = counter("vllm:prompt_tokens_cached", "Cached.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated.")
        self.request_success = counter(
            "vllm:request_success", "Finished.", ENGINE_LABELS + ["finished_reason"])
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Per batch.", ITERATION_BUCKETS)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Prompt.", TOKEN_BUCKETS)
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Generation.", TOKEN_BUCKETS)
        self.request_max_num_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens", "Max generation.", TOKEN_BUCKETS)
        self.request_params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "max_tokens.", TOKEN_BUCKETS)
        self.request_params_n = histogram("vllm:request_params_n", "n.", N_BUCKETS)
        self.request_num_preemptions = histogram(
            "vllm:request_num_preemptions", "Preemptions.", PREEMPTION_BUCKETS)
        self.request_prefill_kv_computed_tokens = histogram(
            "vllm:request_prefill_kv_computed_tokens", "KV computed.", TOKEN_BUCKETS)
        self.time_to_first_token = histogram(
            "vllm:time_to_first_token_seconds", "TTFT.", TTFT_BUCKETS)
        self.inter_token_latency = histogram(
            "vllm:inter_token_latency_seconds", "ITL.", ITL_BUCKETS)
        self.e2e_request_latency = histogram(
            "vllm:e2e_request_latency_seconds", "E2E.", LATENCY_BUCKETS)
        self.request_queue_time = histogram(
            "vllm:request_queue_time_seconds", "Queue.", LATENCY_BUCKETS)
        self.request_prefill_time = histogram(
            "vllm:request_prefill_time_seconds", "Prefill.", LATENCY_BUCKETS)
        self.request_decode_time = histogram(
            "vllm:request_decode_time_seconds", "Decode.", LATENCY_BUCKETS)
        self.request_inference_time = histogram(
            "vllm:request_inference_time_seconds", "Inference.", LATENCY_BUCKETS)
        self.request_time_per_output_token = histogram(
            "vllm:request_time_per_output_token_seconds", "TPOT.", ITL_BUCKETS)


class Children:
    """The children of one (model_name, engine) label set, resolved once."""

    def __init__(self, m, model_name, engine):
        labels = {"model_name": model_name, "engine": engine}
        self.num_preemptions = m.num_preemptions.labels(**labels)
        self.prompt_tokens = m.prompt_tokens.labels(**labels)
        self.prompt_tokens_by_source = [
            m.prompt_tokens_by_source.labels(source=s, **labels) for s in SOURCES]
        self.prompt_tokens_cached = m.prompt_tokens_cached.labels(**labels)
        self.generation_tokens = m.generation_tokens.labels(**labels)
        self.request_success = {
            reason: m.request_success.labels(finished_reason=reason, **labels)
            for reason in ("stop", "length", "abort", "error", "repetition")}
        self.iteration_tokens = m.iteration_tokens.labels(**labels)
        self.request_prompt_tokens = m.request_prompt_tokens.labels(**labels)
        self.request_generation_tokens = m.request_generation_tokens.labels(**labels)
        self.request_max_num_generation_tokens = (
            m.request_max_num_generation_tokens.labels(**labels))
        self.request_params_max_tokens = m.request_params_max_tokens.labels(**labels)
        self.request_params_n = m.request_params_n.labels(**labels)
        self.request_num_preemptions = m.request_num_preemptions.labels(**labels)
        self.request_prefill_kv_computed_tokens = (
            m.request_prefill_kv_computed_tokens.labels(**labels))
        self.time_to_first_token = m.time_to_first_token.labels(**labels)
        self.inter_token_latency = m.inter_token_latency.labels(**labels)
        self.e2e_request_latency = m.e2e_request_latency.labels(**labels)
        self.request_queue_time = m.request_queue_time.labels(**labels)
        self.request_prefill_time = m.request_prefill_time.labels(**labels)
        self.request_decode_time = m.request_decode_time.labels(**labels)
        self.request_inference_time = m.request_inference_time.labels(**labels)
        self.request_time_per_output_token = (
            m.request_time_per_output_token.labels(**labels))


def diff_or_zero(end, start):
    return end - start if end > 0.0 and start > 0.0 and end >= start else 0.0


class Request:
    """One request's lifecycle state (the rules of src/tracker.rs)."""

    __slots__ = ("h", "arrival_time", "prompt_len", "max_tokens", "n",
                 "is_prefilling", "queued_ts", "scheduled_ts", "first_token_ts",
                 "last_token_ts", "num_generation_tokens", "num_preemptions",
                 "latest_num_cached_tokens", "terminated")

    def __init__(self, children, arrival_time, prompt_len, max_tokens, n):
        self.h = children
        self.arrival_time = arrival_time
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.n = n
        self.is_prefilling = True
        self.queued_ts = self.scheduled_ts = 0.0
        self.first_token_ts = self.last_token_ts = 0.0
        self.num_generation_tokens = 0
        self.num_preemptions = 0
        self.latest_num_cached_tokens = 0
        self.terminated = False

    def observe_output(self, batch_ts, received_at, output):
        if self.terminated:
            return True
        new_tokens, events, prefill_stats, finish_reason = output
        h = self.h
        if prefill_stats is not None:
            self.latest_num_cached_tokens = prefill_stats[2]
        self.num_generation_tokens += new_tokens
        h.generation_tokens.inc(new_tokens)
        for kind, ts in events:
            if kind == QUEUED:
                self.queued_ts = ts
            elif kind == SCHEDULED:
                if self.scheduled_ts == 0.0:
                    self.scheduled_ts = ts
            else:
                self.num_preemptions += 1
                h.num_preemptions.inc(1)
        if new_tokens:
            if self.is_prefilling:
                if prefill_stats is not None:
                    prompt, computed, cached, local, external = prefill_stats
                    h.prompt_tokens.inc(prompt)
                    by_source = h.prompt_tokens_by_source
                    by_source[0].inc(computed)
                    by_source[1].inc(local)
                    by_source[2].inc(external)
                    h.prompt_tokens_cached.inc(cached)
                h.time_to_first_token.observe(received_at - self.arrival_time)
                self.first_token_ts = batch_ts
                self.is_prefilling = False
            elif self.last_token_ts > 0.0:
                h.inter_token_latency.observe(batch_ts - self.last_token_ts)
            self.last_token_ts = batch_ts
        if finish_reason is not None:
            self.finish(received_at, finish_reason)
        return self.terminated

    def finish(self, received_at, reason):
        if self.terminated:
            return
        self.terminated = True
        h = self.h
        tokens = self.num_generation_tokens
        h.request_success[reason].inc()
        h.request_prompt_tokens.observe(self.prompt_len)
        h.request_generation_tokens.observe(tokens)
        h.request_max_num_generation_tokens.observe(tokens)
        if self.max_tokens is not None:
            h.request_params_max_tokens.observe(self.max_tokens)
        h.request_params_n.observe(self.n)
        h.request_num_preemptions.observe(self.num_preemptions)
        h.request_prefill_kv_computed_tokens.observe(
            max(self.prompt_len - self.latest_num_cached_tokens, 0))
        h.e2e_request_latency.observe(received_at - self.arrival_time)
        h.request_queue_time.observe(diff_or_zero(self.scheduled_ts, self.queued_ts))
        h.request_prefill_time.observe(
            diff_or_zero(self.first_token_ts, self.scheduled_ts))
        decode = diff_or_zero(self.last_token_ts, self.first_token_ts)
        h.request_decode_time.observe(decode)
        h.request_inference_time.observe(
            diff_or_zero(self.last_token_ts, self.scheduled_ts))
        h.request_time_per_output_token.observe(
            decode / (tokens - 1) if tokens > 1 else 0.0)


ARRIVAL_TIME = 1_700_000_000.0


def canonical_steps():
    """(batch_ts, received_at, (new_tokens, events, prefill_stats, finish_reason))."""
    steps = []
    batch_ts = 10.2
    for i in range(OUTPUTS):
        # One token every 18 to 30 ms, 250 ms more after a preemption.
        if i > 0:
            batch_ts += 0.018 + 0.004 * (i % 4)
            if i in PREEMPTED_AT:
                batch_ts += 0.25
        received_at = ARRIVAL_TIME + 0.25 + (batch_ts - 10.2)
        events, prefill_stats, finish_reason = (), None, None
        if i == 0:
            events = ((QUEUED, 10.0), (SCHEDULED, 10.05))
            prefill_stats = (PROMPT_LEN, 448, 64, 64, 0)
        if i in PREEMPTED_AT:
            events = ((PREEMPTED, batch_ts - 0.24), (SCHEDULED, batch_ts - 0.02))
        if i == OUTPUTS - 1:
            finish_reason = "length"
        steps.append((batch_ts, received_at, (1, events, prefill_stats, finish_reason)))
    return steps


def run_request(children, steps):
    request = Request(children, ARRIVAL_TIME, PROMPT_LEN, OUTPUTS, 1)
    for batch_ts, received_at, output in steps:
        request.observe_output(batch_ts, received_at, output)
    assert request.terminated


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000,
                        help="timed requests in total (default 20000)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds the timed requests are split into (default 10)")
    args = parser.parse_args()

    metrics = Metrics()
    children = Children(metrics, MODEL, ENGINE)
    steps = canonical_steps()
    for _ in range(max(args.requests // 20, 10)):  # warm-up
        run_request(children, steps)

    per_round = max(args.requests // args.rounds, 1)
    samples = []
    for _ in range(args.rounds):
        start = time.perf_counter_ns()
        for _ in range(per_round):
            run_request(children, steps)
        samples.append((time.perf_counter_ns() - start) / per_round)

    # Sanity: two preemptions per request, every request observed once.
    total = metrics.registry.get_sample_value(
        "vllm:request_num_preemptions_count", {"model_name": MODEL, "engine": ENGINE})
    preemptions = metrics.registry.get_sample_value(
        "vllm:request_num_preemptions_sum", {"model_name": MODEL, "engine": ENGINE})
    assert preemptions == 2 * total, (preemptions, total)

    print(f"lifecycle: python_prometheus_client={statistics.median(samples):.1f} ns/request")


if __name__ == "__main__":
    main()
