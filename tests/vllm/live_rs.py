"""A live vLLM engine under its Rust frontend (``vllm-rs``), with the
engine-core tap as the only source, started as a vLLM user starts it.

Runs ``vllm serve`` (vLLM's CPU build, through :mod:`vllm_cli`) on the tiny
model of :mod:`tiny_model` with ``VLLM_USE_RUST_FRONTEND=1`` and
``VLLM_RUST_FRONTEND_PATH`` set to the ``vllm-rs`` binary, and nothing else
started by hand: the tap (``vllm_otel_metrics.tap``, a
``vllm.general_plugins`` entry point) starts the sidecar from vLLM's main
process. The environment carries ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the
plugin's ``VLLM_OTEL_METRICS_*`` settings (a free ``/metrics`` port, a log
file; no ingest target: the sidecar must listen on TCP for ``/metrics``
only, as the report's ``sidecar_tcp_listeners`` shows).

The load, bounded in count and time: concurrent completions into a KV cache
small enough to preempt, some of them streams the client drops after the
first chunk, then a few requests with a stop string that is sure to match
(taken from a first greedy completion of the same prompt). Then both
``/metrics`` are compared sample by sample on every ``vllm:`` family both
have: vllm-rs serves OpenMetrics text, the sidecar Prometheus text. At the
end vLLM is stopped and the sidecar must be gone.

    python live_rs.py --model DIR --vllm-rs BIN --report OUT.json --log-dir DIR

Writes what it saw as JSON (the caller judges it); exits non-zero only when
the run itself failed.
"""

import argparse
import asyncio
import json
import math
import os
import re
import subprocess
import sys
import time

import aiohttp
from vllm_otel_metrics import config
from vllm_otel_metrics.sidecar import alive, read_record

from expositions import openmetrics, rounded_apart
from live import (
    BLOCK_SIZE,
    MAX_MODEL_LEN,
    MODEL_NAME,
    SIDECAR_PID,
    Load,
    attribution_options,
    free_port,
    get,
    percentile,
    stop,
    tcp_listeners,
    vllm_env,
    wait,
)

#: Families timed on the frontend's clock by vllm-rs (the time it polled
#: the output, or dropped the stream) and on the engine core's by the tap
#: (the time the frame was sent, or the abort received): their `_count`
#: must be equal, their `_sum` within :data:`CLOCK_TOLERANCE`; their buckets
#: are only counted.
FRONTEND_CLOCK = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds")
CLOCK_TOLERANCE = 0.02

# --- Expositions ------------------------------------------------------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+\S+)?$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


#: The class labels of ``--attribute``: on the sidecar's ``vllm_class:``
#: families, never on its ``vllm:`` ones (the classes summed away there).
CLASS_LABELS = ("lora_name", "priority")


def classed_samples(families: dict, labels=CLASS_LABELS) -> int:
    """How many samples of ``families`` (as :func:`parse` returns them)
    carry one of ``labels``."""
    return sum(
        1 for samples in families.values() for (_, key) in samples if any(k in labels for k, _ in key)
    )


def parse(text: str) -> dict:
    """``{family: {(sample name, labels): value}}`` of every ``vllm:``
    family of an exposition, Prometheus or OpenMetrics text alike: ``labels``
    is a sorted tuple of pairs, a bucket's ``le`` a float (``1`` and ``1.0``,
    ``1e+06`` and ``1000000.0`` are one bound), the value a float. A
    counter's family is its name without ``_total`` (OpenMetrics writes
    ``# TYPE x counter``, Prometheus text ``# TYPE x_total counter``).
    ``_created`` samples are the client library's, not vLLM's metrics."""
    types = {}
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line == "# EOF":
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = SAMPLE.match(line)
        if m is None:
            raise ValueError(f"not a sample line: {line!r}")
        name, raw_labels, raw_value = m.groups()
        if not name.startswith("vllm:") or name.endswith("_created"):
            continue
        family = _family(name, types)
        labels = {k: _unescape(v) for k, v in LABEL.findall(raw_labels or "")}
        if "le" in labels:
            labels["le"] = float(labels["le"])
        value = float(raw_value)
        out.setdefault(family, {})[(name, tuple(sorted(labels.items())))] = value
    return out


def _family(name: str, types: dict) -> str:
    if name in types and types[name] not in ("counter",):
        return name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in types:
                return base
    if name in types:  # a counter declared with its `_total`
        return name[: -len("_total")] if name.endswith("_total") else name
    return name


def total(families: dict, family: str, sample: str, **labels) -> float:
    """The sum of ``sample``'s values in ``family`` over the series that
    carry ``labels``."""
    return sum(
        v
        for (name, key), v in families.get(family, {}).items()
        if name == sample and all(dict(key).get(k) == want for k, want in labels.items())
    )


def show(key) -> str:
    name, labels = key
    inner = ",".join(f'{k}="{v}"' for k, v in labels if k not in ("model_name", "engine"))
    return f"{name}{{{inner}}}"


def stop_strings_as_abort(rows: list, matched: int) -> bool:
    """Whether ``vllm:request_success``'s differing ``rows`` are exactly the
    ``matched`` stop-string requests, ``stop`` on vllm-rs and ``abort`` on
    the sidecar. vllm-rs matches stop strings itself and sends the engine
    core none (its ``EngineCoreSamplingParams`` has no ``stop``); it then
    aborts the request, and the engine core sees the abort a client that
    went away causes."""
    moved = {"stop": 0.0, "abort": 0.0}
    for row in rows:
        reason = row["sample"].split('finished_reason="', 1)[-1].split('"', 1)[0]
        if reason not in moved:
            return False
        moved[reason] = (row["sidecar"] or 0.0) - (row["vllm_rs"] or 0.0)
    return matched > 0 and moved == {"stop": -matched, "abort": float(matched)}


#: Families fed by each output a request gets: the ones a stream the client
#: dropped can differ in (see :func:`abandoned_overcount`).
PER_OUTPUT = (
    "vllm:generation_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_max_num_generation_tokens",
    "vllm:iteration_tokens_total",
    "vllm:inter_token_latency_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:num_preemptions",
    "vllm:request_num_preemptions",
)


def abandoned_overcount(theirs: dict, ours: dict, aborted: float, rows: list) -> dict:
    """Whether the :data:`PER_OUTPUT` families differ exactly as decode
    outputs the sidecar counted and vllm-rs did not would make them differ.

    vllm-rs counts an output when the HTTP handler polls it from the
    request's stream (``RequestMetricsTracker::observe_output``); a client
    that goes away makes it drop the stream, and only then send the engine
    core an abort. Outputs the engine sent in between (the step it was
    running finishes before the abort reaches it) reach vllm-rs for a
    request it no longer tracks, and are not counted; the tap saw them sent
    and the tracker counts them. Each is one more decode step of an aborted
    request: one token, one inter-token latency, a later last token (decode
    and inference time grow by the same amount), sometimes a preemption
    event it carried. ``aborted`` is vllm-rs's count of client aborts,
    ``rows`` the differing samples of those families."""

    def diff(family, sample):
        return total(ours, family, sample) - total(theirs, family, sample)

    tokens = diff("vllm:generation_tokens", "vllm:generation_tokens_total")
    preemptions = diff("vllm:num_preemptions", "vllm:num_preemptions_total")
    itl = "vllm:inter_token_latency_seconds"
    itl_sum = diff(itl, itl + "_sum")
    checks = {
        "tokens counted by the sidecar only, at most 2 per client abort": 0 <= tokens <= 2 * aborted,
        "preemptions counted by the sidecar only, at most 1 per client abort": 0 <= preemptions <= aborted,
        "one inter-token latency per extra token": diff(itl, itl + "_count") == tokens and itl_sum >= 0,
    }
    # vllm-rs adds a step's tokens to vllm:iteration_tokens_total when it
    # dispatches the step to the requests' streams, not when a handler
    # polls them: an output dispatched to a stream its handler then dropped
    # unread is in it, one that came after the drop is not.
    steps = "vllm:iteration_tokens_total"
    checks[f"{steps}: same count, sum + at most the extra tokens"] = (
        diff(steps, steps + "_count") == 0 and 0 <= diff(steps, steps + "_sum") <= tokens
    )
    for family, extra in (
        ("vllm:request_generation_tokens", tokens),
        ("vllm:request_max_num_generation_tokens", tokens),
        ("vllm:request_num_preemptions", preemptions),
    ):
        checks[f"{family}: same count, sum +{extra:g}"] = (
            diff(family, family + "_count") == 0 and diff(family, family + "_sum") == extra
        )
    for family in ("vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds"):
        checks[f"{family}: same count, sum + the extra inter-token latencies"] = (
            diff(family, family + "_count") == 0 and abs(diff(family, family + "_sum") - itl_sum) < 1e-6
        )
    tpot = "vllm:request_time_per_output_token_seconds"
    checks[f"{tpot}: same count"] = diff(tpot, tpot + "_count") == 0
    if rows:
        checks["something counted by the sidecar only"] = tokens > 0 or preemptions > 0
    # Buckets: the extra latencies add observations; the per-request values
    # (tokens, times, preemptions) and the steps' token sums only grow, so
    # observations move to higher buckets.
    for row in rows:
        sample, a, b = row["sample"], row["vllm_rs"], row["sidecar"]
        if a is None or b is None:
            checks[f"{sample} on both sides"] = False
        elif "_bucket{" in sample:
            if sample.startswith(itl):
                ok = 0 <= b - a <= tokens
            elif sample.startswith(tpot):
                ok = abs(b - a) <= aborted
            else:
                ok = -max(aborted, tokens) <= b - a <= 0
            checks[f"{sample} moved by the extra outputs"] = ok
    return {
        "explained": all(checks.values()),
        "extra_tokens": tokens,
        "extra_preemptions": preemptions,
        "extra_inter_token_seconds": itl_sum,
        "client_aborts": aborted,
        "failed_checks": [name for name, ok in checks.items() if not ok],
    }


def compare(theirs: dict, ours: dict, stop_matched: int = 0, sums_rounded: bool = False) -> dict:
    """Sample by sample on every family both have (``theirs`` vllm-rs's,
    ``ours`` the sidecar's, as :func:`parse` returns them); ``stop_matched``
    is how many requests vllm-rs ended on a stop string. With
    ``sums_rounded`` (the sidecar's classes summed at scrape time) a ``_sum`` sample
    within :data:`expositions.SUM_ROUNDING` of vllm-rs's is equal: the
    classes' sums added in another order differ in the last bits."""
    shared = sorted(set(theirs) & set(ours))
    per_family = {}
    differing = []  # the failures
    zero_one_side = []  # known: a series one side creates at 0 and the other not yet
    stop_as_abort = []  # known: see stop_strings_as_abort
    abandoned = []  # known when explained: see abandoned_overcount
    clock = {}
    for family in shared:
        a_family, b_family = theirs[family], ours[family]
        keys = sorted(set(a_family) | set(b_family), key=lambda k: (k[0], repr(k[1])))
        rows = []
        for key in keys:
            a, b = a_family.get(key), b_family.get(key)
            if a == b:
                continue
            if sums_rounded and rounded_apart(key, a, b):
                continue
            row = {"sample": show(key), "vllm_rs": a, "sidecar": b}
            if a is None or b is None:
                if (a if a is not None else b) == 0:
                    zero_one_side.append(row)
                    continue
            rows.append(row)
        entry = {"compared": len(keys), "differing": len(rows), "first": rows[:5]}
        if family in FRONTEND_CLOCK:
            name = family
            count = (total(theirs, family, name + "_count"), total(ours, family, name + "_count"))
            sums = (total(theirs, family, name + "_sum"), total(ours, family, name + "_sum"))
            ratio = abs(sums[1] - sums[0]) / max(abs(sums[0]), 1e-12)
            buckets = sum(1 for r in rows if "_bucket{" in r["sample"])
            clock[family] = {
                "count": count,
                "sum": sums,
                "sum_relative_difference": ratio,
                "buckets_differing": buckets,
                "buckets_compared": sum(1 for k in keys if k[0].endswith("_bucket")),
            }
            failing = [r for r in rows if "_bucket{" not in r["sample"] and "_sum{" not in r["sample"]]
            if ratio > CLOCK_TOLERANCE:
                failing += [r for r in rows if "_sum{" in r["sample"]]
            entry["differing_beyond_clock"] = len(failing)
            differing += failing
        elif family == "vllm:request_success" and rows and stop_strings_as_abort(rows, stop_matched):
            entry["stop_strings_as_abort"] = len(rows)
            stop_as_abort += rows
        elif family in PER_OUTPUT:
            abandoned += rows
        else:
            differing += rows
        per_family[family] = entry
    client_aborts = total(theirs, "vllm:request_success", "vllm:request_success_total", finished_reason="abort")
    overcount = abandoned_overcount(theirs, ours, client_aborts, abandoned)
    overcount["samples"] = len(abandoned)
    if abandoned and not overcount["explained"]:
        differing += abandoned
    only = {
        "only_vllm_rs": {f: _nonzero(theirs[f]) for f in sorted(set(theirs) - set(ours))},
        "only_sidecar": {f: _nonzero(ours[f]) for f in sorted(set(ours) - set(theirs))},
    }
    return {
        "shared_families": shared,
        "shared_samples": sum(v["compared"] for v in per_family.values()),
        "per_family": per_family,
        "differing_samples": differing,
        "zero_on_one_side": zero_one_side,
        "stop_strings_as_abort": stop_as_abort,
        "abandoned_streams": {**overcount, "first": abandoned[:8]},
        "frontend_clock": clock,
        **only,
    }


def _nonzero(samples: dict) -> list:
    """A one-sided family's samples that are not 0 (its zeros are listed by count)."""
    return [show(k) + f" {v}" for k, v in sorted(samples.items(), key=lambda kv: repr(kv[0])) if v != 0]


# --- Load -------------------------------------------------------------------


STOP_PROMPT = " ".join(f"w{i}" for i in (17, 3, 250, 41, 9, 302, 77, 5))


async def stop_strings(url: str, requests: int) -> dict:
    """One greedy completion (temperature 0) of :data:`STOP_PROMPT`, then
    ``requests`` more of the same prompt with a stop string taken from that
    completion's text, past its first few tokens: it is sure to match."""
    out = {"requests": requests, "errors": [], "finish_reasons": {}}
    timeout = aiohttp.ClientTimeout(total=300)
    base = {"model": MODEL_NAME, "prompt": STOP_PROMPT, "max_tokens": 48, "temperature": 0.0, "ignore_eos": True}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(url, json=base) as response:
            first = await response.json()
        text = first["choices"][0]["text"]
        out["greedy_text"] = text
        stop = None
        words = text.split()
        for word in words[4:]:
            at = text.find(word)
            # The first place the string occurs is past the fourth token.
            if len(text[:at].split()) >= 4:
                stop = word
                break
        if stop is None:
            out["errors"].append(f"no stop string to take from {text!r}")
            return out
        out["stop_string"] = stop

        async def one(index: int):
            body = dict(base, stop=[stop], stream=index % 2 == 1)
            async with session.post(url, json=body) as response:
                if response.status != 200:
                    out["errors"].append(f"stop request {index}: HTTP {response.status}")
                    return
                if not body["stream"]:
                    answer = await response.json()
                    choice = answer["choices"][0]
                    reason = choice.get("finish_reason")
                    out.setdefault("completion_tokens", []).append(answer["usage"]["completion_tokens"])
                else:
                    reason = None
                    async for line in response.content:
                        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                            chunk = json.loads(line[6:])
                            reason = (chunk.get("choices") or [{}])[0].get("finish_reason") or reason
                out["finish_reasons"][str(reason)] = out["finish_reasons"].get(str(reason), 0) + 1

        await asyncio.gather(*(one(i) for i in range(requests)))
    return out


# --- Settling ---------------------------------------------------------------

SUCCESS = ("vllm:request_success", "vllm:request_success_total")


def settle(vllm_metrics: str, sidecar_metrics: str, timeout: float = 90):
    """Waits until vllm-rs is idle, the sidecar's ``vllm:request_success``
    total equals vllm-rs's, and neither exposition changes between two
    scrapes a second apart; returns both texts (the last ones at the
    timeout) and how long it took."""
    began = time.monotonic()
    deadline = began + timeout
    previous = None
    while True:
        theirs_text, ours_text = get(vllm_metrics), get(sidecar_metrics)
        if theirs_text and ours_text:
            theirs, ours = parse(theirs_text), parse(ours_text)
            busy = total(theirs, "vllm:num_requests_running", "vllm:num_requests_running") + total(
                theirs, "vllm:num_requests_waiting", "vllm:num_requests_waiting"
            )
            same_total = total(theirs, *SUCCESS) == total(ours, *SUCCESS)
            now = (theirs, ours)
            if busy == 0 and same_total and now == previous:
                return theirs_text, ours_text, round(time.monotonic() - began, 1)
            previous = now
            if time.monotonic() >= deadline:
                return theirs_text, ours_text, None
        elif time.monotonic() >= deadline:
            raise SystemExit(f"no /metrics: vllm-rs {bool(theirs_text)}, sidecar {bool(ours_text)}")
        time.sleep(1.0)


def reasons(families: dict) -> dict:
    out = {}
    for (name, labels), v in families.get("vllm:request_success", {}).items():
        out[dict(labels).get("finished_reason")] = v
    return out


# --- Main -------------------------------------------------------------------


def sidecar_pids(vllm_log: str, env: dict) -> list:
    """The sidecars started for this run: the pids vLLM's log names, and
    the one the supervisor's lock file holds (vLLM's main process may log
    before vLLM has set up its logging, so the log alone can miss it). The
    lock file is where vLLM's plugin (run with ``env``) keeps it, in the
    user's private directory."""
    pids = {int(m) for m in SIDECAR_PID.findall(open(vllm_log, errors="replace").read())}
    try:
        lock = config.from_env(env).sidecar.lock_file
    except config.ConfigError:
        return sorted(pids)
    pid = read_record(lock).get("pid")
    if isinstance(pid, int) and pid > 0:
        pids.add(pid)
    return sorted(pids)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--vllm-rs", required=True)
    p.add_argument("--blocks", type=int, default=24)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--drop-every", type=int, default=5)
    p.add_argument("--stop-requests", type=int, default=4)
    p.add_argument("--load-timeout", type=float, default=600)
    p.add_argument("--report", required=True)
    p.add_argument("--log-dir", required=True)
    # Attribution (docs/SEMANTICS.md §6d): vLLM's priority scheduling, the
    # requests' priorities in turn, a LoRA adapter every other request, and
    # the tap's VLLM_OTEL_METRICS_ATTRIBUTE.
    p.add_argument("--priorities", default="", help="comma-separated, cycled over the requests")
    p.add_argument("--lora", help="a LoRA adapter's directory, served as `sql`")
    p.add_argument("--attribute", default="", help="VLLM_OTEL_METRICS_ATTRIBUTE")
    args = p.parse_args()

    api_port, metrics_port = free_port(), free_port()
    vllm_log = os.path.join(args.log_dir, "vllm.log")
    sidecar_log = os.path.join(args.log_dir, "sidecar.log")
    env = vllm_env(os.path.join(args.log_dir, "runtime"), metrics_port, sidecar_log)
    env.update({"VLLM_USE_RUST_FRONTEND": "1", "VLLM_RUST_FRONTEND_PATH": os.path.abspath(args.vllm_rs)})
    # The tap is the source under the Rust frontend by default: no override.
    env.pop("VLLM_OTEL_METRICS_SOURCE", None)
    argv = [
        sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_cli.py"),
        "serve", args.model,
        "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(api_port),
        "--dtype", "float32", "--block-size", str(BLOCK_SIZE),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--num-gpu-blocks-override", str(args.blocks),
        "--gpu-memory-utilization", "0.3",
    ]
    priorities = [int(p) for p in args.priorities.split(",") if p]
    extra, adapters = attribution_options(args, env)
    argv += extra
    report = {"blocks": args.blocks, "sidecar_pids": []}
    started = time.monotonic()
    with open(vllm_log, "ab") as log:
        vllm = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        base = f"http://127.0.0.1:{api_port}"
        vllm_metrics = f"{base}/metrics"
        sidecar_metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        try:
            wait("vllm-rs's /health", lambda: get(f"{base}/health") is not None, 900, vllm, vllm_log)
        except SystemExit as failed:
            if not args.lora:
                raise
            # vLLM 0.32.0's Rust frontend refuses to start with an adapter
            # (docs/SEMANTICS.md §6d): what it and the engine core said.
            report["lora_startup_failure"] = str(failed)[:200]
            with open(vllm_log, errors="replace") as lines:
                report["lora_errors"] = [line.rstrip() for line in lines if "LoRA" in line or "add_lora" in line]
        else:
            report["startup_seconds"] = round(time.monotonic() - started, 1)
            wait("the sidecar's /metrics", lambda: get(sidecar_metrics), 60, vllm, vllm_log)
            # What the sidecar the tap started listens on: /metrics alone.
            running = wait("the started sidecar's pid",
                           lambda: [pid for pid in sidecar_pids(vllm_log, env) if alive(pid)], 30, vllm, vllm_log)
            report["sidecar_metrics_addr"] = f"127.0.0.1:{metrics_port}"
            report["sidecar_tcp_listeners"] = tcp_listeners(running[0])
            log_text = open(vllm_log, errors="replace").read()
            report["rust_frontend_launched"] = "Launching Rust frontend" in log_text

            url = f"{base}/v1/completions"
            # A dropped stream goes after its first chunk: vllm-rs drops it and
            # aborts the request in the engine.
            load = Load(url, args.requests, args.concurrency, args.drop_every, seed=1, drop_after=1,
                        priorities=priorities, adapters=adapters)
            began = time.monotonic()

            async def drive():
                await asyncio.wait_for(load.run(), args.load_timeout)
                return await asyncio.wait_for(stop_strings(url, args.stop_requests), args.load_timeout)

            stops = asyncio.run(drive())
            report["load_seconds"] = round(time.monotonic() - began, 1)
            report["load"] = {
                "completed": load.completed, "dropped_by_client": load.dropped, "errors": load.errors,
                "finish_reasons": load.finish_reasons,
                "ttft_p50": percentile(load.ttft, 0.5), "ttft_p99": percentile(load.ttft, 0.99),
            }
            report["stop_strings"] = stops

            vllm_text, sidecar_text, settled = settle(vllm_metrics, sidecar_metrics)
            report["settled_after_seconds"] = settled
            report["sent_by_class"] = load.sent
            theirs, ours = parse(vllm_text), parse(sidecar_text)
            report["classed_vllm_samples"] = classed_samples(ours)
            report.update(
                compare(theirs, ours, stops.get("finish_reasons", {}).get("stop", 0), sums_rounded=bool(args.attribute))
            )
            report["finished_reasons"] = {"vllm_rs": reasons(theirs), "sidecar": reasons(ours)}
            report["preemptions"] = {
                "vllm_rs": total(theirs, "vllm:num_preemptions", "vllm:num_preemptions_total"),
                "sidecar": total(ours, "vllm:num_preemptions", "vllm:num_preemptions_total"),
            }
            report["vllm_exposition"] = vllm_text
            report["sidecar_exposition"] = sidecar_text
            report["sidecar_openmetrics"] = openmetrics(sidecar_metrics)
            report["sidecar_pids"] = sidecar_pids(vllm_log, env)
    finally:
        stop(vllm)
        if not report["sidecar_pids"] and os.path.exists(vllm_log):
            report["sidecar_pids"] = sidecar_pids(vllm_log, env)
    # No process outlives vLLM: the sidecar the tap started is gone within
    # a few seconds (it drains first).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(pid) for pid in report["sidecar_pids"]):
        time.sleep(0.2)
    report["sidecars_alive_after_vllm"] = [pid for pid in report["sidecar_pids"] if alive(pid)]
    # vLLM's process manager ends an engine core that outlives its shutdown
    # timeout (0 s by default) with SIGKILL to its whole process tree: the
    # sidecar the tap started there then ends without draining.
    report["sidecar_killed_by_vllm"] = "force killing sub process vllm-otel-metrics" in open(
        vllm_log, errors="replace"
    ).read()
    report["vllm_exit_status"] = vllm.returncode
    report["total_seconds"] = round(time.monotonic() - started, 1)
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1, default=lambda v: None if isinstance(v, float) and math.isnan(v) else str(v))


if __name__ == "__main__":
    main()
