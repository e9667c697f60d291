#!/usr/bin/env bash
# Rewrites the golden expositions, tests/data/NAME.prom, from `replay` of
# tests/data/NAME.jsonl (what tests/replay.rs compares byte for byte), then
# checks each sample of each against the independent reference,
# tests/reference/reference.py, the way tests/replay.rs does: a golden is
# replay's output, and the reference is what says its values are right. A
# golden the reference disagrees with is left unwritten, and the script
# fails with compare.py's report. Run after a change that adds or changes a
# family; review the diff it prints before committing.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --locked --bin vllm-otel-metrics
bin=${CARGO_TARGET_DIR:-target}/debug/vllm-otel-metrics
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=0
for trace in tests/data/*.jsonl; do
  name=$(basename "$trace" .jsonl)
  status=0
  "$bin" replay "$trace" --output prometheus --metrics-addr none \
    >"$work/$name.prom" 2>"$work/$name.log" || status=$?
  # Exit status 2: the trace holds deliberately invalid lines
  # (tests/data/NAME.invalid lists them).
  if [ "$status" -ne 0 ] && [ "$status" -ne 2 ]; then
    echo "replay $trace: exit status $status" >&2
    cat "$work/$name.log" >&2
    exit 1
  fi
  python3 tests/reference/reference.py "$trace" --quiet >"$work/$name.reference"
  if python3 tests/reference/compare.py "$work/$name.reference" "$work/$name.prom" \
    >"$work/$name.compare"; then
    cp "$work/$name.prom" "tests/data/$name.prom"
  else
    echo "tests/data/$name.prom: replay and the reference disagree; not written" >&2
    cat "$work/$name.compare" >&2
    failed=1
  fi
done
git diff --stat -- tests/data
exit "$failed"
