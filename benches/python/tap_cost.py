"""The engine-core tap's cost beside vLLM's own work, in one run.

The engine-core tap (``python/src/vllm_otel_metrics/tap.py``) runs inside
vLLM's engine-core process, so every microsecond of Python it runs holds the
GIL the step loop needs. This bench builds engine steps with vLLM's own
classes and times, interleaved in rounds (alternating which goes first):

- **per step**: vLLM's ``MsgpackEncoder().encode_into(outputs, buffer)`` (the
  output thread's encode, into a reused ``bytearray``) against the tap's GIL
  time for that step:

  - ``hot``: the ``_send_msg_tracking_payload`` wrapper exactly as
    ``Tap._hook`` installs it (on a stand-in with no-op methods), called
    with the real encoded buffer, less the unwrapped no-op's call;
  - ``thread``: the streaming thread's share: ``FrameQueue.take()``,
    ``Tap._to_records(items)`` and what the transport does with each record
    while it holds the GIL, amortized over the steps of one drain. Over the
    ingest socket (the transport to a sidecar the plugin started) that is
    the list of parts ``sendmsg`` gathers: vLLM's frames are not copied in
    Python, and ``sendmsg`` releases the GIL for the kernel's copy. Over
    gRPC (a sidecar run by other means) it is ``SerializeToString()``, which
    gRPC's Python layer calls with the GIL held. The thread drains every
    ``POLL_SECONDS`` (1 s), so a drain holds ~30–200 steps;
    ``--per-drain`` (default 1,16) sets the steps per drain (fewer steps a
    drain cost more each), and one more row has the steps a drain holds as
    deployed: one ``POLL_SECONDS`` of steps at ``--step-ms``.

  Steps are decode steps of ``batch`` running requests (vLLM-style internal
  ids ``cmpl-<32 hex>-0-<8 hex>``, one new token each, no events); every 50th
  step a few outputs carry QUEUED/SCHEDULED events and ``PrefillStats`` (new
  requests) and as many others finish by ``length``. Every step carries
  ``SchedulerStats`` with a ``PrefixCacheStats``, as when vLLM logs stats;

- **per new request**: vLLM's ``MsgpackDecoder(EngineCoreRequest).decode()``
  of an encoded ``EngineCoreRequest`` (512-token prompt, ``max_tokens=128``;
  what the input thread does for each request) against the tap's work: the
  ``add_request`` wrapper's copy of the fields the record needs
  (``tap.started``, of a ``vllm.v1.request.Request`` made by
  ``Request.from_engine_core_request``) and its append, then on the thread
  ``_drain`` + ``_to_records`` (``Tap._request_record`` of the copy) +
  serialization. A second
  row adds what a request costs when it lands between two steps of one
  drain: it splits their ``EngineCoreFrames`` chunk in two (16 batch-64
  steps, 4 requests between them, against the same steps alone).

Times are ``perf_counter_ns`` around blocks of 16 steps (or requests, or
one drain); a block slower than 10 × the median block was descheduled and
is left out, in vLLM's measurements as in the tap's. Each row is the median
over rounds (after one unreported warm-up round), with the range over
rounds. Nothing is asserted: the bench exits non-zero only when it crashes.
``ratio`` is tap over vLLM; the targets (tap ≤ 0.5 × vLLM at batch 256,
≤ 1.0 × at 1 and 64 and per request) are printed beside them.

These loops run warm: the same code over and over, caches hot.
``--in-situ`` measures in situ instead, once per transport: this thread
plays vLLM's output thread at one step per ``--step-ms`` period (5, 15,
30 ms for batch 1, 64, 256), encoding each step with vLLM's encoder and
handing it to the hot path, both timed, while the tap's real ``Streamer``
streams to a sink in another process (a Unix socket, or a gRPC server); the
CPU time of the process's other threads (``/proc/self/task/*/schedstat``)
is the tap's background cost: Python threads (the stream thread, gRPC's
request-consuming and polling threads: they can hold the GIL, an upper
bound) apart from gRPC's C-core threads (they cannot).

Needs the python of ``scripts/vllm-env.sh`` (vLLM 0.33.0). The tap is
imported from this repository's ``python/src``, whatever plugin that
environment has installed, and the protobuf module is generated from
``proto/`` into a temporary directory with ``grpc_tools.protoc``, taken from
this python when it has grpcio-tools, else from ``$PROTOC_PYTHON`` (default
``python3``); only ``protobuf`` is needed at run time.

    python benches/python/tap_cost.py [--rounds 9] [--batches 1,64,256]
        [--per-drain 1,16] [--steps 400]
        [--in-situ [--grpc-seconds 4] [--grpc-rounds 3]]
"""

import argparse
import importlib.util
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def generated_package(work: pathlib.Path) -> pathlib.Path:
    """Generates ``vllm_otel_metrics/v1/ingest_pb2*.py`` from ``proto/``
    under ``work``; returns the generated package directory."""
    proto_root = REPO / "proto"
    proto = proto_root / "vllm_otel_metrics" / "v1" / "ingest.proto"
    if importlib.util.find_spec("grpc_tools") is not None:
        python = sys.executable
    else:
        python = os.environ.get("PROTOC_PYTHON") or shutil.which("python3") or "python3"
    subprocess.run(
        [python, "-m", "grpc_tools.protoc", f"-I{proto_root}", f"--python_out={work}",
         f"--grpc_python_out={work}", str(proto)],
        check=True,
    )
    package = work / "vllm_otel_metrics"
    (package / "v1" / "__init__.py").touch()
    return package


def import_tap(work: pathlib.Path):
    """The repository's ``vllm_otel_metrics`` (not the installed one), with
    ``v1`` resolving to freshly generated code."""
    sys.path.insert(0, str(REPO / "python" / "src"))
    for name in [m for m in sys.modules if m == "vllm_otel_metrics" or m.startswith("vllm_otel_metrics.")]:
        del sys.modules[name]
    import vllm_otel_metrics

    source = pathlib.Path(vllm_otel_metrics.__file__).resolve().parent
    if source != (REPO / "python" / "src" / "vllm_otel_metrics").resolve():
        raise SystemExit(f"imported vllm_otel_metrics from {source}, not from this repository")
    vllm_otel_metrics.__path__.append(str(generated_package(work)))
    from vllm_otel_metrics import config, convert, stream, tap

    pb = convert.messages()
    if "EngineCoreFrames" not in pb.DESCRIPTOR.message_types_by_name:
        raise SystemExit(f"{pb.__file__} has no EngineCoreFrames")
    return config, convert, stream, tap, pb


# vLLM's classes.
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.engine import (  # noqa: E402
    EngineCoreEvent,
    EngineCoreEventType,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FinishReason,
)
from vllm.v1.metrics.stats import PrefillStats, PrefixCacheStats, SchedulerStats  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder  # noqa: E402

EVENT_EVERY = 50
PROMPT_LEN = 512
MAX_TOKENS = 128
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def request_id(rng: random.Random) -> str:
    return f"cmpl-{rng.getrandbits(128):032x}-0-{rng.getrandbits(32):08x}"


def engine_steps(batch: int, count: int, rng: random.Random) -> list:
    """``count`` consecutive engine steps with ``batch`` running requests."""
    ids = [request_id(rng) for _ in range(batch)]
    t = time.monotonic()
    steps = []
    for step in range(count):
        t += 0.02
        outputs = []
        churn = step % EVENT_EVERY == EVENT_EVERY - 1
        turnover = set(rng.sample(range(batch), min(4, batch))) if churn else set()
        for i, rid in enumerate(ids):
            token = [rng.randrange(150_000)]
            if i in turnover:
                # The old request finishes; a new one takes its slot and
                # gives its first token this step.
                outputs.append(EngineCoreOutput(rid, token, finish_reason=FinishReason.LENGTH))
                ids[i] = rid = request_id(rng)
                cached = rng.choice((0, 16, 256))
                outputs.append(EngineCoreOutput(
                    rid, [rng.randrange(150_000)],
                    events=[EngineCoreEvent(EngineCoreEventType.QUEUED, t - 0.015),
                            EngineCoreEvent(EngineCoreEventType.SCHEDULED, t - 0.01)],
                    prefill_stats=PrefillStats(
                        num_prompt_tokens=PROMPT_LEN, num_computed_tokens=PROMPT_LEN - cached,
                        num_cached_tokens=cached, num_local_cached_tokens=cached),
                ))
            else:
                outputs.append(EngineCoreOutput(rid, token))
        prefix = PrefixCacheStats()
        if churn:
            prefix.requests, prefix.queries = len(turnover), len(turnover) * PROMPT_LEN
            prefix.hits = 16 * len(turnover)
        stats = SchedulerStats(num_running_reqs=batch, num_waiting_reqs=0,
                               kv_cache_usage=min(1.0, batch * 640 / 100_000),
                               step_counter=step, prefix_cache_stats=prefix)
        steps.append(EngineCoreOutputs(engine_index=0, outputs=outputs,
                                       scheduler_stats=stats, timestamp=t))
    return steps


class StandIn:
    """An ``EngineCoreProc`` as far as ``Tap._hook`` sees it: the three
    methods, doing nothing."""

    @staticmethod
    def _send_msg_tracking_payload(socket, buffers):
        return None

    def add_request(self, request, request_wave=0):
        return None

    def abort_requests(self, request_ids):
        return None


#: Steps per timed block; a block slower than OUTLIER × the median block was
#: descheduled (the machine is shared) and is left out, in every measurement.
BLOCK = 16
OUTLIER = 10


def per_step(blocks) -> float:
    """ns per step of timed blocks ``(ns, steps)``, leaving out outliers."""
    typical = statistics.median(ns / steps for ns, steps in blocks)
    kept = [(ns, steps) for ns, steps in blocks if ns / steps <= OUTLIER * typical]
    return sum(ns for ns, _ in kept) / sum(steps for _, steps in kept)


def time_encode(encoder, steps, buffer) -> float:
    encode_into, clock, blocks = encoder.encode_into, time.perf_counter_ns, []
    for start in range(0, len(steps), BLOCK):
        block = steps[start:start + BLOCK]
        began = clock()
        for outputs in block:
            encode_into(outputs, buffer)
        blocks.append((clock() - began, len(block)))
    return per_step(blocks)


def time_hot(core, buffers) -> float:
    clock, blocks = time.perf_counter_ns, []
    for start in range(0, len(buffers), BLOCK):
        block = buffers[start:start + BLOCK]
        began = clock()
        for bufs in block:
            core._send_msg_tracking_payload(None, bufs)
        blocks.append((clock() - began, len(block)))
    return per_step(blocks)


def prepare(transport: str):
    """What the stream thread does with a record before the kernel or gRPC
    takes it, with the GIL held: over the ingest socket, the list of parts
    ``sendmsg`` gathers (vLLM's frames as they are; ``sendmsg`` releases
    the GIL for its copy); over gRPC, the serialization gRPC's Python
    layer calls."""
    from vllm_otel_metrics import wire

    return wire.socket_parts if transport == "socket" else wire.serialize


def time_thread(tap, items, per_drain: int, transport: str) -> float:
    """The thread's work per step: drains of ``per_drain`` queued steps each,
    converted and prepared for ``transport`` (:func:`prepare`)."""
    # The queue's deque itself: the bench queues what the hooks made.
    queue = tap.queue.items
    drain, to_records, ready = tap.queue.take, tap._to_records, prepare(transport)
    clock, blocks = time.perf_counter_ns, []
    for start in range(0, len(items), per_drain):
        queue.extend(items[start:start + per_drain])
        began = clock()
        for record in to_records(drain()):
            ready(record)
        blocks.append((clock() - began, min(per_drain, len(items) - start)))
    return per_step(blocks)


TRANSPORTS = ("socket", "grpc")


def spread(values) -> str:
    return f"{min(values) / 1000:.2f}–{max(values) / 1000:.2f}"


def make_tap(config, tap_module, queue_bound: int, target: str = "http://127.0.0.1:1",
             socket_path: "str | None" = None):
    """A tap on a stand-in engine; with ``socket_path`` its settings are a
    started sidecar's (the Tap itself starts none), so it streams over that
    ingest socket."""
    settings = config.from_env({
        "VLLM_OTEL_METRICS_QUEUE": str(queue_bound),
        "VLLM_OTEL_METRICS_SIDECAR": "auto" if socket_path else "off",
        "VLLM_OTEL_METRICS_SOCKET": socket_path or "none",
        "VLLM_OTEL_METRICS_TARGET": target,
    })
    tap = tap_module.Tap(settings, MODEL, 0, EngineCoreOutputs.__struct_fields__,
                         EngineCoreOutput.__struct_fields__, False, False)
    core = StandIn()
    tap._hook(core)
    return tap, core


def bench_steps(args, config, tap_module, pb, rng) -> list:
    rows = []
    for batch, step_ms in zip(args.batches, args.step_ms):
        steps = engine_steps(batch, args.steps, rng)
        encoder = MsgpackEncoder()
        buffer = bytearray()
        # What vLLM hands to _send_msg_tracking_payload: encode_into's list,
        # the bytearray first (no step here has out-of-band tensors).
        buffers = buffers_of(steps)
        assert all(len(b) == 1 for b in buffers), "a step with out-of-band buffers"
        frame_bytes = statistics.mean(len(b[0]) for b in buffers)
        tap, core = make_tap(config, tap_module, len(steps) + 10)
        plain = StandIn()
        # The thread's input: what the hot path queues.
        time_hot(core, buffers)
        items = list(tap.queue.items)
        tap.queue.clear()
        vllm_t, hot_t = [], []
        # And the steps one drain holds as deployed: a step every --step-ms,
        # a drain every POLL_SECONDS.
        deployed = max(1, round(tap_module.POLL_SECONDS * 1000 / step_ms))
        drains = sorted({*args.per_drain, min(deployed, len(steps))})
        thread_t = {(name, k): [] for name in TRANSPORTS for k in drains}

        def ours():
            # The wrapper's time less that of the method it wraps (vLLM's).
            hot = time_hot(core, buffers) - time_hot(plain, buffers)
            tap.queue.clear()
            threads = {(name, k): time_thread(tap, items, k, name) for name, k in thread_t}
            return hot, threads

        for round_ in range(args.rounds + 1):  # round 0 warms up, unreported
            if round_ % 2:
                hot, threads = ours()
                theirs = time_encode(encoder, steps, buffer)
            else:
                theirs = time_encode(encoder, steps, buffer)
                hot, threads = ours()
            if round_ == 0:
                continue
            vllm_t.append(theirs)
            hot_t.append(hot)
            for key, value in threads.items():
                thread_t[key].append(value)
        rows.append((batch, frame_bytes, vllm_t, hot_t, thread_t))
    return rows


def bench_requests(args, config, tap_module, pb, rng) -> tuple:
    params = SamplingParams(max_tokens=MAX_TOKENS)
    core_request = EngineCoreRequest(
        request_id=request_id(rng),
        prompt_token_ids=[rng.randrange(150_000) for _ in range(PROMPT_LEN)],
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=time.time(),
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
    )
    frames = MsgpackEncoder().encode(core_request)
    decoder = MsgpackDecoder(EngineCoreRequest)
    decoded = decoder.decode(frames)
    assert decoded.request_id == core_request.request_id
    assert len(decoded.prompt_token_ids) == PROMPT_LEN
    requests = []
    for _ in range(args.requests):
        r = decoder.decode(frames)
        r.request_id = request_id(rng)
        requests.append(Request.from_engine_core_request(r, None))
    tap, core = make_tap(config, tap_module, 10 * len(requests) + 100)
    plain = StandIn()
    tap_queue = tap.queue

    def vllm_decode():
        decode, clock, blocks = decoder.decode, time.perf_counter_ns, []
        for start in range(0, len(requests), BLOCK):
            n = len(requests[start:start + BLOCK])
            began = clock()
            for _ in range(n):
                decode(frames)
            blocks.append((clock() - began, n))
        return per_step(blocks)

    def tap_requests(transport):
        # Per block of requests: the add_request wrapper less vLLM's own
        # add_request, then the thread's drain, records and preparation.
        ready = prepare(transport)
        clock, blocks = time.perf_counter_ns, []
        for start in range(0, len(requests), BLOCK):
            block = requests[start:start + BLOCK]
            began = clock()
            for request in block:
                core.add_request(request, 0)
            hooked = clock() - began
            began = clock()
            for request in block:
                plain.add_request(request, 0)
            own = clock() - began
            began = clock()
            for record in tap._to_records(tap_queue.take()):
                ready(record)
            blocks.append((hooked - own + clock() - began, len(block)))
        return per_step(blocks)

    # A request that lands between two steps of one drain splits their
    # chunk: 16 batch-64 steps with 4 requests among them, against the same
    # steps alone; per request.
    for bufs in buffers_of(engine_steps(64, 16, rng)):
        core._send_msg_tracking_payload(None, bufs)
    step_items = list(tap_queue.items)
    tap_queue.clear()
    for request in requests[:4]:
        core.add_request(request, 0)
    started = list(tap_queue.items)
    tap_queue.clear()
    mixed = list(step_items)
    for i, item in enumerate(started):
        mixed.insert(4 * (i + 1) + i, item)

    def split_cost(drain, to_records):
        # The median over repetitions of (mixed - steps alone), per request.
        ready = prepare("socket")
        differences = []
        for _ in range(max(1, len(requests) // 4)):
            tap_queue.items.extend(step_items)
            began = time.perf_counter_ns()
            for record in to_records(drain()):
                ready(record)
            alone = time.perf_counter_ns() - began
            tap_queue.items.extend(mixed)
            began = time.perf_counter_ns()
            for record in to_records(drain()):
                ready(record)
            differences.append(time.perf_counter_ns() - began - alone)
        return statistics.median(differences) / len(started)

    vllm_t, split_t = [], []
    tap_t = {transport: [] for transport in TRANSPORTS}
    for round_ in range(args.rounds + 1):
        def ours():
            return ({t: tap_requests(t) for t in TRANSPORTS},
                    split_cost(tap_queue.take, tap._to_records))

        if round_ % 2:
            t, split = ours()
            v = vllm_decode()
        else:
            v = vllm_decode()
            t, split = ours()
        if round_:
            vllm_t.append(v)
            for transport, value in t.items():
                tap_t[transport].append(value)
            split_t.append(split)
    return vllm_t, tap_t, split_t


def buffers_of(steps):
    encoder = MsgpackEncoder()
    return [encoder.encode_into(outputs, bytearray()) for outputs in steps]


SINK = """
import sys
from concurrent import futures
import grpc
def stream(requests, context):
    for _ in requests:
        pass
    return b""  # an empty IngestSummary
handler = grpc.method_handlers_generic_handler(
    "vllm_otel_metrics.v1.Ingest", {"Stream": grpc.stream_unary_rpc_method_handler(stream)})
server = grpc.server(futures.ThreadPoolExecutor(2))
server.add_generic_rpc_handlers((handler,))
print(server.add_insecure_port("127.0.0.1:0"), flush=True)
server.start()
server.wait_for_termination()
"""


def thread_cpu() -> dict:
    """CPU time of each thread of this process, ns (``schedstat``)."""
    times = {}
    for task in pathlib.Path("/proc/self/task").iterdir():
        try:
            times[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass
    return times


def split_cpu(before: dict, after: dict) -> tuple:
    """(Python threads but this one, other threads) CPU between two
    :func:`thread_cpu` snapshots, ns. Python threads are the ones that can
    hold the GIL (the stream thread, gRPC's request-consuming and polling
    threads); gRPC's C-core threads cannot."""
    import threading

    python = {t.native_id for t in threading.enumerate()} - {threading.get_native_id()}
    py = other = 0
    for tid, ns in after.items():
        if tid == threading.get_native_id():
            continue
        delta = ns - before.get(tid, 0)
        if tid in python:
            py += delta
        else:
            other += delta
    return py, other


SOCKET_SINK = """
import socket, sys, threading
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen()
print("ready", flush=True)
def read(connection):
    with connection:
        while connection.recv(1 << 20):
            pass
while True:
    connection, _ = listener.accept()
    threading.Thread(target=read, args=(connection,), daemon=True).start()
"""


class GilFree:
    """A connection whose ``sendmsg``/``sendall`` add the calling thread's
    CPU time inside them to ``total[0]``: the time the stream thread spends
    without the GIL, in the kernel's copy."""

    def __init__(self, sock, total):
        self._sock, self._total = sock, total

    @classmethod
    def wrap(cls, sock, total):
        return None if sock is None else cls(sock, total)

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def sendmsg(self, *args):
        began = time.thread_time_ns()
        try:
            return self._sock.sendmsg(*args)
        finally:
            self._total[0] += time.thread_time_ns() - began

    def sendall(self, *args):
        began = time.thread_time_ns()
        try:
            return self._sock.sendall(*args)
        finally:
            self._total[0] += time.thread_time_ns() - began


def bench_in_situ(args, config, tap_module, transport: str) -> list:
    """In situ: the engine's output thread played by this thread, paced at
    one step per period: it encodes each step with vLLM's encoder (timed)
    and hands the buffers to the tap's hot path (timed), while the real
    Streamer streams to a sink in another process that reads and discards:
    a Unix socket (``transport="socket"``, the started sidecar's ingest
    socket) or a gRPC server (``"grpc"``, a sidecar run by other means).
    Nothing is warm here: the stream thread sleeps between drains and this
    thread between steps, as in vLLM. After a window with no steps (the idle
    cost), the streaming window: the CPU of this process's other threads,
    Python threads (which can hold the GIL) apart from gRPC's C-core threads,
    per step."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="tap-sink-"))
    socket_path = str(work / "ingest.sock")
    if transport == "socket":
        sink = subprocess.Popen([sys.executable, "-c", SOCKET_SINK, socket_path],
                                stdout=subprocess.PIPE, text=True)
    else:
        sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    rows = []
    try:
        first = sink.stdout.readline().strip()
        target = "http://127.0.0.1:1" if transport == "socket" else f"http://127.0.0.1:{int(first)}"
        for batch, period_ms in zip(args.batches, args.step_ms):
            steps = engine_steps(batch, 200, random.Random(args.seed))
            count = int(args.grpc_seconds * 1000 / period_ms)
            encoder, buffer = MsgpackEncoder(), bytearray()
            clock = time.perf_counter_ns
            runs = []
            for _ in range(args.grpc_rounds):
                tap, core = make_tap(config, tap_module, count + 10, target,
                                     socket_path if transport == "socket" else None)
                kernel = [0]
                if transport == "socket":
                    # The CPU this thread spends inside sendmsg and sendall,
                    # which run without the GIL (the kernel's copy).
                    connect = tap.streamer.socket.connect
                    tap.streamer.socket.connect = lambda: GilFree.wrap(connect(), kernel)
                streamer = tap.streamer.start()
                deadline = time.monotonic() + 10
                while not streamer.connected and time.monotonic() < deadline:
                    time.sleep(0.01)
                if not streamer.connected or streamer.transport != transport:
                    raise RuntimeError(f"the tap's streamer did not connect to the {transport} sink")
                # Past the first second, when the stream thread polls least
                # often (IDLE_POLL_SECONDS), then a window without steps.
                time.sleep(1.2)
                before, began = thread_cpu(), time.monotonic()
                time.sleep(args.grpc_seconds)
                idle_py, idle_c = split_cpu(before, thread_cpu())
                idle_s = time.monotonic() - began
                encode, hot = [], []
                before, began = thread_cpu(), time.monotonic()
                for i in range(count):
                    t0 = clock()
                    bufs = encoder.encode_into(steps[i % len(steps)], buffer)
                    t1 = clock()
                    core._send_msg_tracking_payload(None, bufs)
                    t2 = clock()
                    encode.append((t1 - t0, 1))
                    hot.append((t2 - t1, 1))
                    delay = began + (i + 1) * period_ms / 1000 - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                while streamer.pending:
                    time.sleep(0.001)
                py, c = split_cpu(before, thread_cpu())
                sent = streamer.sent
                streamer.close()
                if sent == 0:
                    raise RuntimeError("nothing was sent to the sink")
                runs.append({
                    "idle_py": idle_py / idle_s / 1e6, "idle_c": idle_c / idle_s / 1e6,
                    "encode": per_step(encode), "hot": per_step(hot),
                    "py": py / count, "c": c / count, "messages": sent,
                    "kernel": kernel[0] / count,
                })
            rows.append((batch, period_ms, count, runs))
    finally:
        sink.terminate()
        sink.wait()
        shutil.rmtree(work, ignore_errors=True)
    return rows


def print_in_situ(grpc_rows) -> None:
    med = statistics.median

    def cell(xs):
        return f"{med(xs) / 1000:6.2f} ({spread(xs)})"

    print("\nin situ (--in-situ), paced steps, nothing warm; µs per step, median (range over "
          "rounds):\nvLLM encode_into; the tap's hot path (with the no-op it wraps); its Python "
          "threads' CPU (the stream thread,\nits sendmsg included, and gRPC's: can hold the GIL); "
          "ratio (hot + threads) / encode; gRPC's C-core\nthreads (no GIL); idle CPU")
    for label, rows in grpc_rows:
        print(f" {label}:")
        for batch, period_ms, count, runs in rows:
            col = [r["encode"] for r in runs], [r["hot"] for r in runs], [r["py"] for r in runs]
            ratios = [(r["hot"] + r["py"]) / r["encode"] for r in runs]
            held = [(r["hot"] + r["py"] - r["kernel"]) / r["encode"] for r in runs]
            print(f"  batch {batch:>3}, a step every {period_ms:>2} ms ({count} steps, "
                  f"{med(r['messages'] for r in runs):.0f} records): encode {cell(col[0])}  "
                  f"hot {cell(col[1])}  threads {cell(col[2])}  ratio {med(ratios):.2f} "
                  f"({min(ratios):.2f}–{max(ratios):.2f})  less sendmsg's kernel copy "
                  f"{med(r['kernel'] for r in runs) / 1000:.2f}: {med(held):.2f} "
                  f"({min(held):.2f}–{max(held):.2f})  C-core "
                  f"{med(r['c'] for r in runs) / 1000:.1f}  idle "
                  f"{med(r['idle_py'] for r in runs):.2f} + {med(r['idle_c'] for r in runs):.2f} ms/s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda v: [int(x) for x in v.split(",")]  # noqa: E731
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--batches", type=ints, default=[1, 64, 256])
    p.add_argument("--per-drain", type=ints, default=[1, 16])
    p.add_argument("--steps", type=int, default=400, help="engine steps per batch size and round")
    p.add_argument("--requests", type=int, default=400, help="new requests per round")
    p.add_argument("--in-situ", action="store_true",
                   help="also measure the real Streamer's CPU per step, streaming to a sink over "
                        "the ingest socket and over gRPC")
    p.add_argument("--step-ms", type=ints, default=[5, 15, 30],
                   help="the step period of each batch size, ms: the steps a drain holds as "
                        "deployed (a row of its own), and --in-situ's pace")
    p.add_argument("--grpc-seconds", type=float, default=4.0,
                   help="--in-situ: seconds of steps per round")
    p.add_argument("--grpc-rounds", type=int, default=3, help="--in-situ: rounds")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if len(args.step_ms) != len(args.batches):
        p.error("--step-ms needs one period per batch size")
    work = pathlib.Path(tempfile.mkdtemp(prefix="tap-cost-"))
    try:
        config, _convert, _stream, tap_module, pb = import_tap(work)
        rng = random.Random(args.seed)
        import vllm

        load = os.getloadavg()
        print(f"vLLM {vllm.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
              f"load average {load[0]:.2f} {load[1]:.2f} at the start (other cores busy when "
              f"above ~1); {args.rounds} rounds, {args.steps} steps per batch size, "
              f"1 in {EVENT_EVERY} steps with new and finished requests", flush=True)
        rows = bench_steps(args, config, tap_module, pb, rng)
        req = bench_requests(args, config, tap_module, pb, rng)
        in_situ = []
        if args.in_situ:
            for transport in TRANSPORTS:
                label = {"socket": "over the ingest socket (the started sidecar)",
                         "grpc": "over gRPC (a sidecar run by other means)"}[transport]
                in_situ.append((label, bench_in_situ(args, config, tap_module, transport)))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    print("\nper engine step, µs, median (range over rounds). hot: the send wrapper less the "
          "method it wraps;\nthread: drain + _to_records + the transport's preparation (the "
          "socket's sendmsg parts, or gRPC's\nserialization), per step; ratio: (hot + thread) / "
          "vLLM encode_into")
    print(f"{'batch':>5} {'frame B':>7} {'vLLM encode_into':>19} {'tap hot':>17} "
          f"{'over':>6} {'/drain':>6} {'tap thread':>18} {'ratio':>17} {'target':>6}")
    for batch, frame_bytes, vllm_t, hot_t, thread_t in rows:
        target = "≤ 0.5" if batch >= 256 else "≤ 1.0"
        for (name, k), series in thread_t.items():
            ratios = [(h + t) / v for h, t, v in zip(hot_t, series, vllm_t)]
            print(f"{batch:>5} {frame_bytes:>7,.0f} "
                  f"{med(vllm_t) / 1000:>6.2f} ({spread(vllm_t):>11}) "
                  f"{med(hot_t) / 1000:>5.2f} ({spread(hot_t):>9}) {name:>6} {k:>6} "
                  f"{med(series) / 1000:>6.2f} ({spread(series):>10}) "
                  f"{med(ratios):>5.2f} ({min(ratios):.2f}–{max(ratios):.2f}) {target:>6}")
    vllm_t, tap_t, split_t = req
    print(f"\nper new request, µs, median (range): {PROMPT_LEN}-token prompt, max_tokens={MAX_TOKENS}")
    print(f"  vLLM MsgpackDecoder(EngineCoreRequest).decode     {med(vllm_t) / 1000:6.2f} ({spread(vllm_t)})")
    for transport, series in tap_t.items():
        ratios = [t / v for t, v in zip(series, vllm_t)]
        print(f"  tap: add_request append, record, {transport + ' prep':<12}    "
              f"{med(series) / 1000:6.2f} ({spread(series)})  ratio {med(ratios):.2f} "
              f"({min(ratios):.2f}–{max(ratios):.2f}), target ≤ 1.0")
    with_split = [(t + s) / v for t, s, v in zip(tap_t["socket"], split_t, vllm_t)]
    print(f"  + a frames chunk split in two (socket)          {med(split_t) / 1000:6.2f} "
          f"({spread(split_t)})  ratio with it {med(with_split):.2f} "
          f"({min(with_split):.2f}–{max(with_split):.2f})")
    if in_situ:
        print_in_situ(in_situ)
    return 0


if __name__ == "__main__":
    sys.exit(main())
