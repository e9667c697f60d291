"""A live vLLM engine with and without the plugin, alternated in one session.

vLLM's CPU build serves the tiny model of ``tests/vllm/tiny_model.py`` as
``tests/vllm/live.py`` starts it (``vllm serve``, one API server). Each
round starts it twice, in alternating order:

- ``stock``: vLLM with its own Prometheus logger only (``VLLM_PLUGINS`` names
  no plugin, so vLLM loads no stat-logger plugin);
- ``plugin``: vLLM with the plugin installed and loaded; the plugin starts
  its sidecar, as a user gets it.

Each start gets an unreported warm-up load, then the measured load: short
prompts and short streamed completions at a small concurrency, so that
engine steps are as short as this CPU allows and the frontend's share of
the time is as large as it gets. Reported per run: requests per second,
TTFT p50/p99 and ITL p50/p99 as the client sees them (ITL: the gaps between
streamed tokens), and the API server process's CPU time per request (user
plus system, ``/proc``; the engine core is another process), and its CPU
share while idle (``api_idle_cpu``, seconds per second). Last, the
ratios plugin / stock per round and their ranges:

    live: throughput=… ttft_p99=… itl_p50=… itl_p99=… api_cpu=… (plugin / stock, min-max over rounds)

    python benches/python/live_engine.py [--rounds 4] [--requests 300] [--concurrency 4]

with the python of ``scripts/vllm-cpu-env.sh`` with the plugin's wheel
installed (``tests/vllm_live.rs`` installs it there).
"""

import argparse
import asyncio
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import aiohttp

REPO = pathlib.Path(__file__).resolve().parents[2]
VLLM_TESTS = REPO / "tests" / "vllm"
sys.path.insert(0, str(VLLM_TESTS))

from proc import cpu_seconds  # noqa: E402
from live import (  # noqa: E402
    BLOCK_SIZE, MAX_MODEL_LEN, MODEL_NAME, free_port, get, percentile, stop, vllm_env, wait,
)


async def one(session, url: str, index: int, ttft: list, itl: list) -> None:
    body = {
        "model": MODEL_NAME,
        "prompt": " ".join(f"w{(index * 7 + i) % 500}" for i in range(8)),
        "max_tokens": 32,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
    }
    began = time.monotonic()
    last = None
    async with session.post(url, json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"request {index}: HTTP {response.status}")
        async for line in response.content:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            now = time.monotonic()
            if last is None:
                ttft.append(now - began)
            else:
                itl.append(now - last)
            last = now


async def load(url: str, count: int, concurrency: int) -> dict:
    ttft, itl = [], []
    semaphore = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def bounded(index):
            async with semaphore:
                await one(session, url, index, ttft, itl)

        began = time.monotonic()
        await asyncio.gather(*(bounded(i) for i in range(count)))
        wall = time.monotonic() - began
    return {"rps": count / wall, "ttft": ttft, "itl": itl}


def run(args, variant: str, work: pathlib.Path) -> dict:
    port, ingest, metrics = free_port(), free_port(), free_port()
    log_path = work / f"{variant}-{time.monotonic_ns()}.log"
    env = vllm_env(ingest, metrics, str(work / f"sidecar-{port}.log"))
    if variant == "stock":
        # A name no plugin has: vLLM loads no stat-logger plugin.
        env["VLLM_PLUGINS"] = "none"
    argv = [
        sys.executable, str(VLLM_TESTS / "vllm_cli.py"), "serve", args.model,
        "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--block-size", str(BLOCK_SIZE), "--max-model-len", str(MAX_MODEL_LEN),
        "--num-gpu-blocks-override", "256", "--gpu-memory-utilization", "0.3",
    ]
    with open(log_path, "ab") as log:
        vllm = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait("vLLM's /health", lambda: get(f"{base}/health") is not None, 900, vllm, str(log_path))
        if variant == "plugin":
            wait("the sidecar", lambda: get(f"http://127.0.0.1:{metrics}/metrics"), 60, vllm, str(log_path))
        url = f"{base}/v1/completions"
        asyncio.run(load(url, args.warmup, args.concurrency))
        # What the API server spends with nothing to serve.
        time.sleep(1)
        idle_before = cpu_seconds(vllm.pid)
        time.sleep(args.idle_seconds)
        idle = (cpu_seconds(vllm.pid) - idle_before) / args.idle_seconds
        cpu_before = cpu_seconds(vllm.pid)
        result = asyncio.run(load(url, args.requests, args.concurrency))
        result["api_cpu"] = (cpu_seconds(vllm.pid) - cpu_before) / args.requests
        result["api_idle_cpu"] = idle
    finally:
        stop(vllm)
    figures = {
        "rps": result["rps"],
        "ttft_p50": percentile(result["ttft"], 0.5),
        "ttft_p99": percentile(result["ttft"], 0.99),
        "itl_p50": percentile(result["itl"], 0.5),
        "itl_p99": percentile(result["itl"], 0.99),
        "api_cpu": result["api_cpu"],
        "api_idle_cpu": result["api_idle_cpu"],
    }
    print(f"{variant:6} " + " ".join(
        f"{k}={v * 1000:.2f}ms" if k != "rps" else f"{k}={v:.2f}" for k, v in figures.items()
    ), flush=True)
    return figures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", help="a model directory (default: the tiny model, written here)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--idle-seconds", type=float, default=10.0)
    args = p.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="live-bench-"))
    if not args.model:
        args.model = str(work / "model")
        subprocess.run([sys.executable, str(VLLM_TESTS / "tiny_model.py"), args.model], check=True)
    rounds = []
    for round_ in range(args.rounds):
        order = ["stock", "plugin"] if round_ % 2 == 0 else ["plugin", "stock"]
        rounds.append({variant: run(args, variant, work) for variant in order})
    ratios = {key: [r["plugin"][key] / r["stock"][key] for r in rounds]
              for key in ("rps", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "api_cpu", "api_idle_cpu")}
    for key, values in ratios.items():
        print(f"{key}: plugin/stock per round " + " ".join(f"{v:.3f}" for v in values)
              + f" (median {statistics.median(values):.3f})")
    print("live: " + " ".join(f"{key}={min(v):.3f}-{max(v):.3f}" for key, v in ratios.items())
          + " (plugin / stock, min-max over rounds)")


if __name__ == "__main__":
    main()
