#!/usr/bin/env python3
"""Seeded random JSONL trace generator (docs/SEMANTICS.md §5) for the reference tests.

Usage:
    python3 tests/reference/gen_trace.py --seed N [--requests R] [--models M]
        [--engines E] [--malformed K] [--outputs-target T] [--no-engine-records]
        [--kv-connectors]

Simulates a few engines stepping in monotonic time and writes a valid trace to
stdout: request starts, outputs batches (queued/scheduled events on the first
output, chunked prefill outputs without tokens, preemptions during prefill and
during decode with re-scheduling (prefill_stats only on a request's first
output with a token, as vLLM's engine sends them; a re-admission's
prefix-cache lookup shows in scheduler_stats alone), prefix-cache hits,
speculative multi-token outputs, all finish reasons), explicit aborts,
scheduler_stats, plus noise the tracker must ignore (outputs/aborts for
unknown or finished ids, duplicate starts of live ids, reuse of finished ids)
and requests left in flight at the end.

Preemption reasons and GenAI operation names, drawn from a third RNG so
that everything else is the same as without them: a `preempted` event
mostly carries no `reason` (or `kv_full`, or null), sometimes `priority`,
rarely `prefix_cache_reset`; a `request` carries no `operation_name` (or
null) for some requests, otherwise mostly `chat` or `text_completion`,
rarely another of the semantic conventions' operations.

Engine-level records, drawn from a second RNG so the records above
are the same as without them: `engine_config` start-ups (random cache_config,
sometimes max_loras, sometimes a later replacement or a repeat), scheduler_stats
with random subsets of the optional fields (skipped waiting requests, KV fetch
stages, external prefix cache with by-source maps that do or do not add up,
multi-modal cache, KV block eviction events, perf_stats, spec_decoding, LoRA
adapter lists with received_at), `sleep_state` (levels 0-2) and `operation`
records for all eight operations.  --no-engine-records leaves all of them out
(and the engine-level malformed kinds): the trace of the generator before them.

--kv-connectors makes scheduler_stats records carry `kv_connector_stats`
(docs/SEMANTICS.md §4b), drawn from a fourth RNG so that every other line is
the same as without it: each engine runs some of the three connector kinds
(NIXL, the OffloadingConnector, the SimpleCPUOffloadConnector; every kind on
some engine, all three on at least one), and most of its scheduler_stats
carry one step's stats of them with vLLM-like magnitudes (NIXL transfers of
1e4-1e10 bytes taking 1 ms-2 s, 5-60000 descriptors, occasional failures and
expiries; offload loads and stores of 1e6-3e8 bytes with their times and
per-job sizes, lookup delays from 1e-5 s to 20 s, CPU-buffer usage
fractions, occasional allocation failures, stores skipped on engines with a
store threshold; store outcomes, restored, used and pending blocks),
sometimes with fields left out or null, values on bucket bounds and empty
lists.  Without it the output is byte for byte what it was before the option
existed.

--malformed K inserts K invalid lines at random positions and writes their
1-based line numbers to stderr (one per line); among them, unknown preemption
reasons and operation names; with --kv-connectors, about half of them are
scheduler_stats whose kv_connector_stats break one of §4b's rules.  The
malformed lines come from
their own RNG, so removing them yields exactly the trace produced with
--malformed 0 for the same seed.

--outputs-target T ignores --requests and keeps generating until about T
engine-core outputs were emitted.  Output is streamed; memory stays bounded.
(With --malformed the simulation is run twice: once to count lines, once to
write, so positions can be chosen uniformly without buffering.)

Times are integers in units of 1e-4 s internally, so every timestamp in the
trace is a "nice" decimal (engine clock around 1000.0, wall clock ~1.7e9).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import deque

UNIT = 10_000                    # time units per second (1e-4 s resolution)
WALL0 = 1_700_000_000 * UNIT     # wall clock origin
MODEL_NAMES = ["llama-3.1-8b", "qwen/Qwen2.5-7B-Instruct", "mistral-7b-v0.3",
               "m", "gemma-2-9b", "phi-3.5-mini"]
# Engine indices chosen so that numeric and string ordering differ (2 < 10).
ENGINE_IDS = [0, 2, 10, 1, 3, 7, 11, 4, 5, 6, 8, 9, 12, 13, 14, 15]
REASONS = ["stop"] * 14 + ["length"] * 2 + ["repetition"] * 2 + ["error", "abort"]
# docs/SEMANTICS.md §5: a preempted event's reason (absent or null: kv_full)
# and a request's operation_name (absent or null: text_completion).
PREEMPTION_REASONS = ["kv_full", "priority", "prefix_cache_reset"]
OPERATION_NAMES = ["chat", "create_agent", "embeddings", "execute_tool",
                   "generate_content", "invoke_agent", "text_completion"]
RARE_OPERATIONS = [op for op in OPERATION_NAMES if op not in ("chat", "text_completion")]

# Engine-level records.
KV_FETCH_STAGES = ["waiting_to_start", "in_progress", "completed_waiting"]
EXTERNAL_SOURCES = ["host", "p2p", "disk", "external_unspecified"]
SLEEP_OPERATIONS = ["sleep", "release_kv_cache_memory", "wake"]
RL_OPERATIONS = ["init", "start", "start_draft", "update", "finish"]
OPS_BOUNDS = [0.01, 0.1, 1.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0]
RESIDENCY_BOUNDS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
                    10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0]
LORA_NAMES = ["sql-lora", "tweet-summary", "zh-en"]

# KV-connector stats (docs/SEMANTICS.md §4b, --kv-connectors).
KV_CONNECTOR_KINDS = ["nixl", "offloading", "simple_cpu_offload"]
SAVE_OUTCOMES = ["stored", "dropped_cpu_full", "dropped_request_gone", "dropped_null_block",
                 "dropped_not_hashed", "skipped_already_cached", "skipped_in_flight"]
NIXL_TIME_BOUNDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0]
NIXL_BYTES_BOUNDS = [2 ** (10 + i) for i in range(1, 25, 2)]
NIXL_DESC_BOUNDS = [10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000]
OFFLOAD_SIZE_BOUNDS = [1_000_000, 5_000_000, 10_000_000, 20_000_000, 40_000_000, 60_000_000,
                       80_000_000, 100_000_000, 150_000_000, 200_000_000]
LOOKUP_BOUNDS = [0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                 1.0, 5.0, 10.0]
# cache_config keys of vLLM's CacheConfig with plausible values (as str(value)).
CACHE_CONFIG_POOL = {
    "block_size": ["16", "32", "64"],
    "gpu_memory_utilization": ["0.9", "0.85", "0.95", "0.5"],
    "swap_space": ["4", "0"],
    "cache_dtype": ["auto", "fp8", "fp8_e5m2"],
    "num_gpu_blocks": ["1024", "2048", "8192", "27910"],
    "num_cpu_blocks": ["None", "512"],
    "enable_prefix_caching": ["True", "False"],
    "prefix_caching_hash_algo": ["sha256", "sha256_cbor"],
    "cpu_offload_gb": ["0", "4.5"],
    "calculate_kv_scales": ["False", "True"],
    "sliding_window": ["None", "4096"],
    "is_attention_free": ["False"],
    "num_gpu_blocks_override": ["None", "1000"],
    "mamba_cache_dtype": ["auto", "float32"],
    "kv_offloading_backend": ["native", "lmcache"],
    "kv_sharing_fast_prefill": ["False"],
    "_note": ['say "hi" \\ ok', "über-cache", "a=b,c"],     # escaping / UTF-8
}


def secs(units: int) -> float:
    """A time in 1e-4 s units as the closest double (repr is the short decimal)."""
    return units / UNIT


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Req:
    __slots__ = ("rid", "model", "engine", "arrival", "prompt_len", "max_tokens",
                 "n", "target", "reason", "phase", "chunks_left", "tokens",
                 "pending", "eligible_tick", "resume_stats", "started")

    def __init__(self, rid, model, engine, arrival, prompt_len, max_tokens, n,
                 target, reason, tick):
        self.rid = rid
        self.model = model
        self.engine = engine
        self.arrival = arrival
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.n = n
        self.target = target          # tokens to generate before finishing
        self.reason = reason          # finish reason used on the last token
        self.phase = "waiting"        # waiting | prefill | decode | preempted
        self.chunks_left = 0
        self.tokens = 0
        self.pending = []             # events to attach to the next output
        self.eligible_tick = tick + 1
        self.resume_stats = False     # first output after a decode preemption
        self.started = False          # had its first token


class Engine:
    def __init__(self, eid, model, clock0, max_running):
        self.eid = eid
        self.model = model
        self.clock0 = clock0          # engine monotonic clock at sim t=0 (units)
        self.max_running = max_running
        self.waiting = deque()
        self.preempted = deque()
        self.running = []
        # Engine-level profile, set by Sim.engine_profile.
        self.announce = False         # emits an engine_config at start
        self.config = None            # cache_config dict (None: the key is left out)
        self.max_loras = None
        self.kv_consumer = False      # reports num_kv_fetch_reqs_by_stage
        self.external = False         # KV connector: external prefix cache fields
        self.mm = False
        self.perf = False
        self.spec_k = 0               # speculative tokens per draft (0: no spec decoding)
        self.lora = False             # reports LoRA adapter lists
        self.level = 0                # sleep level
        # KV-connector profile (--kv-connectors), set by Sim.kv_profile.
        self.kv_kinds = []            # connector kinds this engine runs
        self.store_threshold = 0      # >= 2: the offloading stats carry stores_skipped
        self.cpu_blocks = 0           # the simple offload pool's capacity
        self.pending_blocks = 0       # its pending stores, carried between steps

    def clock(self, t):
        return self.clock0 + t


class Sim:
    def __init__(self, args, emit, on_line=None):
        self.rng = random.Random(args.seed)
        self.args = args
        self.emit_line = emit
        self.on_line = on_line        # hook: called before every valid line
        self.models = MODEL_NAMES[:max(1, args.models)]
        self.engines = []
        for i in range(max(1, args.engines)):
            eid = ENGINE_IDS[i] if i < len(ENGINE_IDS) else 100 + i
            clock0 = 1000 * UNIT + self.rng.randrange(0, 50 * UNIT)
            self.engines.append(Engine(eid, self.models[i % len(self.models)],
                                       clock0, self.rng.randint(6, 20)))
        # Engine-level records use their own RNG: the simulation above is
        # unchanged by them (same requests, outputs, scheduler_stats values).
        self.engine_records = not getattr(args, "no_engine_records", False)
        self.xrng = random.Random(args.seed * 1_000_003 + 14)
        # Preemption reasons and operation names: a third RNG, so the
        # simulation and the engine-level records are unchanged by them.
        self.srng = random.Random(args.seed * 1_000_003 + 58037)
        # KV-connector stats (--kv-connectors): a fourth RNG, used only with
        # the option, so that without it the trace is unchanged.
        self.kv_connectors = getattr(args, "kv_connectors", False)
        self.krng = random.Random(args.seed * 1_000_003 + 4242)
        self.kv_bad_kinds = []        # malformed kv_connector_stats kinds still to use
        if self.kv_connectors:
            for eng in self.engines:
                self.kv_profile(eng)
            k = self.krng
            if not any(len(e.kv_kinds) == 3 for e in self.engines):
                k.choice(self.engines).kv_kinds = list(KV_CONNECTOR_KINDS)
            for kind in KV_CONNECTOR_KINDS:            # every kind somewhere
                if not any(kind in e.kv_kinds for e in self.engines):
                    eng = k.choice(self.engines)
                    eng.kv_kinds = [c for c in KV_CONNECTOR_KINDS
                                    if c in eng.kv_kinds or c == kind]
        if self.engine_records:
            for eng in self.engines:
                self.engine_profile(eng)
            # Every optional feature on at least one engine.
            for attr, value in (("kv_consumer", True), ("external", True), ("mm", True),
                                ("perf", True), ("spec_k", 3), ("lora", True)):
                if not any(getattr(e, attr) for e in self.engines):
                    setattr(self.xrng.choice(self.engines), attr, value)
        self.live = {}                # rid -> Req
        self.finished = deque(maxlen=64)   # recently terminated ids
        self.created = 0
        self.next_id = 0
        self.outputs_emitted = 0
        self.t = 0

    # -- output helpers ---------------------------------------------------
    def emit(self, obj):
        if self.on_line is not None:
            self.on_line(self)
        self.emit_line(dumps(obj))

    def wall(self, t):
        return secs(WALL0 + t)

    # -- preemption reasons and operation names (all randomness from self.srng)
    def preemption_reason(self):
        """The `reason` of a preempted event that carries the field: mostly
        kv_full (or null, which means kv_full), sometimes priority, rarely
        prefix_cache_reset."""
        r = self.srng.random()
        if r < 0.45:
            return "kv_full"
        if r < 0.55:
            return None                                # null = absent = kv_full
        if r < 0.9:
            return "priority"
        return "prefix_cache_reset"

    def operation_name(self, rec):
        """Sets (or leaves out) a request record's `operation_name`."""
        r = self.srng.random()
        if r < 0.25:
            return                                     # absent: text_completion
        if r < 0.3:
            rec["operation_name"] = None               # null = absent
        elif r < 0.65:
            rec["operation_name"] = "chat"
        elif r < 0.95:
            rec["operation_name"] = "text_completion"
        else:
            rec["operation_name"] = self.srng.choice(RARE_OPERATIONS)

    # -- engine-level records (all randomness from self.xrng) --------
    def engine_profile(self, eng):
        x = self.xrng
        eng.announce = x.random() < 0.75
        eng.kv_consumer = x.random() < 0.4
        eng.external = x.random() < 0.5
        eng.mm = x.random() < 0.4
        eng.perf = x.random() < 0.8
        eng.spec_k = x.choice([0, 0, 0, 1, 2, 3, 5, 16])
        eng.lora = x.random() < 0.5
        eng.max_loras = x.randint(1, 8) if eng.lora and x.random() < 0.8 else None
        eng.config = self.random_cache_config()

    def random_cache_config(self):
        x = self.xrng
        r = x.random()
        if r < 0.05:
            return None                                # key absent: only `engine`
        if r < 0.1:
            return {}
        keys = [k for k in CACHE_CONFIG_POOL if k != "_note"]
        chosen = x.sample(keys, x.randint(1, len(keys)))
        if x.random() < 0.15:
            chosen.append("_note")
        return {k: x.choice(CACHE_CONFIG_POOL[k]) for k in chosen}

    def engine_config(self, eng):
        rec = {"type": "engine_config", "model_name": eng.model, "engine": eng.eid}
        if eng.config is not None:
            rec["cache_config"] = eng.config
        if eng.max_loras is not None:
            rec["max_loras"] = eng.max_loras
        elif self.xrng.random() < 0.2:
            rec["max_loras"] = None                    # null = absent
        self.emit(rec)

    def replace_engine_config(self, eng):
        """A restart: a changed cache_config (or the same one), max_loras kept,
        changed or dropped."""
        x = self.xrng
        r = x.random()
        if r < 0.2:
            pass                                       # the same config again
        elif r < 0.5 and eng.config:
            config = dict(eng.config)
            key = x.choice(sorted(config))
            choices = [v for v in CACHE_CONFIG_POOL[key] if v != config[key]]
            if choices:
                config[key] = x.choice(choices)
            else:
                del config[key]
            eng.config = config
        else:
            eng.config = self.random_cache_config()
        r = x.random()
        if r < 0.15:
            eng.max_loras = None
        elif r < 0.3:
            eng.max_loras = x.randint(0, 16)
        self.engine_config(eng)

    def sleep_state(self, model, eid, level):
        self.emit({"type": "sleep_state", "model_name": model, "engine": eid, "level": level})

    def operation(self):
        x = self.xrng
        op = x.choice(SLEEP_OPERATIONS + RL_OPERATIONS)
        r = x.random()
        if r < 0.25:
            duration = x.choice(OPS_BOUNDS)            # exactly on a bucket bound
        elif r < 0.3:
            duration = x.choice([0.0, 900.0, 1234.5])  # zero, beyond the last bound
        else:
            duration = round(min(x.lognormvariate(0.5, 2.0), 2000.0), 4)
        self.emit({"type": "operation", "operation": op, "duration": float(duration)})

    def engine_events(self):
        """Per tick: occasional restarts, sleep/wake and API-server operations."""
        x = self.xrng
        if x.random() < 0.012:
            self.replace_engine_config(x.choice(self.engines))
        if x.random() < 0.02:
            eng = x.choice(self.engines)
            eng.level = 0 if eng.level else x.choice([1, 1, 2]) if x.random() < 0.8 else 0
            self.sleep_state(eng.model, eng.eid, eng.level)
        if x.random() < 0.03:
            self.operation()

    def residency(self, hi):
        """A KV block time in seconds: often on a RESIDENCY bound, else random."""
        x = self.xrng
        r = x.random()
        if r < 0.15:
            v = x.choice([b for b in RESIDENCY_BOUNDS if b <= hi] or [0.0])
        elif r < 0.2:
            v = 0.0
        else:
            v = round(x.lognormvariate(1.0, 2.5), 3)
        return float(min(v, hi))

    def engine_fields(self, eng, rec, rx):
        """Random subsets of scheduler_stats' optional fields, all valid."""
        x = self.xrng
        waiting = rec["num_waiting_reqs"]
        if x.random() < 0.6:
            rec["num_skipped_waiting_reqs"] = x.randint(0, waiting) if x.random() < 0.7 else 0
        if eng.kv_consumer and x.random() < 0.9:
            stages = x.sample(KV_FETCH_STAGES, x.randint(0, 3))
            rec["num_kv_fetch_reqs_by_stage"] = {s: x.randint(0, 4) for s in stages}
        if eng.external and x.random() < 0.9:
            queries = x.choice([0, x.randint(0, 3000)])
            hits = x.randint(0, queries)
            rec["external_prefix_cache_queries"] = queries
            rec["external_prefix_cache_hits"] = hits
            r = x.random()
            if r < 0.2:
                pass                                   # no map: all external_unspecified
            elif r < 0.75:                             # a map that adds up
                tiers = x.sample(EXTERNAL_SOURCES, x.randint(1, 4))
                cuts = sorted(x.randint(0, hits) for _ in tiers[1:])
                parts = [b - a for a, b in zip([0] + cuts, cuts + [hits])]
                rec["external_prefix_cache_hits_by_source"] = dict(zip(tiers, parts))
            else:                                      # one that does not (fallback)
                tiers = x.sample(EXTERNAL_SOURCES, x.randint(0, 3))
                by = {t: x.randint(0, 200) for t in tiers}
                if sum(by.values()) == hits:
                    by["disk"] = by.get("disk", 0) + 1
                rec["external_prefix_cache_hits_by_source"] = by
        elif x.random() < 0.05:
            rec["external_prefix_cache_queries"] = 0   # explicit zeros
            rec["external_prefix_cache_hits"] = 0
        if eng.mm and x.random() < 0.9:
            queries = x.randint(0, 8)
            rec["mm_cache_queries"] = queries
            rec["mm_cache_hits"] = x.randint(0, queries)
        if x.random() < 0.3:
            events = []
            for _ in range(x.randint(0, 3)):
                lifetime = self.residency(4000.0)
                idle = self.residency(lifetime) if x.random() < 0.8 else lifetime
                gaps = [self.residency(lifetime) for _ in range(x.randint(0, 3))]
                ev = {"lifetime_seconds": lifetime, "idle_seconds": idle,
                      "reuse_gaps_seconds": gaps}
                events.append(ev)
            rec["kv_cache_eviction_events"] = events
        if eng.perf and x.random() < 0.95:
            perf = {}
            for key, lo, hi in (("num_flops_per_gpu", 11, 14),
                                ("num_read_bytes_per_gpu", 8, 11),
                                ("num_write_bytes_per_gpu", 6, 9)):
                if x.random() < 0.9:
                    perf[key] = float(f"{x.randint(0, 999) / 100}e{x.randint(lo, hi)}")
            rec["perf_stats"] = perf
        if eng.spec_k and x.random() < 0.9:
            drafts = x.randint(0, max(1, rec["num_running_reqs"]))
            per_pos, bound = [], drafts
            for _ in range(eng.spec_k):
                bound = x.randint(0, bound)            # later positions accept less
                per_pos.append(bound)
            rec["spec_decoding"] = {"num_drafts": drafts,
                                    "num_draft_tokens": drafts * eng.spec_k,
                                    "num_accepted_tokens": sum(per_pos),
                                    "num_accepted_tokens_per_pos": per_pos}
        if eng.lora and x.random() < 0.8:
            def adapters():
                names = x.sample(LORA_NAMES, x.choice([0, 0, 1, 1, 2]))
                return [n for n in LORA_NAMES if n in names]    # stable order
            which = x.random()
            if which < 0.8:
                rec["running_lora_adapters"] = adapters()
            if which > 0.2:
                rec["waiting_lora_adapters"] = adapters()
            rec["received_at"] = secs(rx)
        elif x.random() < 0.2:
            rec["received_at"] = secs(rx)

    # -- KV-connector stats (all randomness from self.krng) -------------------
    def kv_profile(self, eng):
        k = self.krng
        eng.kv_kinds = [c for c in KV_CONNECTOR_KINDS if k.random() < 0.55]
        eng.store_threshold = k.choice([0, 0, 2, 3])
        eng.cpu_blocks = k.choice([512, 2048, 8192, 27910])

    def log_uniform(self, lo, hi):
        """A number between lo and hi, uniform in log scale."""
        k = self.krng
        return lo * (hi / lo) ** k.random()

    def maybe_bound(self, bounds, value, p=0.1):
        """Sometimes a bucket bound instead of `value` (le is inclusive)."""
        return self.krng.choice(bounds) if self.krng.random() < p else value

    def seconds_value(self, lo, hi, bounds):
        return float(self.maybe_bound(bounds, round(self.log_uniform(lo, hi), 6)))

    def nixl_stats(self):
        """vLLM's NixlKVConnectorStats.data for one step: one entry per
        completed transfer in the four lists, failure lists as counts."""
        k = self.krng
        n = k.choice([0, 0, 1, 1, 1, 2, 2, 3, 4, 6])
        stats = {
            "transfer_duration": [self.seconds_value(0.001, 2.0, NIXL_TIME_BOUNDS)
                                  for _ in range(n)],
            "post_duration": [self.seconds_value(0.0002, 0.5, NIXL_TIME_BOUNDS)
                              for _ in range(n)],
            "bytes_transferred": [self.maybe_bound(NIXL_BYTES_BOUNDS,
                                                   int(self.log_uniform(1e4, 1e10)))
                                  for _ in range(n)],
            "num_descriptors": [self.maybe_bound(NIXL_DESC_BOUNDS,
                                                 int(self.log_uniform(5, 60000)))
                                for _ in range(n)],
        }
        for key, p in (("num_failed_transfers", 0.08), ("num_failed_handshakes", 0.03),
                       ("num_failed_notifications", 0.05), ("num_kv_expired_reqs", 0.06),
                       ("num_notifications_after_expiry", 0.04)):
            stats[key] = k.randint(1, 3) if k.random() < p else 0
        return self.thin(stats)

    def offloading_stats(self, eng):
        """The OffloadingConnector's (CPU spec) per-step payload."""
        k = self.krng
        stats = {}
        for direction, p in (("load", 0.4), ("store", 0.55)):
            if k.random() < p:                         # jobs finished this step
                jobs = k.randint(1, 4)
                sizes = [self.maybe_bound(OFFLOAD_SIZE_BOUNDS,
                                          int(self.log_uniform(1e6, 3e8)) // jobs, 0.05)
                         for _ in range(jobs)]
                bandwidth = self.log_uniform(2e9, 2.5e10)        # bytes/s
                stats[f"{direction}_bytes"] = sum(sizes)
                stats[f"{direction}_time"] = round(sum(sizes) / bandwidth, 6)
                stats[f"{direction}_sizes"] = sizes
        lookups = k.choice([0, 0, 1, 1, 2, 3, 5])
        if lookups or k.random() < 0.2:
            stats["lookup_sync_delays"] = [self.seconds_value(1e-5, 0.5, LOOKUP_BOUNDS)
                                           for _ in range(lookups)]
        if k.random() < 0.25:
            stats["lookup_async_delays"] = [self.seconds_value(1e-4, 20.0, LOOKUP_BOUNDS)
                                            for _ in range(k.randint(1, 2))]
        if k.random() < 0.12:
            stats["allocation_failures"] = k.randint(1, 4)
        if eng.store_threshold >= 2:                   # every step, 0 included
            stats["stores_skipped"] = k.choice([0, 0, 0, k.randint(1, 40)])
        r = k.random()
        usage = 0.0 if r < 0.1 else 1.0 if r < 0.13 else round(k.random(), 4)
        write = round(usage * k.random(), 4)
        stats["cpu_cache_usage"] = usage
        stats["cpu_cache_write_usage"] = write
        stats["cpu_cache_read_usage"] = round(max(usage - write, 0.0), 4)
        return self.thin(stats)

    def simple_offload_stats(self, eng):
        """The SimpleCPUOffloadConnector's per-step payload."""
        k = self.krng
        stats = {}
        outcomes = {}
        for outcome in k.sample(SAVE_OUTCOMES, k.choice([0, 1, 1, 2, 3])):
            outcomes[outcome] = k.randint(1, 64) if k.random() < 0.9 else 0
        if outcomes or k.random() < 0.3:
            stats["save_outcomes"] = {o: outcomes[o] for o in SAVE_OUTCOMES if o in outcomes}
        if k.random() < 0.35:
            stats["load_blocks"] = k.randint(1, 256) if k.random() < 0.9 else 0
        eng.pending_blocks = max(0, eng.pending_blocks + k.randint(-40, 40))
        eng.pending_blocks = min(eng.pending_blocks, eng.cpu_blocks // 4)
        used = min(eng.cpu_blocks, eng.pending_blocks + k.randint(0, eng.cpu_blocks // 2))
        stats["used_blocks"] = used
        stats["pending_store_blocks"] = eng.pending_blocks
        return self.thin(stats)

    def thin(self, stats):
        """Every field is optional: now and then one is left out or null."""
        k = self.krng
        if k.random() < 0.15:
            key = k.choice(sorted(stats)) if stats else None
            if key is not None:
                if k.random() < 0.5:
                    del stats[key]
                else:
                    stats[key] = None
        return stats

    def kv_connector_fields(self, eng, rec):
        """kv_connector_stats on most of an engine's scheduler_stats."""
        k = self.krng
        if not eng.kv_kinds or k.random() >= 0.75:
            if eng.kv_kinds and k.random() < 0.05:
                rec["kv_connector_stats"] = None               # null = absent
            return
        stats = {}
        for kind in eng.kv_kinds:
            if k.random() < 0.1:
                continue                                       # no data this step
            if kind == "nixl":
                stats[kind] = self.nixl_stats() if k.random() < 0.95 else k.choice([{}, None])
            elif kind == "offloading":
                stats[kind] = self.offloading_stats(eng)
            else:
                stats[kind] = self.simple_offload_stats(eng)
        rec["kv_connector_stats"] = stats

    # -- request lifecycle ----------------------------------------------------
    def new_request(self):
        rng = self.rng
        eng = rng.choice(self.engines)
        model = eng.model if rng.random() < 0.9 else rng.choice(self.models)
        if self.finished and rng.random() < 0.03:
            rid = rng.choice(list(self.finished))     # fresh request, reused id
            if rid in self.live:
                rid = f"req-{self.next_id}"; self.next_id += 1
        else:
            rid = f"req-{self.next_id}"; self.next_id += 1
        prompt_len = min(int(rng.lognormvariate(5.5, 1.2)) + 1, 30000)
        r = rng.random()
        max_tokens = rng.choice([16, 64, 128, 256, 512, 1024, 2048]) if r < 0.6 else None
        absent_max = r >= 0.8                         # else explicit null
        n = rng.choice([1, 1, 1, 1, 2, 3, 4])
        target = max(1, int(rng.expovariate(1 / 60)))
        reason = rng.choice(REASONS)
        if max_tokens is not None and target >= max_tokens:
            target, reason = max_tokens, "length"
        arrival = WALL0 + self.t
        req = Req(rid, model, eng.eid, arrival, prompt_len, max_tokens, n, target,
                  reason, self.t)
        rec = {"type": "request", "request_id": rid, "model_name": model,
               "engine": eng.eid, "arrival_time": secs(arrival), "prompt_len": prompt_len}
        if max_tokens is not None:
            rec["max_tokens"] = max_tokens
        elif not absent_max:
            rec["max_tokens"] = None
        if n != 1 or rng.random() < 0.5:
            rec["n"] = n
        self.operation_name(rec)
        self.emit(rec)
        req.pending.append({"type": "queued",
                            "timestamp": secs(eng.clock(self.t) + rng.randint(1, 9))})
        eng.waiting.append(req)
        self.live[rid] = req
        self.created += 1

    def forget(self, req):
        self.live.pop(req.rid, None)
        self.finished.append(req.rid)

    def prefill_stats(self, req):
        rng = self.rng
        total = req.prompt_len + (req.tokens if req.resume_stats else 0)
        cached = 0
        if rng.random() < 0.45 and total > 16:
            cached = 16 * rng.randint(1, (total - 1) // 16)
        external = 0
        if cached and rng.random() < 0.25:
            external = 16 * rng.randint(0, cached // 16)
        stats = {"num_prompt_tokens": total, "num_computed_tokens": total - cached,
                 "num_cached_tokens": cached, "num_local_cached_tokens": cached - external,
                 "num_external_cached_tokens": external}
        if rng.random() < 0.1:                        # fields default to 0
            stats = {k: v for k, v in stats.items() if v != 0}
        return stats, cached

    # -- one engine step -------------------------------------------------------
    def step_engine(self, eng):
        rng = self.rng
        ts = eng.clock(self.t)
        rx = WALL0 + self.t + rng.randint(5, 40)
        queries = hits = 0
        # Schedule: preempted requests first, then waiting ones.
        while len(eng.running) < eng.max_running:
            if eng.preempted:
                req = eng.preempted.popleft()
            elif eng.waiting and eng.waiting[0].eligible_tick <= self.t:
                req = eng.waiting.popleft()
            else:
                break
            req.pending.append({"type": "scheduled",
                                "timestamp": secs(ts - rng.randint(10, 45))})
            if req.started:
                req.phase, req.resume_stats = "decode", True
            else:
                req.phase, req.chunks_left = "prefill", 1 + req.prompt_len // 2048
                if rng.random() < 0.1:
                    req.chunks_left += 1
            eng.running.append(req)

        outputs = []
        still_running = []
        for req in eng.running:
            out = {"request_id": req.rid, "new_token_ids": []}
            keep = True
            # Preemption, during prefill (before first token) or decode.
            if rng.random() < (0.08 if req.phase == "prefill" else 0.02):
                req.pending.append({"type": "preempted",
                                    "timestamp": secs(ts - rng.randint(1, 9))})
                if rng.random() < 0.3:                 # else no reason: kv_full
                    req.pending[-1]["reason"] = self.preemption_reason()
                if req.phase == "decode" and rng.random() < 0.25:
                    # Preempted and resumed within the step: tokens still flow.
                    pass
                else:
                    req.phase = "preempted"
                    eng.preempted.append(req)
                    keep = False
            if keep and req.phase == "prefill":
                req.chunks_left -= 1
                if req.chunks_left <= 0:
                    stats, cached = self.prefill_stats(req)
                    out["prefill_stats"] = stats
                    queries += req.prompt_len; hits += cached
                    k = 1
                    req.phase, req.started = "decode", True
                else:
                    k = 0                              # chunked prefill: no token
            elif keep:                                 # decode
                r = rng.random()
                k = 0 if r < 0.04 else (1 if r < 0.9 else rng.randint(2, 4))
                if req.resume_stats:
                    # The re-admission looks its tokens up in the prefix cache
                    # (scheduler_stats) but sends no prefill_stats: vLLM's
                    # engine sends them once per request, with the first output.
                    stats, cached = self.prefill_stats(req)
                    queries += stats["num_prompt_tokens"]; hits += cached
                    req.resume_stats = False
                    k = max(k, 1)
                k = min(k, req.target - req.tokens)
            else:
                k = 0
            if k:
                out["new_token_ids"] = [rng.randrange(0, 151_000) for _ in range(k)]
                req.tokens += k
            if req.pending:
                out["events"] = req.pending
                req.pending = []
            if keep and req.started and req.tokens >= req.target:
                out["finish_reason"] = req.reason
                self.forget(req)
                keep = False
            if keep:
                still_running.append(req)
            outputs.append(out)
        eng.running = still_running

        # Noise: an output for an unknown or already finished request.
        if rng.random() < 0.03:
            ghost = (rng.choice(list(self.finished))
                     if self.finished and rng.random() < 0.5 else f"ghost-{rng.randrange(10**6)}")
            if ghost not in self.live:
                g = {"request_id": ghost, "new_token_ids": [rng.randrange(1000)]}
                if rng.random() < 0.5:
                    g["prefill_stats"] = {"num_prompt_tokens": 32, "num_computed_tokens": 32}
                if rng.random() < 0.3:
                    g["finish_reason"] = "stop"
                outputs.insert(rng.randrange(len(outputs) + 1), g)
        if outputs:
            self.emit({"type": "outputs", "engine": eng.eid, "timestamp": secs(ts),
                       "received_at": secs(rx), "outputs": outputs})
            self.outputs_emitted += len(outputs)
        if rng.random() < 0.7:
            used = sum(r.prompt_len + r.tokens for r in eng.running)
            rec = {"type": "scheduler_stats", "model_name": eng.model, "engine": eng.eid,
                   "num_running_reqs": len(eng.running),
                   "num_waiting_reqs": len(eng.waiting) + len(eng.preempted),
                   "kv_cache_usage": round(min(1.0, used / 60000), 4),
                   "prefix_cache_queries": queries, "prefix_cache_hits": hits}
            if self.engine_records:
                self.engine_fields(eng, rec, rx)
            if self.kv_connectors:
                self.kv_connector_fields(eng, rec)
            self.emit(rec)

    def abort(self, req):
        eng = next(e for e in self.engines if e.eid == req.engine)
        for q in (eng.waiting, eng.preempted):
            if req in q:
                q.remove(req)
        if req in eng.running:
            eng.running.remove(req)
        self.emit({"type": "abort", "request_id": req.rid,
                   "received_at": secs(WALL0 + self.t + self.rng.randint(1, 40))})
        self.forget(req)

    # -- main loop -------------------------------------------------------------
    def done(self):
        if self.args.outputs_target is not None:
            return self.outputs_emitted >= self.args.outputs_target
        in_flight = max(1, self.args.requests // 15)
        return self.created >= self.args.requests and len(self.live) <= in_flight

    def run(self):
        rng = self.rng
        unlimited = self.args.outputs_target is not None
        if self.engine_records:
            x = self.xrng
            for eng in self.engines:
                if eng.announce:
                    self.engine_config(eng)
            if x.random() < 0.3:
                # A label set seen only through sleep_state (start-up, then level).
                unused = [m for m in MODEL_NAMES if m not in self.models] or ["sleeper"]
                self.sleep_state(x.choice(unused), self.engines[0].eid, x.choice([0, 1, 2]))
        while not self.done():
            self.t += rng.randint(50, 300)
            # Arrivals.
            if unlimited or self.created < self.args.requests:
                for _ in range(sum(rng.random() < 0.15 for _ in self.engines)):
                    if unlimited or self.created < self.args.requests:
                        self.new_request()
            # Engine steps (not every engine steps on every tick).
            for eng in rng.sample(self.engines, len(self.engines)):
                if rng.random() < 0.85:
                    self.step_engine(eng)
            # Explicit aborts of live requests (any phase).
            if self.live and rng.random() < 0.03:
                self.abort(self.live[rng.choice(list(self.live))])
            # Noise: abort of an unknown / finished id; duplicate start.
            if rng.random() < 0.01:
                rid = (rng.choice(list(self.finished)) if self.finished and rng.random() < 0.5
                       else f"ghost-{rng.randrange(10**6)}")
                if rid not in self.live:
                    self.emit({"type": "abort", "request_id": rid,
                               "received_at": secs(WALL0 + self.t + 3)})
            if self.live and rng.random() < 0.01:
                req = self.live[rng.choice(list(self.live))]
                dup = {"type": "request", "request_id": req.rid,
                       "model_name": rng.choice([req.model, "dup-model"]),
                       "engine": req.engine, "arrival_time": secs(WALL0 + self.t),
                       "prompt_len": req.prompt_len + 7, "max_tokens": 99, "n": 2}
                self.operation_name(dup)               # ignored with the rest of it
                self.emit(dup)
            if self.engine_records:
                self.engine_events()


# ---------------------------------------------------------------------------
# Malformed lines (their own RNG; they never perturb the simulation)
# ---------------------------------------------------------------------------

OLD_KINDS = ["bad_json", "missing_field", "unknown_type", "nan_literal",
             "negative_engine", "string_number", "not_object", "infinity",
             "bool_number", "unknown_event", "unknown_reason", "float_uint",
             "missing_nested"]
# A preemption reason or an operation name outside docs/SEMANTICS.md §5's sets.
REASON_KINDS = ["unknown_preemption_reason", "unknown_operation_name"]
# Engine-level records that break one validity rule of the spec.
ENGINE_KINDS = ["unknown_stage", "skipped_gt_waiting", "four_gaps", "per_pos_mismatch",
                "sleep_level", "unknown_operation", "negative_duration", "bad_cache_key",
                "external_hits_gt_queries", "bad_source_key", "mm_hits_gt_queries",
                "idle_gt_lifetime", "negative_residency", "bad_perf", "accepted_gt_drafted",
                "too_many_positions", "bad_adapter", "bad_cache_value", "bad_max_loras"]


# scheduler_stats whose kv_connector_stats break one rule of §4b (--kv-connectors).
KV_KINDS = ["unknown_kv_field", "unknown_connector_kind", "unknown_outcome",
            "negative_kv_number", "float_kv_count", "fraction_out_of_range",
            "kv_list_too_long", "kv_wrong_type", "kv_nonfinite"]


def full_kv_connector_stats() -> dict:
    """Valid kv_connector_stats with every field of the three kinds."""
    return {"nixl": {"transfer_duration": [0.0421, 0.3], "post_duration": [0.0012, 0.004],
                     "bytes_transferred": [8388608, 123456789], "num_descriptors": [64, 1200],
                     "num_failed_transfers": 1, "num_failed_handshakes": 0,
                     "num_failed_notifications": 1, "num_kv_expired_reqs": 0,
                     "num_notifications_after_expiry": 0},
            "offloading": {"load_bytes": 50000000, "load_time": 0.0041,
                           "load_sizes": [20000000, 30000000], "store_bytes": 12000000,
                           "store_time": 0.0011, "store_sizes": [12000000],
                           "lookup_sync_delays": [0.00002, 0.0003],
                           "lookup_async_delays": [0.25], "allocation_failures": 0,
                           "stores_skipped": 3, "cpu_cache_usage": 0.5,
                           "cpu_cache_write_usage": 0.2, "cpu_cache_read_usage": 0.3},
            "simple_cpu_offload": {"save_outcomes": {"stored": 12, "dropped_cpu_full": 2},
                                   "load_blocks": 40, "used_blocks": 300,
                                   "pending_store_blocks": 12}}


def malformed_kv_line(kind: str, mrng: random.Random, model: str, eng: int,
                      now: float) -> str:
    if mrng.random() < 0.25:
        model = "never-seen-model"       # accepting it would create start-up series
    s = full_scheduler_stats(mrng, model, eng, now)
    kv = full_kv_connector_stats()
    for key in mrng.sample(sorted(kv), mrng.randint(0, 2)):
        del kv[key]                      # the rest of the line varies
    s["kv_connector_stats"] = kv
    if kind == "unknown_kv_field":
        target, field = mrng.choice([("nixl", "num_failed_transfer"), ("nixl", "xfer_time"),
                                     ("offloading", "total_bytes"),
                                     ("offloading", "cpu_allocation_sizes"),
                                     ("simple_cpu_offload", "capacity_blocks")])
        kv.setdefault(target, {})[field] = 1
    elif kind == "unknown_connector_kind":
        kv[mrng.choice(["lmcache", "NIXL", "multi", "offload", "p2p_nccl"])] = {}
    elif kind == "unknown_outcome":
        simple = kv.setdefault("simple_cpu_offload", {})
        simple["save_outcomes"] = {"stored": 1,
                                   mrng.choice(["evicted", "Stored", "dropped", ""]): 2}
    elif kind == "negative_kv_number":
        target, field, value = mrng.choice([
            ("nixl", "num_failed_transfers", -1), ("nixl", "transfer_duration", [0.1, -0.001]),
            ("offloading", "load_time", -0.5), ("offloading", "store_sizes", [-1]),
            ("simple_cpu_offload", "used_blocks", -3)])
        kv.setdefault(target, {})[field] = value
    elif kind == "float_kv_count":
        target, field, value = mrng.choice([
            ("nixl", "num_kv_expired_reqs", 1.0), ("offloading", "load_bytes", 3.0e6),
            ("offloading", "allocation_failures", 2.5), ("simple_cpu_offload", "load_blocks", 7.0),
            ("simple_cpu_offload", "save_outcomes", {"stored": 4.0})])
        kv.setdefault(target, {})[field] = value
    elif kind == "fraction_out_of_range":
        field = mrng.choice(["cpu_cache_usage", "cpu_cache_write_usage", "cpu_cache_read_usage"])
        kv.setdefault("offloading", {})[field] = mrng.choice([1.5, -0.1, 100, 1.0000001])
    elif kind == "kv_list_too_long":
        target, field = mrng.choice([("nixl", "num_descriptors"),
                                     ("offloading", "lookup_sync_delays")])
        kv.setdefault(target, {})[field] = [0] * 65_537
    elif kind == "kv_wrong_type":
        r = mrng.random()
        if r < 0.3:
            s["kv_connector_stats"] = mrng.choice([[], "nixl", 1])
        elif r < 0.6:
            kv["nixl"] = mrng.choice([[], [0.1], 0])
        else:
            kv.setdefault("offloading", {})[mrng.choice(["load_bytes", "load_sizes"])] = "12"
    else:  # kv_nonfinite: a JSON number beyond f64
        kv.setdefault("offloading", {})["store_time"] = 0.125
        return dumps(s).replace('"store_time":0.125', '"store_time":1e400')
    return dumps(s)


def full_scheduler_stats(mrng: random.Random, model: str, eng: int, now: float) -> dict:
    """A valid scheduler_stats carrying every optional field (for corrupting)."""
    return {"type": "scheduler_stats", "model_name": model, "engine": eng,
            "num_running_reqs": 3, "num_waiting_reqs": 5, "kv_cache_usage": 0.25,
            "prefix_cache_queries": 640, "prefix_cache_hits": 128, "received_at": now,
            "num_skipped_waiting_reqs": 2,
            "num_kv_fetch_reqs_by_stage": {"waiting_to_start": 1, "in_progress": 2},
            "external_prefix_cache_queries": 800, "external_prefix_cache_hits": 200,
            "external_prefix_cache_hits_by_source": {"host": 150, "disk": 50},
            "mm_cache_queries": 4, "mm_cache_hits": 1,
            "kv_cache_eviction_events": [{"lifetime_seconds": 12.5, "idle_seconds": 3.0,
                                          "reuse_gaps_seconds": [1.0, 2.5]}],
            "perf_stats": {"num_flops_per_gpu": 1.2e13, "num_read_bytes_per_gpu": 1.6e10,
                           "num_write_bytes_per_gpu": 2.0e8},
            "spec_decoding": {"num_drafts": 3, "num_draft_tokens": 9, "num_accepted_tokens": 5,
                              "num_accepted_tokens_per_pos": [3, 2, 0]},
            "running_lora_adapters": ["sql-lora"],
            "waiting_lora_adapters": mrng.choice([[], ["math-lora"]])}


def malformed_engine_line(kind: str, mrng: random.Random, model: str, eng: int,
                          now: float) -> str:
    if mrng.random() < 0.25:
        model = "never-seen-model"       # accepting it would create start-up series
    s = full_scheduler_stats(mrng, model, eng, now)
    if kind == "unknown_stage":
        s["num_kv_fetch_reqs_by_stage"][mrng.choice(["loading", "done", "WAITING_TO_START"])] = 1
    elif kind == "skipped_gt_waiting":
        s["num_skipped_waiting_reqs"] = s["num_waiting_reqs"] + mrng.randint(1, 3)
    elif kind == "four_gaps":
        s["kv_cache_eviction_events"].append({"lifetime_seconds": 30.0, "idle_seconds": 1.0,
                                              "reuse_gaps_seconds": [0.5, 1.0, 2.0, 4.0]})
    elif kind == "per_pos_mismatch":
        s["spec_decoding"]["num_accepted_tokens_per_pos"] = mrng.choice([[3, 1, 0], [3, 2, 1],
                                                                          []])
    elif kind == "sleep_level":
        return dumps({"type": "sleep_state", "model_name": model, "engine": eng,
                      "level": mrng.choice([3, 4, 255])})
    elif kind == "unknown_operation":
        return dumps({"type": "operation", "operation": mrng.choice(["nap", "Sleep", "load",
                                                                     "wake_up", ""]),
                      "duration": 1.5})
    elif kind == "negative_duration":
        return dumps({"type": "operation", "operation": mrng.choice(SLEEP_OPERATIONS
                                                                    + RL_OPERATIONS),
                      "duration": mrng.choice([-0.5, -1e-3, -30.0])})
    elif kind in ("bad_cache_key", "bad_cache_value", "bad_max_loras"):
        rec = {"type": "engine_config", "model_name": model, "engine": eng,
               "cache_config": {"block_size": "16", "gpu_memory_utilization": "0.9"},
               "max_loras": 2}
        if kind == "bad_cache_key":
            rec["cache_config"][mrng.choice(["engine", "1abc", "__reserved", "block-size",
                                             "", "cache dtype"])] = "x"
        elif kind == "bad_cache_value":
            r = mrng.random()
            if r < 0.4:
                rec["cache_config"]["block_size"] = 16
            elif r < 0.7:
                rec["cache_config"]["cache_dtype"] = "x" * 257
            else:
                rec["cache_config"] = {f"key_{i}": "v" for i in range(65)}
        else:
            rec["max_loras"] = mrng.choice([-1, 2**32, 1.5, "4"])
        return dumps(rec)
    elif kind == "external_hits_gt_queries":
        s["external_prefix_cache_hits"] = 900
        s["external_prefix_cache_hits_by_source"] = {"host": 900}
    elif kind == "bad_source_key":
        s["external_prefix_cache_hits_by_source"] = {mrng.choice(["device", "gpu", "HOST"]): 200}
    elif kind == "mm_hits_gt_queries":
        s["mm_cache_hits"] = 5
    elif kind == "idle_gt_lifetime":
        s["kv_cache_eviction_events"][0]["idle_seconds"] = 13.0
    elif kind == "negative_residency":
        ev = s["kv_cache_eviction_events"][0]
        ev[mrng.choice(["lifetime_seconds", "idle_seconds"])] = -1.0
        if mrng.random() < 0.5:
            ev["lifetime_seconds"], ev["idle_seconds"] = 12.5, 3.0
            ev["reuse_gaps_seconds"] = [1.0, -0.25]
    elif kind == "bad_perf":
        key = mrng.choice(["num_flops_per_gpu", "num_read_bytes_per_gpu"])
        bad = mrng.choice([-1.0, "1e12", "overflow"])
        s["perf_stats"][key] = 0.0 if bad == "overflow" else bad
        if bad == "overflow":            # a JSON number beyond f64: not finite
            return dumps(s).replace(f'"{key}":0.0', f'"{key}":1e400')
    elif kind == "accepted_gt_drafted":
        s["spec_decoding"] = {"num_drafts": 1, "num_draft_tokens": 2, "num_accepted_tokens": 3,
                              "num_accepted_tokens_per_pos": [1, 1, 1]}
    elif kind == "too_many_positions":
        s["spec_decoding"] = {"num_drafts": 1, "num_draft_tokens": 17, "num_accepted_tokens": 17,
                              "num_accepted_tokens_per_pos": [1] * 17}
    else:  # bad_adapter
        s["running_lora_adapters"] = mrng.choice([["a,b"], [""], ["ok", 7],
                                                  ["x" * 200, "y" * 60]])
    return dumps(s)


def malformed_line(mrng: random.Random, sim: Sim | None) -> str:
    live = sorted(sim.live) if sim is not None and sim.live else ["req-0"]
    rid = mrng.choice(live)
    eng = sim.engines[0].eid if sim is not None else 0
    model = sim.engines[0].model if sim is not None else "m"
    now = secs(WALL0 + (sim.t if sim is not None else 0))
    ts = 1000.0 + (sim.t / UNIT if sim is not None else 0)
    good_out = {"request_id": rid, "new_token_ids": [1, 2], "finish_reason": "stop"}
    engine_kinds = ENGINE_KINDS if sim is None or sim.engine_records else []
    if sim is not None and sim.kv_connectors and mrng.random() < 0.5:
        # The kinds in a shuffled round, so that a few lines break different rules.
        if not sim.kv_bad_kinds:
            sim.kv_bad_kinds = mrng.sample(KV_KINDS, len(KV_KINDS))
        return malformed_kv_line(sim.kv_bad_kinds.pop(), mrng, model, eng, now)
    kind = mrng.choice(OLD_KINDS + REASON_KINDS + engine_kinds)
    if kind in ENGINE_KINDS:
        return malformed_engine_line(kind, mrng, model, eng, now)
    if kind == "unknown_preemption_reason":
        # The old generator's reason, other spellings, a non-string; on a
        # preempted event mostly, but any event's reason is checked (§5).
        reason = mrng.choice(["kv_cache_full", "KV_FULL", "kv-full", "recompute", "swap",
                              "", 3])
        etype = mrng.choice(["preempted", "preempted", "preempted", "queued", "scheduled"])
        out = dict(good_out, events=[{"type": etype, "timestamp": ts, "reason": reason}])
        outputs = [out]
        if mrng.random() < 0.5:          # a valid preemption in the same batch is lost too
            outputs.insert(0, {"request_id": rid, "new_token_ids": [],
                               "events": [{"type": "preempted", "timestamp": ts,
                                           "reason": "priority"}]})
        return dumps({"type": "outputs", "engine": eng, "timestamp": ts,
                      "received_at": now, "outputs": outputs})
    if kind == "unknown_operation_name":
        return dumps({"type": "request", "request_id": mrng.choice(["bad-op", rid]),
                      "model_name": mrng.choice([model, "never-seen-model"]),
                      "engine": eng, "arrival_time": now, "prompt_len": 10,
                      "operation_name": mrng.choice(["completion", "Chat", "chat_completion",
                                                     "embedding", "", "text-completion",
                                                     7, ["chat"]])})
    if kind == "bad_json":
        full = dumps({"type": "abort", "request_id": rid, "received_at": now})
        return full[: mrng.randint(1, len(full) - 1)]
    if kind == "missing_field":
        return mrng.choice([
            dumps({"type": "outputs", "engine": eng, "timestamp": ts, "outputs": [good_out]}),
            dumps({"type": "request", "request_id": "bad-new", "model_name": model,
                   "engine": eng, "arrival_time": now}),
            dumps({"type": "abort", "received_at": now}),
            dumps({"type": "scheduler_stats", "model_name": model, "engine": eng,
                   "num_running_reqs": 1, "num_waiting_reqs": 2, "kv_cache_usage": 0.5,
                   "prefix_cache_queries": 10}),
        ])
    if kind == "unknown_type":
        return dumps({"type": mrng.choice(["finish", "Abort", "output", ""]),
                      "request_id": rid, "received_at": now})
    if kind == "nan_literal":
        return mrng.choice([
            '{"type":"abort","request_id":"%s","received_at":NaN}' % rid,
            '{"type":"scheduler_stats","model_name":"%s","engine":%d,"num_running_reqs":1,'
            '"num_waiting_reqs":0,"kv_cache_usage":NaN,"prefix_cache_queries":5,'
            '"prefix_cache_hits":1}' % (model, eng),
        ])
    if kind == "negative_engine":
        return mrng.choice([
            dumps({"type": "request", "request_id": "bad-neg", "model_name": model,
                   "engine": -1, "arrival_time": now, "prompt_len": 10}),
            dumps({"type": "scheduler_stats", "model_name": model, "engine": -3,
                   "num_running_reqs": 1, "num_waiting_reqs": 0, "kv_cache_usage": 0.1,
                   "prefix_cache_queries": 5, "prefix_cache_hits": 1}),
        ])
    if kind == "string_number":
        return mrng.choice([
            dumps({"type": "outputs", "engine": eng, "timestamp": str(ts),
                   "received_at": now, "outputs": [good_out]}),
            dumps({"type": "scheduler_stats", "model_name": model, "engine": eng,
                   "num_running_reqs": "3", "num_waiting_reqs": 0, "kv_cache_usage": 0.1,
                   "prefix_cache_queries": 5, "prefix_cache_hits": 1}),
            dumps({"type": "request", "request_id": "bad-str", "model_name": model,
                   "engine": str(eng), "arrival_time": now, "prompt_len": 10}),
        ])
    if kind == "not_object":
        return mrng.choice(['[{"type":"abort","request_id":"%s","received_at":%r}]' % (rid, now),
                            '"abort"', "42", "null"])
    if kind == "infinity":
        return ('{"type":"outputs","engine":%d,"timestamp":Infinity,"received_at":%r,'
                '"outputs":[%s]}' % (eng, now, dumps(good_out)))
    if kind == "bool_number":
        return dumps({"type": "request", "request_id": "bad-bool", "model_name": model,
                      "engine": eng, "arrival_time": now, "prompt_len": True})
    if kind == "unknown_event":
        out = dict(good_out, events=[{"type": "swapped", "timestamp": ts}])
        return dumps({"type": "outputs", "engine": eng, "timestamp": ts,
                      "received_at": now, "outputs": [out]})
    if kind == "unknown_reason":
        return dumps({"type": "outputs", "engine": eng, "timestamp": ts, "received_at": now,
                      "outputs": [{"request_id": rid, "new_token_ids": [3]},
                                  dict(good_out, finish_reason="timeout")]})
    if kind == "float_uint":
        return dumps({"type": "outputs", "engine": eng, "timestamp": ts, "received_at": now,
                      "outputs": [dict(good_out, prefill_stats={"num_cached_tokens": 4.5})]})
    # missing_nested: an event without timestamp
    out = dict(good_out, events=[{"type": "preempted"}])
    return dumps({"type": "outputs", "engine": eng, "timestamp": ts,
                  "received_at": now, "outputs": [out]})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="seeded JSONL trace generator (docs/SEMANTICS.md §5)")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--models", type=int, default=2)
    ap.add_argument("--engines", type=int, default=3)
    ap.add_argument("--malformed", type=int, default=0)
    ap.add_argument("--outputs-target", type=int, default=None)
    ap.add_argument("--no-engine-records", action="store_true",
                    help="leave out the engine-tier records and fields")
    ap.add_argument("--kv-connectors", action="store_true",
                    help="scheduler_stats carry kv_connector_stats (SEMANTICS §4b); "
                         "without it the trace is unchanged")
    args = ap.parse_args(argv)
    if args.models < 1 or args.engines < 1 or args.requests < 0 or args.malformed < 0:
        ap.error("--models/--engines must be >= 1, --requests/--malformed >= 0")
    if args.models > len(MODEL_NAMES):
        ap.error(f"--models must be <= {len(MODEL_NAMES)}")

    out = sys.stdout
    write = out.write
    if args.malformed == 0:
        Sim(args, lambda line: write(line + "\n")).run()
        out.flush()
        return 0

    # Pass 1: count valid lines.
    count = [0]
    def counter(_line):
        count[0] += 1
    Sim(args, counter).run()
    total = count[0] + args.malformed
    mrng = random.Random(args.seed * 7919 + 0xBAD)
    bad_positions = set(mrng.sample(range(1, total + 1), args.malformed))
    lineno = [0]

    def put_bad(sim):
        # Fill any malformed slots that come before the next valid line.
        while lineno[0] + 1 in bad_positions:
            lineno[0] += 1
            write(malformed_line(mrng, sim) + "\n")

    def writer(line):
        lineno[0] += 1
        write(line + "\n")

    sim = Sim(args, writer, on_line=put_bad)
    sim.run()
    put_bad(sim)                     # trailing malformed lines
    out.flush()
    for pos in sorted(bad_positions):
        print(pos, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
