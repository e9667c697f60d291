#!/usr/bin/env bash
# Replay throughput and peak memory on a generated trace of about N engine-core
# outputs (default 1,000,000). Prints outputs/s and peak RSS. The replay prints
# its final exposition (to /dev/null), so the Prometheus bridge's reader
# aggregates every measurement, as in a default `replay` serving /metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
outputs=${1:-1000000}
trace=${TRACE:-target/bench/replay-${outputs}.jsonl}
mkdir -p "$(dirname "$trace")"
if [ ! -s "$trace" ]; then
  echo "==> generating $trace (about $outputs outputs)"
  python3 tests/reference/gen_trace.py --seed 1 --outputs-target "$outputs" --models 2 --engines 4 >"$trace" 2>/dev/null
fi
cargo build --release --quiet
count=$(python3 - "$trace" <<'PY'
import json, sys
n = 0
with open(sys.argv[1]) as f:
    for line in f:
        if '"outputs"' in line:
            rec = json.loads(line)
            if rec.get("type") == "outputs":
                n += len(rec["outputs"])
print(n)
PY
)
log=$(mktemp)
/usr/bin/time -v target/release/vllm-otel-metrics replay "$trace" --output prometheus --metrics-addr none >/dev/null 2>"$log" || true
secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$log" | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
size=$(stat -c %s "$trace")
python3 -c "print(f'replay: {int($count):,} outputs ({$size/1e6:.0f} MB) in {float($secs):.2f} s = {int($count)/float($secs):,.0f} outputs/s, peak RSS {int($rss)/1024:.1f} MiB')"
rm -f "$log"
