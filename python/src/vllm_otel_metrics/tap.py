"""The engine-core tap: the source under vLLM's Rust frontend (``vllm-rs``),
and under its Python frontend when asked for.

``vllm-rs`` (``VLLM_USE_RUST_FRONTEND=1``) replaces vLLM's Python API server,
so no stat-logger plugin loads there. What does load in every process,
engine cores included, is a ``vllm.general_plugins`` entry point:
``EngineCore.__init__`` calls ``load_general_plugins()``. :func:`register` is
that entry point. It runs *inside* ``EngineCoreProc.__init__``, so it hooks
``run_busy_loop``, which vLLM looks up on the finished engine; the hook
starts the tap once, on the engine's own thread, before the first step.

What the tap sees, and what it costs the engine core (the GIL it holds is
the step loop's; docs/PERFORMANCE.md measures it against vLLM's own work):

- **each step's outputs**: the output thread has just msgpack-encoded the
  step's ``EngineCoreOutputs`` for the frontend and hands the buffers to
  ``_send_msg_tracking_payload``. The tap's wrapper copies the first buffer
  (the whole msgpack value; tensors vLLM sends beside it are not read) and
  appends it with the wall-clock time to a deque bounded in items
  (``VLLM_OTEL_METRICS_QUEUE``) and frame bytes
  (``VLLM_OTEL_METRICS_QUEUE_BYTES``). Nothing is decoded here: the sidecar
  reads vLLM's layout in Rust (``src/sources/tap/``);
- **each new request**: ``add_request`` copies the few fields the sidecar
  needs (id, arrival time, prompt length, ``max_tokens``, ``n``, whether it
  has stop strings, ``traceparent``) into a :class:`Started` and appends
  that: never the ``Request`` itself, which holds the prompt's token ids and
  any multimodal inputs, and which the queue would otherwise keep alive
  (up to ``VLLM_OTEL_METRICS_QUEUE`` of them while the sidecar is down);
- **each abort**: ``abort_requests`` appends the ids. A client that went away
  and a frontend that matched a stop string send the same abort.

The streaming thread (:class:`.stream.Streamer`) drains the queue
(:class:`.bounded_queue.FrameQueue`) in one go,
groups consecutive frames into one ``EngineCoreFrames`` record (the bytes
joined, their lengths and times as packed numbers) and sends it with the
requests and aborts in their order.

vLLM's struct layouts move between versions. The tap sends the field names
of ``EngineCoreOutputs`` and ``EngineCoreOutput`` as the running vLLM defines
them, and checks first that the fields the sidecar needs are there
(:data:`REQUIRED_FIELDS`, the same list as ``src/sources/tap/frame.rs``). A
vLLM it cannot read, or one without the methods it hooks, gets one warning in
vLLM's log and an engine without the tap: vLLM serves on.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import config, convert, kv_connector, wire
from .bounded_queue import Frame, FrameQueue
from .convert import pb

log = logging.getLogger("vllm.vllm_otel_metrics")

#: Fields the sidecar reads, by struct (``src/sources/tap/frame.rs``
#: ``REQUIRED_FIELDS``; a test checks the two lists agree).
REQUIRED_FIELDS = {
    "EngineCoreOutputs": ("outputs", "timestamp"),
    "EngineCoreOutput": ("request_id", "new_token_ids", "finish_reason", "events"),
}

#: The engine-core methods the tap wraps.
HOOKS = ("_send_msg_tracking_payload", "add_request", "abort_requests")

#: Most frame bytes in one ``EngineCoreFrames`` record: with :data:`MAX_RECORDS`
#: records a message stays far below the sidecar's 16 MiB limit.
MAX_CHUNK_BYTES = 512 * 1024
#: Most frames in one chunk: the ingest socket hands a chunk's parts (its
#: frames and two more) to one ``sendmsg``, which takes at most 1024 (IOV_MAX).
MAX_CHUNK_FRAMES = 1000
#: Most records in one message.
MAX_RECORDS = 16
#: Records kept to be sent again after a sidecar's shutdown: chunks are large,
#: so fewer than the stat-logger's records.
RESEND_WINDOW = 64
#: Most queued items drained into one message.
MAX_DRAIN = 1024
#: How often the streaming thread looks at the queue, seconds. Each look
#: that finds steps costs a message's conversion and send, under the GIL:
#: at the stat-logger's 50 ms that was 2.6 to 4.1 times vLLM's own encode
#: of the steps (benches/python/tap_cost.py). Every frame carries its own
#: send time, so waiting longer delays the export, not the measurements.
POLL_SECONDS = 1.0

_registered = False


def _version() -> str:
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except Exception:  # noqa: BLE001 — only for the log line
        return "unknown"


def register() -> None:
    """The ``vllm.general_plugins`` entry point: hooks ``run_busy_loop`` of
    vLLM's engine-core processes when the tap is the source
    (:func:`.config.engine_source`). Runs in every vLLM process. Under the
    Rust frontend it also starts the sidecar, from vLLM's main process
    (:func:`start_sidecar`). A wrong setting, or a private directory or
    lock file that is not this user's, is one line in vLLM's log and no
    tap."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        if config.engine_source() != "engine_core":
            return
        if config.rust_frontend() and multiprocessing.parent_process() is None:
            start_sidecar()
    except config.ConfigError as e:
        log.error("vllm-otel-metrics: %s; the engine-core tap is off, vLLM goes on", e)
        return
    try:
        from vllm.v1.engine import core
    except Exception:  # noqa: BLE001 — a vLLM without the v1 engine core
        log.warning(
            "vllm-otel-metrics: vLLM %s has no v1 engine core; the engine-core tap is off",
            _version(),
        )
        return
    for cls in (core.EngineCoreProc, getattr(core, "DPEngineCoreProc", None)):
        if cls is not None and "run_busy_loop" in cls.__dict__:
            _hook_busy_loop(cls)


def start_sidecar() -> None:
    """Starts the host's sidecar from vLLM's main process under the Rust
    frontend (the Python frontend's stat-logger plugin does it there).

    Not from an engine core: vLLM ends an engine core's whole process tree
    with SIGKILL when it stops, which would kill the sidecar before it
    drained its last spans and samples. The main process ends the normal
    way, so the supervisor's exit handler stops the sidecar with SIGTERM
    and ``serve --parent-pid`` covers the rest. No ``--max-model-len``
    (:func:`.sidecar.planned`).
    """
    from .sidecar import Supervisor, planned

    settings = config.from_env()
    if settings.sidecar is None:
        return
    supervisor = Supervisor(*planned(settings.sidecar, None, True)).start()
    import atexit

    atexit.register(supervisor.close)


def _hook_busy_loop(cls: Any) -> None:
    original = cls.__dict__["run_busy_loop"]

    def run_busy_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Once per engine, on its own thread, before the first step.
        if getattr(self, "_vllm_otel_metrics_tap", None) is None:
            try:
                self._vllm_otel_metrics_tap = Tap.attach(self)
            except config.ConfigError as e:
                log.error("vllm-otel-metrics: %s; the engine-core tap is off, vLLM goes on", e)
                self._vllm_otel_metrics_tap = False
            except Exception:
                log.exception("vllm-otel-metrics: the engine-core tap failed to start; it is off")
                self._vllm_otel_metrics_tap = False
        return original(self, *args, **kwargs)

    run_busy_loop.__wrapped__ = original  # type: ignore[attr-defined]
    cls.run_busy_loop = run_busy_loop


def readable_layout(outputs_cls: type, output_cls: type) -> str | None:
    """Why the sidecar could not read these structs, or None when it can.

    >>> class Outputs: __struct_fields__ = ("engine_index", "outputs", "timestamp")
    >>> class Output: __struct_fields__ = ("request_id", "new_token_ids")
    >>> readable_layout(Outputs, Output)
    "EngineCoreOutput has no field 'finish_reason'"
    """
    for name, cls in (("EngineCoreOutputs", outputs_cls), ("EngineCoreOutput", output_cls)):
        fields = getattr(cls, "__struct_fields__", None)
        if fields is None:
            return f"{name} is not a msgspec struct"
        for field in REQUIRED_FIELDS[name]:
            if field not in fields:
                return f"{name} has no field {field!r}"
    return None


# Not frozen, like the plugin's items (plugin.Step): made on vLLM's threads,
# where a frozen dataclass's __init__ costs about four times a plain one's.
@dataclasses.dataclass(slots=True)
class Started:
    """A queued new request: the fields of the engine's ``Request`` its
    record needs, copied in ``add_request`` (:func:`started`), so that the
    queue holds no reference to the request, its prompt or its inputs.
    Values as vLLM has them (the record converts them on the streaming
    thread)."""

    at: float
    request_id: Any
    #: ``Request.arrival_time`` (None: ``at``).
    arrival_time: Any
    #: ``Request.num_prompt_tokens``.
    prompt_len: Any
    #: ``SamplingParams.max_tokens``.
    max_tokens: Any = None
    #: ``SamplingParams.n`` (1 when vLLM has none), or None for a request
    #: without sampling parameters.
    n: Any = None
    #: Whether ``SamplingParams.stop`` names stop strings.
    stop_strings: bool = False
    #: The ``traceparent`` of the request's trace headers.
    traceparent: Any = None
    #: ``Request.lora_request.lora_name`` (None: the base model): the name
    #: alone, an immutable string, never the ``LoRARequest``.
    lora_name: Any = None
    #: ``Request.priority``.
    priority: Any = None


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def started(at: float, request: Any) -> Started:
    """What the tap keeps of a new ``request`` (vLLM's ``Request``), taken
    at ``at``. Runs in ``add_request`` on vLLM's engine thread: plain
    attribute reads (``getattr`` with a default costs twice as much, and
    vLLM 0.32 and 0.33 set them all in ``Request.__init__``; a vLLM without
    one makes each request counted as unconvertible, and logged); the
    conversions wait for the streaming thread."""
    params = request.sampling_params
    headers = request.trace_headers
    lora = request.lora_request
    return Started(
        at,
        request.request_id,
        request.arrival_time,
        request.num_prompt_tokens,
        None if params is None else params.max_tokens,
        None if params is None else (params.n or 1),
        params is not None and bool(params.stop),
        headers.get("traceparent") if headers else None,
        None if lora is None else lora.lora_name,
        request.priority,
    )


@dataclasses.dataclass(slots=True)
class Aborted:
    """Queued aborts."""

    at: float
    request_ids: list[str]


@dataclasses.dataclass(slots=True)
class EngineStart:
    """The engine's start-up records (:func:`.convert.engine_records`),
    queued as they are."""

    records: Sequence[convert.Record]


#: What the tap queues (an unreadable request as the record it stands for).
Item = Frame | Started | Aborted | EngineStart | convert.Unconvertible


def _running(request: Any) -> bool:
    """Whether the scheduler's ``Request`` is there and not finished."""
    if request is None:
        return False
    finished = getattr(request, "is_finished", None)
    try:
        return not finished() if callable(finished) else True
    except Exception:  # noqa: BLE001 — never fail vLLM's abort
        return True


class Tap:
    """One engine core's tap: its queue, its hooks and its streamer."""

    def __init__(
        self,
        settings: config.Settings,
        model_name: str,
        engine: int,
        outputs_fields: Iterable[str],
        output_fields: Iterable[str],
        kv_consumer: bool,
        lora_enabled: bool,
        admit: Callable[[], bool] | None = None,
    ) -> None:
        # Not at the top: register() runs in every vLLM process, and the
        # stream imports gRPC.
        from .stream import Streamer

        self.model_name = model_name
        self.engine = engine
        self._chunk = wire.ChunkWriter(
            model_name=model_name,
            engine_core_outputs_fields=list(outputs_fields),
            engine_core_output_fields=list(output_fields),
            kv_consumer=kv_consumer,
            lora_enabled=lora_enabled,
        )
        #: The queue the hooks fill: bounded in items and frame bytes.
        self.queue = FrameQueue(
            settings.queue,
            settings.queue_bytes,
            self._weigh,
            max_drain=MAX_DRAIN,
            max_drain_bytes=MAX_CHUNK_BYTES * MAX_RECORDS // 2,
        )
        self.streamer = Streamer(
            settings,
            self.queue,
            self._to_records,
            grouping=wire.groups,
            max_records=MAX_RECORDS,
            resend_window=RESEND_WINDOW,
            poll_seconds=POLL_SECONDS,
            admit=admit,
        )

    @classmethod
    def attach(cls, engine_core: Any) -> Tap | bool:
        """Starts a tap on ``engine_core`` (an ``EngineCoreProc``); False when
        this vLLM cannot be tapped (warned once)."""
        from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs

        from .plugin import served_model_name

        version = _version()
        unreadable = readable_layout(EngineCoreOutputs, EngineCoreOutput)
        missing = [name for name in HOOKS if not callable(getattr(engine_core, name, None))]
        if unreadable or missing:
            log.warning(
                "vllm-otel-metrics: cannot tap vLLM %s's engine core (%s); the engine-core tap "
                "is off and vLLM serves on without it",
                version,
                unreadable or f"no method {', '.join(missing)}",
            )
            return False
        settings = config.from_env()
        vllm_config = engine_core.vllm_config
        rust_frontend = config.rust_frontend()
        model_name = served_model_name(vllm_config)
        engine = int(getattr(engine_core, "engine_index", 0))
        kv_consumer, nixl = kv_connector.kv_transfer_setup(
            getattr(vllm_config, "kv_transfer_config", None)
        )
        lora_config = getattr(vllm_config, "lora_config", None)
        admit = None
        if settings.sidecar is not None and settings.sidecar.lock_file is not None:
            from .sidecar import Gate, fingerprint, planned

            # The sidecar this vLLM's supervisor starts (in another process)
            # has this configuration: one of another instance's is not ours.
            admit = Gate(
                settings.sidecar.lock_file,
                fingerprint(*planned(settings.sidecar, vllm_config, rust_frontend)),
            ).admits
        tap = cls(
            settings,
            model_name,
            engine,
            EngineCoreOutputs.__struct_fields__,
            EngineCoreOutput.__struct_fields__,
            kv_consumer,
            lora_config is not None,
            admit,
        )
        # Under vllm-rs the sidecar's token buckets do not follow the model's
        # length (start_sidecar): the length stays out of the engine_config
        # record, or the sidecar would advise matching it.
        max_model_len = (
            None if rust_frontend else getattr(vllm_config.model_config, "max_model_len", None)
        )
        # The first item: the queue is empty.
        tap.queue.put(
            EngineStart(
                convert.engine_records(
                    vllm_config.cache_config,
                    model_name,
                    engine,
                    getattr(lora_config, "max_loras", None) if lora_config else None,
                    max_model_len,
                    kv_consumer,
                    nixl,
                    time.time(),
                )
            )
        )
        tap.streamer.start()
        tap._hook(engine_core)
        import atexit

        atexit.register(tap.close)
        log.info(
            "vllm-otel-metrics: engine-core tap on engine %d of %s (vLLM %s, pid %d), "
            "streaming to %s",
            engine,
            model_name,
            version,
            os.getpid(),
            (settings.sidecar and settings.sidecar.ingest_socket) or settings.address,
        )
        return tap

    def close(self) -> None:
        self.streamer.close()

    def _hook(self, engine_core: Any) -> None:
        """Wraps the three methods on the instance (an instance attribute
        wins over the class's function): nothing global changes, and each
        call is looked up anew, so the running output thread sees it."""
        frames = self.queue
        queue = frames.items
        bound = frames.bound
        put = frames.put
        dropped = frames.drop
        add = engine_core.add_request
        abort = engine_core.abort_requests
        now = time.time

        # The hot path: one engine step. A copy of the encoded step, a time,
        # an append (FrameQueue.frames_through); its dropped frames have a
        # counter of their own: it runs on vLLM's output thread, the other
        # hooks on its engine thread.
        _send_msg_tracking_payload = frames.frames_through(engine_core._send_msg_tracking_payload)

        # A copy of the few fields a request's record needs, never the
        # request: the queue must not keep its prompt and inputs alive.
        def add_request(request: Any, *args: Any, **kwargs: Any) -> Any:
            if len(queue) < bound:
                try:
                    item: Item = started(now(), request)
                except Exception as e:  # noqa: BLE001 — never fail vLLM's call
                    item = convert.Unconvertible("request", f"{type(e).__name__}: {e}")
                put(item)
            else:
                dropped(1)
            return add(request, *args, **kwargs)

        # vLLM 0.33 calls abort_requests twice for one abort from the
        # frontend (early, from its aborts queue, and again in order from
        # its input queue): only the ids the scheduler still runs are an
        # abort, so each is recorded once.
        live = getattr(getattr(engine_core, "scheduler", None), "requests", None)
        if not isinstance(live, dict):
            live = None

        def abort_requests(request_ids: Any, *args: Any, **kwargs: Any) -> Any:
            ids = (request_ids,) if isinstance(request_ids, str) else request_ids
            if live is not None:
                ids = [i for i in ids if _running(live.get(i))]
            else:
                ids = list(ids)
            if ids:
                if len(queue) < bound:
                    put(Aborted(now(), ids))
                else:
                    dropped(len(ids))
            return abort(request_ids, *args, **kwargs)

        engine_core._send_msg_tracking_payload = _send_msg_tracking_payload
        engine_core.add_request = add_request
        engine_core.abort_requests = abort_requests

    @staticmethod
    def _weigh(item: Item) -> int:
        """How many records ``item`` stands for, as its drop is counted."""
        if type(item) is EngineStart:
            return len(item.records)
        if type(item) is Aborted:
            return len(item.request_ids)
        return 1

    def _to_records(self, items: Iterable[Item]) -> list[Any]:
        """Runs on the streaming thread: the drained items as records, in
        order; the frames in chunks of at most :data:`MAX_CHUNK_BYTES` and
        :data:`MAX_CHUNK_FRAMES`."""
        chunk = self._chunk
        records: list[Any] = []
        frames: list[bytes] = []
        times: list[float] = []
        size = 0
        for item in items:
            if type(item) is tuple:
                at, frame = item
                if frames and (
                    size + len(frame) > MAX_CHUNK_BYTES or len(frames) >= MAX_CHUNK_FRAMES
                ):
                    records.append(chunk.record(frames, times, size))
                    frames, times, size = [], [], 0
                frames.append(frame)
                times.append(at)
                size += len(frame)
                continue
            if frames:
                records.append(chunk.record(frames, times, size))
                frames, times, size = [], [], 0
            if type(item) is Started:
                try:
                    records.append(self._request_record(item))
                except Exception as e:  # noqa: BLE001 — one odd request must not cost the drain
                    records.append(convert.Unconvertible("request", f"{type(e).__name__}: {e}"))
            elif type(item) is Aborted:
                for request_id in item.request_ids:
                    record = pb.Record()
                    record.abort.request_id = str(request_id)
                    record.abort.received_at = item.at
                    records.append(record)
            elif type(item) is EngineStart:
                records.extend(item.records)
            elif type(item) is convert.Unconvertible:
                # A request add_request could not read: counted and logged.
                records.append(item)
            else:
                raise TypeError(f"not an item the tap queues: {item!r}")
        if frames:
            records.append(chunk.record(frames, times, size))
        return records

    def _request_record(self, item: Started) -> Any:
        record = pb.Record()
        message = record.request
        message.request_id = str(item.request_id)
        message.model_name = self.model_name
        message.engine = self.engine
        message.arrival_time = float(item.arrival_time or item.at)
        message.prompt_len = int(item.prompt_len or 0)
        if item.n is not None:
            if item.max_tokens is not None:
                message.max_tokens = int(item.max_tokens)
            message.n = int(item.n)
            message.stop_strings = item.stop_strings
        if item.traceparent:
            message.traceparent = str(item.traceparent)
        if item.lora_name:
            message.lora_name = str(item.lora_name)
        if item.priority is not None:
            # Python's int is unbounded, the wire's sint64 is not.
            message.priority = min(max(int(item.priority), _INT64_MIN), _INT64_MAX)
        return record
