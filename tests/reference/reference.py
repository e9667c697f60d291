#!/usr/bin/env python3
"""Independent reference implementation of DESIGN.md §3 over the JSONL trace of §4.

Usage:
    python3 tests/reference/reference.py TRACE.jsonl [--max-model-len N]

Prints the final Prometheus text exposition (format 0.0.4) to stdout.  Invalid
lines are skipped entirely (reported on stderr as ``FILE:LINE: reason``; the
exit status stays 0 so the output can be piped/captured unconditionally).

Only the Python 3.11 standard library is used.  This file is deliberately
written without looking at the Rust implementation: it is the oracle the Rust
replay output is compared against (see compare.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

# ---------------------------------------------------------------------------
# Catalog (DESIGN §2).  Order matters: it is the exposition order.
# ---------------------------------------------------------------------------

PRE = [1, 2, 3, 4, 5, 10, 20]
N_BUCKETS = [1, 2, 5, 10, 20]
ITER = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
        2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LAT = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
       50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def tok_buckets(max_model_len: int) -> list[int]:
    """§2 TOK: 1-2-5 series up to max_model_len, then max_model_len itself
    unless it is already the last boundary."""
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            v = mantissa * scale
            if v > max_model_len:
                if not out or out[-1] != max_model_len:
                    out.append(max_model_len)
                return out
            out.append(v)
        scale *= 10


# (vLLM name, kind, bucket key, HELP) — the per-request tier, §2 table order.
PER_REQUEST = [
    ("vllm:num_preemptions", "counter", None,
     "Cumulative number of preemption events."),
    ("vllm:prompt_tokens", "counter", None,
     "Prompt tokens summed over sequences, including prefix-cache hits; each "
     "parallel-sampling child counts its prompt separately. Equals the sum of "
     "vllm:prompt_tokens_by_source_total."),
    ("vllm:prompt_tokens_by_source", "counter", None,
     "Number of prompt tokens by source."),
    ("vllm:prompt_tokens_cached", "counter", None,
     "Number of prompt tokens with prefix cache hits."),
    ("vllm:generation_tokens", "counter", None,
     "Number of generation tokens processed."),
    ("vllm:request_success", "counter", None,
     "Count of successfully processed requests."),
    ("vllm:iteration_tokens_total", "histogram", "ITER",
     "Histogram of computed prompt and generated tokens per nonempty engine output batch."),
    ("vllm:request_prompt_tokens", "histogram", "TOK",
     "Prompt length of each finished sequence; each parallel-sampling child is one observation."),
    ("vllm:request_generation_tokens", "histogram", "TOK",
     "Number of generation tokens processed."),
    ("vllm:request_max_num_generation_tokens", "histogram", "TOK",
     "Histogram of maximum number of requested generation tokens."),
    ("vllm:request_params_max_tokens", "histogram", "TOK",
     "Histogram of the max_tokens request parameter."),
    ("vllm:request_params_n", "histogram", "N",
     "Histogram of the n request parameter."),
    ("vllm:request_num_preemptions", "histogram", "PRE",
     "Histogram of the number of times a request was preempted."),
    ("vllm:request_prefill_kv_computed_tokens", "histogram", "TOK",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens)."),
    ("vllm:time_to_first_token_seconds", "histogram", "TTFT",
     "Histogram of time to first token in seconds."),
    ("vllm:inter_token_latency_seconds", "histogram", "ITL",
     "Histogram of inter-token latency in seconds."),
    ("vllm:e2e_request_latency_seconds", "histogram", "LAT",
     "Histogram of e2e request latency in seconds."),
    ("vllm:request_queue_time_seconds", "histogram", "LAT",
     "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_prefill_time_seconds", "histogram", "LAT",
     "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_decode_time_seconds", "histogram", "LAT",
     "Histogram of time spent in DECODE phase for request."),
    ("vllm:request_inference_time_seconds", "histogram", "LAT",
     "Histogram of time spent in RUNNING phase for request."),
    ("vllm:request_time_per_output_token_seconds", "histogram", "ITL",
     "Histogram of time_per_output_token_seconds per request."),
]

# The scheduler tier, §2 second table order.
SCHEDULER = [
    ("vllm:num_requests_running", "gauge", None,
     "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "gauge", None,
     "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "gauge", None,
     "KV-cache usage. 1 means 100 percent usage."),
    ("vllm:prefix_cache_queries", "counter", None,
     "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "counter", None,
     "Prefix cache hits, in terms of number of cached tokens."),
]

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
EVENT_TYPES = ("queued", "scheduled", "preempted")
U64_MAX = 2**64 - 1


# ---------------------------------------------------------------------------
# Trace parsing and validation (§4).  Every line is fully validated into
# plain dataclasses before anything is applied, so an invalid line changes
# nothing ("skipped entirely").
# ---------------------------------------------------------------------------

class Invalid(Exception):
    """Raised for a line that does not fit §4."""


_MISSING = object()


def _get(obj: dict, key: str, required: bool) -> Any:
    """Fetch a field.  Optional fields that are absent *or null* return
    _MISSING (resolution of an ambiguity: null is treated as absent for
    every optional field, as §4 states explicitly for max_tokens)."""
    if key not in obj:
        if required:
            raise Invalid(f"missing field `{key}`")
        return _MISSING
    value = obj[key]
    if value is None:
        if required:
            raise Invalid(f"field `{key}` is null")
        return _MISSING
    return value


def req_str(obj: dict, key: str) -> str:
    v = _get(obj, key, True)
    if not isinstance(v, str):
        raise Invalid(f"field `{key}`: expected a string")
    return v


def as_uint(v: Any, key: str) -> int:
    # bool is a subclass of int in Python: reject it explicitly.
    if isinstance(v, bool) or not isinstance(v, int):
        raise Invalid(f"field `{key}`: expected an unsigned integer")
    if v < 0 or v > U64_MAX:
        raise Invalid(f"field `{key}`: out of range for an unsigned integer")
    return v


def as_float(v: Any, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Invalid(f"field `{key}`: expected a number")
    try:
        f = float(v)
    except OverflowError:
        raise Invalid(f"field `{key}`: number out of range") from None
    if not math.isfinite(f):
        raise Invalid(f"field `{key}`: non-finite number")
    return f


def req_uint(obj: dict, key: str) -> int:
    return as_uint(_get(obj, key, True), key)


def req_float(obj: dict, key: str) -> float:
    return as_float(_get(obj, key, True), key)


def opt_uint(obj: dict, key: str) -> Optional[int]:
    v = _get(obj, key, False)
    return None if v is _MISSING else as_uint(v, key)


def req_obj(v: Any, what: str) -> dict:
    if not isinstance(v, dict):
        raise Invalid(f"{what}: expected an object")
    return v


def req_list(v: Any, what: str) -> list:
    if not isinstance(v, list):
        raise Invalid(f"{what}: expected an array")
    return v


@dataclass
class RequestRec:
    request_id: str
    model_name: str
    engine: int
    arrival_time: float
    prompt_len: int
    max_tokens: Optional[int]
    n: int


@dataclass
class Event:
    type: str
    timestamp: float


@dataclass
class PrefillStats:
    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0


@dataclass
class Output:
    request_id: str
    num_new_tokens: int
    events: list[Event]
    prefill_stats: Optional[PrefillStats]
    finish_reason: Optional[str]


@dataclass
class OutputsRec:
    engine: int
    timestamp: float
    received_at: float
    outputs: list[Output]


@dataclass
class AbortRec:
    request_id: str
    received_at: float


@dataclass
class SchedulerStatsRec:
    model_name: str
    engine: int
    num_running_reqs: int
    num_waiting_reqs: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int


def _reject_constant(name: str) -> Any:
    # json accepts NaN / Infinity / -Infinity literals; §4 says non-finite
    # numbers make the line invalid (and they are not JSON anyway).
    raise Invalid(f"non-finite number literal {name}")


def parse_event(v: Any) -> Event:
    obj = req_obj(v, "event")
    etype = req_str(obj, "type")
    if etype not in EVENT_TYPES:
        raise Invalid(f"unknown event type {etype!r}")
    ts = req_float(obj, "timestamp")
    reason = _get(obj, "reason", False)
    if reason is not _MISSING and not isinstance(reason, str):
        raise Invalid("event field `reason`: expected a string")
    return Event(etype, ts)


def parse_prefill_stats(v: Any) -> PrefillStats:
    obj = req_obj(v, "prefill_stats")
    ps = PrefillStats()
    for name in ("num_prompt_tokens", "num_computed_tokens", "num_cached_tokens",
                 "num_local_cached_tokens", "num_external_cached_tokens"):
        value = opt_uint(obj, name)
        if value is not None:          # fields default to 0 (§4)
            setattr(ps, name, value)
    return ps


def parse_output(v: Any) -> Output:
    obj = req_obj(v, "output")
    rid = req_str(obj, "request_id")
    tokens = req_list(_get(obj, "new_token_ids", True), "new_token_ids")
    for t in tokens:
        as_uint(t, "new_token_ids[]")
    events_raw = _get(obj, "events", False)
    events = ([] if events_raw is _MISSING
              else [parse_event(e) for e in req_list(events_raw, "events")])
    ps_raw = _get(obj, "prefill_stats", False)
    ps = None if ps_raw is _MISSING else parse_prefill_stats(ps_raw)
    fr = _get(obj, "finish_reason", False)
    if fr is _MISSING:
        fr = None
    elif not isinstance(fr, str) or fr not in FINISH_REASONS:
        raise Invalid(f"unknown finish reason {fr!r}")
    return Output(rid, len(tokens), events, ps, fr)


def parse_line(text: str):
    """Return a record dataclass, or raise Invalid."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except Invalid:
        raise
    except (ValueError, RecursionError) as e:
        raise Invalid(f"bad JSON: {e}") from None
    obj = req_obj(value, "line")
    rtype = req_str(obj, "type")
    if rtype == "request":
        n = opt_uint(obj, "n")
        return RequestRec(
            request_id=req_str(obj, "request_id"),
            model_name=req_str(obj, "model_name"),
            engine=req_uint(obj, "engine"),
            arrival_time=req_float(obj, "arrival_time"),
            prompt_len=req_uint(obj, "prompt_len"),
            max_tokens=opt_uint(obj, "max_tokens"),
            n=1 if n is None else n,            # n defaults to 1 (§4)
        )
    if rtype == "outputs":
        return OutputsRec(
            engine=req_uint(obj, "engine"),
            timestamp=req_float(obj, "timestamp"),
            received_at=req_float(obj, "received_at"),
            outputs=[parse_output(o)
                     for o in req_list(_get(obj, "outputs", True), "outputs")],
        )
    if rtype == "abort":
        return AbortRec(req_str(obj, "request_id"), req_float(obj, "received_at"))
    if rtype == "scheduler_stats":
        return SchedulerStatsRec(
            model_name=req_str(obj, "model_name"),
            engine=req_uint(obj, "engine"),
            num_running_reqs=req_uint(obj, "num_running_reqs"),
            num_waiting_reqs=req_uint(obj, "num_waiting_reqs"),
            kv_cache_usage=req_float(obj, "kv_cache_usage"),
            prefix_cache_queries=req_uint(obj, "prefix_cache_queries"),
            prefix_cache_hits=req_uint(obj, "prefix_cache_hits"),
        )
    raise Invalid(f"unknown record type {rtype!r}")


# ---------------------------------------------------------------------------
# Metric state: counters, histograms and gauges keyed by label tuples
# (model_name, engine[, finished_reason | source]).
# ---------------------------------------------------------------------------

class Histogram:
    """Explicit-bucket histogram; `le` is inclusive (v counts in every bucket
    whose upper bound >= v).  Sum accumulates in float in observation order."""

    def __init__(self, bounds: list):
        self.bounds = bounds
        self.cumulative = [0] * len(bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.sum += float(v)
        self.count += 1
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.cumulative[i] += 1


class Metrics:
    def __init__(self, max_model_len: int):
        buckets = {"PRE": PRE, "N": N_BUCKETS, "ITER": ITER,
                   "TOK": tok_buckets(max_model_len),
                   "TTFT": TTFT, "ITL": ITL, "LAT": LAT}
        self.bounds = {name: buckets[key]
                       for name, kind, key, _ in PER_REQUEST if kind == "histogram"}
        # family name -> {label tuple -> value}
        self.series: dict[str, dict[tuple, Any]] = {
            name: {} for name, _, _, _ in PER_REQUEST + SCHEDULER}

    # §3 "Series appear as soon as a request of that (model, engine) starts":
    # every per-request family except request_success (whose series appear
    # per finished_reason on first use) gets its zero-valued series.
    def ensure_label_set(self, model: str, engine: int) -> None:
        labels = (model, engine)
        for name, kind, _, _ in PER_REQUEST:
            fam = self.series[name]
            if name == "vllm:request_success":
                continue
            if name == "vllm:prompt_tokens_by_source":
                for src in SOURCES:
                    fam.setdefault(labels + (src,), 0)
            elif kind == "counter":
                fam.setdefault(labels, 0)
            else:
                if labels not in fam:
                    fam[labels] = Histogram(self.bounds[name])

    def add(self, name: str, labels: tuple, amount: int) -> None:
        fam = self.series[name]
        fam[labels] = fam.get(labels, 0) + amount

    def observe(self, name: str, labels: tuple, value: float) -> None:
        fam = self.series[name]
        if labels not in fam:          # cannot happen for started label sets
            fam[labels] = Histogram(self.bounds[name])
        fam[labels].observe(value)

    def set_gauge(self, name: str, labels: tuple, value) -> None:
        self.series[name][labels] = value


# ---------------------------------------------------------------------------
# Tracker (§3)
# ---------------------------------------------------------------------------

def d(end: float, start: float) -> float:
    """§3: d(end, start) = end - start if end > 0 && start > 0 && end >= start, else 0."""
    if end > 0 and start > 0 and end >= start:
        return end - start
    return 0.0


@dataclass
class RequestState:
    """Per-request state; §3: starts prefilling, all timestamps 0, counts 0."""
    rec: RequestRec
    prefilling: bool = True
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    num_tokens: int = 0
    num_preemptions: int = 0
    num_cached_tokens: int = 0

    @property
    def labels(self) -> tuple:
        return (self.rec.model_name, self.rec.engine)


class Tracker:
    def __init__(self, metrics: Metrics):
        self.m = metrics
        self.live: dict[str, RequestState] = {}
        self.unknown_inputs = 0   # mirrors the internal self-telemetry counter

    # -- request start ------------------------------------------------------
    def start(self, rec: RequestRec) -> None:
        # §3: a second start for a live request id changes no metric.
        if rec.request_id in self.live:
            self.unknown_inputs += 1
            return
        self.live[rec.request_id] = RequestState(rec)
        self.m.ensure_label_set(rec.model_name, rec.engine)

    # -- one engine-core output (§3 steps 1-5) ------------------------------
    def apply_output(self, st: RequestState, out: Output, ts: float, rx: float) -> None:
        labels = st.labels
        ps = out.prefill_stats
        # 1. prefill_stats present -> remember num_cached_tokens.
        if ps is not None:
            st.num_cached_tokens = ps.num_cached_tokens
        # 2. generation tokens, request token count.
        self.m.add("vllm:generation_tokens", labels, out.num_new_tokens)
        st.num_tokens += out.num_new_tokens
        # 3. events in order.
        for ev in out.events:
            if ev.type == "queued":
                st.queued_ts = ev.timestamp
            elif ev.type == "scheduled":
                if st.scheduled_ts == 0:
                    st.scheduled_ts = ev.timestamp
            elif ev.type == "preempted":
                st.num_preemptions += 1
                self.m.add("vllm:num_preemptions", labels, 1)
        # 4. token-carrying output: first token (TTFT) or ITL.
        if out.num_new_tokens > 0:
            if st.prefilling:
                if ps is not None:
                    self.m.add("vllm:prompt_tokens", labels, ps.num_prompt_tokens)
                    self.m.add("vllm:prompt_tokens_by_source", labels + ("local_compute",),
                               ps.num_computed_tokens)
                    self.m.add("vllm:prompt_tokens_by_source", labels + ("local_cache_hit",),
                               ps.num_local_cached_tokens)
                    self.m.add("vllm:prompt_tokens_by_source", labels + ("external_kv_transfer",),
                               ps.num_external_cached_tokens)
                    self.m.add("vllm:prompt_tokens_cached", labels, ps.num_cached_tokens)
                self.m.observe("vllm:time_to_first_token_seconds", labels,
                               rx - st.rec.arrival_time)
                st.first_token_ts = ts
                st.prefilling = False
            elif st.last_token_ts > 0:
                self.m.observe("vllm:inter_token_latency_seconds", labels,
                               ts - st.last_token_ts)
            st.last_token_ts = ts
        # 5. finish_reason present -> terminal recording at rx.
        if out.finish_reason is not None:
            self.terminate(st, out.finish_reason, rx)

    # -- one outputs batch ----------------------------------------------------
    def apply_batch(self, rec: OutputsRec) -> None:
        # Per batch: iteration tokens grouped by the requests' label set,
        # over outputs of requests known (live) at the moment they are applied.
        iteration: dict[tuple, int] = {}
        for out in rec.outputs:
            st = self.live.get(out.request_id)
            if st is None:
                self.unknown_inputs += 1       # unknown / already finished
                continue
            computed = out.prefill_stats.num_computed_tokens if out.prefill_stats else 0
            iteration[st.labels] = iteration.get(st.labels, 0) + out.num_new_tokens + computed
            self.apply_output(st, out, rec.timestamp, rec.received_at)
        for labels, total in iteration.items():
            if total > 0:
                self.m.observe("vllm:iteration_tokens_total", labels, total)

    # -- explicit abort -------------------------------------------------------
    def abort(self, rec: AbortRec) -> None:
        st = self.live.get(rec.request_id)
        if st is None:
            self.unknown_inputs += 1
            return
        self.terminate(st, "abort", rec.received_at)

    # -- terminal recording, exactly once per request (§3) ---------------------
    def terminate(self, st: RequestState, reason: str, rx: float) -> None:
        del self.live[st.rec.request_id]       # later input for this id is unknown
        labels = st.labels
        rec = st.rec
        m = self.m
        m.add("vllm:request_success", labels + (reason,), 1)
        m.observe("vllm:request_prompt_tokens", labels, rec.prompt_len)
        m.observe("vllm:request_generation_tokens", labels, st.num_tokens)
        m.observe("vllm:request_max_num_generation_tokens", labels, st.num_tokens)
        if rec.max_tokens is not None:
            m.observe("vllm:request_params_max_tokens", labels, rec.max_tokens)
        m.observe("vllm:request_params_n", labels, rec.n)
        m.observe("vllm:request_num_preemptions", labels, st.num_preemptions)  # zero included
        m.observe("vllm:request_prefill_kv_computed_tokens", labels,
                  max(rec.prompt_len - st.num_cached_tokens, 0))
        m.observe("vllm:e2e_request_latency_seconds", labels, rx - rec.arrival_time)
        m.observe("vllm:request_queue_time_seconds", labels, d(st.scheduled_ts, st.queued_ts))
        m.observe("vllm:request_prefill_time_seconds", labels,
                  d(st.first_token_ts, st.scheduled_ts))
        decode = d(st.last_token_ts, st.first_token_ts)
        m.observe("vllm:request_decode_time_seconds", labels, decode)
        m.observe("vllm:request_inference_time_seconds", labels,
                  d(st.last_token_ts, st.scheduled_ts))
        tpot = decode / (st.num_tokens - 1) if st.num_tokens > 1 else 0.0
        m.observe("vllm:request_time_per_output_token_seconds", labels, tpot)

    # -- scheduler tier -----------------------------------------------------
    def scheduler_stats(self, rec: SchedulerStatsRec) -> None:
        labels = (rec.model_name, rec.engine)
        # Gauges take the latest value; the two counters add per-step amounts.
        self.m.set_gauge("vllm:num_requests_running", labels, rec.num_running_reqs)
        self.m.set_gauge("vllm:num_requests_waiting", labels, rec.num_waiting_reqs)
        self.m.set_gauge("vllm:kv_cache_usage_perc", labels, rec.kv_cache_usage)
        self.m.add("vllm:prefix_cache_queries", labels, rec.prefix_cache_queries)
        self.m.add("vllm:prefix_cache_hits", labels, rec.prefix_cache_hits)

    def apply(self, rec) -> None:
        if isinstance(rec, RequestRec):
            self.start(rec)
        elif isinstance(rec, OutputsRec):
            self.apply_batch(rec)
        elif isinstance(rec, AbortRec):
            self.abort(rec)
        else:
            self.scheduler_stats(rec)
    # Requests still live at end of trace are deliberately NOT recorded.


# ---------------------------------------------------------------------------
# Exposition
# ---------------------------------------------------------------------------

def escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def fmt_float(x) -> str:
    return repr(float(x))


def label_str(labels: tuple, extra_name: Optional[str], le: Optional[str] = None) -> str:
    parts = [f'model_name="{escape_label(labels[0])}"', f'engine="{labels[1]}"']
    if extra_name is not None:
        parts.append(f'{extra_name}="{escape_label(labels[2])}"')
    if le is not None:
        parts.append(f'le="{le}"')
    return "{" + ",".join(parts) + "}"


EXTRA_LABEL = {"vllm:request_success": "finished_reason",
               "vllm:prompt_tokens_by_source": "source"}
FLOAT_GAUGES = {"vllm:kv_cache_usage_perc"}


def render(m: Metrics) -> str:
    lines: list[str] = []
    for name, kind, _, help_text in PER_REQUEST + SCHEDULER:
        exposed = name + "_total" if kind == "counter" else name
        lines.append(f"# HELP {exposed} {help_text}")
        lines.append(f"# TYPE {exposed} {kind}")
        extra = EXTRA_LABEL.get(name)
        # Sorted by label values; engine is an int so it compares numerically.
        for labels in sorted(m.series[name]):
            value = m.series[name][labels]
            if kind == "histogram":
                h: Histogram = value
                for b, c in zip(h.bounds, h.cumulative):
                    lines.append(f"{name}_bucket{label_str(labels, extra, fmt_float(b))} {c}")
                lines.append(f"{name}_bucket{label_str(labels, extra, '+Inf')} {h.count}")
                lines.append(f"{name}_sum{label_str(labels, extra)} {fmt_float(h.sum)}")
                lines.append(f"{name}_count{label_str(labels, extra)} {h.count}")
            elif kind == "counter":
                lines.append(f"{exposed}{label_str(labels, extra)} {int(value)}")
            elif name in FLOAT_GAUGES:
                lines.append(f"{name}{label_str(labels, extra)} {fmt_float(value)}")
            else:
                lines.append(f"{name}{label_str(labels, extra)} {int(value)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def run(path: str, max_model_len: int, errors) -> str:
    tracker = Tracker(Metrics(max_model_len))
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for lineno, raw in enumerate(stream, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                errors(f"{path}:{lineno}: invalid UTF-8")
                continue
            if text.strip() == "":
                continue                      # blank lines are ignored
            try:
                rec = parse_line(text)
            except Invalid as e:
                errors(f"{path}:{lineno}: {e}")
                continue
            tracker.apply(rec)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    return render(tracker.m)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="JSONL trace file ('-' for stdin)")
    ap.add_argument("--max-model-len", type=int, default=131072)
    ap.add_argument("--quiet", action="store_true", help="do not report invalid lines on stderr")
    args = ap.parse_args(argv)
    if args.max_model_len < 1:
        ap.error("--max-model-len must be >= 1")
    report = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    sys.stdout.write(run(args.trace, args.max_model_len, report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
